#!/usr/bin/env bash
# Soak: threads applying, building, driving, evicting, sweeping and rehydrating at random
# against each index for a set time; then the invariants are checked, including that
# nothing acknowledged was lost. Also runs the dedicated "nothing acknowledged is lost"
# workload for LEDGER_SECS per index (default: the same time).
#
# Usage: scripts/soak.sh [SECONDS_PER_INDEX]   (default 60)
# SOAK_PROFILE=dev reuses the debug test build (CI does, to save a release compile).
set -euo pipefail
cd "$(dirname "$0")/.."
export SOAK_SECS=${1:-60}
export LEDGER_SECS=${LEDGER_SECS:-$SOAK_SECS}
release=--release
[ "${SOAK_PROFILE:-release}" = dev ] && release=
cargo test $release --locked -p wal-index --test soak -- --include-ignored --nocapture
