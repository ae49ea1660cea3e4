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

Each figure is printed twice: for the whole drive (tip entered the WAL -> drive served,
the report's steady-state row) and for what is left of it beyond the tail's decode
(`drives.steady_beyond_decode_ms`), the decode being the same code in every design. With
both designs in a run, it prints each ratio (lockfree / papaya) with a 95% bootstrap
interval over runs.

A default run always runs the engine first, then papaya, then the lock designs;
`--alternate` takes that order out of the comparison. Each run takes about a minute:
run it on a quiet machine, nothing else running.
"""

import argparse
import json
import math
import os
import random
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


# The two measures: the JSON report's key for each one's samples, and its name here.
MEASURES = (
    ("steady_tip_to_served_ms", "tip -> served"),
    ("steady_beyond_decode_ms", "beyond the tail's decode"),
)


def simulate(extra, engine, path):
    """One simulator run; returns {engine: {measure key: (p99_ms, [samples_ms])}} for each
    engine that served a drive in its steady state (one that served none has no p99 to
    compare)."""
    command = [BINARY, "simulate", "--json", path] + extra
    if engine is not None:
        command += ["--engine", engine]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    return {
        e["engine"]: {
            key: (quantile(sorted(e["drives"][key]), 0.99), e["drives"][key])
            for key, _ in MEASURES
        }
        for e in report["engines"]
        if e["drives"]["steady_tip_to_served"]["samples"] > 0
    }


def pooled_p99_ratio(runs, key):
    """lockfree's pooled steady-state p99 over papaya's, over the given runs."""
    ours = sorted(x for run in runs for x in run["lockfree"][key][1])
    theirs = sorted(x for run in runs for x in run["papaya"][key][1])
    return quantile(ours, 0.99) / quantile(theirs, 0.99)


def median_p99_ratio(runs, key):
    """lockfree's median run p99 over papaya's, over the given runs."""
    ours = statistics.median(run["lockfree"][key][0] for run in runs)
    theirs = statistics.median(run["papaya"][key][0] for run in runs)
    return ours / theirs


def print_interval(both, key, resamples=2000):
    """Both ratios with a 95% bootstrap interval: runs (pairs, with --alternate) are drawn
    with replacement, so the interval says how far the ratio moves with which runs one
    happened to get. An interval that holds 1.0 means these runs cannot rank the two."""
    draw = random.Random(0x5EED)
    for name, ratio in (("pooled p99", pooled_p99_ratio), ("median run p99", median_p99_ratio)):
        samples = sorted(
            ratio([draw.choice(both) for _ in both], key) for _ in range(resamples)
        )
        low, high = samples[int(0.025 * resamples)], samples[int(0.975 * resamples) - 1]
        print(
            f"lockfree / papaya, {name}: {ratio(both, key):.3f} "
            f"(95% bootstrap interval over runs {low:.3f} to {high:.3f})"
        )


def print_measure(per_run, key, title):
    """One measure's table, and with both designs its ratios."""
    engines = list(dict.fromkeys(e for run in per_run for e in run))
    print(f"\n{title}\n")
    print("| engine | runs | median of the runs' p99 | pooled drives | pooled p50 / p99 / p99.9 / max (ms) |")
    print("|---|---|---|---|---|")
    for engine in engines:
        p99s = [run[engine][key][0] for run in per_run if engine in run]
        pooled = sorted(s for run in per_run if engine in run for s in run[engine][key][1])
        print(
            f"| {engine} | {len(p99s)} | {statistics.median(p99s):.2f} | {len(pooled)} | "
            f"{quantile(pooled, 0.5):.2f} / {quantile(pooled, 0.99):.2f} / "
            f"{quantile(pooled, 0.999):.2f} / {quantile(pooled, 1.0):.2f} |"
        )
    both = [run for run in per_run if "lockfree" in run and "papaya" in run]
    if both:
        at_or_below = sum(run["lockfree"][key][0] <= run["papaya"][key][0] for run in both)
        print(f"\nlockfree's p99 at or below papaya's in {at_or_below} of {len(both)} runs")
        print_interval(both, key)


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
            p99s = ", ".join(
                f"{e} {v[MEASURES[0][0]][0]:.2f} ({v[MEASURES[1][0]][0]:.2f} beyond the decode)"
                for e, v in run.items()
            )
            print(f"run {n + 1}: steady-state p99 ms: {p99s or 'no steady-state drive'}", flush=True)
    for key, title in MEASURES:
        print_measure(per_run, key, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
