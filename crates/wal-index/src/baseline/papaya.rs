//! [`PapayaIndex`]: the design an engineer would write in an afternoon from today's best
//! concurrent map, kept as a comparator: `papaya::HashMap<ExecutionId, Arc<Slot>>`, each
//! execution's chain behind an `ArcSwap`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete, Spine, advance};

use super::Removal;
use crate::config::IndexConfig;
use crate::eviction_plan::{self, Candidate, report_sweep};
use crate::index::{IndexHooks, StateIndex};
use crate::labels::EvictReason;
use crate::observe::IndexObserver;
use crate::report::{Applied, BatchReport, Build, EvictionStats, IndexStats, RehydrateReport};
use crate::sync::{
    self, Arc, ArcSwap, AtomicBool, AtomicU64, Clock, ConcurrentMap, Mutex, Notify, Ordering,
};
use crate::waiting_room::{Registered, WaitingRooms};

/// One execution: its published chain, its spine cache, its writers' lock and its waiters.
struct Slot {
    chain: ArcSwap<Chain>,
    spine: ArcSwap<Option<Spine>>,
    /// Serializes this execution's appliers and evictors.
    writer: Mutex<SlotState>,
    /// Set under `writer` before the slot leaves the map and its waiters are woken, so a
    /// drive that listened on a slot being evicted sees it and looks again.
    retired: AtomicBool,
    changed: Notify,
    /// Recency, in the clock's nanoseconds (relaxed: a hint for the eviction policy).
    last_used: AtomicU64,
}

#[derive(Default)]
struct SlotState {
    evicted: bool,
    pending_sink: bool,
}

/// The engine's semantics on the design a user would build instead of it: a
/// [papaya](https://docs.rs/papaya) map from execution to slot, and in each slot the chain
/// behind an `ArcSwap`, a spine cache, a short lock for its writers and its own
/// notification.
///
/// What it shares with [`WalIndex`](crate::WalIndex): the same chain-fold work per operation
/// (a batch groups each execution's events and publishes one snapshot per execution, a build
/// loads the snapshot and advances the cached spine without a lock), waits by per-execution
/// notification, and evictions that take no global lock (each removes one key). What it
/// leaves out, as an afternoon's design would: the finished set (a drive for an execution
/// evicted after its terminal event waits out its cap), stall checks, checkpoints, and the
/// protocol's models (its own correctness rests on papaya's and arc-swap's). Its totals
/// live under one small lock, as the engine's do.
pub struct PapayaIndex {
    config: IndexConfig,
    observer: std::sync::Arc<dyn IndexObserver>,
    slots: ConcurrentMap<ExecutionId, Arc<Slot>>,
    /// Drives waiting for executions that have no slot.
    rooms: WaitingRooms,
    stats: Mutex<IndexStats>,
    clock: Clock,
}

comparator_basics!(PapayaIndex);

impl PapayaIndex {
    fn slot(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        self.slots.peek(&execution_id, |slot| slot.cloned())
    }

    fn slot_or_create(&self, execution_id: ExecutionId) -> Arc<Slot> {
        if let Some(slot) = self.slot(execution_id) {
            return slot;
        }
        let order = self.config.order;
        let slot = self.slots.get_or_insert_with(execution_id, || {
            Arc::new(Slot {
                chain: sync::comparator::new_swap(Arc::new(Chain::new(order))),
                spine: sync::comparator::new_swap(Arc::new(None)),
                writer: Mutex::new(SlotState::default()),
                retired: AtomicBool::new(false),
                changed: sync::new_notify(),
                last_used: AtomicU64::new(self.clock.now()),
            })
        });
        // After the insert: a drive entering the room checks residency under the rooms
        // lock, so it either finds this slot or is in the room this wakes.
        self.rooms.wake(execution_id);
        slot
    }

