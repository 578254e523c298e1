#!/usr/bin/env python3
"""Every CUDA kernel of the library (lib/, optim/, train/) begins with begin_dependent_kernel(),
or with begin_overlapping_kernel() and then reaches end_overlapping_kernel() with no return.

A kernel launched by launch_dependent (lib/cuda/dependent_launch.cuh) may start while the kernel
before it still runs; its first statement must wait for that kernel, or it races with it (reads
stale data, or overwrites what that kernel still reads). A race shows only now and then on the
GPU, so the rule is checked on the source instead: every kernel begins with the wait, whichever
way it is launched (the wait is free in a kernel launched plainly). Also: every kernel that
launch_dependent names outright is one of those checked (a library's kernel, CUB's say, must
not be launched early). A kernel passed in a variable (`kernel`) comes from an assignment or a
parameter of the same file, whose kernels are all checked. Exits 1 naming each offender.
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
    """(name, first statement, body) of each __global__ function defined in text."""
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
        body = text[brace + 1:matching(text, brace, "{", "}")]
        statements = re.sub(r"^\s*(//[^\n]*\n\s*)*", "", body)
        yield name, statements.split(";", 1)[0].strip(), body


FOLDERS = ("lib", "optim", "train", "layers", "examples")
SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".inl")


def launched_names(text):
    """The first argument of each launch_dependent call, without template arguments or scope."""
    for found in re.finditer(r"\blaunch_dependent\(", text):
        rest = text[found.end():]
        if rest.lstrip().startswith("void (*"):
            continue  # the template's own definition
        first = re.match(r"\s*([\w:]+)", rest)
        if first:
            yield first.group(1).split("::")[-1]


def main():
    errors, names, count, sources = [], set(), 0, {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            sources[path] = text
            for name, first, body in kernels(text):
                count += 1
                names.add(name)
                if first == "begin_overlapping_kernel()":
                    # It must reach end_overlapping_kernel() on every path: the call is there and
                    # nothing returns early.
                    code = re.sub(r"//[^\n]*", "", body)
                    if "end_overlapping_kernel();" not in code or re.search(r"\breturn\b", code):
                        errors.append(f"{path.relative_to(ROOT)}: {name} begins with begin_overlapping_kernel() "
                                      "but does not end with end_overlapping_kernel() on every path (a return?)")
                elif first != "begin_dependent_kernel()":
                    errors.append(f"{path.relative_to(ROOT)}: {name} begins with '{first[:60]}', "
                                  "not begin_dependent_kernel() (or begin_overlapping_kernel())")
    if count == 0:
        print("error: no kernels found (has the tree moved?)")
        return 1
    launches = 0
    for path, text in sources.items():
        for name in launched_names(text):
            launches += 1
            if name not in names and name != "kernel":
                errors.append(f"{path.relative_to(ROOT)}: launch_dependent({name}, ...) names no kernel "
                              "checked here")
    for line in errors:
        print(f"error: {line}")
    print(f"{count} kernels, {launches} dependent launches, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
