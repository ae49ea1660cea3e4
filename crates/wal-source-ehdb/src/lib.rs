//! The WAL drain on EHDB's events feed: the feed noetl's workers read.
//!
//! # The feed
//!
//! The writer serves each shard's log over plain TCP. A frame is a `u32` big-endian length,
//! then that many bytes of JSON. A subscriber sends one frame, `{"shard": S, "cursor": C,
//! "heartbeat_ms": H}` (the sort key of the last record it holds, `0` from the beginning;
//! the heartbeat interval it asks for, which a writer that predates heartbeats ignores), and
//! reads frames back:
//!
//! - a batch: a JSON array of records in ascending `global_sequence`, never empty, at most
//!   the writer's `EHDB_FEED_BATCH_LIMIT` (2,000 by default) to a frame, back to back while
//!   a backlog lasts; a record is `{"global_sequence": N, "execution_id": "…",
//!   "transaction_id": "…", "payload": "<the event envelope as a JSON string>"}`, with an
//!   optional `event_id` and possibly keys this reader does not know (ignored);
//! - a heartbeat, when asked for: the object `{"heartbeat":true}`, one at once after the
//!   subscription (before the writer's first poll), then one each time the writer has been
//!   parked an interval with nothing new.
//!
//! Nothing on the wire names the head: it is reached at a batch shorter than the cap or at
//! any heartbeat after the first. A record's shard is XxHash64 (seed 0) of its
//! `execution_id` text modulo the shard count ([`shard_of`]).
//!
//! # What this crate does with it
//!
//! | piece | what it does |
//! |---|---|
//! | [`frame`] | reads frames as a stream: records are handed over as they are parsed, one record's memory at a time whatever the frame's size; each payload is unescaped once into a reused buffer and decoded once into its event; a bad record is counted and its neighbours kept |
//! | [`EhdbSource`] | a [`WalSource`](wal_index::WalSource): one reader per shard, a bounded queue to the drain, and resume after a dropped connection or a writer restart from the last record handed over (nothing replayed twice) |
//! | [`EhdbRehydrate`] | rehydrate on a miss through the feed: one execution's records from its shard, filtered on `execution_id` before the payload is touched, within today's deadline and message cap |
//! | [`read_retained`] | everything the writer retains on a shard, read once (what `sb-sim replay ehdb://` shows) |
//! | [`EhdbPublisher`] | records into the writer's ingest face, each acknowledged (for tools and tests) |
//! | [`shard_of`] | the writer's shard function |
//!
//! ```no_run
//! use std::sync::Arc;
//! use wal_index::{Drain, DrainConfig, WalIndex};
//! use wal_source_ehdb::{EhdbConfig, EhdbSource};
//!
//! let source = EhdbSource::connect(EhdbConfig::new("127.0.0.1:7070").shards([0]))?;
//! let index = Arc::new(WalIndex::default());
//! let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
//! # drop(drain);
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # Trade-offs
//!
//! - A payload is unescaped into a scratch buffer the reader reuses, then decoded from it
//!   into the event's allocation: one decode, no `String` or `serde_json::Value` per record,
//!   but the payload's bytes are copied twice (unescape, then the event's canonical bytes).
//! - A broken frame (not JSON, trailing bytes) loses the records after the damage in that
//!   frame: its length is known, so the next frame is read, but the writer is not asked
//!   again for what was skipped. The real writer never sends one.
//! - A shard's records wait in the queue behind other shards' when the drain is slower
//!   than the feed: the queue is one, shared, and first come first served.
//! - A writer that heartbeats is held to it: three intervals without a byte (15 s by
//!   default) are an outage, and the shard is redialled. A writer that predates heartbeats
//!   sends nothing while it has nothing new, so a stopped one (accepting, never sending) is
//!   found only with [`EhdbConfig::idle_deadline`], off by default; keepalive finds a host
//!   that went away, not a process that stopped.
//! - Threads, not tasks: one blocking reader per shard, so a pool that drains many shards
//!   has that many threads parked on sockets.
//! - [`EhdbRehydrate`] blocks the calling thread for up to its deadline; a drive running as
//!   a task on a small runtime holds a worker thread that long.
//! - The writer, not this crate, decides the cold start: this writer version prepares a
//!   subscription's whole backlog before its first byte (~15–36 s for production's 1.4 GB on
//!   a 2-core machine), and a SIGKILL loses its unsealed tail, acknowledged records included
//!   (the index keeps what the drain already had; a record it had not is gone).
//!
//! # Concurrency
//!
//! Each reader thread owns its connection, its frame reader and its cursor; it shares with
//! the source a bounded crossbeam channel (the records), one mutex-guarded vector of shard
//! states (outages, locked when a shard goes down or up and once per `pull`), relaxed
//! statistics counters and a relaxed stop flag. The flag carries no data (the channel's
//! own synchronisation orders the records it hands over) and is polled before every socket
//! read, in every 20 ms slice of a wait for queue room or a redial pause, and at least every
//! 100 ms while a read blocks: there is no lock-free protocol here to model, and no
//! `unsafe`.

mod config;
mod connect;
pub mod frame;
mod publisher;
mod rehydrate;
mod shard;
mod source;
#[cfg(feature = "test-writer")]
pub mod test_writer;

pub use config::{
    DEFAULT_FEED_BATCH_LIMIT, DEFAULT_RESUME_BYTES, DEFAULT_RESUME_DEPTH, EhdbConfig,
};
pub use publisher::EhdbPublisher;
pub use rehydrate::{EhdbRehydrate, read_retained};
pub use shard::shard_of;
pub use source::{EhdbSource, EhdbStats};
