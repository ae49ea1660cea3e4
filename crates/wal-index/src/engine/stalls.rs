//! The engine's stall check ([`crate::stall`]): which resident executions have waited past
//! the bound for the same missing hop. It loads snapshots and walks them, as a build does;
//! the only lock it takes is its own, which nothing else takes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chain_fold::{EventId, ExecutionId};

use super::WalIndex;
use super::slot::Slot;
use crate::labels::StallReason;
use crate::stall::StalledChain;
use crate::sync::{Arc, Mutex};

/// What stall checks remember between runs: the executions whose chain was broken when
/// last walked. Everything else is judged from the chain and its slot's `judged` mark.
#[derive(Default)]
pub(super) struct StallWatch {
    broken: Mutex<HashMap<ExecutionId, Hole>>,
}

/// One broken chain as the checks saw it.
struct Hole {
    /// The slot it was seen in: an execution evicted and re-created is a new case.
    slot: Arc<Slot>,
    /// The walk's verdict; a different one is a new case.
    reason: StallReason,
    missing: Option<EventId>,
    /// The newest event when the verdict was last confirmed.
    newest: EventId,
    /// When a check first saw this verdict.
    since: u64,
    reported: bool,
}

/// Records `verdict` for `slot`'s execution: the same verdict as before keeps its clock and
/// its reported mark, another one starts afresh.
fn confirm<'w>(
    broken: &'w mut HashMap<ExecutionId, Hole>,
    slot: &Arc<Slot>,
    verdict: &StalledChain,
    now: u64,
) -> &'w mut Hole {
    let fresh = || Hole {
        slot: Arc::clone(slot),
        reason: verdict.reason,
        missing: verdict.missing_event_id,
        newest: verdict.newest_event_id,
        since: now,
        reported: false,
    };
    let hole = broken.entry(slot.execution_id).or_insert_with(fresh);
    if !Arc::ptr_eq(&hole.slot, slot)
        || (hole.reason, hole.missing) != (verdict.reason, verdict.missing_event_id)
    {
        *hole = fresh();
    }
    hole.newest = verdict.newest_event_id;
    hole
}

/// The walk's verdict on `slot`'s chain from its newest event, if it does not reach
/// genesis (`waited` left zero).
fn verdict_of(slot: &Slot, chain: &chain_fold::Chain) -> Option<StalledChain> {
    let newest = chain.newest()?;
    let incomplete = chain.walk_from(newest).err()?;
    StalledChain::from_walk(slot.execution_id, newest, &incomplete, Duration::ZERO)
}

/// An execution whose terminal event was just applied, before it is evicted: if its chain
/// does not reach genesis, it is reported now (its events will never wait again), unless
/// a check already reported the same verdict. Returns the report.
pub(super) fn finished(index: &WalIndex, slot: &Arc<Slot>, now: u64) -> Option<StalledChain> {
    index.config.stall_after?;
    if index.backfill.get().is_behind() {
        return None;
    }
    let chain = slot.chain();
    let mut verdict = verdict_of(slot, &chain)?;
    let mut broken = index.stalls.broken.lock();
    slot.judge(verdict.newest_event_id);
    let hole = confirm(&mut broken, slot, &verdict, now);
    if std::mem::replace(&mut hole.reported, true) {
        return None;
    }
    verdict.waited = Duration::from_nanos(now.saturating_sub(hole.since));
    index.accounting.observer().stalled_chain(&verdict);
    Some(verdict)
}

/// Reports (to the observer) and returns the executions whose chain has been broken the
/// same way for longer than the bound as of `now`, each once per verdict.
pub(super) fn stalled_chains_at(index: &WalIndex, now: Instant) -> Vec<StalledChain> {
    let Some(bound) = index.config.stall_after else {
        return Vec::new();
    };
    // A hole is expected while the drain replays the history that fills it.
    if index.backfill.get().is_behind() {
        return Vec::new();
    }
    let now = index.nanos(now);
    let bound = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    let mut broken = index.stalls.broken.lock();
    let snapshot = index.directory.snapshot();
    broken.retain(|execution_id, hole| {
        snapshot
            .get(execution_id)
            .is_some_and(|slot| Arc::ptr_eq(slot, &hole.slot))
    });
    for slot in snapshot.values() {
        let chain = slot.chain();
        let Some(newest) = chain.newest() else {
            continue;
        };
        if !slot.judge(newest) {
            continue; // walked from this newest event before: the verdict stands
        }
        let Some(verdict) = verdict_of(slot, &chain) else {
            broken.remove(&slot.execution_id);
            continue;
        };
        confirm(&mut broken, slot, &verdict, now);
    }
    drop(snapshot);
    let mut stalled = Vec::new();
    for (&execution_id, hole) in broken.iter_mut() {
        let waited = now.saturating_sub(hole.since);
        if hole.reported || waited <= bound {
            continue;
        }
        hole.reported = true;
        let found = StalledChain {
            execution_id,
            newest_event_id: hole.newest,
            reason: hole.reason,
            missing_event_id: hole.missing,
            waited: Duration::from_nanos(waited),
        };
        index.accounting.observer().stalled_chain(&found);
        stalled.push(found);
    }
    stalled.sort_by_key(|found| found.execution_id);
    stalled
}
