//! Hooks through which an index reports what it does, so a metrics layer (the `sb-metrics`
//! crate) can record it without this crate depending on any metrics library.

use std::time::Duration;

use chain_fold::AdvanceOutcome;

use crate::backfill::Backfill;
use crate::labels::{
    CheckpointLabel, DriveLabel, EvictReason, RefusalLabel, RehydrateLabel, ShardReadLabel,
    ShardVerifyLabel, WaitLabel,
};
use crate::report::{Build, IndexStats};
use crate::stall::StalledChain;

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
    /// Whether builds are timed for this observer: asked once, when the index is made.
    /// The default is `true`; an observer that does nothing with a build's `elapsed` (as
    /// [`NoopObserver`]) answers `false`, and the engine's builds then read no clock for
    /// it (two reads of the OS clock, about a fifth of an incremental build): their
    /// [`Build::elapsed`](crate::report::Build::elapsed) is zero.
    fn times_builds(&self) -> bool {
        true
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
    /// Where the drain stands against the log's head at subscription, after a pull (the
    /// `backfilling` gauge: 1 while [`Backfill::Behind`]).
    fn backfill(&self, state: Backfill) {
        let _ = state;
    }
    /// A stall check found `stalled` (the `stalled_chains_total` counter). Called once per
    /// hole, from the thread that ran the check (the drain's), with no lock held.
    fn stalled_chain(&self, stalled: &StalledChain) {
        let _ = stalled;
    }
    /// What became of a checkpoint (the `checkpoints_total` counter): the drain reports
    /// each it took, wrote, failed to write or skipped, and a restore each it used.
    fn checkpoint(&self, outcome: CheckpointLabel) {
        let _ = outcome;
    }
    /// A checkpoint was refused at restore (the `checkpoint_refused_total` counter).
    fn checkpoint_refused(&self, reason: RefusalLabel) {
        let _ = reason;
    }
    /// A drive read the execution's state shard (`state_shard_reads_total`, and `took`
    /// for `state_shard_read_duration_seconds`). Not called for a drive whose flow has no
    /// shard reader.
    fn state_shard_read(&self, outcome: ShardReadLabel, took: Duration) {
        let _ = (outcome, took);
    }
    /// The verify mode compared a served shard with the retained WAL
    /// (`state_shard_verify_total`; a mismatch is also `state_equivalence_mismatch_total`).
    fn state_shard_verify(&self, outcome: ShardVerifyLabel) {
        let _ = outcome;
    }
}

/// Records nothing: the default observer.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

/// Builds are not timed for it ([`IndexObserver::times_builds`]).
impl IndexObserver for NoopObserver {
    fn times_builds(&self) -> bool {
        false
    }
}

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

