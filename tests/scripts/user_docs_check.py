#!/usr/bin/env python3
"""The README and the binaries' --help are for users (issue 48):
- nothing points outside the repository (no ../ path, no BENCHMARKS.md or DESIGN.md, which a
  clone does not have);
- the README carries no work-log references (sessions, device calls, issue numbers);
- every folder the README's layout table names exists, and every top-level source folder is in it.
  user_docs_check.py [BINARY ...]   (each binary's --help is checked too)
With --self-test it first checks that it catches a planted outside reference."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./|BENCHMARKS\.md|DESIGN\.md|shared/")
WORK_LOG = re.compile(r"\b(session \d+|call \d+|issue \d+)", re.I)
SOURCE_FOLDERS = ["lib", "optim", "layers", "train", "models", "examples", "bench", "tests", "scripts", "docs"]


def text_problems(name, text, work_log):
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if OUTSIDE.search(line):
            found.append(f"{name}:{n} points outside the repository: {line.strip()[:100]}")
        if work_log and WORK_LOG.search(line):
            found.append(f"{name}:{n} reads as a work log: {line.strip()[:100]}")
    return found


def layout_problems(readme, root):
    found, named = [], set()
    for folder in re.findall(r"^\| `([a-z_/<>]+/)` \|", readme, re.M):
        named.add(folder.split("/")[0])
        path = folder.split("<")[0]
        if not (root / path).is_dir():
            found.append(f"README layout table names {folder}, which is not in the tree")
    for folder in SOURCE_FOLDERS:
        if (root / folder).is_dir() and folder not in named:
            found.append(f"README layout table leaves out {folder}/")
    return found


def problems(root, binaries):
    readme = (root / "README.md").read_text()
    found = text_problems("README.md", readme, work_log=True) + layout_problems(readme, root)
    for binary in binaries:
        help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
        found += text_problems(pathlib.Path(binary).name + " --help", help_text, work_log=False)
    return found


def self_test():
    planted = "see ../shared/DESIGN.md (session 12)\n| `lib/` | x |\n| `nowhere/` | y |\n"
    assert len(text_problems("t", planted, work_log=True)) == 2
    assert any("nowhere/" in p for p in layout_problems(planted, ROOT))


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    if "--self-test" in sys.argv:
        self_test()
    found = problems(ROOT, args)
    for p in found:
        print("USER DOCS:", p)
    print(f"user docs: {'FAILED' if found else 'ok'} ({len(found)} problems)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
