#!/usr/bin/env python3
"""Draws what the binaries and ft-bench measured, as PNG files (matplotlib, no display needed).

  plot.py loss RUN.jsonl [RUN.jsonl ...] -o loss.png [--labels fused,unfused]
      Training loss against step, one line per run, from the JSONL metrics the binaries write
      with --metrics (one object a logged step: "step", "loss"; evaluation lines carry
      "eval": {"val loss": x} and are drawn as markers). Runs of one model side by side: fused
      against unfused, or against a PyTorch run's metrics in the same format.

  plot.py bench BENCH.json [BENCH.json ...] -o bench.png [--rename OLD=NEW,...]
                [--variants A,B,...] [--workloads W,...] [--title TEXT]
      Step time by workload, one bar per variant (fused, unfused, PyTorch eager, ...), on a log
      scale, each bar labelled with its time and its ratio to the fused bar. A file holds
      {"device": "...", "date": "...", "results": [{"workload": "gpt2-124M", "variant": "fused",
      "ms": 32.4}, ...]}; several files are merged (their devices must agree: times from
      different GPUs are not compared). --rename gives variants a common name (each workload's
      same-op-sequence peer as "PyTorch eager", say), everywhere (OLD=NEW) or in one workload
      (WORKLOAD:OLD=NEW, which wins); a workload with two variants renamed alike is an error.
      --variants and --workloads keep only those, in that order.

Bad input (a missing file, a line that is not JSON, a run with no loss, a result without a
workload, variant or positive ms) stops with a message that names the file and line.
"""
import argparse
import json
import math
import pathlib
import sys


class PlotError(Exception):
    pass


def read_loss_curve(path):
    """(steps, losses, eval_steps, eval_losses) from a metrics JSONL file."""
    steps, losses, eval_steps, eval_losses = [], [], [], []
    try:
        lines = pathlib.Path(path).read_text().splitlines()
    except OSError as e:
        raise PlotError(f"{path}: cannot read: {e.strerror}") from e
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlotError(f"{path}:{number}: not JSON ({e.msg})") from e
        if not isinstance(record, dict) or "step" not in record:
            raise PlotError(f"{path}:{number}: a metrics line is an object with a \"step\"")
        step = record["step"]
        if isinstance(record.get("eval"), dict):
            for name, value in record["eval"].items():
                if "loss" in name and isinstance(value, (int, float)):
                    eval_steps.append(step)
                    eval_losses.append(value)
        if isinstance(record.get("loss"), (int, float)):
            steps.append(step)
            losses.append(record["loss"])
    if not losses:
        raise PlotError(f"{path}: no line has a \"loss\" (was it written with --metrics?)")
    return steps, losses, eval_steps, eval_losses


def parse_renames(text):
    """'a=b,w:c=d' -> {(None, "a"): "b", ("w", "c"): "d"}: a variant renamed in every workload, or
    (WORKLOAD:VARIANT) in one. The new name is after the last '=' (workload names hold '=')."""
    renames = {}
    for part in filter(None, (text or "").split(",")):
        old, sep, new = part.rpartition("=")
        workload, colon, variant = old.partition(":")
        if not colon:
            workload, variant = None, old
        if not sep or not variant.strip() or not new.strip() or (colon and not workload.strip()):
            raise PlotError(f"--rename: '{part}' is not OLD=NEW or WORKLOAD:OLD=NEW")
        renames[(workload.strip() if colon else None, variant.strip())] = new.strip()
    return renames


def select(table, renames, variants, workloads):
    """The table with variants renamed, then only the named variants and workloads kept, in the
    order given (all of them, in first-seen order, when a list is empty)."""
    out = {}
    for workload, by_variant in table.items():
        renamed = {}
        for variant, ms in by_variant.items():
            name = renames.get((workload, variant), renames.get((None, variant), variant))
            if name in renamed:
                raise PlotError(f"--rename: {workload} has two variants named '{name}'")
            renamed[name] = ms
        out[workload] = renamed
    if workloads:
        missing = [w for w in workloads if w not in out]
        if missing:
            raise PlotError(f"--workloads: no results for {', '.join(missing)}")
        out = {w: out[w] for w in workloads}
    if variants:
        out = {w: {v: by[v] for v in variants if v in by} for w, by in out.items()}
    return out