/// Two observers, both told everything, `A` first: metrics and a tally of one's own, say,
/// without a forwarding type.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use wal_index::observe::NoopObserver;
/// use wal_index::{IndexObserver, StateIndex, WalIndex, IndexConfig};
///
/// #[derive(Default)]
/// struct Records(AtomicU64);
/// impl IndexObserver for Records {
///     fn wal_events(&self, count: u64) {
///         self.0.fetch_add(count, Ordering::Relaxed);
///     }
/// }
///
/// let records = Arc::new(Records::default());
/// let both = Arc::new((NoopObserver, Arc::clone(&records)));
/// let index = WalIndex::with_observer(IndexConfig::default(), both);
/// index.observer().wal_events(3);
/// assert_eq!(records.0.load(Ordering::Relaxed), 3);
/// ```
impl<A: IndexObserver, B: IndexObserver> IndexObserver for (A, B) {
    fn build(&self, outcome: &AdvanceOutcome, elapsed: Duration, waited: Duration) {
        self.0.build(outcome, elapsed, waited);
        self.1.build(outcome, elapsed, waited);
    }
    fn times_builds(&self) -> bool {
        self.0.times_builds() || self.1.times_builds()
    }
    fn drive_wait(&self, outcome: WaitLabel) {
        self.0.drive_wait(outcome);
        self.1.drive_wait(outcome);
    }
    fn drive(&self, outcome: DriveLabel) {
        self.0.drive(outcome);
        self.1.drive(outcome);
    }
    fn drive_tail(&self, applied: u32, rejected: u32) {
        self.0.drive_tail(applied, rejected);
        self.1.drive_tail(applied, rejected);
    }
    fn residency(&self, stats: IndexStats) {
        self.0.residency(stats);
        self.1.residency(stats);
    }
    fn evicted(&self, reason: EvictReason, count: usize) {
        self.0.evicted(reason, count);
        self.1.evicted(reason, count);
    }
    fn rehydrate(&self, outcome: RehydrateLabel) {
        self.0.rehydrate(outcome);
        self.1.rehydrate(outcome);
    }
    fn wal_events(&self, count: u64) {
        self.0.wal_events(count);
        self.1.wal_events(count);
    }
    fn healthy(&self, up: bool) {
        self.0.healthy(up);
        self.1.healthy(up);
    }
    fn backfill(&self, state: Backfill) {
        self.0.backfill(state);
        self.1.backfill(state);
    }
    fn stalled_chain(&self, stalled: &StalledChain) {
        self.0.stalled_chain(stalled);
        self.1.stalled_chain(stalled);
    }
    fn checkpoint(&self, outcome: CheckpointLabel) {
        self.0.checkpoint(outcome);
        self.1.checkpoint(outcome);
    }
    fn checkpoint_refused(&self, reason: RefusalLabel) {
        self.0.checkpoint_refused(reason);
        self.1.checkpoint_refused(reason);
    }
    fn state_shard_read(&self, outcome: ShardReadLabel, took: Duration) {
        self.0.state_shard_read(outcome, took);
        self.1.state_shard_read(outcome, took);
    }
    fn state_shard_verify(&self, outcome: ShardVerifyLabel) {
        self.0.state_shard_verify(outcome);
        self.1.state_shard_verify(outcome);
    }
}

/// A shared observer observes as the one it points to.
impl<T: IndexObserver + ?Sized> IndexObserver for std::sync::Arc<T> {
    fn build(&self, outcome: &AdvanceOutcome, elapsed: Duration, waited: Duration) {
        (**self).build(outcome, elapsed, waited);
    }
    fn times_builds(&self) -> bool {
        (**self).times_builds()
    }
    fn drive_wait(&self, outcome: WaitLabel) {
        (**self).drive_wait(outcome);
    }
    fn drive(&self, outcome: DriveLabel) {
        (**self).drive(outcome);
    }
    fn drive_tail(&self, applied: u32, rejected: u32) {
        (**self).drive_tail(applied, rejected);
    }
    fn residency(&self, stats: IndexStats) {
        (**self).residency(stats);
    }
    fn evicted(&self, reason: EvictReason, count: usize) {
        (**self).evicted(reason, count);
    }
    fn rehydrate(&self, outcome: RehydrateLabel) {
        (**self).rehydrate(outcome);
    }
    fn wal_events(&self, count: u64) {
        (**self).wal_events(count);
    }
    fn healthy(&self, up: bool) {
        (**self).healthy(up);
    }
    fn backfill(&self, state: Backfill) {
        (**self).backfill(state);
    }
    fn stalled_chain(&self, stalled: &StalledChain) {
        (**self).stalled_chain(stalled);
    }
    fn checkpoint(&self, outcome: CheckpointLabel) {
        (**self).checkpoint(outcome);
    }
    fn checkpoint_refused(&self, reason: RefusalLabel) {
        (**self).checkpoint_refused(reason);
    }
    fn state_shard_read(&self, outcome: ShardReadLabel, took: Duration) {
        (**self).state_shard_read(outcome, took);
    }
    fn state_shard_verify(&self, outcome: ShardVerifyLabel) {
        (**self).state_shard_verify(outcome);
    }
}
