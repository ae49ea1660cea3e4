//! The engine's stall checks ([`crate::stall`] states the rule): which holes in resident
//! chains, and in the chains of executions that left the index, have been open longer than
//! the bound.
//!
//! # Locks
//!
//! [`StallWatch`] is one mutex. Checks hold it for their whole scan; the drain's terminal
//! eviction takes it briefly, and only for an evicted chain that has a hole. Builds,
//! drives, and every other writer never take it. The observer is called after it is
//! released. Under it, checks read published snapshots exactly as builds do.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use chain_fold::{Chain, EventId, ExecutionId};

use super::WalIndex;
use super::slot::Slot;
use crate::labels::StallReason;
use crate::stall::{DEPARTED_HOLES_MAX, REPORTED_MEMORY, StalledChain};
use crate::sync::{Arc, Mutex};

/// What stall checks remember between runs.
#[derive(Default)]
pub(super) struct StallWatch {
    state: Mutex<Watch>,
}

#[derive(Default)]
struct Watch {
    /// Resident executions whose chain had holes when last scanned.
    resident: HashMap<ExecutionId, Resident>,
    /// Holes of executions that left the index, by execution and missing id.
    departed: HashMap<(ExecutionId, EventId), Hole>,
    /// The holes reported lately, oldest first, and the same as a set.
    reported: VecDeque<(ExecutionId, EventId)>,
    reported_set: HashSet<(ExecutionId, EventId)>,
    /// Since when the drain has been caught up (checks count a hole's time from here at
    /// the earliest): 0 (the index's start) until a check finds it behind, then the first
    /// check that finds it caught up again.
    caught_up_since: u64,
    /// The last check found the drain behind.
    behind: bool,
}

/// A resident chain with holes, in the slot it was seen in.
struct Resident {
    slot: Arc<Slot>,
    holes: HashMap<EventId, Hole>,
}

#[derive(Clone, Copy)]
struct Hole {
    /// When a check (or an eviction) first saw it.
    since: u64,
    /// The chain's newest event when it was last seen.
    newest: EventId,
    reported: bool,
}

impl Watch {
    fn was_reported(&self, execution_id: ExecutionId, missing: EventId) -> bool {
        self.reported_set.contains(&(execution_id, missing))
    }

    fn remember_reported(&mut self, execution_id: ExecutionId, missing: EventId) {
        if self.reported_set.insert((execution_id, missing)) {
            self.reported.push_back((execution_id, missing));
        }
        while self.reported.len() > REPORTED_MEMORY {
            if let Some(old) = self.reported.pop_front() {
                self.reported_set.remove(&old);
            }
        }
    }

    /// Records the unreported holes of an execution that left the index.
    fn depart(
        &mut self,
        execution_id: ExecutionId,
        holes: impl IntoIterator<Item = (EventId, Hole)>,
    ) {
        for (missing, hole) in holes {
            if hole.reported || self.was_reported(execution_id, missing) {
                continue;
            }
            self.departed
                .entry((execution_id, missing))
                .and_modify(|kept| kept.since = kept.since.min(hole.since))
                .or_insert(hole);
        }
        while self.departed.len() > DEPARTED_HOLES_MAX {
            let oldest = self
                .departed
                .iter()
                .min_by_key(|(_, hole)| hole.since)
                .map(|(&key, _)| key);
            if let Some(oldest) = oldest {
                self.departed.remove(&oldest);
            }
        }
    }
}

/// A chain's holes, if it is judged at all (it holds its genesis).
fn holes_of(chain: &Chain) -> Vec<EventId> {
    if chain.is_empty() || !chain.holds_genesis() {
        return Vec::new();
    }
    chain.missing_links()
}

/// After `slot` was evicted holding `chain`: the chain's open holes stay on record (unless
/// already reported), to be judged by the checks like resident ones. Costs one scan of the
/// chain (no allocation when it has no hole) and, only for a chain with holes, the watch's
/// lock.
pub(super) fn departed(index: &WalIndex, slot: &Arc<Slot>, chain: &Chain, now: u64) {
    if !stall_checks_on(index) {
        return;
    }
    let missing = holes_of(chain);
    if missing.is_empty() {
        return;
    }
    let newest = chain.newest().unwrap_or(EventId::MIN);
    let mut watch = index.stalls.state.lock();
    let seen = match watch.resident.remove(&slot.execution_id) {
        Some(resident) if Arc::ptr_eq(&resident.slot, slot) => resident.holes,
        Some(other) => {
            // A check saw a newer slot of the same execution: keep that one.
            watch.resident.insert(slot.execution_id, other);
            HashMap::new()
        }
        None => HashMap::new(),
    };
    let holes: Vec<(EventId, Hole)> = missing
        .into_iter()
        .map(|id| {
            let hole = seen.get(&id).copied().unwrap_or(Hole {
                since: now,
                newest,
                reported: false,
            });
            (id, Hole { newest, ..hole })
        })
        .collect();
    watch.depart(slot.execution_id, holes);
}

