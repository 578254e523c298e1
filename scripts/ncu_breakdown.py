"""Where a training step's time goes, kernel by kernel, from `ncu --csv --page raw` (stdin)
with the metrics that the unfused suite's BREAKDOWN=1 (scripts/device/suites/unfused.sh) asks for. Launches are grouped by kernel name
and launch shape (a GPT-2 layer's kernels then show up 12 times in one group), and the groups
are printed largest first with their share of the summed kernel time and the DRAM bandwidth
they reached. `--steps N` divides the totals by N when the profile covered N steps.

Kernel time under ncu is each kernel alone (ncu serializes them), so the sum leaves out the
launch gaps and the overlap a real step has; compare it with the step's own time."""
import argparse
import csv
import sys

PEAK_DRAM_GBPS = 3000.0  # H100 SXM HBM3, as measured by a device-to-device copy (KINDS.md)


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


GENERIC_KERNELS = {"map_kernel", "map_reduce_columns_kernel", "map_two_phase_kernel"}


def short_name(name):
    """The kernel's name without template arguments and parameter lists (cuBLAS's tile names stay)."""
    # ncu writes an anonymous namespace as "(anonymous namespace)", "<unnamed>" or, with a
    # --kernel-name filter, a clipped "unnamed>": drop it before the template arguments go.
    for anonymous in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        name = name.replace(anonymous, "")
    cut = name.split("(")[0]
    depth, out, args = 0, [], [[]]
    for ch in cut:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
        elif depth == 1 and ch == ",":
            args.append([])
        elif depth == 1:
            args[-1].append(ch)
    short = "".join(out).removeprefix("void ").replace("ft::cuda::", "")
    # The generic launchers (row_map.cuh's map kernels) are told apart by their functor: the
    # first template argument that names a type of the project's (capitalized), not a number.
    functors = ["".join(a).strip().split("::")[-1] for a in args if any(c.isupper() for c in "".join(a))]
    if short.split("::")[-1] in GENERIC_KERNELS and functors:
        short += "::" + functors[0]
    return short[:90]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=float, default=1.0, help="steps the profile covered")
    parser.add_argument("--top", type=int, default=40, help="groups to print")
    args = parser.parse_args()
    lines = [l for l in sys.stdin if l.startswith('"')]
    rows = list(csv.DictReader(lines))
    # --page raw: a units row follows the header; keep the launches only.
    rows = [r for r in rows if r.get("ID", "").strip().isdigit()]
    groups = {}
    for r in rows:
        key = (short_name(r.get("Kernel Name", "?")), r.get("launch__grid_size", ""), r.get("launch__block_size", ""))
        g = groups.setdefault(key, {"n": 0, "ns": 0.0, "bytes": 0.0, "active": 0.0, "elapsed": 0.0,
                                    "regs": r.get("launch__registers_per_thread", "")})
        g["n"] += 1
        g["ns"] += number(r.get("gpu__time_duration.sum"))
        g["bytes"] += number(r.get("dram__bytes_read.sum")) + number(r.get("dram__bytes_write.sum"))
        # When asked for (sm__cycles_active.avg, sm__cycles_elapsed.avg): the share of the launch's
        # cycles the average SM had work, which shows a causal or wave tail.
        g["active"] += number(r.get("sm__cycles_active.avg"))
        g["elapsed"] += number(r.get("sm__cycles_elapsed.avg"))
    total_ns = sum(g["ns"] for g in groups.values())
    print(f"{len(rows)} launches, kernel time summed: {total_ns / 1e6 / args.steps:.3f} ms per step "
          f"(ncu runs kernels one at a time: no launch gaps, no overlap)")
    print(f"{'ms/step':>8} {'share':>6} {'count':>6} {'us each':>8} {'GB/s':>7} {'%dram':>6} {'regs':>5} "
          f"{'%sm':>5} {'grid':>8} {'block':>6}  kernel")
    ranked = sorted(groups.items(), key=lambda kv: -kv[1]["ns"])
    for (name, grid, block), g in ranked[: args.top]:
        gbps = g["bytes"] / g["ns"] if g["ns"] else 0.0  # bytes per ns = GB/s
        busy = f"{100 * g['active'] / g['elapsed']:5.1f}" if g["elapsed"] else f"{'-':>5}"
        print(f"{g['ns'] / 1e6 / args.steps:8.3f} {100 * g['ns'] / total_ns:5.1f}% {g['n'] / args.steps:6.0f} "
              f"{g['ns'] / g['n'] / 1e3:8.1f} {gbps:7.0f} {100 * gbps / PEAK_DRAM_GBPS:5.1f}% {g['regs']:>5} {busy} "
              f"{grid:>8} {block:>6}  {name}")
    rest = ranked[args.top:]
    if rest:
        print(f"{sum(g['ns'] for _, g in rest) / 1e6 / args.steps:8.3f} ms in {len(rest)} more groups")


if __name__ == "__main__":
    main()
