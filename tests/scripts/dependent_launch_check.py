#!/usr/bin/env python3
"""Every CUDA kernel of the library (lib/, optim/, train/) begins with begin_dependent_kernel().

A kernel launched by launch_dependent (lib/cuda/dependent_launch.cuh) may start while the kernel
before it still runs; its first statement must wait for that kernel, or it races with it (reads
stale data, or overwrites what that kernel still reads). A race shows only now and then on the
GPU, so the rule is checked on the source instead: every kernel begins with the wait, whichever
way it is launched (the wait is free in a kernel launched plainly). Exits 1 naming each kernel
that does not.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def matching(text, at, open_char, close_char):
    depth = 0
    for i in range(at, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced")


def kernels(text):
    """(name, first statement) of each __global__ function defined in text."""
    for found in re.finditer(r"__global__", text):
        paren = text.index("(", found.end())
        # Skip __launch_bounds__(...) between __global__ and the name.
        while text[found.end():paren].rstrip().endswith("__launch_bounds__"):
            paren = text.index("(", matching(text, paren, "(", ")") + 1)
        name = text[found.end():paren].split()[-1]
        close = matching(text, paren, "(", ")")
        brace = text.find("{", close)
        semicolon = text.find(";", close)
        if brace < 0 or 0 <= semicolon < brace:
            continue  # a declaration
        body = text[brace + 1:]
        body = re.sub(r"^\s*(//[^\n]*\n\s*)*", "", body)
        yield name, body.split(";", 1)[0].strip()


def main():
    missing, count = [], 0
    for folder in ("lib", "optim", "train"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".cu", ".cuh"):
                continue
            for name, first in kernels(path.read_text()):
                count += 1
                if first != "begin_dependent_kernel()":
                    missing.append(f"{path.relative_to(ROOT)}: {name} begins with '{first[:60]}'")
    if count == 0:
        print("error: no kernels found (has the tree moved?)")
        return 1
    for line in missing:
        print(f"error: {line}, not begin_dependent_kernel()")
    print(f"{count} kernels, {len(missing)} without the wait first")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
