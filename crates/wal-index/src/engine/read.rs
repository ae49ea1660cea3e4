//! The engine's reads: builds and snapshots. Nothing here takes a lock or waits.

use std::time::Duration;

use chain_fold::{AdvanceOutcome, Chain, EventId, ExecutionId, Incomplete, advance};

use super::WalIndex;
use crate::report::Build;
use crate::sync::{Arc, Stopwatch};

/// Builds the spine at `expected_head` from the execution's published snapshot and shared
/// spine cache, and publishes the result to the cache by compare-and-swap.
pub(super) fn build(
    index: &WalIndex,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
) -> Build {
    let started = Stopwatch::start();
    // The miss path first, decided from the published snapshots while they are borrowed:
    // no reference count is touched, no spine-cache load, no allocation. A drive polling
    // for a tip the drain has not applied yet spends its builds here.
    let probe = index.directory.peek(execution_id, |slot| {
        let slot = slot?;
        let missing = expected_head
            .filter(|&tip| !slot.may_hold(tip) || !slot.with_chain(|chain| chain.contains(tip)));
        Some(match missing {
            Some(tip) => {
                // Every build of a resident execution refreshes its recency (see below).
                slot.touch(index.clock.started(started));
                Err(tip)
            }
            None => Ok(Arc::clone(slot)),
        })
    });
    let slot = match probe {
        Some(Ok(slot)) => slot,
        Some(Err(tip)) => return incomplete(index, Incomplete::TipMissing(tip), started),
        None => {
            let why = expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing);
            return incomplete(index, why, started);
        }
    };
    // The cache is loaded as an owned Arc (its identity is what the compare-and-swap
    // below compares), and *before* the chain: an apply that rewrites an event publishes
    // its chain, then empties the cache, so a build that read the chain before the rewrite
    // also read the cache before it was emptied, and its compare-and-swap fails. The chain
    // is only borrowed for the walk, without touching its
    // reference count, so builds of one hot execution do not contend on it.
    let cached = slot.cached_spine();
    let result = slot.with_chain(|chain| {
        let target = expected_head.or_else(|| chain.max_id());
        target.map(|t| advance(chain, Option::as_ref(&cached), t))
    });
    let Some(result) = result else {
        return incomplete(index, Incomplete::NoEvents, started);
    };
    // A cache hit is already cached; an ancestor served as a prefix of the cached spine
    // leaves the longer spine cached, so the drives finishing after it extend that one.
    if let Some(spine) = &result.spine
        && result.replaces_cache
    {
        slot.publish_spine(&cached, spine.clone(), &index.accounting);
    }
    // Every build of a resident execution refreshes its recency, served or not (as today):
    // a drive that keeps missing must not age its execution into a TTL or LRU eviction.
    slot.touch(index.clock.started(started));
    // Nothing above can block: no lock, no wait loop (see the progress table).
    let observer = index.accounting.observer();
    crate::observe::finish_build(
        observer,
        result.outcome,
        result.spine,
        Duration::ZERO,
        started.elapsed(),
    )
}

fn incomplete(index: &WalIndex, why: Incomplete, started: Stopwatch) -> Build {
    let observer = index.accounting.observer();
    crate::observe::finish_build(
        observer,
        AdvanceOutcome::Incomplete(why),
        None,
        Duration::ZERO,
        started.elapsed(),
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
