//! The concurrent state-builder index: the WAL drain publishes one snapshot per execution,
//! builds read snapshots without any lock the drain can hold, and a drive waiting for a tip
//! is woken only when its own execution changes.
//!
//! # Why
//!
//! Today's index is a `HashMap` of chains behind one async mutex. The drain takes it per
//! applied event; a build whose tip is not yet indexed is exactly the build that arrives
//! while the drain is applying that tip, so in production 98.7% of such a build is waiting
//! (376.6 µs of 381.6 µs). [`WalIndex`] removes the wait by construction.
//!
//! # What a worker pool uses
//!
//! | item | role |
//! |---|---|
//! | [`WalIndex`] | the index; its [`StateIndex`] methods are the whole surface |
//! | [`IndexConfig`] | eviction limits, spine order, slim payloads, sink gate (`from_env` reads today's variables) |
//! | [`DriveBudget`], [`DriveFlow`], [`DriveFallbacks`], [`Drive`], [`DriveOutcome`] | the worker's drive: its deadline, tail events, shard and rehydrate steps, and what it returned |
//! | [`Drain`], [`DrainConfig`], [`WalSource`] | the loop that pulls the WAL into the index, and what it pulls from |
//! | [`Drain::warm_start`], [`checkpoint::Checkpointing`] | a pool's start from its newest checkpoint the log still holds, and the checkpoints it takes |
//! | [`IndexObserver`] | where builds, drives, residency and evictions are reported (`sb-metrics` implements it) |
//! | [`Event`], [`Spine`], [`Chain`], [`Incomplete`], ... | the `chain-fold` types that appear in those signatures, re-exported |
//!
//! Everything else lives in named modules: [`config`], [`report`] (what each operation
//! returns), [`observe`] (the observer and its no-op), [`labels`] (the metric label enums),
//! [`flow`] (the drive's steps, fallbacks and read bounds), [`ingest`] (drain reports, the
//! decode, the channel and file sources), [`rehydrate`] (the replay concurrency cap), [`stall`] (chains that wait for a
//! hop the WAL lost), [`protocol`] (documentation only:
//! how the engine publishes, waits and evicts, and which ordering pairs with which), and,
//! behind the `baselines`
//! feature, `baseline` (today's design and a per-execution-lock design, kept to be
//! measured against).
//!
//! # Quick start
//!
//! ```
//! use std::sync::Arc;
//! use wal_index::{Drain, DrainConfig, DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};
//! use wal_index::ingest::channel_wal;
//!
//! let index = Arc::new(WalIndex::new(IndexConfig::default()));
//! let (wal, source) = channel_wal();
//! let drain = Drain::new(index.clone(), source, DrainConfig::default()).spawn();
//!
//! wal.append(r#"{"event_id":1,"execution_id":42,"event_type":"playbook_started"}"#);
//! wal.append(r#"{"event_id":2,"execution_id":42,"prev_event_id":1,"event_type":"step"}"#);
//!
//! // The drive for tip 2 waits (on execution 42 alone) until the drain has applied it.
//! let drive = index.drive(42, Some(2), &DriveFlow::new(DriveBudget::default()));
//! assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
//!
//! drop(wal);
//! let report = drain.join().unwrap();
//! assert_eq!(report.events, 2);
//! ```
//!
//! # Layout
//!
//! The crate reads from the pure core outwards: `chain-fold` (a separate crate) decides
//! what a build returns; `sync` is the one place synchronization primitives come from
//! (std, loom or shuttle); `engine` is [`WalIndex`]; `index` holds [`StateIndex`] and the
//! one drive every index shares; [`checkpoint`] keeps an index across a restart (where a
//! checkpoint stands in the log, its bytes, its stores, the restore and the writer), and
//! imports neither the drain nor a source; [`ingest`] feeds an index and starts a pool from
//! a checkpoint; `baseline` holds the comparators. Imports run one way: the engine never
//! imports a comparator, and no module imports the crate root (`scripts/module-cycles.py`
//! checks both in CI).

mod backfill;
pub mod checkpoint;
pub mod config;
#[doc = include_str!("protocol.md")]
pub mod protocol {}
mod engine;
mod eviction_plan;
mod index;
pub mod ingest;
pub mod labels;
pub mod observe;
pub mod rehydrate;
pub mod report;
#[cfg(all(test, wal_index_shuttle))]
mod shuttle_models;
pub mod stall;
pub mod state_spine;
mod sync;
#[cfg(test)]
mod test_events;
mod waiting_room;

#[cfg(feature = "baselines")]
pub mod baseline;

pub use chain_fold::{
    AdvanceOutcome, Chain, Event, EventError, EventId, ExecutionId, Incomplete, Spine, SpineOrder,
};
pub use config::{DriveBudget, IndexConfig};
pub use engine::WalIndex;
pub use index::StateIndex;
pub use index::flow::{self, DriveFallbacks, DriveFlow};
pub use ingest::{Drain, DrainConfig, WalSource};
pub use observe::IndexObserver;
pub use report::{Drive, DriveOutcome};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
