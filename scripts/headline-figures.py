#!/usr/bin/env python3
"""Every figure in the README's headline list must be owned by a table.

The README states its headline figures in one bulleted list (from the line starting
"Headline ratios" to the next heading); each figure in it (a number with a unit: ns, µs,
ms, s, x, B, KB, MB, GB, GB/s, %, M or k events/s) must appear in a table of
docs/benchmarks.md or docs/simulator.md (a Markdown table, or a report pasted as a fenced
block), the two pages whose tables carry each figure with its date, machine and commit. A figure the README states that no table holds fails the
check, naming it.

Usage: python3 scripts/headline-figures.py   (exit 1 when a figure is not owned)
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = r"(?:ns|µs|us|ms|s|x|B|KB|MB|GB|GB/s|MB/s|%|M|k)"
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s?(" + UNIT + r")(?![\w])")


def headline(readme: str) -> str:
    start = readme.index("Headline ratios")
    end = readme.index("\n## ", start)
    return readme[start:end]


def normalize(number: str, unit: str) -> str:
    return f"{number.replace(',', '')}{'' if unit == '' else ' '}{unit}".replace("us", "µs")


def figures(text: str) -> set[str]:
    return {normalize(n, u) for n, u in FIGURE.findall(text)}


def main() -> int:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    owners = "".join(
        (ROOT / "docs" / page).read_text(encoding="utf-8")
        for page in ("benchmarks.md", "simulator.md")
    )
    owned = figures(owners)
    # A bare number also counts when a table states it (its unit in the header): a Markdown
    # table row, or a report the simulator printed, pasted as a fenced block.
    rows, fenced = [], False
    for line in owners.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or line.lstrip().startswith("|"):
            rows.append(line)
    rows = "\n".join(rows)
    bare = {n.replace(",", "") for n in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", rows)}
    missing = sorted(
        f for f in figures(headline(readme)) if f not in owned and f.split(" ")[0] not in bare
    )
    for figure in missing:
        print(f"README headline figure {figure!r} is in no table of docs/benchmarks.md or docs/simulator.md")
    if missing:
        return 1
    print(f"every headline figure of the README is owned by a table ({len(figures(headline(readme)))} checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