    /// Applies one execution's events as one published snapshot, retrying on a fresh slot
    /// if the one found was evicted meanwhile: how many were new, whether one was terminal,
    /// and the slot they landed in.
    fn apply_to(&self, execution_id: ExecutionId, events: Vec<Event>) -> (usize, bool, Arc<Slot>) {
        let now = self.clock.now();
        loop {
            let slot = self.slot_or_create(execution_id);
            let state = slot.writer.lock();
            if state.evicted {
                drop(state);
                // The evictor removes it from the map right after marking it.
                sync::yield_now();
                continue;
            }
            let current = sync::comparator::load(&slot.chain);
            let mut chain = Chain::clone(&current);
            let (len, bytes, rewrites) = (chain.len(), chain.bytes(), chain.rewrites());
            let (mut new, mut terminal) = (0, false);
            for event in events {
                terminal |= event.is_terminal();
                new += usize::from(chain.apply(event));
            }
            {
                // Reported under the lock, so the observer's gauges end on the last change.
                let mut stats = self.stats.lock();
                stats.executions += usize::from(len == 0 && !chain.is_empty());
                stats.events += chain.len() - len;
                stats.bytes = stats.bytes + chain.bytes() - bytes;
                self.observer.residency(*stats);
            }
            let rewritten = chain.rewrites() != rewrites;
            sync::comparator::store(&slot.chain, Arc::new(chain));
            if rewritten {
                // A spine built before a rewrite must not be extended: start afresh.
                sync::comparator::store(&slot.spine, Arc::new(None));
            }
            slot.last_used.fetch_max(now, Ordering::Relaxed);
            drop(state);
            slot.changed.notify(usize::MAX);
            return (new, terminal, slot);
        }
    }

    /// Evicts `execution_id`'s slot if it is `expected` (any slot when `None`) and
    /// `still_justified` holds for its chain and recency under its lock.
    fn evict_slot(
        &self,
        execution_id: ExecutionId,
        expected: Option<&Arc<Slot>>,
        still_justified: impl FnOnce(&Arc<Chain>, u64) -> bool,
    ) -> Removal {
        let Some(slot) = self.slot(execution_id) else {
            return Removal::Gone;
        };
        if expected.is_some_and(|expected| !Arc::ptr_eq(expected, &slot)) {
            return Removal::Gone;
        }
        let mut state = slot.writer.lock();
        if state.evicted {
            return Removal::Gone;
        }
        if self.config.sink_gate && state.pending_sink {
            return Removal::Gated;
        }
        let chain = sync::comparator::load(&slot.chain);
        if !still_justified(&chain, slot.last_used.load(Ordering::Relaxed)) {
            return Removal::Changed;
        }
        state.evicted = true;
        // SeqCst pairs with the load after `listen` in `IndexHooks::listen`: stored before
        // the `notify` below (the wait list's listen-then-check pattern, `sync::Notify`).
        slot.retired.store(true, Ordering::SeqCst);
        sync::comparator::store(&slot.chain, Arc::new(Chain::new(chain.order())));
        sync::comparator::store(&slot.spine, Arc::new(None));
        {
            let mut stats = self.stats.lock();
            stats.executions -= usize::from(!chain.is_empty());
            stats.events -= chain.len();
            stats.bytes -= chain.bytes();
            self.observer.residency(*stats);
        }
        self.slots
            .remove_if(&execution_id, |current| Arc::ptr_eq(current, &slot));
        drop(state);
        slot.changed.notify(usize::MAX);
        Removal::Evicted(chain.len())
    }

    /// Events grouped by execution, each group in WAL order, groups in ascending id.
    fn grouped(&self, events: Vec<Event>) -> Vec<(ExecutionId, Vec<Event>)> {
        let mut events: Vec<Event> = events
            .into_iter()
            .map(|e| if self.config.slim { e.to_slim() } else { e })
            .collect();
        events.sort_by_key(Event::execution_id);
        let mut groups: Vec<(ExecutionId, Vec<Event>)> = Vec::new();
        for event in events {
            match groups.last_mut() {
                Some((id, group)) if *id == event.execution_id() => group.push(event),
                _ => groups.push((event.execution_id(), vec![event])),
            }
        }
        groups
    }

