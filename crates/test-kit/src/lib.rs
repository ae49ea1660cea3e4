//! What the workspace's tests share across crates, so no test includes another crate's
//! file by path:
//!
//! | module | what | used by |
//! |---|---|---|
//! | [`s3_server`] | an S3-protocol server (`s3s-fs`) a test starts and kills | `wal-index/tests/checkpoint.rs`, `state-shard/tests/` |
//! | [`decoded`] | what a read that decodes in the index's mode must hand over | `wal-source-nats/tests/rehydrate.rs`, `wal-source-ehdb/tests/rehydrate.rs` |
//! | [`differential`] | the sequential model of the differential tests: an op language over the index API, the model's own implementation of it, and what every index must agree on after each op | `wal-index/tests/differential.rs` (proptest), `fuzz/fuzz_targets/differential.rs` (cargo-fuzz) |
//!
//! The JetStream fault drill is `wal_source_nats::test_broker::drill`, beside the cluster
//! harness it drives.

pub mod decoded;
pub mod differential;
pub mod s3_server;
