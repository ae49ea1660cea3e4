//! The engine's stall checks ([`crate::stall`] states the rule): which holes in resident
//! chains, and in the chains of executions that left the index, have been open longer than
//! the bound.
//!
//! # Locks
//!
//! [`StallWatch`] is one mutex. Checks hold it for their whole scan. An eviction takes it
//! after the directory's lock is released, only for a chain with a hole, while departed
//! holes are on record, or while another eviction is between its removal and its record
//! (then it stamps its slot's generation, so an older slot's record that comes later is
//! known stale; a sweep's victims count as each other's, so a sweep takes the lock once per
//! victim but the last): so an applier whose batch ends an execution (the drain's terminal
//! eviction) or a sink-gate release that removes a slot may wait for a check's scan.
//! Builds and drive waits never take it. It is taken with no other lock held, and the
//! observer is called after it is released. Under it, checks read published snapshots as
//! builds do.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use chain_fold::{Chain, EventId, ExecutionId};

use super::WalIndex;
use super::slot::Slot;
use crate::labels::StallReason;
use crate::stall::{DEPARTED_HOLES_MAX, REPORTED_MEMORY, StalledChain};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};

/// What stall checks remember between runs.
#[derive(Default)]
pub(super) struct StallWatch {
    state: Mutex<Watch>,
    /// Whether departed holes are on record: an eviction of a chain without holes takes
    /// the lock only then. Written under the lock; a stale `false` read by an eviction
    /// only leaves a departed hole that this eviction's chain filled to the next check
    /// that finds the execution resident (or, if none does, to be reported).
    departed_on_record: AtomicBool,
    /// Evictions between their removal from the directory and the end of their record
    /// ([`begin_departures`] to [`departed`]). While another is in flight, a departure takes
    /// the lock and stamps its slot's generation (`Watch::newest_departure`), so an older
    /// slot of the same execution whose record comes later does not overwrite it.
    departing: AtomicU64,
}

