#!/usr/bin/env bash
# pyarrow, an Arrow implementation that is not arrow-rs, for the state-shard interop tests
# (crates/state-shard/tests/interop.rs runs scripts/shard-interop.py). Installs it from
# PyPI for the python3 on PATH unless it imports already; exits non-zero if it cannot.
set -euo pipefail
if ! python3 -c 'import pyarrow' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check pyarrow >&2 \
    || python3 -m pip install --quiet --disable-pip-version-check --user pyarrow >&2
fi
python3 -c 'import pyarrow; print(pyarrow.__version__)'
