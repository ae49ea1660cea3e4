//! Hooks through which an index reports what it does, so a metrics layer (the `sb-metrics`
//! crate) can record it without this crate depending on any metrics library.

use std::time::Duration;

use chain_fold::AdvanceOutcome;

use crate::report::{EvictReason, IndexStats};

/// The final outcome of a drive, as `drive_builds_total{outcome}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriveLabel {
    /// Served within the wait budget.
    Served,
    /// Served after replaying the execution from the retained WAL.
    ServedRehydrated,
    /// Not served: the caller falls back to the server-built state.
    FallbackIncomplete,
}

impl DriveLabel {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            DriveLabel::Served => "served",
            DriveLabel::ServedRehydrated => "served_rehydrated",
            DriveLabel::FallbackIncomplete => "fallback_incomplete",
        }
    }
}

/// How one wait of a drive ended, as `drive_wait_total{outcome}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitLabel {
    /// Ended by a notification.
    Woken,
    /// Ended by the per-wait cap.
    Timeout,
}

impl WaitLabel {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            WaitLabel::Woken => "woken",
            WaitLabel::Timeout => "timeout",
        }
    }
}

/// How one rehydration attempt ended, as `rehydrate_total{outcome}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RehydrateLabel {
    /// The replay made the build complete.
    Served,
    /// Replayed, still incomplete.
    Incomplete,
    /// The retained WAL had nothing for the execution.
    Empty,
    /// The concurrency cap was reached; nothing was replayed.
    Throttled,
}

impl RehydrateLabel {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            RehydrateLabel::Served => "served",
            RehydrateLabel::Incomplete => "incomplete",
            RehydrateLabel::Empty => "empty",
            RehydrateLabel::Throttled => "throttled",
        }
    }
}

/// Receives an index's events. Every method has an empty default, so an observer
/// implements only what it records. Calls are synchronous and on the hot path: keep them to
/// a few atomic operations.
///
/// [`IndexObserver::residency`] is called **while the index's accounting is locked**, once
/// per change, with the new totals; an observer that sets three gauges from that one value
/// therefore never shows a mix of two states.
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
