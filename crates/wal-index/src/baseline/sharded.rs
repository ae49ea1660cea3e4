//! [`ShardedMutexIndex`]: the fix a reasonable engineer would try before a lock-free
//! design — one mutex and one notification per execution — kept as a comparator.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete, Spine};
use dashmap::DashMap;

use super::Removal;
use super::entry::{self, Cloned, Entry, apply_each};
use crate::config::IndexConfig;
use crate::eviction_plan::{self, report_sweep};
use crate::index::{IndexHooks, StateIndex};
use crate::labels::EvictReason;
use crate::observe::IndexObserver;
use crate::report::{Applied, BatchReport, Build, EvictionStats, IndexStats, RehydrateReport};
use crate::sync::{self, Arc, AtomicBool, Clock, Mutex, Notify, Ordering};
use crate::waiting_room::{Registered, WaitingRooms};

struct Slot {
    /// A short blocking lock, never held across an await: a drive's build takes it
    /// inline, so no executor thread can park on it while the next holder is a task
    /// queued behind that very thread.
    entry: Mutex<Entry>,
    appended: Notify,
    /// Set (after `entry.evicted`, before the map drops the slot and its waiters are woken)
    /// so a drive that listened on a slot being evicted sees it and looks again.
    retired: AtomicBool,
}

/// Today's design with the global lock split per execution: a sharded map (`dashmap`) of
/// slots, each with its own short blocking lock (`parking_lot`, never held across an
/// await) and its own notification.
///
/// Everything else is as in [`MutexIndex`](super::MutexIndex), today's data path included:
/// the drain takes the execution's lock per applied event (the parsed record deep-cloned
/// and walked under it) and wakes that execution's waiters per event, a build's timer
/// starts before the lock, and a build clones every payload value of the spine out under
/// the lock and serializes them after it. So an incomplete build still queues behind the drain applying *its own*
/// execution — exactly the case production measured — while builds of other executions no
/// longer do. It exists so the engine is compared with the obvious alternative, not only
/// with today's design.
///
/// The totals live under a separate small lock, taken inside the execution's lock.
pub struct ShardedMutexIndex {
    config: IndexConfig,
    observer: std::sync::Arc<dyn IndexObserver>,
    slots: DashMap<ExecutionId, Arc<Slot>>,
    /// Drives waiting for executions that have no slot.
    rooms: WaitingRooms,
    stats: Mutex<IndexStats>,
    clock: Clock,
}

comparator_basics!(ShardedMutexIndex);

impl ShardedMutexIndex {
    /// An empty index.
    pub fn new(config: IndexConfig) -> Self {
        Self::with_config(config)
    }

    fn nanos(&self, at: Instant) -> u64 {
        self.clock.at(at)
    }

    fn prepare(&self, event: Event) -> Event {
        if self.config.slim {
            event.to_slim()
        } else {
            event
        }
    }

    fn slot(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        self.slots.get(&execution_id).map(|s| Arc::clone(&s))
    }

    fn slot_or_create(&self, execution_id: ExecutionId) -> Arc<Slot> {
        if let Some(slot) = self.slot(execution_id) {
            return slot;
        }
        let now = self.nanos(Instant::now());
        let mut created = false;
        let slot = Arc::clone(&self.slots.entry(execution_id).or_insert_with(|| {
            created = true;
            Arc::new(Slot {
                entry: Mutex::new(Entry::new(&self.config, now)),
                appended: sync::new_notify(),
                retired: AtomicBool::new(false),
            })
        }));
        if created {
            // After the insert (and with the map's shard lock released): a drive entering
            // the room checks residency under the rooms lock, so it either finds this slot
            // or is in the room this wakes.
            self.rooms.wake(execution_id);
        }
        slot
    }

