//! The engine's reads: builds and snapshots. Nothing here takes a lock or waits.

use std::time::Duration;

use chain_fold::{AdvanceOutcome, Chain, EventId, ExecutionId, Incomplete, advance};

use super::WalIndex;
use crate::report::Build;
use crate::sync::Stopwatch;

/// Builds the spine at `expected_head` from the execution's published snapshot and shared
/// spine cache, and publishes the result to the cache by compare-and-swap.
///
/// The whole build runs on the slot as the directory lends it (under the map's read guard),
/// so no reference count of the slot is touched; a build of a tip above the chain's largest
/// id (a drive polling for a tip the drain has not applied yet) is decided by one load,
/// without loading the chain or the cache.
pub(super) fn build(
    index: &WalIndex,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
) -> Build {
    // The clock is read only for what a pool keeps: recency when an eviction limit reads
    // it, the build's duration when the observer takes it.
    let started = (index.builds_read_the_clock || index.builds_timed).then(Stopwatch::start);
    let built = index.directory.peek(execution_id, |slot| {
        let slot = slot?;
        // Every build of a resident execution refreshes its recency, served or not (as
        // today), to the millisecond: a drive that keeps missing must not age its execution
        // into a TTL or LRU eviction. Without an eviction limit nothing evicts by it, and
        // the build takes the newest write's reading instead of the clock's (a checkpoint
        // still records recency, for a pool that restores it with limits).
        let now = match started.filter(|_| index.builds_read_the_clock) {
            Some(started) => index.clock.started(started),
            None => index.last_write(),
        };
        // The mutation leaves recency alone without a limit: a checkpoint would carry a
        // read-mostly execution as idle since its last write.
        if !chain_fold::mutation::on("build-skips-recency") || index.builds_read_the_clock {
            slot.touch_for_build(now);
        }
        if let Some(tip) = expected_head.filter(|&tip| !slot.may_hold(tip)) {
            return Some((
                AdvanceOutcome::Incomplete(Incomplete::TipMissing(tip)),
                None,
            ));
        }
        // The cache is loaded *before* the chain: an apply that rewrites an event
        // publishes its chain, then empties the cache, so a build that read the chain
        // before the rewrite also read the cache before it was emptied, and its
        // compare-and-swap fails. Both are lent, not cloned (the cache's identity is what
        // the compare-and-swap compares), so builds of one hot execution do not contend on
        // their reference counts.
        slot.with_cached_spine(|cached| {
            let result = slot.with_chain(|chain| {
                let target = expected_head.or_else(|| chain.max_id());
                target.map(|t| advance(chain, Option::as_ref(cached), t))
            })?;
            // A cache hit is already cached; an ancestor served as a prefix of the cached
            // spine leaves the longer spine cached, so the drives finishing after it extend
            // that one.
            if let Some(spine) = &result.spine
                && result.replaces_cache
            {
                slot.publish_spine(cached, spine.clone(), &index.accounting);
            }
            Some((result.outcome, result.spine))
        })
    });
    let (outcome, spine) = built.unwrap_or_else(|| {
        let why = expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing);
        (AdvanceOutcome::Incomplete(why), None)
    });
    // Nothing above can block: no lock, no wait loop (see the progress table).
    crate::observe::finish_build(
        index.accounting.observer(),
        outcome,
        spine,
        Duration::ZERO,
        started
            .filter(|_| index.builds_timed)
            .map_or(Duration::ZERO, |started| started.elapsed()),
    )
}

/// A snapshot of one execution's chain.
pub(super) fn chain(index: &WalIndex, execution_id: ExecutionId) -> Option<Chain> {
    index
        .lookup(execution_id)
        .map(|slot| Chain::clone(&slot.chain()))
}

/// The ids of resident executions (those holding at least one event), ascending.
pub(super) fn execution_ids(index: &WalIndex) -> Vec<ExecutionId> {
    let mut ids: Vec<ExecutionId> = index
        .directory
        .slots()
        .iter()
        .filter(|slot| !slot.with_chain(Chain::is_empty))
        .map(|slot| slot.execution_id)
        .collect();
    ids.sort_unstable();
    ids
}
