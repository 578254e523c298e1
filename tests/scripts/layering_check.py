#!/usr/bin/env python3
"""The include arrows point one way (DESIGN.md's layers): lib <- optim <- layers <- train <- examples.
Every #include "<folder>/..." in a source file must name its own top-level folder or one below it.
Inside lib/ the core files (lib/*.h, lib/*.cpp) must not reach up into lib/ops/ or lib/cuda/; the
includes that still do are listed in KNOWN_UPWARD (issue 47 removes them), so that a new one fails
here and a removed one must leave the list. With --self-test it also checks that it catches a
planted upward include."""
import pathlib
import re
import sys
import tempfile

ORDER = ["lib", "optim", "layers", "train", "models", "examples"]
SOURCES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
# lib's core files that still include an op or CUDA header (the arrows issue 47 turns around).
KNOWN_UPWARD = {
    ("lib/autograd.cpp", "lib/ops/elementwise.h"),
    ("lib/tensor.cpp", "lib/cuda/launchers.h"),
    ("lib/tensor.cpp", "lib/ops/cpu_dispatch.h"),
    ("lib/tensor.cpp", "lib/ops/elementwise.h"),
    ("lib/tensor.cpp", "lib/ops/random.h"),
    ("lib/tensor.cpp", "lib/ops/shape_ops.h"),
    ("lib/no_cuda.cpp", "lib/cuda/launchers.h"),
    *(("lib/no_cuda.cpp", f"lib/ops/{op}.h") for op in
      ("attention", "bias_act", "cross_entropy", "dropout", "embedding", "layer_norm", "linear", "lora_linear",
       "softmax")),
}


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
                core = folder == "lib" and "/" not in rel[len("lib/"):]
                if core and top == "lib" and rest.split("/")[0] in ("ops", "cuda"):
                    upward.add((rel, f"lib/{rest}"))
    for rel, header in sorted(upward - KNOWN_UPWARD):
        found.append(f"{rel} includes {header}: lib's core may not include ops or CUDA headers")
    for rel, header in sorted(KNOWN_UPWARD - upward):
        if (root / rel).exists():
            found.append(f"{rel} no longer includes {header}: take it off KNOWN_UPWARD")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for folder in ORDER:
            (root / folder).mkdir()
        (root / "lib/tensor.h").write_text('#include "lib/dtype.h"\n')
        (root / "optim/adam.cpp").write_text('#include "lib/tensor.h"\n')
        assert problems(root) == [], problems(root)
        (root / "lib/autograd.h").write_text('#include "train/trainer.h"\n')
        (root / "lib/grad.cpp").write_text('#include "lib/ops/linear.h"\n')
        found = problems(root)
        assert any("lib/autograd.h includes train/trainer.h" in p for p in found), found
        assert any("lib/grad.cpp includes lib/ops/linear.h" in p for p in found), found


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
