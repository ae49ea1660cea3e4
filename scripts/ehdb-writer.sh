#!/usr/bin/env bash
# Builds the EHDB writer harness (scripts/ehdb-writer/main.rs, this repository's tooling)
# against the EHDB source tree EHDB_SRC names, and prints the binary's path. The harness is
# for tests and benchmarks only; none of EHDB's code is copied: its crates are path
# dependencies of a throwaway package in target/ehdb-writer, which reuses EHDB's own
# lockfile so its dependencies resolve as EHDB pins them.
#
# Usage: EHDB_SRC=/path/to/ehdb scripts/ehdb-writer.sh    (exits 1 if EHDB_SRC is unusable)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
src=${EHDB_SRC:-}
if [ -z "$src" ] || [ ! -f "$src/crates/ehdb-feed/Cargo.toml" ]; then
  echo "EHDB_SRC does not name an EHDB source tree (crates/ehdb-feed is missing)" >&2
  exit 1
fi
src=$(cd "$src" && pwd)
work=$root/target/ehdb-writer
mkdir -p "$work"
cat >"$work/Cargo.toml" <<TOML
[package]
name = "sb-ehdb-writer"
version = "0.0.0"
edition = "2021"
publish = false

[[bin]]
name = "ehdb-writer"
path = "$root/scripts/ehdb-writer/main.rs"

[dependencies]
ehdb-feed = { path = "$src/crates/ehdb-feed" }
ehdb-l0 = { path = "$src/crates/ehdb-l0" }
serde_json = "1"
tokio = { version = "1", features = ["rt-multi-thread", "net", "macros", "io-util"] }

[workspace]
TOML
[ -f "$work/Cargo.lock" ] || cp "$src/Cargo.lock" "$work/Cargo.lock"
CARGO_TARGET_DIR="$work/target" cargo build --release -q --manifest-path "$work/Cargo.toml" >&2
echo "$work/target/release/ehdb-writer"
