#!/usr/bin/env python3
"""Every query of a Grafana dashboard must return data from a live Prometheus.

Usage: dashboard-queries.py PROMETHEUS_URL DASHBOARD_JSON PID [SECONDS]

Reads every panel target's `expr` from the dashboard, substitutes the Grafana variables
($__rate_interval -> 30s, $job -> .+), and polls Prometheus' HTTP API every 2 s while the
process PID (the running simulation) lives, for at most SECONDS (default 240). A target
passes once one of its series has returned a finite value above zero; the builds panel
must also have shown each of the four build outcomes. Exits 0 when every target passed,
1 (listing what never did) otherwise.
"""
import json
import math
import os
import sys
import time
import urllib.parse
import urllib.request

SUBSTITUTIONS = {"$__rate_interval": "30s", "$job": ".+"}
BUILD_OUTCOMES = {"cache_hit", "incremental", "cold_rebuild", "incomplete"}


def targets(path):
    with open(path) as f:
        dashboard = json.load(f)
    found = []
    for panel in dashboard["panels"]:
        if panel.get("type") == "row":
            continue
        if not panel.get("targets"):
            sys.exit(f"dashboard-queries: panel {panel['title']!r} has no query")
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in SUBSTITUTIONS.items():
                expr = expr.replace(variable, value)
            if "$" in expr:
                sys.exit(f"dashboard-queries: unknown variable in {panel['title']!r}: {expr}")
            found.append((f"{panel['title']} [{target['refId']}]", expr))
    return found


def query(base, expr):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as answer:
        body = json.load(answer)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def main():
    base, path, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    limit = float(sys.argv[4]) if len(sys.argv) > 4 else 240.0
    pending = dict(targets(path))
    best = {name: None for name in pending}
    outcomes_seen = set()
    print(f"dashboard-queries: {len(pending)} queries from {path}")
    started = time.monotonic()
    while alive(pid) and time.monotonic() - started < limit:
        time.sleep(2)
        for name, expr in list(pending.items()):
            try:
                rows = query(base, expr)
            except Exception as error:  # Prometheus not up yet, or a bad query
                best[name] = f"error: {error}"
                continue
            values = [float(r["value"][1]) for r in rows]
            finite = [v for v in values if math.isfinite(v)]
            complete = True
            if name.startswith("Builds by outcome"):
                outcomes_seen |= {
                    r["metric"].get("outcome")
                    for r in rows
                    if math.isfinite(float(r["value"][1])) and float(r["value"][1]) > 0
                }
                complete = BUILD_OUTCOMES <= outcomes_seen
            if finite and max(finite) > 0 and complete:
                elapsed = time.monotonic() - started
                print(f"  ok after {elapsed:5.1f} s  {name}: {len(rows)} series, max {max(finite):.4g}")
                del pending[name]
            else:
                best[name] = f"{len(rows)} series, values {values[:6]}"
        if not pending:
            print("dashboard-queries OK: every panel query returned data; builds seen for "
                  + ", ".join(sorted(outcomes_seen)))
            return 0
    print("dashboard-queries FAILED: the simulation ended (or the time ran out) first")
    for name in pending:
        print(f"  no data: {name} ({best[name]})")
    missing = BUILD_OUTCOMES - outcomes_seen
    if missing:
        print(f"  builds never seen for: {', '.join(sorted(missing))}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