fn stall_checks_on(index: &WalIndex) -> bool {
    index
        .config
        .stall_after
        .is_some_and(|bound| !bound.is_zero())
}

/// One check as of `now`: reports (to the observer, after releasing the lock) and returns
/// the holes open longer than the bound while the drain was caught up, each once.
pub(super) fn check_stalls_at(index: &WalIndex, now: Instant) -> Vec<StalledChain> {
    let Some(bound) = index.config.stall_after.filter(|b| !b.is_zero()) else {
        return Vec::new();
    };
    let now = index.nanos(now);
    let bound = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    let mut watch = index.stalls.state.lock();
    if index.backfill.get().is_behind() {
        watch.behind = true;
        return Vec::new();
    }
    if std::mem::replace(&mut watch.behind, false) {
        watch.caught_up_since = now;
    }
    let caught_up_since = watch.caught_up_since;
    scan_resident(index, &mut watch, now);
    let mut found = Vec::new();
    let overdue = |hole: &Hole| now.saturating_sub(hole.since.max(caught_up_since)) > bound;
    let report = |execution_id, missing, hole: &Hole| StalledChain {
        execution_id,
        missing_event_id: missing,
        newest_event_id: hole.newest,
        reason: StallReason::MissingHop,
        waited: Duration::from_nanos(now.saturating_sub(hole.since.max(caught_up_since))),
    };
    for (&execution_id, resident) in &mut watch.resident {
        for (&missing, hole) in &mut resident.holes {
            if !hole.reported && overdue(hole) {
                hole.reported = true;
                found.push(report(execution_id, missing, hole));
            }
        }
    }
    let due: Vec<(ExecutionId, EventId)> = watch
        .departed
        .iter()
        .filter(|(_, hole)| overdue(hole))
        .map(|(&key, _)| key)
        .collect();
    for key in due {
        if let Some(hole) = watch.departed.remove(&key) {
            found.push(report(key.0, key.1, &hole));
        }
    }
    for stalled in &found {
        watch.remember_reported(stalled.execution_id, stalled.missing_event_id);
    }
    drop(watch);
    found.sort_by_key(|s| (s.execution_id, s.missing_event_id));
    for stalled in &found {
        index.accounting.observer().stalled_chain(stalled);
    }
    found
}

/// Brings the record of resident holes up to date: slots gone since the last check hand
/// their holes to the departed record, chains that changed are scanned again, and departed
/// holes whose missing id has arrived (in a re-created slot) are dropped.
fn scan_resident(index: &WalIndex, watch: &mut Watch, now: u64) {
    let snapshot = index.directory.snapshot();
    let gone: Vec<ExecutionId> = watch
        .resident
        .iter()
        .filter(|(id, resident)| {
            !snapshot
                .get(*id)
                .is_some_and(|slot| Arc::ptr_eq(slot, &resident.slot))
        })
        .map(|(&id, _)| id)
        .collect();
    for execution_id in gone {
        if let Some(resident) = watch.resident.remove(&execution_id) {
            watch.depart(execution_id, resident.holes);
        }
    }
    for slot in snapshot.values() {
        let chain = slot.chain();
        if !slot.judge(&chain) {
            continue; // unchanged since the last scan: its holes, if any, stand
        }
        let missing = holes_of(&chain);
        if missing.is_empty() {
            watch.resident.remove(&slot.execution_id);
            continue;
        }
        let newest = chain.newest().unwrap_or(EventId::MIN);
        let reported: Vec<bool> = missing
            .iter()
            .map(|&id| watch.was_reported(slot.execution_id, id))
            .collect();
        let resident = watch
            .resident
            .entry(slot.execution_id)
            .or_insert_with(|| Resident {
                slot: Arc::clone(slot),
                holes: HashMap::new(),
            });
        resident
            .holes
            .retain(|id, _| missing.binary_search(id).is_ok());
        for (&id, reported) in missing.iter().zip(reported) {
            let hole = resident.holes.entry(id).or_insert(Hole {
                since: now,
                newest,
                reported,
            });
            hole.newest = newest;
        }
    }
    let filled: Vec<(ExecutionId, EventId)> = watch
        .departed
        .keys()
        .filter(|(execution_id, missing)| {
            snapshot
                .get(execution_id)
                .is_some_and(|slot| slot.with_chain(|chain| chain.contains(*missing)))
        })
        .copied()
        .collect();
    for key in filled {
        watch.departed.remove(&key);
    }
}