    /// Runs `f` on the execution's live entry under its lock, creating it if needed and
    /// retrying if an eviction removed the one found.
    fn with_live_entry<R>(
        &self,
        execution_id: ExecutionId,
        mut f: impl FnMut(&mut Entry) -> R,
    ) -> (R, Arc<Slot>) {
        loop {
            let slot = self.slot_or_create(execution_id);
            let mut entry = slot.entry.lock();
            if entry.evicted {
                drop(entry);
                // The evictor removes the slot from the map right after marking it.
                sync::yield_now();
                continue;
            }
            let result = f(&mut entry);
            drop(entry);
            return (result, slot);
        }
    }

    /// Evicts `execution_id`'s slot if it is `expected` (any slot when `None`) and
    /// `still_justified` holds for its entry under the entry's lock.
    fn evict_slot(
        &self,
        execution_id: ExecutionId,
        expected: Option<&Arc<Slot>>,
        still_justified: impl FnOnce(&Entry) -> bool,
    ) -> Removal {
        let Some(slot) = self.slot(execution_id) else {
            return Removal::Gone;
        };
        if expected.is_some_and(|expected| !Arc::ptr_eq(expected, &slot)) {
            return Removal::Gone;
        }
        let mut entry = slot.entry.lock();
        if entry.evicted {
            return Removal::Gone;
        }
        if self.config.sink_gate && entry.pending_sink {
            return Removal::Gated;
        }
        if !still_justified(&entry) {
            return Removal::Changed;
        }
        entry.evicted = true;
        // SeqCst pairs with the load after `listen` in `IndexHooks::listen`: the flag is
        // stored before the `notify` below (the wait list's listen-then-check pattern,
        // `sync::Notify`).
        slot.retired.store(true, Ordering::SeqCst);
        let events = entry.chain.len();
        {
            let mut stats = self.stats.lock();
            entry.subtract_from(&mut stats);
            self.observer.residency(*stats);
        }
        // Out of the map before the entry lock is released, so the spin of a drive that saw
        // `retired` lasts no longer than this removal (nobody waits for an entry lock while
        // holding a shard lock, so the order entry -> shard cannot deadlock).
        self.slots
            .remove_if(&execution_id, |_, s| Arc::ptr_eq(s, &slot));
        drop(entry);
        slot.appended.notify(usize::MAX);
        Removal::Evicted(events)
    }

    /// Indexes one event under its execution's mutex, then wakes that execution's waiters.
    /// Returns the slot it landed in.
    fn apply_one(&self, event: Event) -> (Applied, Arc<Slot>) {
        // The drain's parse, before the lock (today's drain holds a parsed record).
        let parsed = entry::parse(&event);
        let event = self.prepare(event);
        let mut applied = Applied {
            execution_id: event.execution_id(),
            event_id: event.id(),
            is_new: false,
            is_terminal: event.is_terminal(),
        };
        let now = self.nanos(Instant::now());
        let mut event = Some(event);
        let (is_new, slot) = self.with_live_entry(applied.execution_id, |entry| {
            let mut stats = self.stats.lock();
            let is_new = event
                .take()
                .is_some_and(|e| entry.apply(e, &parsed, self.config.slim, now, &mut stats));
            (is_new, *stats)
        });
        let (is_new, stats) = is_new;
        // After the lock, as today.
        self.observer.residency(stats);
        applied.is_new = is_new;
        slot.appended.notify(usize::MAX);
        (applied, slot)
    }

    /// Today's build under the execution's lock (`entry` is `None` when it has no slot).
    fn build_locked(
        &self,
        entry: Option<&mut Entry>,
        expected_head: Option<EventId>,
        started: Instant,
    ) -> Built {
        match entry {
            Some(entry) if !entry.evicted => entry.build(expected_head, self.nanos(started)),
            _ => (
                AdvanceOutcome::Incomplete(
                    expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing),
                ),
                None,
            ),
        }
    }

    /// After the lock: serialize the cloned values, then report.
    fn finish_build(&self, built: Built, waited: Duration, started: Instant) -> Build {
        let (outcome, served) = built;
        let spine = served.map(|(spine, cloned)| {
            entry::serialize(cloned);
            spine
        });
        crate::observe::finish_build(self.observer(), outcome, spine, waited, started.elapsed())
    }
}

