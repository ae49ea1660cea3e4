#!/usr/bin/env bash
# Prints the path of a binary or example that `cargo test --workspace --locked` builds, after
# building it that way if it is not built yet (a no-op after the tests ran).
#
# Usage: scripts/test-build-binary.sh NAME       (a bin or example target, e.g. sb-sim, worker_pool)
#
# `cargo test --workspace` builds every bin and example with the features of the whole
# workspace, dev-dependencies included; `cargo run -p sb-sim` resolves sb-sim's alone, a
# different feature set that rebuilds a dozen crates (about three minutes on 2 cores). The
# scripts that run sb-sim or its worker-pool example (worker-example.sh, prometheus-e2e.sh)
# take their binaries from here, so after the tests they build nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked --no-run -q --message-format=json | python3 -c '
import json, sys
name, found = sys.argv[1], None
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if (m.get("reason") == "compiler-artifact" and t.get("name") == name and m.get("executable")
            and not m["profile"]["test"] and set(t["kind"]) & {"bin", "example"}):
        found = m["executable"]
if not found:
    sys.exit("test-build-binary: cargo test --workspace built no bin or example named " + name)
print(found)' "$1"