    /// Every slot, one per execution, by ascending id. A walk of the map while others write
    /// it can yield a slot removed during the walk *and* its execution's successor, so an
    /// execution met twice keeps only the slot the map holds now (neither, if it holds
    /// none): a plan never judges a successor by its predecessor.
    fn live_slots(&self) -> Vec<(ExecutionId, Arc<Slot>)> {
        let mut slots = Vec::with_capacity(self.slots.len());
        self.slots
            .for_each(|&id, slot| slots.push((id, Arc::clone(slot))));
        slots.sort_unstable_by_key(|(id, _)| *id);
        slots
            .chunk_by(|a, b| a.0 == b.0)
            .filter_map(|met| match met {
                [(id, slot)] => Some((*id, Arc::clone(slot))),
                [(id, _), ..] => self.slot(*id).map(|current| (*id, current)),
                [] => None,
            })
            .collect()
    }

    fn finish(&self, outcome: AdvanceOutcome, spine: Option<Spine>, started: Instant) -> Build {
        crate::observe::finish_build(
            self.observer(),
            outcome,
            spine,
            Duration::ZERO,
            started.elapsed(),
        )
    }
}

impl IndexHooks for PapayaIndex {
    fn clock(&self) -> &Clock {
        &self.clock
    }

    /// This execution's own notification; without a slot, a waiting room (a drive creates
    /// no slot).
    fn listen(&self, execution_id: ExecutionId) -> Registered<'_> {
        loop {
            if let Some(slot) = self.slot(execution_id) {
                let listener = slot.changed.listen();
                // SeqCst pairs with the store in `evict_slot`.
                if !slot.retired.load(Ordering::SeqCst) {
                    return Registered::on(listener);
                }
                sync::yield_now();
                continue;
            }
            if let Some(place) = self
                .rooms
                .enter(execution_id, || self.slot(execution_id).is_some())
            {
                return Registered::in_room(place);
            }
        }
    }

    /// Yes: like the engine, it keeps slim events when configured to.
    fn drain_decodes_slim(&self) -> bool {
        self.config.slim
    }

    synchronous_drain_hooks!();
}

impl StateIndex for PapayaIndex {
    const NAME: &'static str = "papaya";

    fn with_observer(config: IndexConfig, observer: std::sync::Arc<dyn IndexObserver>) -> Self {
        PapayaIndex {
            config,
            observer,
            slots: ConcurrentMap::new(),
            rooms: WaitingRooms::default(),
            stats: Mutex::new(IndexStats::default()),
            clock: Clock::new(),
        }
    }

    fn config(&self) -> &IndexConfig {
        &self.config
    }

    fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }

    /// Indexes one event, publishes its execution's snapshot and wakes its waiters.
    fn apply(&self, event: Event) -> Applied {
        let event = if self.config.slim {
            event.to_slim()
        } else {
            event
        };
        let (execution_id, event_id) = (event.execution_id(), event.id());
        let (new, is_terminal, _) = self.apply_to(execution_id, vec![event]);
        Applied {
            execution_id,
            event_id,
            is_new: new == 1,
            is_terminal,
        }
    }

    /// Publishes each touched execution once, then evicts the batch's terminal executions.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        let mut report = BatchReport::default();
        let mut terminal = Vec::new();
        for (execution_id, group) in self.grouped(events) {
            report.executions += 1;
            report.applied += group.len();
            let (new, is_terminal, slot) = self.apply_to(execution_id, group);
            report.new += new;
            if is_terminal {
                terminal.push((execution_id, slot));
            }
        }
        for (execution_id, slot) in terminal {
            match self.evict_slot(execution_id, Some(&slot), |_, _| true) {
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

    /// Lock-free: the snapshot and the cached spine, advanced; the cache replaced by
    /// compare-and-swap. Runs on the slot as the map lends it (no reference count of the
    /// slot or the chain is touched).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        let started = Instant::now();
        let missing = || {
            AdvanceOutcome::Incomplete(
                expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing),
            )
        };
        let (outcome, spine) = self.slots.peek(&execution_id, |slot| {
            let Some(slot) = slot else {
                return (missing(), None);
            };
            slot.last_used
                .fetch_max(self.clock.at(started), Ordering::Relaxed);
            let cached = sync::comparator::load(&slot.spine);
            sync::comparator::peek(&slot.chain, |chain| {
                let Some(target) = expected_head.or_else(|| chain.max_id()) else {
                    return (missing(), None);
                };
                let result = advance(chain, Option::as_ref(&cached), target);
                if let Some(spine) = &result.spine
                    && result.replaces_cache
                {
                    sync::comparator::compare_and_swap(
                        &slot.spine,
                        &cached,
                        Arc::new(Some(spine.clone())),
                    );
                }
                (result.outcome, result.spine)
            })
        });
        self.finish(outcome, spine, started)
    }

    fn touch(&self, execution_id: ExecutionId) -> bool {
        let now = self.clock.now();
        self.slot(execution_id).is_some_and(|slot| {
            slot.last_used.fetch_max(now, Ordering::Relaxed);
            !slot.retired.load(Ordering::Relaxed)
        })
    }

    fn evict(&self, execution_id: ExecutionId) -> bool {
        let evicted = matches!(
            self.evict_slot(execution_id, None, |_, _| true),
            Removal::Evicted(events) if events > 0
        );
        if evicted {
            self.observer.evicted(EvictReason::Explicit, 1);
        }
        evicted
    }

    /// One sweep: read each slot without a lock, plan, evict each victim if its chain and
    /// recency are still the ones the plan judged.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
        let policy = self.config.eviction;
        if policy == Default::default() {
            return EvictionStats::default();
        }
        let mut judged: HashMap<ExecutionId, (Arc<Slot>, Arc<Chain>, u64)> = HashMap::new();
        let mut candidates = Vec::new();
        for (id, slot) in self.live_slots() {
            let slot = &slot;
            let chain = sync::comparator::load(&slot.chain);
            let last_used = slot.last_used.load(Ordering::Relaxed);
            candidates.push(Candidate {
                execution_id: id,
                last_used,
                events: chain.len(),
                bytes: chain.bytes(),
                gated: self.config.sink_gate && slot.writer.lock().pending_sink,
            });
            judged.insert(id, (Arc::clone(slot), chain, last_used));
        }
        let (mut plan, idle_empty) =
            eviction_plan::plan(candidates, &policy, self.clock.at(now), self.clock.epoch());
        let evict = |execution_id: ExecutionId| {
            let Some((slot, seen, used)) = judged.get(&execution_id) else {
                return Removal::Gone;
            };
            self.evict_slot(execution_id, Some(slot), |chain, last_used| {
                Arc::ptr_eq(chain, seen) && last_used == *used
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
        loop {
            let slot = self.slot_or_create(execution_id);
            let mut state = slot.writer.lock();
            if !state.evicted {
                state.pending_sink = true;
                return;
            }
            drop(state);
            sync::yield_now();
        }
    }

    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool {
        let _ = reason;
        self.confirm_sunk(execution_id)
    }

    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool {
        self.slot(execution_id)
            .is_some_and(|slot| std::mem::take(&mut slot.writer.lock().pending_sink))
    }

    fn stats(&self) -> IndexStats {
        *self.stats.lock()
    }

    /// Replays one execution's events as one published snapshot.
    fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport {
        let (mut report, mine) = RehydrateReport::sorted(execution_id, events);
        if !mine.is_empty() {
            let mine: Vec<Event> = mine
                .into_iter()
                .map(|e| if self.config.slim { e.to_slim() } else { e })
                .collect();
            report.applied = mine.len();
            report.new = self.apply_to(execution_id, mine).0;
        }
        report
    }

    fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        self.slot(execution_id)
            .map(|slot| Chain::clone(&sync::comparator::load(&slot.chain)))
    }

    fn execution_ids(&self) -> Vec<ExecutionId> {
        self.live_slots()
            .into_iter()
            .filter(|(_, slot)| !sync::comparator::peek(&slot.chain, Chain::is_empty))
            .map(|(id, _)| id)
            .collect()
    }
}