/// What one build did under the lock: the outcome, and the spine with its cloned values.
type Built = (AdvanceOutcome, Option<(Spine, Cloned)>);

impl IndexHooks for ShardedMutexIndex {
    fn clock(&self) -> &crate::sync::Clock {
        &self.clock
    }

    /// This execution's own signal: each event applied to it wakes this waiter. An
    /// execution without a slot: a waiting room, so a drive creates no slot.
    fn listen(&self, execution_id: ExecutionId) -> Registered<'_> {
        loop {
            if let Some(slot) = self.slot(execution_id) {
                let listener = slot.appended.listen();
                // SeqCst pairs with the store in `evict_slot` (the wait list's
                // listen-then-check pattern: stored before `notify`, loaded after `listen`).
                if !slot.retired.load(Ordering::SeqCst) {
                    return Registered::on(listener);
                }
                // Being evicted: the evictor removes it from the map next.
                sync::yield_now();
                continue;
            }
            if let Some(place) = self
                .rooms
                .enter(execution_id, || self.slots.contains_key(&execution_id))
            {
                return Registered::in_room(place);
            }
        }
    }

    /// No: today's drain hands over whole envelopes (see the trait).
    fn drain_decodes_slim(&self) -> bool {
        false
    }

    synchronous_drain_hooks!();
}

impl StateIndex for ShardedMutexIndex {
    const NAME: &'static str = "sharded";

    /// An empty index reporting to `observer`.
    fn with_observer(config: IndexConfig, observer: std::sync::Arc<dyn IndexObserver>) -> Self {
        ShardedMutexIndex {
            config,
            observer,
            slots: DashMap::new(),
            rooms: WaitingRooms::default(),
            stats: Mutex::new(IndexStats::default()),
            clock: Clock::new(),
        }
    }

