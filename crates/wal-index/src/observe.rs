//! Hooks through which an index reports what it does, so a metrics layer (the `sb-metrics`
//! crate) can record it without this crate depending on any metrics library.

use std::time::Duration;

use chain_fold::AdvanceOutcome;

use crate::labels::{DriveLabel, EvictReason, RehydrateLabel, WaitLabel};
use crate::report::{Build, IndexStats};

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

/// Assembles a build that took `elapsed` and reports it to `observer`: every index ends
/// each build here, so what the observer hears is what the caller gets.
pub(crate) fn finish_build(
    observer: &dyn IndexObserver,
    outcome: AdvanceOutcome,
    spine: Option<chain_fold::Spine>,
    waited: Duration,
    elapsed: Duration,
) -> Build {
    let build = Build {
        outcome,
        spine,
        waited,
        elapsed,
    };
    observer.build(&build.outcome, build.elapsed, build.waited);
    build
}
