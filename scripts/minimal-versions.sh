#!/usr/bin/env bash
# Keeps the dependency floors true.
#
# A worker pool that depends on chain-fold, wal-index or sb-metrics resolves its own
# versions, anywhere between each floor in their Cargo.toml files and the newest. This
# resolves every *direct* dependency of the library crates to the oldest version its floor
# allows (transitive ones stay at their newest compatible, as `-Z direct-minimal-versions`
# does), then builds and tests the library crates against that resolution. A floor below a
# version the code needs, or below a fix it relies on that a test exercises, fails here.
#
# Usage: scripts/minimal-versions.sh      (needs a nightly toolchain for the resolution only;
#                                          the tests build on the default toolchain)
#
# It works on a copy of the source tree (the checkout's Cargo.lock is never touched) whose
# workspace lists only the library crates, so the binaries' and benches' dependencies do
# not take part in the resolution. Its target dir is target/minimal-versions.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
libs=(chain-fold wal-index sb-metrics wal-source-ehdb state-shard)

# One fixed place for the copy: cargo hashes a workspace's members by their path within it
# and finds them fresh by their (copied) modification times, so a second run with the same
# target dir reuses the first run's test binaries, whose CARGO_MANIFEST_DIR must still
# exist (a fresh temporary directory each run left tests reading files of a deleted copy).
work=$root/target/minimal-versions-src
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
tar --exclude=./target --exclude=./.git --exclude=./fuzz -cf - . | tar -xf - -C "$work"
cd "$work"
members=$(printf '"crates/%s", ' "${libs[@]}")
python3 - "$members" <<'EOF'
import re, sys
text = open("Cargo.toml").read()
text = re.sub(r"members = \[[^\]]*\]", "members = [" + sys.argv[1].rstrip(", ") + "]", text, count=1)
open("Cargo.toml", "w").write(text)
EOF
# The profile overrides name packages that are no longer in the graph; cargo warns only.
if ! cargo +nightly update -Z direct-minimal-versions >"$work/update.log" 2>&1; then
  cat "$work/update.log"
  echo "the floors do not resolve: raise the floor the error names"
  exit 1
fi
echo "direct dependencies resolved to their floors:"
for lib in "${libs[@]}"; do
  cargo tree --locked -p "$lib" -e normal,dev --depth 1 --prefix none 2>/dev/null | tail -n +2
done | sort -u | sed 's/^/  /'
export CARGO_TARGET_DIR="$root/target/minimal-versions"
args=()
for lib in "${libs[@]}"; do args+=(-p "$lib"); done
cargo test --locked "${args[@]}"
