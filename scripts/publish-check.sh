#!/usr/bin/env bash
# The library crates as crates.io would take them:
#   1. each crate's rust-version is at least the highest rust-version of its normal and
#      build dependencies (every target), read from the lockfile's resolution;
#   2. each crate builds (`cargo check --lib`) on the toolchain its rust-version names,
#      installed with rustup (minimal profile) when missing; skipped, saying so, only
#      where rustup cannot fetch it;
#   3. `cargo publish --dry-run` packages all six and builds each package as published,
#      against the others' packages (cargo's multi-package publish, Cargo 1.90+), in its
#      own target dir, target/publish, which nothing else reads (CI deletes it after).
#
# Usage: scripts/publish-check.sh
#   MSRV_SKIP="wal-source-nats state-shard"   crates whose step 2 is skipped (CI skips
#                                 wal-source-nats and state-shard: their bounds are their
#                                 clients' own rust-versions (async-nats'; arrow's and
#                                 object_store's), which step 1 checks, and building a
#                                 broker or HTTP client's stack on a second toolchain costs
#                                 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
CRATES=(chain-fold wal-index sb-metrics wal-source-nats wal-source-ehdb state-shard)

echo "--- 1. rust-version against the dependencies'"
python3 - "${CRATES[@]}" <<'PY'
import json, subprocess, sys
meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--locked"]))
declared = {p["name"]: p.get("rust_version") for p in meta["packages"] if p["source"] is None}
known = {(p["name"], p["version"]): p.get("rust_version") for p in meta["packages"]}
version = lambda v: tuple(int(x) for x in (v.split(".") + ["0", "0"])[:3])
failed = False
for name in sys.argv[1:]:
    tree = subprocess.check_output(
        ["cargo", "tree", "--locked", "-p", name, "-e", "normal,build", "--target", "all",
         "--prefix", "none", "--format", "{p}"], text=True)
    needs = []
    for line in tree.splitlines()[1:]:
        dep, ver = line.split()[0], line.split()[1].lstrip("v")
        if known.get((dep, ver)):
            needs.append((version(known[(dep, ver)]), f"{dep} {ver}"))
    own = declared[name]
    if own is None:
        print(f"  {name}: no rust-version"); failed = True; continue
    top = max(needs) if needs else ((0,), "nothing")
    ok = version(own) >= top[0]
    failed |= not ok
    print(f"  {name}: rust-version {own}; its dependencies need {'.'.join(map(str, top[0]))} ({top[1]}) {'ok' if ok else 'TOO LOW'}")
sys.exit(1 if failed else 0)
PY

echo "--- 2. each crate on the toolchain its rust-version names"
declare -A RUST_VERSION VERSION
while read -r name version rv; do RUST_VERSION[$name]=$rv; VERSION[$name]=$version; done < <(
  cargo metadata --format-version 1 --locked --no-deps | python3 -c \
    "import json,sys; [print(p['name'], p['version'], p['rust_version']) for p in json.load(sys.stdin)['packages'] if p['rust_version']]")
for crate in "${CRATES[@]}"; do
  if [[ " ${MSRV_SKIP:-} " == *" $crate "* ]]; then
    echo "  SKIP $crate (MSRV_SKIP)"; continue
  fi
  rv=${RUST_VERSION[$crate]}
  if ! rustup run "$rv" rustc --version >/dev/null 2>&1 \
      && ! rustup toolchain install "$rv" --profile minimal >/dev/null 2>&1; then
    echo "  SKIP $crate: rustup could not install Rust $rv here"; continue
  fi
  features=()
  [ "$crate" = wal-index ] && features=(--features baselines)
  echo "  $crate on Rust $rv"
  CARGO_TARGET_DIR=target/msrv cargo "+$rv" check --locked -q --lib -p "$crate" "${features[@]}"
done

echo "--- 3. cargo publish --dry-run"
# cargo verifies each package against the others' packages through a temporary registry
# under target/publish/package, and unpacks them into $CARGO_HOME/registry/src like any registry
# crate; an earlier dry run from the same path left an unpacked copy of the same name and
# version there, which cargo reuses as is (stale sources, a false failure). Remove only
# those copies of this workspace's own crates.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for crate in "${CRATES[@]}"; do
  rm -rf "$cargo_home"/registry/src/*/"$crate-${VERSION[$crate]}"
done
args=()
for crate in "${CRATES[@]}"; do args+=(-p "$crate"); done
log=$(mktemp)
if ! CARGO_TARGET_DIR=target/publish cargo publish --workspace --dry-run --locked --allow-dirty "${args[@]}" >"$log" 2>&1; then
  cat "$log"; rm -f "$log"
  echo "publish-check: cargo publish --dry-run failed"; exit 1
fi
grep -E "Packaged|Verifying|Uploading" "$log"; rm -f "$log"
echo "publish-check OK"
