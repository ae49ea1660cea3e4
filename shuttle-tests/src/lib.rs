//! Randomized-schedule tests of `wal-index` under [shuttle](https://docs.rs/shuttle): the
//! tests live in `tests/` and run only with `--cfg wal_index_shuttle` (`scripts/shuttle.sh`),
//! which puts every engine's synchronization on shuttle's scheduler.
