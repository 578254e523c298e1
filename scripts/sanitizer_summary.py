#!/usr/bin/env python3
"""Summarizes compute-sanitizer logs written by scripts/device/run.sh sanitize.

Each log (<tool>-<shard>.log) holds a gtest shard's output with the tool's reports interleaved,
so a report belongs to the test whose "[ RUN ]" line came last. Reports are grouped by tool,
kind and kernel, and split by owner: the project's own kernels, and NVIDIA's (cuBLAS's nvjet
and cutlass kernels, CUB's own kernels), which are listed apart, as are the tool's own errors
(launches it could not follow). Exit status 1 when the project has a finding, a launch went
unchecked, a test failed under a tool, or a shard did not finish.

usage: sanitizer_summary.py LOG_DIR EXPECTED_TEST_COUNT
"""
import collections
import pathlib
import re
import sys

NOT_A_FINDING = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                 "Target application returned", "Error: process didn't terminate successfully",
                 "Target application terminated before first instrumented API call")  # used no CUDA
NVIDIA_KERNEL = re.compile(r"nvjet|cublas|cutlass|xmma|gemv|gemmk|splitKreduce|cudnn", re.I)


def function_name(text):
    """'void ft::cuda::k<float, (int)8>(const T1 *, int)+0x1b0 in f.cu:3' -> 'ft::cuda::k<float, (int)8>'."""
    text = text.replace("(anonymous namespace)::", "").strip()
    if text.startswith("void "):
        text = text[5:]
    depth = 0
    for i, c in enumerate(text):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0 and (c == "(" or text.startswith("+0x", i) or text.startswith(" in ", i)):
            return text[:i]
    return text


def kernel_of(block):
    """The kernel a report is in: its outermost device frame, else the function after 'at'."""
    frames = [line.split("Device Frame:", 1)[1] for line in block if "Device Frame:" in line]
    if frames:
        return function_name(frames[-1])
    for line in block:
        m = re.search(r"\bat (?!0x[0-9a-f]+ on\b)(?:0x[0-9a-f]+ in )?(.*)", line)
        if m and not m.group(1).startswith("host access"):
            return function_name(m.group(1))
    m = re.search(r"on access by (\w+)", " ".join(block))
    return f"host API {m.group(1)}" if m else "(no kernel named)"


def owner(kernel, kind=""):
    if kind.startswith("Internal Sanitizer Error"):
        return "tool"  # the tool could not follow a launch (out of memory, say): nothing was checked
    if kernel.startswith(("cub::", "thrust::")):
        return "NVIDIA"
    if NVIDIA_KERNEL.search(kernel) and not kernel.startswith("ft::"):
        return "NVIDIA"
    return "project"


def parse_log(path):
    tool = path.stem.rsplit("-", 1)[0]
    test, done, failed, finished = None, 0, [], False
    findings = []  # (tool, kind, kernel, test)
    block = None

    def close_block():
        if block:
            kind = re.sub(r"0x[0-9a-f]+", "0x...", block[0])
            findings.append((tool, kind, kernel_of(block), test or "(before any test)"))

    for raw in path.read_text(errors="replace").splitlines():
        line = raw.rstrip()
        if line.startswith("========= "):
            body = line[len("========= "):]
            if body.startswith(" "):  # continues the report
                if block is not None:
                    block.append(body.strip())
                continue
            close_block()
            block = None if any(text in body for text in NOT_A_FINDING) else [body]
            continue
        close_block()
        block = None
        if m := re.match(r"\[ RUN      \] (\S+)", line):
            test = m.group(1)
        elif re.match(r"\[ {7}OK \] \S+ \(\d+ ms\)|\[  SKIPPED \] \S+ \(\d+ ms\)", line):
            done += 1
        elif m := re.match(r"\[  FAILED  \] (\S+) \(\d+ ms\)", line):
            done += 1
            failed.append(m.group(1))
        elif re.match(r"\[==========\] \d+ tests? from .* ran\.", line):
            finished = True
    close_block()
    return tool, done, failed, finished, test, findings


def main():
    log_dir, expected = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    per_tool = collections.defaultdict(lambda: {"done": 0, "failed": [], "cut": [], "shards": 0})
    findings = []
    for path in sorted(log_dir.glob("*-[0-9]*.log")):
        tool, done, failed, finished, last_test, found = parse_log(path)
        t = per_tool[tool]
        t["shards"] += 1
        t["done"] += done
        t["failed"] += failed
        if not finished:
            t["cut"].append(f"{path.name} stopped in {last_test}")
        findings += found

    groups = collections.OrderedDict()
    for tool, kind, kernel, test in findings:
        key = (owner(kernel, kind), tool, kind, kernel)
        g = groups.setdefault(key, {"count": 0, "tests": []})
        g["count"] += 1
        if test not in g["tests"]:
            g["tests"].append(test)

    print(f"== compute-sanitizer over the GPU suite ({expected} tests) ==")
    print(f"{'tool':<10} {'tests run':>11} {'failed':>7} {'project':>8} {'NVIDIA':>7} {'unchecked':>9}  finished")
    bad = False
    for tool, t in per_tool.items():
        mine = sum(g["count"] for (o, tl, _, _), g in groups.items() if tl == tool and o == "project")
        theirs = sum(g["count"] for (o, tl, _, _), g in groups.items() if tl == tool and o == "NVIDIA")
        complete = not t["cut"] and t["done"] == expected
        lost = sum(g["count"] for (o, tl, _, _), g in groups.items() if tl == tool and o == "tool")
        bad |= mine > 0 or lost > 0 or bool(t["failed"]) or not complete
        print(f"{tool:<10} {t['done']:>5}/{expected:<5} {len(t['failed']):>7} {mine:>8} {theirs:>7} {lost:>9}  "
              f"{'yes' if complete else 'NO'}")
    titles = {"project": "findings in project kernels", "NVIDIA": "findings in NVIDIA kernels",
              "tool": "the tool's own errors (launches it could not check)"}
    for who, title in titles.items():
        rows = [(k, g) for k, g in groups.items() if k[0] == who]
        if who == "tool" and not rows:
            continue
        print(f"\n{title}: {'none' if not rows else ''}")
        for (_, tool, kind, kernel), g in rows:
            tests = ", ".join(g["tests"][:3]) + (f" (+{len(g['tests']) - 3} more)" if len(g["tests"]) > 3 else "")
            print(f"  {tool}: {kind}\n      in {kernel[:160]}  x{g['count']}, in {tests}")
    for tool, t in per_tool.items():
        for name in t["failed"]:
            print(f"failed under {tool}: {name}")
        for cut in t["cut"]:
            print(f"not finished under {tool}: {cut}")
    print("\nRESULT sanitize=" + ("FINDINGS" if bad else "CLEAN"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
