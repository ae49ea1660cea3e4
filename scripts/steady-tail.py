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
    python3 scripts/steady-tail.py 5 --alternate -- --stall-secs 0
                                                       # simulator flags after --

A default run always runs the engine first, then papaya, then the lock designs;
`--alternate` takes that order out of the comparison. Each run takes about a minute:
run it on a quiet machine, nothing else running.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BINARY = os.path.join(TARGET, "release", "sb-sim")


def quantile(sorted_samples, q):
    """The sample at rank (n - 1) * q rounded half up, as the simulator's `Latency::of`
    (Rust's `f64::round`; Python's `round` would round a half to even)."""
    if not sorted_samples:
        return float("nan")
    return sorted_samples[math.floor((len(sorted_samples) - 1) * q + 0.5)]


def simulate(extra, engine, path):
    """One simulator run; returns {engine: (p99_ms, [samples_ms])} for each engine that
    served a drive in its steady state (one that served none has no p99 to compare)."""
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
        if e["drives"]["steady_tip_to_served"]["samples"] > 0
    }


def main():
    # Everything after the first `--` goes to the simulator as it is.
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s RUNS [--alternate] [-- SIMULATOR FLAGS]",
    )
    parser.add_argument("runs", type=int, help="runs (pairs with --alternate)")
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="lockfree and papaya each in a process of its own, alternating the order",
    )
    args = parser.parse_args(own)
    if args.runs < 1:
        parser.error("RUNS must be at least 1")
    # The flags this script sets itself on every run.
    own_flags = ("--json", "--engine") if args.alternate else ("--json",)
    clash = [flag for flag in extra if flag.split("=")[0] in own_flags]
    if clash:
        parser.error(f"{', '.join(clash)}: this script sets {' and '.join(own_flags)} itself")
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
                    run.update(simulate(extra, engine, path))
            else:
                run = simulate(extra, None, path)
            per_run.append(run)
            p99s = ", ".join(f"{e} {v[0]:.2f}" for e, v in run.items())
            print(f"run {n + 1}: steady-state p99 ms: {p99s or 'no steady-state drive'}", flush=True)
    engines = list(dict.fromkeys(e for run in per_run for e in run))
    print()
    print("| engine | runs | median of the runs' p99 | pooled drives | pooled p50 / p99 / p99.9 / max (ms) |")
    print("|---|---|---|---|---|")
    for engine in engines:
        p99s = [run[engine][0] for run in per_run if engine in run]
        pooled = sorted(s for run in per_run if engine in run for s in run[engine][1])
        print(
            f"| {engine} | {len(p99s)} | {statistics.median(p99s):.2f} | {len(pooled)} | "
            f"{quantile(pooled, 0.5):.2f} / {quantile(pooled, 0.99):.2f} / "
            f"{quantile(pooled, 0.999):.2f} / {quantile(pooled, 1.0):.2f} |"
        )
    both = [run for run in per_run if "lockfree" in run and "papaya" in run]
    if both:
        at_or_below = sum(run["lockfree"][0] <= run["papaya"][0] for run in both)
        print(f"\nlockfree's p99 at or below papaya's in {at_or_below} of {len(both)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
