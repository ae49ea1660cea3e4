//! Loom models of what a worker pool relies on, written against `wal-index`'s public API
//! only (`tests/public_surface.rs`): a drain applying the tip a drive waits for, a terminal
//! eviction racing a drive, and a drive for an execution the index has not seen yet racing
//! its first event. The models of the engine's internals (the slot, the directory, the
//! sweep, the stall checks) stay beside the code they model, in `wal-index`.
//!
//! The models compile only under `--cfg wal_index_loom`, which swaps `wal-index`'s
//! synchronization shim for loom's; `scripts/loom.sh` runs them, then builds each mutation
//! that `scripts/mutations.table` assigns to this crate and requires its model to fail.
//! This library is empty.
