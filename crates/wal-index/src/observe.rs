//! Hooks through which an index reports what it does, so a metrics layer (the `sb-metrics`
//! crate) can record it without this crate depending on any metrics library.

use std::time::Duration;

use chain_fold::AdvanceOutcome;

use crate::report::{EvictReason, IndexStats};

/// A metric label enum: a fixed set of values, each with its place in `LABELS`, so a
/// metrics layer keeps one series per value in an array and indexes it with
/// [`index`](DriveLabel::index) (no string matching on the hot path).
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $label:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order of [`Self::LABELS`].
            pub const ALL: [$name; [$($label),+].len()] = [$($name::$variant),+];
            /// Every label, in the order metrics pre-register them.
            pub const LABELS: [&'static str; [$($label),+].len()] = [$($label),+];

            /// This value's position in [`Self::LABELS`] and [`Self::ALL`].
            pub const fn index(self) -> usize {
                self as usize
            }

            /// The metrics label.
            pub const fn label(self) -> &'static str {
                Self::LABELS[self as usize]
            }
        }
    };
}
pub(crate) use label_enum;

label_enum! {
    /// The final outcome of a drive, as `drive_builds_total{outcome}` labels it: every
    /// value is one way [`StateIndex::drive_flow`](crate::StateIndex::drive_flow) can end
    /// (the [`flow`](crate::flow) module's table says which step gives which).
    DriveLabel {
        /// Served within the wait budget.
        Served = "served",
        /// Served after replaying the execution from the retained WAL.
        ServedRehydrated = "served_rehydrated",
        /// Not served: the caller falls back to the server-built state.
        FallbackIncomplete = "fallback_incomplete",
        /// Served from the execution's state shard.
        ServedShard = "served_shard",
        /// Served from the state shard, whose bytes disagreed with the WAL's.
        ServedShardMismatch = "served_shard_mismatch",
        /// Not served on the stateless edge; the caller retries.
        StatelessRetry = "stateless_retry",
        /// Not attempted: this worker does not build.
        FallbackDisabled = "fallback_disabled",
    }
}

label_enum! {
    /// How one wait of a drive ended, as `drive_wait_total{outcome}` labels it.
    WaitLabel {
        /// Ended by a notification.
        Woken = "woken",
        /// Ended by the per-wait cap.
        Timeout = "timeout",
    }
}

label_enum! {
    /// How one rehydration attempt ended, as `rehydrate_total{outcome}` labels it.
    RehydrateLabel {
        /// The replay made the build complete.
        Served = "served",
        /// Replayed, still incomplete.
        Incomplete = "incomplete",
        /// The retained WAL had nothing for the execution.
        Empty = "empty",
        /// The concurrency cap was reached; nothing was replayed.
        Throttled = "throttled",
    }
}

/// Receives an index's events. Every method has an empty default, so an observer
/// implements only what it records. Calls are synchronous and on the hot path: keep them to
/// a few atomic operations.
///
/// [`WalIndex`](crate::WalIndex) calls [`IndexObserver::residency`] **while its accounting
/// is locked**, once per change, with the new totals; an observer that sets three gauges
/// from that one value therefore never shows a mix of two states. The comparators report
/// after releasing their locks, as today's index does, so two concurrent appliers may
/// report in either order (their gauges can lag behind the index until the next change).
///
/// An observer must not panic. It runs inside the engine's critical sections (residency
/// under the accounting lock, in the middle of an apply or an eviction); a panic there
/// leaves that operation half done, and the index does not try to repair it.
pub trait IndexObserver: Send + Sync + 'static {
    /// One build finished (`waited` is part of `elapsed`).
    fn build(&self, outcome: &AdvanceOutcome, elapsed: Duration, waited: Duration) {
        let _ = (outcome, elapsed, waited);
    }
    /// One wait of a drive ended.
    fn drive_wait(&self, outcome: WaitLabel) {
        let _ = outcome;
    }
    /// One drive finished.
    fn drive(&self, outcome: DriveLabel) {
        let _ = outcome;
    }
    /// A drive applied `applied` of its dispatch's tail events and skipped `rejected`
    /// (undecodable, or of another execution).
    fn drive_tail(&self, applied: u32, rejected: u32) {
        let _ = (applied, rejected);
    }
    /// The resident totals changed to `stats`.
    fn residency(&self, stats: IndexStats) {
        let _ = stats;
    }
    /// `count` executions were evicted for `reason`.
    fn evicted(&self, reason: EvictReason, count: usize) {
        let _ = (reason, count);
    }
    /// One rehydration attempt ended.
    fn rehydrate(&self, outcome: RehydrateLabel) {
        let _ = outcome;
    }
    /// The drain consumed `count` WAL records (bad ones included).
    fn wal_events(&self, count: u64) {
        let _ = count;
    }
    /// The drain's feed is healthy (or not).
    fn healthy(&self, up: bool) {
        let _ = up;
    }
}

/// Records nothing: the default observer.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl IndexObserver for NoopObserver {}
