#!/usr/bin/env python3
"""The include arrows point one way (DESIGN.md's layers):
lib <- optim <- layers <- train <- models <- examples, bench.
Every #include "<folder>/..." in a source file must name its own top-level folder or one below it.
Inside lib/ the arrows point down too. From the bottom: the runtime (lib/runtime.h, lib/runtime/)
and the device helpers the kernels share (lib/cuda/); the core (Tensor, autograd and the other
lib/*.h); the ops (lib/ops/<op>/). So:
- the core may not include an op or a device helper;
- the runtime and the device helpers may not include an op, nor the Tensor: tensor.h, autograd.h
  or any core header that includes one of them.
And no CMake list outside lib/ops/ names an op's file: each op folder adds its own sources
(ft_add_op), so adding an op touches its folder and its test only.
With --self-test it also checks that it catches a planted upward include."""
import pathlib
import re
import sys
import tempfile

ORDER = ["lib", "optim", "layers", "train", "models", "examples", "bench"]
SOURCES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
RUNTIME_HEADER = "runtime.h"  # lib/runtime.h: the runtime's contract, beside the core's headers


def part_of(rel):
    """lib file `rel`'s part: "core", "runtime" (lib/runtime.h, lib/runtime/, lib/cuda/) or "ops"."""
    inner = rel[len("lib/"):]
    if "/" not in inner:
        return "runtime" if inner == RUNTIME_HEADER else "core"
    return "ops" if inner.startswith("ops/") else "runtime"


def tensor_level_headers(root):
    """The core headers that are or include (transitively) lib/tensor.h or lib/autograd.h."""
    includes = {}
    for path in (root / "lib").glob("*.h"):
        includes[path.name] = {rest for top, rest in INCLUDE.findall(path.read_text(errors="replace")) if top == "lib"}
    level = {"tensor.h", "autograd.h"}
    grew = True
    while grew:
        more = {name for name, inc in includes.items() if inc & level} - level
        level |= more
        grew = bool(more)
    return level


def upward_in_lib(rel, included, tensor_level):
    """Why lib file `rel` including lib/`included` points up inside lib, or None."""
    part, target = part_of(rel), part_of("lib/" + included)
    if target == "ops" and part != "ops":
        return f"lib's {part} may not include an op"
    if part == "core" and included.startswith("cuda/"):
        return "lib's core may not include a device helper (lib/cuda/)"
    if part == "runtime" and target == "core" and included in tensor_level:
        return "the runtime and the device helpers sit below the Tensor"
    return None


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
    found = []
    tensor_level = tensor_level_headers(root) if (root / "lib").is_dir() else set()
    for folder in ORDER:
        for path in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
            if path.suffix not in SOURCES:
                continue
            rel = path.relative_to(root).as_posix()
            for top, rest in INCLUDE.findall(path.read_text(errors="replace")):
                if top in ORDER and ORDER.index(top) > ORDER.index(folder):
                    found.append(f"{rel} includes {top}/{rest}: {folder}/ may not include {top}/")
                why = upward_in_lib(rel, rest, tensor_level) if folder == "lib" and top == "lib" else None
                if why:
                    found.append(f"{rel} includes lib/{rest}: {why}")
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
        (root / "lib/runtime").mkdir()
        (root / "lib/grad_view.h").write_text('#include "lib/tensor.h"\n')
        (root / "lib/runtime/pool.cpp").write_text('#include "lib/grad_view.h"\n')
        found = problems(root)
        assert any("lib/runtime/pool.cpp includes lib/grad_view.h: the runtime" in p for p in found), found


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
