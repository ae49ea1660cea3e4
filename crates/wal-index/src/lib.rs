//! The concurrent state-builder index: the WAL drain publishes one snapshot per execution,
//! builds read snapshots without any lock the drain can hold, and a drive waiting for a tip
//! is woken only when its own execution changes.
//!
//! # Why
//!
//! Today's index is a `HashMap` of chains behind one async mutex. The drain takes it per
//! applied event; a build whose tip is not yet indexed is exactly the build that arrives
//! while the drain is applying that tip, so in production 98.7% of such a build is waiting
//! (376.6 µs of 381.6 µs). [`WalIndex`] removes the wait by construction; [`MutexIndex`]
//! keeps today's design, faithfully, so both can be measured side by side through the
//! [`StateIndex`] trait.
//!
//! # Quick start
//!
//! ```
//! use std::sync::Arc;
//! use wal_index::{Drain, DrainConfig, DriveBudget, IndexConfig, WalIndex, channel_wal};
//!
//! let index = Arc::new(WalIndex::new(IndexConfig::default()));
//! let (wal, source) = channel_wal();
//! let drain = Drain::new(index.clone(), source, DrainConfig::default()).spawn();
//!
//! wal.append(r#"{"event_id":1,"execution_id":42,"event_type":"playbook_started"}"#);
//! wal.append(r#"{"event_id":2,"execution_id":42,"prev_event_id":1,"event_type":"step"}"#);
//!
//! // The drive for tip 2 waits (on execution 42 alone) until the drain has applied it.
//! let drive = index.drive_blocking(42, Some(2), DriveBudget::default());
//! assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
//!
//! drop(wal);
//! let report = drain.join().unwrap();
//! assert_eq!(report.events, 2);
//! ```
//!
//! See `docs/protocol.md` in the repository for the publish and wait protocols, and
//! [`WalIndex`] for each operation's progress guarantee.

mod accounting;
#[cfg(not(wal_index_loom))]
mod baseline;
mod config;
#[cfg(not(wal_index_loom))]
mod drain;
#[cfg(not(wal_index_loom))]
mod drive;
#[cfg(not(wal_index_loom))]
mod engine;
#[cfg(not(wal_index_loom))]
mod eviction;
#[cfg(not(wal_index_loom))]
mod locked_entry;
mod observe;
#[cfg(not(wal_index_loom))]
mod rehydrate;
mod report;
#[cfg(not(wal_index_loom))]
mod sharded;
mod slot;
#[cfg(not(wal_index_loom))]
mod source;
#[cfg(not(wal_index_loom))]
mod state_index;
mod sync;

#[cfg(not(wal_index_loom))]
pub use baseline::MutexIndex;
pub use config::{ConfigError, DriveBudget, EvictionPolicy, IndexConfig};
#[cfg(not(wal_index_loom))]
pub use drain::{Backoff, BadRecord, Drain, DrainConfig, DrainHandle, DrainReport};
#[cfg(not(wal_index_loom))]
pub use engine::WalIndex;
pub use observe::{DriveLabel, IndexObserver, NoopObserver, RehydrateLabel, WaitLabel};
#[cfg(not(wal_index_loom))]
pub use rehydrate::{RehydrateGate, RehydratePermit};
pub use report::{
    Applied, ApplyError, BatchReport, Build, Drive, DriveOutcome, EvictReason, EvictionStats,
    IndexStats, RehydrateReport,
};
#[cfg(not(wal_index_loom))]
pub use sharded::ShardedMutexIndex;
#[cfg(not(wal_index_loom))]
pub use source::{ChannelSource, JsonLinesSource, Pull, Record, WalSource, WalWriter, channel_wal};
#[cfg(not(wal_index_loom))]
pub use state_index::StateIndex;

/// The protocol core (slots and accounting) over the loom shim, for the models in
/// `loom-tests/`. Exists only under `--cfg wal_index_loom`; not a public API.
#[cfg(wal_index_loom)]
#[doc(hidden)]
pub mod model {
    pub use crate::accounting::Accounting;
    pub use crate::slot::{Evicted, Slot, SlotApplied, SlotEviction};
    pub use crate::sync::Listener;
}
