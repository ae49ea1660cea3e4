//! noetl's per-execution **state shards**: the one keyed object read a drive makes before
//! it replays the WAL, and the writer that keeps them.
//!
//! # The model
//!
//! Production's system pool writes, for each execution, an Arrow IPC stream holding every
//! event it has seen with its slim payload, under a key derived from the execution id and
//! the pool's cell (`…/execution={id}/state/{open|sealed}.feather`): `open` while the
//! execution runs (rewritten at most every 30 s), `sealed` at its terminal event. A worker
//! whose drive is still incomplete after its deadline reads `sealed`, then `open`, applies
//! the payloads to its index and builds again; only if that fails does it replay the WAL.
//! On EHDB that replay costs the writer a whole log shard's preparation; a state-shard read
//! costs one GET of a few kilobytes.
//!
//! This crate is both halves, byte-compatible with production (the reference is
//! noetl/worker v5.120.0's `src/state_reader.rs`, `src/state_materializer.rs` and
//! `src/state_locator.rs`; the key layout, hash and date rule in [`key`], the
//! columns and types in [`codec`], the slim payload text in [`row`]):
//!
//! - [`StateShardReader`] is a [`DriveFallbacks`](wal_index::DriveFallbacks): its
//!   `state_shard` is the drive's step 3 (combine it with the retained WAL with
//!   [`StateShardReader::then_retained`]);
//! - [`ShardWriter`] runs beside a pool's drain, fed by
//!   [`Drain::on_batch`](wal_index::Drain::on_batch).
//!
//! Both talk to a [`ShardStore`]: S3 and S3-protocol servers, GCS and Azure Blob (the
//! `aws`, `gcp`, `azure` features), production's server over HTTP (`http://…/api/internal/objects`),
//! or a directory.
//!
//! # What a shard is trusted with
//!
//! Nothing. Production's writer holds only its own process's memory, so after a restart
//! it can replace a whole shard with a partial one; a shard can also be stale. The drive
//! serves a shard only when its build from the expected head reaches genesis, exactly as
//! for any other source, and goes on to the WAL otherwise. This crate's writer does not
//! write partial shards over whole ones (see [`ShardWriter`]), but a reader cannot know
//! which writer wrote what it reads.
//!
//! # Trade-offs
//!
//! - The writer is fed by the drain, so it sees what this pool's drain sees: a pool that
//!   drops batches at a full queue (counted) writes shards with gaps, which the drive's
//!   walk then refuses. The queue is bounded so that the drain never waits for storage.
//! - A shard is decoded whole in memory, capped at 64 MiB by default
//!   ([`StateShardReader::max_bytes`]); production's shards are kilobytes.
//! - Each [`ShardStore`] runs a one-thread Tokio runtime of its own for its requests.
//! - Arrow's IPC crates are the largest dependency of the workspace after the broker
//!   client; only `arrow-ipc`, `arrow-array`, `arrow-schema` and `arrow-buffer` are used
//!   (no compute kernels, no compression codecs).

pub mod codec;
mod error;
pub mod key;
mod reader;
pub mod row;
mod settings;
mod store;
mod writer;

pub use error::ShardError;
pub use key::{CellSettings, ShardKind};
pub use reader::{ShardsThenRetained, StateShardReader, events_of};
pub use row::ShardRow;
pub use settings::ShardSettings;
pub use store::ShardStore;
pub use writer::{ShardWriter, WriterConfig, WriterStats};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
