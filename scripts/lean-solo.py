#!/usr/bin/env python3
"""The drain rows of `--bench lean_paired` with each design in a process of its own.

`lean_paired` pairs the engine and the lean design in one process, one pass of each per
round: stable, but each design's pass follows the other's and inherits what that pass
left (the allocator's free lists and deferred frees, arc-swap's debt list). Here each
design runs against itself (`PAIR=engine`, `PAIR=lean`: two indexes of the one design,
alternated), in processes alternated ROUNDS times, and each alternation's ratio is the
engine's median pass over the lean design's, from the two processes next to each other.

    python3 scripts/lean-solo.py 6          # 6 alternations, 101 rounds per process
    python3 scripts/lean-solo.py 6 201      # 201 rounds per process

Prints each alternation's ratios per row, and their median. On a shared VM whose speed
drifts, the ratios of neighbouring processes are what to read; run it with nothing else
running. About 40 s per alternation at 101 rounds.
"""

import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_binary():
    """Builds `lean_paired` and returns its executable, as cargo reports it."""
    built = subprocess.run(
        ["cargo", "bench", "--locked", "-p", "sb-benches", "--bench", "lean_paired", "--no-run"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    for line in built.stderr.splitlines():
        if "Executable" in line and "(" in line:
            return line[line.rindex("(") + 1 : line.rindex(")")]
    raise SystemExit("cargo did not name the lean_paired executable")


def medians(binary, pair, rounds):
    """{row: median pass in ms} of one process running `pair` against itself."""
    out = subprocess.run(
        [binary, str(rounds)],
        env={**os.environ, "PAIR": pair},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[0].endswith(("_alone", "_readers")):
            # The two sides are the same design: their medians' mean is its pass.
            rows[fields[0]] = (float(fields[1]) + float(fields[2])) / 2
    return rows


def main():
    alternations = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 101
    if alternations < 1 or rounds < 4:
        raise SystemExit("usage: lean-solo.py [ALTERNATIONS >= 1] [ROUNDS >= 4]")
    binary = bench_binary()
    ratios = {}
    for n in range(alternations):
        # Alternate which design's process goes first.
        order = ["engine", "lean"] if n % 2 == 0 else ["lean", "engine"]
        got = {pair: medians(binary, pair, rounds) for pair in order}
        line = []
        for row, lean in got["lean"].items():
            ratio = got["engine"][row] / lean
            ratios.setdefault(row, []).append(ratio)
            line.append(f"{row} {got['engine'][row]:.3f}/{lean:.3f} ms {ratio:.3f}x")
        print(f"alternation {n + 1}: " + "; ".join(line), flush=True)
    print()
    print("| row | engine / lean, each alternation | median |")
    print("|---|---|---:|")
    for row, values in ratios.items():
        listed = ", ".join(f"{v:.3f}" for v in values)
        print(f"| {row} | {listed} | {statistics.median(values):.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
