//! Loom models of the `wal-index` protocols. The models live in `tests/` and compile only
//! under `--cfg wal_index_loom`, which swaps every primitive of the engine's sync shim for
//! loom's; run them with `scripts/loom.sh`. In a normal build this crate is empty.
