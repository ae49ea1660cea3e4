#!/usr/bin/env python3
"""Lists the longest functions of the workspace's Rust sources (lines from `fn` to its
closing brace, rustfmt-formatted code assumed).

Usage: scripts/function-lengths.py [--max N] [--skip-tests] [PATH ...]
       (default paths: crates benches)
With --max, exits 1 if a function in the given paths is longer than N lines. With
--skip-tests, files that hold only tests, models or test harnesses (`tests.rs`,
`*_models.rs`, `test_*.rs`, anything under a `tests/` or `test_*/` folder) are not read.
"""
import re
import sys
from pathlib import Path

args = sys.argv[1:]
limit = None
if args[:1] == ["--max"]:
    limit, args = int(args[1]), args[2:]
skip_tests = args[:1] == ["--skip-tests"]
if skip_tests:
    args = args[1:]


def test_only(path):
    name = path.name
    return (
        name == "tests.rs"
        or name.endswith("_models.rs")
        or name.startswith("test_")
        or any(part == "tests" or part.startswith("test_") for part in path.parts[:-1])
    )


roots = [Path(p) for p in (args or ["crates", "benches"])]
found = []
for root in roots:
    for path in sorted(root.rglob("*.rs")) if root.is_dir() else [root]:
        if skip_tests and test_only(path):
            continue
        lines = path.read_text().split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"^(\s*)(?:pub(?:\([a-z]+\))? )?(?:const )?(?:async )?fn (\w+)", line)
            if not m or line.rstrip().endswith(";"):
                continue
            indent = m.group(1)
            for j in range(i, len(lines)):
                if lines[j] == indent + "}":
                    found.append((j - i + 1, f"{path}:{i + 1}", m.group(2)))
                    break
found.sort(reverse=True)
try:
    for n, where, name in found[:10]:
        print(f"{n:5} {where} {name}")
except BrokenPipeError:
    sys.exit(0)
if limit is not None and found and found[0][0] > limit:
    print(f"longest function is {found[0][0]} lines (at most {limit})")
    sys.exit(1)
