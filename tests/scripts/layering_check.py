#!/usr/bin/env python3
"""The include arrows point one way (DESIGN.md's layers):
lib <- optim <- layers <- train <- models <- examples, bench.
Every #include "<folder>/..." in a source file must name its own top-level folder or one below it.
Inside lib/ the arrows point down too:
- lib's core files (lib/*.h, lib/*.cpp) may not reach up into lib/ops/ or lib/cuda/;
- the runtime (lib/runtime/) and the shared device helpers (lib/cuda/) may not include an op;
the includes that still do are listed in KNOWN_UPWARD, so that a new one fails here and a removed
one must leave the list. And no CMake list outside lib/ops/ names an op's file: each op folder adds
its own sources (ft_add_op), so adding an op touches its folder and its test only.
With --self-test it also checks that it catches a planted upward include."""
import pathlib
import re
import sys
import tempfile

ORDER = ["lib", "optim", "layers", "train", "models", "examples", "bench"]
SOURCES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
# lib's core files that still include an op or CUDA header (the arrows issue 47 turns around).
KNOWN_UPWARD = {
    ("lib/autograd.cpp", "lib/ops/elementwise/elementwise.h"),
    ("lib/tensor.cpp", "lib/ops/elementwise/elementwise_cuda.h"),
    ("lib/tensor.cpp", "lib/ops/elementwise/elementwise.h"),
    ("lib/tensor.cpp", "lib/ops/random/random.h"),
    ("lib/tensor.cpp", "lib/ops/shape_ops/shape_ops.h"),
}


def below_in_lib(rel, included):
    """Whether lib file `rel` including lib/`included` points up inside lib."""
    part = rel[len("lib/"):].split("/")[0] if "/" in rel[len("lib/"):] else ""
    target = included.split("/")[0]
    if part == "":  # the core
        return target in ("ops", "cuda")
    if part in ("runtime", "cuda"):
        return target == "ops"
    return False


def cmake_naming_ops(root):
    found = []
    for path in sorted(root.rglob("CMakeLists.txt")) + sorted(root.rglob("*.cmake")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("lib/ops/", "build")) or "/build" in rel:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"\bops/[a-z_]+/[A-Za-z_]+\.(cpp|cu|h)", code):
                found.append(f"{rel}:{n} names an op's file: only the op's own CMakeLists.txt may")
    return found


def problems(root):
    found, upward = [], set()
    for folder in ORDER:
        for path in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
            if path.suffix not in SOURCES:
                continue
            rel = path.relative_to(root).as_posix()
            for top, rest in INCLUDE.findall(path.read_text(errors="replace")):
                if top in ORDER and ORDER.index(top) > ORDER.index(folder):
                    found.append(f"{rel} includes {top}/{rest}: {folder}/ may not include {top}/")
                if folder == "lib" and top == "lib" and below_in_lib(rel, rest):
                    upward.add((rel, f"lib/{rest}"))
    for rel, header in sorted(upward - KNOWN_UPWARD):
        found.append(f"{rel} includes {header}: lib's core may not include ops or CUDA headers")
    for rel, header in sorted(KNOWN_UPWARD - upward):
        if (root / rel).exists():
            found.append(f"{rel} no longer includes {header}: take it off KNOWN_UPWARD")
    return found + cmake_naming_ops(root)


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for folder in ORDER:
            (root / folder).mkdir()
        (root / "lib/tensor.h").write_text('#include "lib/dtype.h"\n')
        (root / "optim/adam.cpp").write_text('#include "lib/tensor.h"\n')
        assert problems(root) == [], problems(root)
        (root / "lib/autograd.h").write_text('#include "train/loop/trainer.h"\n')
        (root / "lib/grad.cpp").write_text('#include "lib/ops/linear/linear.h"\n')
        found = problems(root)
        assert any("lib/autograd.h includes train/loop/trainer.h" in p for p in found), found
        assert any("lib/grad.cpp includes lib/ops/linear/linear.h" in p for p in found), found


def main():
    if "--self-test" in sys.argv:
        self_test()
    root = pathlib.Path(__file__).resolve().parents[2]
    found = problems(root)
    for p in found:
        print("LAYERING:", p)
    print(f"layering: {'FAILED' if found else 'ok'} ({len(found)} problems)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