    /// The configuration.
    fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// The observer.
    fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }

    /// Indexes one event under its execution's mutex, then wakes that execution's waiters.
    fn apply(&self, event: Event) -> Applied {
        self.apply_one(event).0
    }

    /// Applies each event (lock, apply, unlock, wake, per event), then evicts the batch's
    /// terminal executions.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        let (mut report, terminal) = apply_each(events, |event| self.apply_one(event));
        for (execution_id, slot) in terminal {
            match self.evict_slot(execution_id, Some(&slot), |_| true) {
                Removal::Evicted(_) => report.terminal_evicted.push(execution_id),
                Removal::Gated => report.terminal_kept_by_sink_gate.push(execution_id),
                Removal::Gone | Removal::Changed => {}
            }
        }
        if !report.terminal_evicted.is_empty() {
            self.observer
                .evicted(EvictReason::Terminal, report.terminal_evicted.len());
        }
        report
    }

    /// Builds under the execution's mutex (timer started before the lock).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        let started = Instant::now();
        let (built, waited) = match self.slot(execution_id) {
            Some(slot) => {
                let mut entry = slot.entry.lock();
                let waited = started.elapsed();
                (
                    self.build_locked(Some(&mut entry), expected_head, started),
                    waited,
                )
            }
            None => (
                self.build_locked(None, expected_head, started),
                started.elapsed(),
            ),
        };
        self.finish_build(built, waited, started)
    }

    /// Refreshes recency; false if not resident.
    fn touch(&self, execution_id: ExecutionId) -> bool {
        let now = self.nanos(Instant::now());
        self.slot(execution_id).is_some_and(|slot| {
            let mut entry = slot.entry.lock();
            entry.last_used = entry.last_used.max(now);
            !entry.evicted
        })
    }

    /// Evicts one execution; true if one holding events was removed.
    fn evict(&self, execution_id: ExecutionId) -> bool {
        let evicted = matches!(
            self.evict_slot(execution_id, None, |_| true),
            Removal::Evicted(events) if events > 0
        );
        if evicted {
            self.observer.evicted(EvictReason::Explicit, 1);
        }
        evicted
    }

    /// One sweep: lock each execution to read it, plan, evict.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
        let policy = self.config.eviction;
        if policy == Default::default() {
            return EvictionStats::default();
        }
        let slots: Vec<(ExecutionId, Arc<Slot>)> = self
            .slots
            .iter()
            .map(|kv| (*kv.key(), Arc::clone(kv.value())))
            .collect();
        // What the plan judged of each slot: its entry's version and recency. A victim is
        // evicted only if both are unchanged under its lock (see `WalIndex`'s sweep).
        let mut judged: HashMap<ExecutionId, (Arc<Slot>, u64, u64)> =
            HashMap::with_capacity(slots.len());
        let candidates = slots
            .into_iter()
            .map(|(id, slot)| {
                let entry = slot.entry.lock();
                let candidate = entry.candidate(id, self.config.sink_gate);
                let seen = (entry.version, entry.last_used);
                drop(entry);
                judged.insert(id, (slot, seen.0, seen.1));
                candidate
            })
            .collect();
        let (mut plan, idle_empty) =
            eviction_plan::plan(candidates, &policy, self.nanos(now), self.clock.epoch());
        let evict = |execution_id: ExecutionId| {
            let Some((slot, version, last_used)) = judged.get(&execution_id) else {
                return Removal::Gone;
            };
            self.evict_slot(execution_id, Some(slot), |entry| {
                entry.version == *version && entry.last_used == *last_used
            })
        };
        for execution_id in idle_empty {
            evict(execution_id);
        }
        let mut gated_at_eviction = 0;
        plan.evicted
            .retain(|victim| match evict(victim.execution_id) {
                Removal::Evicted(_) => true,
                Removal::Gated => {
                    gated_at_eviction += 1;
                    false
                }
                Removal::Gone | Removal::Changed => false,
            });
        eviction_plan::recount(&mut plan, gated_at_eviction);
        report_sweep(self.observer(), &plan);
        plan
    }

    /// A no-op when the sink gate is off, as today.
    fn mark_pending_sink(&self, execution_id: ExecutionId) {
        if !self.config.sink_gate {
            return;
        }
        self.with_live_entry(execution_id, |entry| entry.pending_sink = true);
    }

    /// Unmarks; returns whether it was marked.
    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool {
        let _ = reason;
        self.confirm_sunk(execution_id)
    }

    /// Unmarks after sinking; returns whether it was marked.
    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool {
        self.slot(execution_id)
            .is_some_and(|slot| std::mem::take(&mut slot.entry.lock().pending_sink))
    }

    /// The resident totals.
    fn stats(&self) -> IndexStats {
        *self.stats.lock()
    }

    /// Replays one execution's events as today does: one lock acquisition (and one wake of
    /// its waiters) per event.
    fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport {
        let (mut report, mine) = RehydrateReport::sorted(execution_id, events);
        for event in mine {
            report.new += usize::from(self.apply_one(event).0.is_new);
        }
        report
    }

    /// A copy of one execution's chain.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        self.slot(execution_id).and_then(|slot| {
            let entry = slot.entry.lock();
            (!entry.evicted).then(|| entry.chain.clone())
        })
    }

    /// Resident execution ids, ascending.
    fn execution_ids(&self) -> Vec<ExecutionId> {
        let slots: Vec<(ExecutionId, Arc<Slot>)> = self
            .slots
            .iter()
            .map(|kv| (*kv.key(), Arc::clone(kv.value())))
            .collect();
        let mut ids: Vec<ExecutionId> = slots
            .into_iter()
            .filter(|(_, slot)| {
                let entry = slot.entry.lock();
                !entry.evicted && !entry.chain.is_empty()
            })
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }
}