impl StallWatch {
    /// Publishes whether departed holes are on record, with the watch's lock held.
    fn note_departed(&self, watch: &Watch) {
        // Relaxed: a hint (see the field); the lock orders everything it guards.
        self.departed_on_record
            .store(watch.departed_holes > 0, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Watch {
    /// Resident executions whose chain had holes when last scanned.
    resident: HashMap<ExecutionId, Resident>,
    /// Entries of `resident` whose slot has left the directory and whose eviction has not
    /// yet recorded what the chain left with ([`departed`] takes its entry's clocks from
    /// here). An eviction that needed no lock (its chain left whole) marks its slot, and
    /// the next check drops the entry.
    leaving: Vec<Resident>,
    /// Holes of executions that left the index, by execution, then missing id.
    departed: HashMap<ExecutionId, HashMap<EventId, Hole>>,
    departed_holes: usize,
    /// The holes reported lately, oldest first, and the same as a set.
    reported: VecDeque<(ExecutionId, EventId)>,
    reported_set: HashSet<(ExecutionId, EventId)>,
    /// Since when clocks run: a hole's time counts from here at the earliest. Moved to the
    /// present by every check while the drain is behind, by the first one after it caught
    /// up, and by a check that follows a gap of more than a bound since the previous one
    /// (the drain was failing or stuck, and checked nothing).
    counting_since: u64,
    /// When the last check ran (`None` before the first).
    last_check: Option<u64>,
    /// The newest slot generation whose departure was recorded while other departures were
    /// in flight, by execution: the record of an older slot that comes later is stale.
    /// Emptied when a departure holding the lock ends the last one in flight, or when a
    /// check finds none in flight.
    newest_departure: HashMap<ExecutionId, u64>,
    /// The last check found the drain behind.
    was_behind: bool,
}

/// A resident chain with holes, in the slot it was seen in.
struct Resident {
    slot: Arc<Slot>,
    holes: HashMap<EventId, Hole>,
}

#[derive(Clone)]
struct Hole {
    /// When a check (or an eviction) first saw it.
    since: u64,
    /// The chain's newest event when it was last seen.
    newest: EventId,
    /// The events that named it when it was last seen (one, but for a fork a conflicting
    /// redelivery made): a departed hole is closed by a chain that holds every one of them
    /// linking elsewhere (see [`Watch::take_departed`]).
    named_by: Box<[EventId]>,
    reported: bool,
}

impl Hole {
    /// A hole first seen at `since`.
    fn new(since: u64, newest: EventId, named_by: Box<[EventId]>) -> Hole {
        Hole {
            since,
            newest,
            named_by,
            reported: false,
        }
    }
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

    /// Records the unreported holes of an execution that left the index. Past
    /// [`DEPARTED_HOLES_MAX`] a new hole is not recorded: the ones on record are closer to
    /// their report.
    fn depart(
        &mut self,
        execution_id: ExecutionId,
        holes: impl IntoIterator<Item = (EventId, Hole)>,
    ) {
        for (missing, hole) in holes {
            if hole.reported || self.was_reported(execution_id, missing) {
                continue;
            }
            let full = self.departed_holes >= DEPARTED_HOLES_MAX;
            let kept = self.departed.entry(execution_id).or_default();
            match kept.get_mut(&missing) {
                // The later sighting says who names it now; the earlier, since when.
                Some(kept) => {
                    kept.since = kept.since.min(hole.since);
                    kept.newest = hole.newest;
                    kept.named_by = hole.named_by;
                }
                None if full => {}
                None => {
                    kept.insert(missing, hole);
                    self.departed_holes += 1;
                }
            }
            if kept.is_empty() {
                self.departed.remove(&execution_id);
            }
        }
    }

    /// Takes the holes (and their clocks) a check keeps for `slot`, `execution_id`'s slot
    /// that left the directory: its entry in `resident`, or the one a check moved to
    /// `leaving` on finding it gone. An entry of a newer slot of the same execution stays.
    fn take_seen(&mut self, execution_id: ExecutionId, slot: &Arc<Slot>) -> HashMap<EventId, Hole> {
        match self.resident.remove(&execution_id) {
            Some(resident) if Arc::ptr_eq(&resident.slot, slot) => resident.holes,
            other => {
                if let Some(other) = other {
                    self.resident.insert(execution_id, other);
                }
                self.leaving
                    .iter()
                    .position(|leaving| Arc::ptr_eq(&leaving.slot, slot))
                    .map(|at| self.leaving.swap_remove(at).holes)
                    .unwrap_or_default()
            }
        }
    }

    /// Takes `execution_id`'s departed holes off the record and judges them against
    /// `chain`, the execution's chain now: a hole is closed if `chain` holds its missing
    /// event (it arrived), or holds every event that named it when it was last seen, each
    /// linking elsewhere, while no event of `chain` names it (redeliveries moved the links
    /// past it, as they close a resident hole). The open ones are returned (to be watched
    /// as resident again, or put back).
    fn take_departed(
        &mut self,
        execution_id: ExecutionId,
        chain: &Chain,
    ) -> HashMap<EventId, Hole> {
        let Some(mut holes) = self.departed.remove(&execution_id) else {
            return HashMap::new();
        };
        self.departed_holes -= holes.len();
        let mut named: Option<Vec<EventId>> = None;
        holes.retain(|&missing, hole| {
            if chain.contains(missing) {
                return false;
            }
            let moved = hole.named_by.iter().all(|&named_by| {
                chain
                    .get(named_by)
                    .is_some_and(|event| event.prev() != Some(missing))
            });
            // The mutation keeps a hole whose link moved: it is reported as a lost write.
            if !moved || chain_fold::mutation::on("departed-hole-ignores-moved-link") {
                return true;
            }
            let named = named.get_or_insert_with(|| chain.missing_links());
            named.binary_search(&missing).is_ok()
        });
        holes
    }
}

/// A chain's holes, if it is judged at all (it holds its genesis): each missing id,
/// ascending, with the events that name it. One scan of the chain, and a second only when
/// it has a hole.
fn holes_of(chain: &Chain) -> Vec<(EventId, Box<[EventId]>)> {
    if chain.is_empty() || !chain.holds_genesis() {
        return Vec::new();
    }
    let missing = chain.missing_links();
    if missing.is_empty() {
        return Vec::new();
    }
    let mut namers: Vec<Vec<EventId>> = vec![Vec::new(); missing.len()];
    for event in chain.iter() {
        let Some(prev) = event.prev() else { continue };
        if let Ok(at) = missing.binary_search(&prev) {
            namers[at].push(event.id());
        }
    }
    missing
        .into_iter()
        .zip(namers)
        .map(|(missing, named_by)| (missing, named_by.into_boxed_slice()))
        .collect()
}

/// Whether `holes` (as [`holes_of`] gives them) has `missing`.
fn has_hole(holes: &[(EventId, Box<[EventId]>)], missing: EventId) -> bool {
    holes
        .binary_search_by_key(&missing, |(missing, _)| *missing)
        .is_ok()
}

/// Before evictions publish the removal of `slots` slots from the directory: each will call
/// [`departed`] once, after.
pub(super) fn begin_departures(index: &WalIndex, slots: usize) {
    if index.config.stall_bound().is_none() || slots == 0 {
        return;
    }
    // Relaxed: the directory's writers' lock, held here and by whoever creates and evicts a
    // later slot of the same execution, orders this before that eviction's load.
    index
        .stalls
        .departing
        .fetch_add(slots as u64, Ordering::Relaxed);
}

/// After `slot` was evicted holding `chain` (called with the directory's lock released):
/// the chain's open holes go on record with the departed ones (unless already reported),
/// and departed holes of the same execution that `chain` filled are dropped. Costs one
/// scan of the chain (no allocation when it has no hole), and the watch's lock only for a
/// chain with holes or while departed holes are on record.
/// `now` reads the clock for the holes' record; it is called only when there is one to
/// make (the common departure, a chain with no hole, reads no clock).
pub(super) fn departed(
    index: &WalIndex,
    slot: &Arc<Slot>,
    chain: &Chain,
    now: impl FnOnce() -> u64,
) {
    if index.config.stall_bound().is_none() {
        return;
    }
    let missing = holes_of(chain);
    // Acquire pairs with the Release decrement at the end of another departure: one seen
    // done has its record (and `departed_on_record`) in place. An older slot of this
    // execution whose departure is not done counts here (see `begin_departures`).
    let others_in_flight = index.stalls.departing.load(Ordering::Acquire) > 1;
    // Relaxed: a hint (see the field); the lock orders everything it guards.
    if missing.is_empty()
        && !others_in_flight
        && !index.stalls.departed_on_record.load(Ordering::Relaxed)
    {
        // A check that already moved this slot's entry to `leaving` drops it at its next
        // run; one that has not yet found the slot gone drops the entry then.
        slot.note_left_whole();
        end_departure(index, None);
        return;
    }
    let execution_id = slot.execution_id;
    let newest = chain.newest().unwrap_or(EventId::MIN);
    let now = now();
    let mut watch = index.stalls.state.lock();
    // The mutation takes every record as the newest: an older chain whose record comes
    // last overwrites what a later one left with.
    let stale = !chain_fold::mutation::on("departure-ignores-generation")
        && watch
            .newest_departure
            .get(&execution_id)
            .is_some_and(|&newer| newer > slot.generation);
    if stale {
        // A later slot of this execution left first and recorded what it left with: this
        // older chain says nothing more. Its clocks go with it, wherever a check keeps
        // them, and a check that has yet to find it gone drops them then.
        watch.take_seen(execution_id, slot);
        slot.note_left_whole();
        end_departure(index, Some(&mut watch));
        return;
    }
    if others_in_flight {
        let stamp = watch.newest_departure.entry(execution_id).or_default();
        *stamp = (*stamp).max(slot.generation);
    }
    let earlier = watch.take_departed(execution_id, chain);
    let seen = watch.take_seen(execution_id, slot);
    let mut holes: Vec<(EventId, Hole)> = earlier.into_iter().collect();
    holes.extend(missing.into_iter().map(|(id, named_by)| {
        let (since, reported) = seen
            .get(&id)
            .map_or((now, false), |hole| (hole.since, hole.reported));
        (
            id,
            Hole {
                reported,
                ..Hole::new(since, newest, named_by)
            },
        )
    }));
    watch.depart(execution_id, holes);
    index.stalls.note_departed(&watch);
    end_departure(index, Some(&mut watch));
}

/// Ends one departure begun by [`begin_departures`]; with the watch's lock held (`watch`),
/// forgets the stamps once none is in flight.
fn end_departure(index: &WalIndex, watch: Option<&mut Watch>) {
    // Release pairs with the Acquire load in `departed`: a departure that sees this one
    // done sees its record.
    let before = index.stalls.departing.fetch_sub(1, Ordering::Release);
    if before == 1
        && let Some(watch) = watch
    {
        // No departure in flight: any later one is of a slot created after every stamped
        // one left, so none can be stale.
        watch.newest_departure.clear();
    }
}

/// One check as of `now`: reports (to the observer, after releasing the lock) and returns
/// the holes open longer than the bound, each once.
pub(super) fn check_stalls_at(index: &WalIndex, now: Instant) -> Vec<StalledChain> {
    let Some(bound) = index.config.stall_bound() else {
        return Vec::new();
    };
    let now = index.nanos(now);
    let bound = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    let mut watch = index.stalls.state.lock();
    let behind = index.backfill.get().is_behind();
    // A gap of more than a bound since the last check (or a drain still behind) restarts
    // every clock: nothing was watched meanwhile, and the drain may be late rather than
    // the WAL lossy.
    let gap = watch
        .last_check
        .is_some_and(|last| now.saturating_sub(last) > bound);
    watch.last_check = Some(now);
    if behind || gap || watch.was_behind {
        watch.counting_since = now;
    }
    watch.was_behind = behind;
    // Acquire, as in `departed`: with none in flight, no stamp can matter (see
    // `end_departure`).
    if index.stalls.departing.load(Ordering::Acquire) == 0 {
        watch.newest_departure.clear();
    }
    // One snapshot serves the whole check: which slots are gone, which departed executions
    // are back, and which chains to scan are all judged against the same map.
    let slots = index.directory.slots();
    let watched = watched_slots(&watch, &slots);
    prune_gone(&mut watch, |id| watched.get(&id).cloned());
    // Departed holes whose execution is resident again: watched with it from here on (or
    // dropped, if it brought the missing event).
    let returned: Vec<(ExecutionId, Arc<Slot>)> = watch
        .departed
        .keys()
        .filter_map(|&id| watched.get(&id).map(|slot| (id, Arc::clone(slot))))
        .collect();
    for (execution_id, slot) in returned {
        let chain = slot.chain();
        let holes = watch.take_departed(execution_id, &chain);
        if holes.is_empty() {
            continue;
        }
        // The holes the chain is back with are watched with it, under their clocks; the
        // others (it came back without its genesis, or without the events that linked
        // past them) stay on record.
        let now_missing = holes_of(&chain);
        let (again, kept): (Vec<_>, Vec<_>) = holes
            .into_iter()
            .partition(|&(missing, _)| has_hole(&now_missing, missing));
        watch.depart(execution_id, kept);
        if again.is_empty() {
            continue;
        }
        let resident = watch
            .resident
            .entry(execution_id)
            .or_insert_with(|| Resident {
                slot: Arc::clone(&slot),
                holes: HashMap::new(),
            });
        for (missing, hole) in again {
            resident
                .holes
                .entry(missing)
                .and_modify(|seen| seen.since = seen.since.min(hole.since))
                .or_insert(hole);
        }
        slot.forget_judged(); // scan it again below
    }
    if !behind {
        scan_resident(&mut watch, &slots, now);
    }
    let found = if behind {
        Vec::new()
    } else {
        take_overdue(&mut watch, now, bound)
    };
    index.stalls.note_departed(&watch);
    drop(watch);
    for stalled in &found {
        index.accounting.observer().stalled_chain(stalled);
    }
    found
}

/// The holes open longer than `bound` since they were first seen (counted from
/// `counting_since` at the earliest), marked reported.
fn take_overdue(watch: &mut Watch, now: u64, bound: u64) -> Vec<StalledChain> {
    let counting_since = watch.counting_since;
    let open_for = |hole: &Hole| now.saturating_sub(hole.since.max(counting_since));
    let report = |execution_id, missing, hole: &Hole| StalledChain {
        execution_id,
        missing_event_id: missing,
        newest_event_id: hole.newest,
        reason: StallReason::MissingHop,
        waited: Duration::from_nanos(open_for(hole)),
    };
    let mut found = Vec::new();
    let reported_set = &watch.reported_set;
    for (&execution_id, resident) in &mut watch.resident {
        for (&missing, hole) in &mut resident.holes {
            if !hole.reported && reported_set.contains(&(execution_id, missing)) {
                hole.reported = true;
            }
            if !hole.reported && open_for(hole) > bound {
                hole.reported = true;
                found.push(report(execution_id, missing, hole));
            }
        }
    }
    let reported_before = found.len();
    watch.departed.retain(|&execution_id, holes| {
        holes.retain(|&missing, hole| {
            let due = open_for(hole) > bound;
            if due {
                found.push(report(execution_id, missing, hole));
            }
            !due
        });
        !holes.is_empty()
    });
    watch.departed_holes -= found.len() - reported_before;
    for stalled in &found {
        watch.remember_reported(stalled.execution_id, stalled.missing_event_id);
    }
    found.sort_by_key(|s| (s.execution_id, s.missing_event_id));
    found
}

/// The slots of `slots` whose execution the watch has an entry for (resident or departed).
fn watched_slots(watch: &Watch, slots: &[Arc<Slot>]) -> HashMap<ExecutionId, Arc<Slot>> {
    slots
        .iter()
        .filter(|slot| {
            watch.resident.contains_key(&slot.execution_id)
                || watch.departed.contains_key(&slot.execution_id)
        })
        .map(|slot| (slot.execution_id, Arc::clone(slot)))
        .collect()
}

/// Moves the entries of slots gone from the directory since the last check (evicted, or
/// evicted and re-created) to `leaving`, and drops those of `leaving` whose eviction left
/// whole. What a slot leaves on the departed record is its eviction's to say, from the
/// chain it left with ([`departed`]): the holes this check saw may have filled since. An
/// eviction that takes the watch's lock takes its slot's clocks from `resident` or
/// `leaving`; one that did not need the lock (its chain left whole) marks the slot.
fn prune_gone(watch: &mut Watch, lookup: impl Fn(ExecutionId) -> Option<Arc<Slot>>) {
    watch.leaving.retain(|leaving| !leaving.slot.left_whole());
    let gone: Vec<ExecutionId> = watch
        .resident
        .iter()
        .filter(|(id, resident)| {
            !lookup(**id).is_some_and(|slot| Arc::ptr_eq(&slot, &resident.slot))
        })
        .map(|(&id, _)| id)
        .collect();
    for execution_id in gone {
        if let Some(resident) = watch.resident.remove(&execution_id) {
            // The first mutation hands the holes this check saw to the departed record, as
            // if the chain had left with them: a hole filled just before the eviction is
            // then reported as a lost write. The second drops them, clocks and all: the
            // eviction's record, if this check ran before it, starts the clocks again.
            if chain_fold::mutation::on("gone-slot-departs-seen-holes") {
                watch.depart(execution_id, resident.holes);
            } else if !chain_fold::mutation::on("gone-slot-forgets-clocks")
                && !resident.slot.left_whole()
            {
                watch.leaving.push(resident);
            }
        }
    }
}

/// Scans again the resident chains that changed since the last check.
fn scan_resident(watch: &mut Watch, slots: &[Arc<Slot>], now: u64) {
    for slot in slots {
        let chain = slot.chain();
        if chain.is_empty() {
            // Evicted after the snapshot was taken (or holding only a sink-gate mark): its
            // eviction puts what it had on record; the next check sees it gone.
            continue;
        }
        if !slot.judge(&chain) {
            continue; // unchanged since the last scan: its holes, if any, stand
        }
        let missing = holes_of(&chain);
        if missing.is_empty() {
            watch.resident.remove(&slot.execution_id);
            continue;
        }
        let newest = chain.newest().unwrap_or(EventId::MIN);
        let resident = watch
            .resident
            .entry(slot.execution_id)
            .or_insert_with(|| Resident {
                slot: Arc::clone(slot),
                holes: HashMap::new(),
            });
        resident.holes.retain(|&id, _| has_hole(&missing, id));
        for (id, named_by) in missing {
            match resident.holes.entry(id) {
                std::collections::hash_map::Entry::Occupied(mut seen) => {
                    let hole = seen.get_mut();
                    hole.newest = newest;
                    hole.named_by = named_by;
                }
                std::collections::hash_map::Entry::Vacant(new) => {
                    new.insert(Hole::new(now, newest, named_by));
                }
            }
        }
    }
}

/// Two departures of one execution out of order: an eviction paused between removing its
/// slot and recording what the chain left with, while the execution is re-created, and
/// its new slot evicted and recorded, meanwhile. The older record, coming last, must not
/// overwrite the newer one.
#[cfg(all(test, not(any(wal_index_loom, wal_index_shuttle))))]
mod out_of_order_departures {
    use std::time::{Duration, Instant};

    use chain_fold::Chain;

    use super::super::slot::{Slot, SlotEviction};
    use crate::config::IndexConfig;
    use crate::engine::WalIndex;
    use crate::index::StateIndex;
    use crate::sync::Arc;
    use crate::test_events::ev;
    use chain_fold::Event;

    const BOUND: Duration = Duration::from_secs(30);

    fn index() -> WalIndex {
        WalIndex::new(IndexConfig {
            stall_after: Some(BOUND),
            ..IndexConfig::default()
        })
    }

    /// An explicit eviction's first half: the slot is out of the directory, and what its
    /// chain left with is not recorded yet.
    fn evict_paused(index: &WalIndex, id: i64) -> (Arc<Slot>, Arc<Chain>) {
        let writer = index.directory.write();
        let slot = writer.get(id).expect("resident");
        let mut last = None;
        let evicted = slot.evict_if(&index.accounting, &index.empties, false, |chain, _| {
            last = Some(Arc::clone(chain));
            true
        });
        assert!(matches!(evicted, SlotEviction::Evicted { .. }));
        super::begin_departures(index, 1);
        writer.publish_removal(&[Arc::clone(&slot)], false);
        (slot, last.expect("judged"))
    }

    /// Its second half.
    fn resume(index: &WalIndex, (slot, chain): (Arc<Slot>, Arc<Chain>)) {
        super::departed(index, &slot, &chain, || index.clock.now());
    }

    /// Checks every quarter bound for a bound and a half after `start`.
    fn reported(index: &WalIndex, start: Instant) -> Vec<(i64, i64)> {
        (1..=6)
            .flat_map(|q| index.check_stalls_at(start + BOUND / 4 * q))
            .map(|s| (s.execution_id, s.missing_event_id))
            .collect()
    }

    /// Execution 7 lives twice: `first` is applied and seen by a check, and its eviction
    /// pauses between its halves; `second` is applied and evicted whole; then the first
    /// eviction's record lands. The index, and when the check ran.
    fn two_lives_recorded_out_of_order(first: &[Event], second: &[Event]) -> (WalIndex, Instant) {
        let index = index();
        let start = Instant::now();
        for event in first {
            index.apply(event.clone());
        }
        assert!(index.check_stalls_at(start).is_empty());
        let older = evict_paused(&index, 7);
        for event in second {
            index.apply(event.clone());
        }
        assert!(index.evict(7));
        resume(&index, older);
        (index, start)
    }

    #[test]
    fn an_older_record_does_not_replace_who_names_a_newer_hole() {
        let (index, start) = two_lives_recorded_out_of_order(
            &[ev(7, 1, None), ev(7, 3, Some(2))],
            // Left with hole 2, named by 4.
            &[ev(7, 1, None), ev(7, 3, Some(1)), ev(7, 4, Some(2))],
        );
        index.apply(ev(7, 1, None));
        index.apply(ev(7, 3, Some(1))); // back without 4
        assert_eq!(reported(&index, start), vec![(7, 2)]);
    }

    #[test]
    fn an_older_record_does_not_bring_back_a_hole_the_newer_chain_filled() {
        let (index, start) = two_lives_recorded_out_of_order(
            &[ev(7, 1, None), ev(7, 3, Some(2))],
            &[ev(7, 1, None), ev(7, 2, Some(1)), ev(7, 3, Some(2))], // left whole
        );
        assert_eq!(reported(&index, start), vec![]);
    }

    #[test]
    fn an_older_record_does_not_close_a_newer_hole() {
        let (index, start) = two_lives_recorded_out_of_order(
            &[ev(7, 1, None), ev(7, 2, Some(1))], // its chain held 2
            &[ev(7, 1, None), ev(7, 3, Some(2))], // left with hole 2
        );
        assert_eq!(reported(&index, start), vec![(7, 2)]);
    }

    #[test]
    fn a_stale_record_leaves_no_clocks_behind() {
        // The check watched hole 2 of the first life; its record is stale.
        let (index, start) = two_lives_recorded_out_of_order(
            &[ev(7, 1, None), ev(7, 3, Some(2))],
            &[ev(7, 1, None)],
        );
        for q in 1..=4 {
            index.check_stalls_at(start + Duration::from_secs(q));
        }
        let watch = index.stalls.state.lock();
        assert!(watch.leaving.is_empty() && watch.resident.is_empty());
    }

    #[test]
    fn stamps_are_forgotten_once_no_departure_is_in_flight() {
        let index = index();
        index.apply(ev(7, 1, None));
        let older = evict_paused(&index, 7);
        index.apply(ev(7, 1, None));
        assert!(index.evict(7));
        assert_eq!(index.stalls.state.lock().newest_departure.len(), 1);
        resume(&index, older); // left whole: no lock, so the next check forgets the stamp
        assert!(index.check_stalls_at(Instant::now()).is_empty());
        assert!(index.stalls.state.lock().newest_departure.is_empty());
        assert_eq!(
            index.stalls.departing.load(crate::sync::Ordering::Relaxed),
            0
        );
    }
}
