#!/usr/bin/env python3
"""The steady state's tail over many simulator runs, pooled.

A default run (`sb-sim simulate`) serves about 125 drives in its steady state, so its
p99 is close to its largest drive and one slow drive moves it by milliseconds. This
script runs the simulator RUNS times, reads each run's JSON report, and prints for
each engine: every run's steady-state p99, their median, and the p50 / p99 / p99.9 /
max of all the runs' steady-state drives pooled (RUNS x ~125 samples), with how many
runs had the engine's p99 at or below the papaya design's.

    python3 scripts/steady-tail.py 20                  # default runs, every engine
    python3 scripts/steady-tail.py 10 --alternate      # lockfree and papaya in
                                                       # processes of their own,
                                                       # alternating which goes first
    python3 scripts/steady-tail.py 5 -- --stall-secs 0 # extra simulator flags

A default run always runs the engine first, then papaya, then the lock designs;
`--alternate` takes that order out of the comparison. Each run takes about a minute:
run it on a quiet machine, nothing else running.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "sb-sim")


def quantile(sorted_samples, q):
    """The sample at rank round((n - 1) * q): the simulator's own definition."""
    if not sorted_samples:
        return float("nan")
    return sorted_samples[round((len(sorted_samples) - 1) * q)]


def simulate(extra, engine, path):
    """One simulator run; returns {engine: (p99_ms, [samples_ms])}."""
    command = [BINARY, "simulate", "--json", path] + extra
    if engine is not None:
        command += ["--engine", engine]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    return {
        e["engine"]: (
            e["drives"]["steady_tip_to_served"]["p99_ms"],
            e["drives"]["steady_tip_to_served_ms"],
        )
        for e in report["engines"]
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=int, help="runs (pairs with --alternate)")
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="lockfree and papaya each in a process of its own, alternating the order",
    )
    parser.add_argument("extra", nargs="*", help="simulator flags, after --")
    args = parser.parse_args()
    subprocess.run(
        ["cargo", "build", "--release", "--locked", "-q", "-p", "sb-sim"],
        cwd=ROOT,
        check=True,
    )
    per_run = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        for n in range(args.runs):
            if args.alternate:
                order = ["lockfree", "papaya"] if n % 2 == 0 else ["papaya", "lockfree"]
                run = {}
                for engine in order:
                    run.update(simulate(args.extra, engine, path))
            else:
                run = simulate(args.extra, None, path)
            per_run.append(run)
            p99s = ", ".join(f"{e} {v[0]:.2f}" for e, v in run.items())
            print(f"run {n + 1}: steady-state p99 ms: {p99s}", flush=True)
    engines = list(per_run[0])
    print()
    print("| engine | runs | median of the runs' p99 | pooled drives | pooled p50 / p99 / p99.9 / max (ms) |")
    print("|---|---|---|---|---|")
    for engine in engines:
        p99s = [run[engine][0] for run in per_run]
        pooled = sorted(s for run in per_run for s in run[engine][1])
        print(
            f"| {engine} | {len(p99s)} | {statistics.median(p99s):.2f} | {len(pooled)} | "
            f"{quantile(pooled, 0.5):.2f} / {quantile(pooled, 0.99):.2f} / "
            f"{quantile(pooled, 0.999):.2f} / {quantile(pooled, 1.0):.2f} |"
        )
    if "lockfree" in engines and "papaya" in engines:
        at_or_below = sum(run["lockfree"][0] <= run["papaya"][0] for run in per_run)
        print(f"\nlockfree's p99 at or below papaya's in {at_or_below} of {len(per_run)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