def read_bench(paths):
    """(device, {workload: {variant: ms}}) with workloads and variants in first-seen order."""
    device, table = None, {}
    for path in paths:
        try:
            document = json.loads(pathlib.Path(path).read_text())
        except OSError as e:
            raise PlotError(f"{path}: cannot read: {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise PlotError(f"{path}:{e.lineno}: not JSON ({e.msg})") from e
        if not isinstance(document, dict) or not isinstance(document.get("results"), list):
            raise PlotError(f"{path}: expected an object with a \"results\" list")
        this_device = document.get("device", "unknown device")
        if device is not None and this_device != device:
            raise PlotError(f"{path}: measured on {this_device}, the others on {device}: not comparable")
        device = this_device
        for index, result in enumerate(document["results"]):
            where = f"{path}: results[{index}]"
            if not isinstance(result, dict):
                raise PlotError(f"{where}: not an object")
            workload, variant, ms = result.get("workload"), result.get("variant"), result.get("ms")
            if not isinstance(workload, str) or not workload or not isinstance(variant, str) or not variant:
                raise PlotError(f"{where}: needs a \"workload\" and a \"variant\" name")
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not math.isfinite(ms) or ms <= 0:
                raise PlotError(f"{where}: \"ms\" must be a positive number, not {ms!r}")
            table.setdefault(workload, {})[variant] = float(ms)
    return device, table


def pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise PlotError("matplotlib is not installed (apt install python3-matplotlib, or pip install matplotlib)") from e
    matplotlib.use("Agg")  # files only: no display on a training or CI machine
    import matplotlib.pyplot as plt
    return plt


def plot_loss(paths, labels, output):
    curves = [read_loss_curve(p) for p in paths]
    if labels and len(labels) != len(paths):
        raise PlotError(f"--labels names {len(labels)} runs, but {len(paths)} files were given")
    labels = labels or [pathlib.Path(p).stem for p in paths]
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    styles = ["-", "--", ":", "-."]  # runs that agree (fused and unfused) still show as two lines
    for index, ((steps, losses, eval_steps, eval_losses), label) in enumerate(zip(curves, labels)):
        line, = axes.plot(steps, losses, styles[index % len(styles)], label=label, linewidth=1.4)
        if eval_steps:
            axes.plot(eval_steps, eval_losses, "o", color=line.get_color(), markersize=4, label=f"{label} (eval)")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(output)
    plt.close(figure)


def readable(value):
    """4307.07 -> '4,307'; 32.397 -> '32.4'; 0.4012 -> '0.401'."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def plot_bench(paths, output, renames=None, variants=None, workloads=None, title=None):
    device, table = read_bench(paths)
    table = select(table, renames or {}, variants, workloads)
    if not any(table.values()):
        raise PlotError(f"{', '.join(map(str, paths))}: no results")
    variants = []
    for by_variant in table.values():
        variants += [v for v in by_variant if v not in variants]
    plt = pyplot()
    workloads = list(table)
    width = 0.8 / len(variants)
    figure, axes = plt.subplots(figsize=(min(13.0, max(6.0, 0.9 * len(workloads) * len(variants))), 4.5), dpi=120)
    for i, variant in enumerate(variants):
        xs = [w + (i - (len(variants) - 1) / 2) * width for w in range(len(workloads))]
        present = [(x, table[name].get(variant), name) for x, name in zip(xs, workloads)]
        present = [(x, ms, name) for x, ms, name in present if ms is not None]
        bars = axes.bar([x for x, _, _ in present], [ms for _, ms, _ in present], width, label=variant)
        for bar, (_, ms, name) in zip(bars, present):
            fused = table[name].get("fused")
            text = readable(ms) + (f"\n{readable(ms / fused)}x" if fused and variant != "fused" else "")
            axes.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                          fontsize=7)
    axes.set_yscale("log")
    low, high = axes.get_ylim()
    axes.set_ylim(low, high * 3)  # room for the labels above the tallest bar
    axes.set_xticks(range(len(workloads)))
    axes.set_xticklabels(workloads)
    axes.set_ylabel("ms per step (log scale)")
    axes.set_xlabel("each bar: median ms, and that time over fused's", fontsize=8)
    axes.set_title(title or f"fusedtrain on {device}", fontsize=10)
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3, which="both")
    figure.tight_layout()
    figure.savefig(output)
    plt.close(figure)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    loss = commands.add_parser("loss", help="loss curves from --metrics JSONL files")
    loss.add_argument("runs", nargs="+")
    loss.add_argument("-o", "--output", required=True, help="the PNG to write")
    loss.add_argument("--labels", help="comma-separated names for the runs (default: file names)")
    bench = commands.add_parser("bench", help="fused / unfused / peer bars from ft-bench JSON")
    bench.add_argument("files", nargs="+")
    bench.add_argument("-o", "--output", required=True, help="the PNG to write")
    bench.add_argument("--rename", help="OLD=NEW or WORKLOAD:OLD=NEW, comma-separated: variants drawn under another name")
    bench.add_argument("--variants", help="comma-separated variants to draw, in this order (default: all)")
    bench.add_argument("--workloads", help="comma-separated workloads to draw, in this order (default: all)")
    bench.add_argument("--title", help="the chart's title (default: fusedtrain on DEVICE)")
    args = parser.parse_args(argv)
    try:
        if args.command == "loss":
            plot_loss(args.runs, args.labels.split(",") if args.labels else None, args.output)
        else:
            split = lambda text: [x.strip() for x in text.split(",") if x.strip()] if text else None
            plot_bench(args.files, args.output, parse_renames(args.rename), split(args.variants),
                       split(args.workloads), args.title)
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
