//! [`MutexIndex`]: today's design, reproduced faithfully so every claim is measured against
//! it in the same run.

use std::collections::HashMap;
use std::time::Instant;

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete, Spine};
// The synchronous surface runs the async operation to completion: one body for both, parked
// in the same fair queue, outside Tokio's cooperative budget (see `sync::run_to_completion`).
use crate::backfill::Backfill;
use crate::sync::run_to_completion as block_on;
use serde_json::Value;

use super::entry::{self, BatchTally, Cloned, Entry};
use crate::config::IndexConfig;
use crate::eviction_plan::{self, report_sweep};
use crate::index::{IndexHooks, StateIndex};
use crate::labels::EvictReason;
use crate::observe::IndexObserver;
use crate::report::{Applied, BatchReport, Build, EvictionStats, IndexStats, RehydrateReport};
use crate::sync::{self, AsyncMutex, Clock, Notify};
use crate::waiting_room::Registered;

#[derive(Default)]
struct Inner {
    executions: HashMap<ExecutionId, Entry>,
    stats: IndexStats,
    /// Entries created so far: each entry's `incarnation`, so a terminal eviction can tell
    /// the entry its terminal event landed in from one re-created after it was evicted.
    created: u64,
}

/// Today's index: one async mutex around a `HashMap` of per-execution chains, and one
/// global "something was appended" notification.
///
/// What it reproduces, on purpose (docs/baseline.md has the row-by-row comparison with
/// today's code, and the direction each remaining difference pushes the ratios):
///
/// - the mutex is **Tokio's**: fair, first come first served;
/// - the drain takes the mutex **for every applied event**: before it, the pulled batch is
///   parsed into JSON values; under it, for each event, that value (or its slim projection) is
///   **deep-cloned** into the index and **walked** for its byte estimate; after it, every
///   waiting drive is woken (**any** execution's event wakes **every** drive), and the
///   residency gauges are set;
/// - a build's timer starts **before** it takes the mutex, so `Build::waited` is the lock
///   wait production's `index_lock_wait_seconds_total` reports; under the lock it
///   advances the cached spine and **clones every payload value of the spine**; after it,
///   it serializes them, and the observer hears of it;
/// - a replay takes the lock **once per event**.
///
/// What it does not do: sleep, spin, or take the lock more often than today. It uses the
/// same pure core (`chain-fold`) as the engine for chains and spines, so a difference
/// measured between them is the concurrency design and today's data path, not the chain
/// code. Its synchronous methods park the calling thread in the mutex's queue; `drive` and
/// the async drain await it.
///
/// ```
/// use wal_index::baseline::MutexIndex;
/// use wal_index::{Event, IndexConfig, StateIndex};
///
/// let index = MutexIndex::new(IndexConfig::default());
/// index.apply(Event::minimal(1, 7, None, "playbook_started"));
/// let build = index.build(7, Some(1));
/// assert_eq!(build.spine.unwrap().ids(), vec![1]);
/// ```
pub struct MutexIndex {
    config: IndexConfig,
    observer: std::sync::Arc<dyn IndexObserver>,
    inner: AsyncMutex<Inner>,
    appended: Notify,
    clock: Clock,
}

comparator_basics!(MutexIndex);

/// What one build did under the lock: the outcome, and the spine with its cloned values.
type Built = (AdvanceOutcome, Option<(Spine, Cloned)>);

impl Inner {
    fn entry(&mut self, execution_id: ExecutionId, config: &IndexConfig, now: u64) -> &mut Entry {
        let created = &mut self.created;
        self.executions.entry(execution_id).or_insert_with(|| {
            *created += 1;
            let mut entry = Entry::new(config, now);
            entry.incarnation = *created;
            entry
        })
    }

    /// Today's apply under the lock. Returns whether the event was new, the incarnation it
    /// landed in, and the totals after it (reported once the lock is released).
    fn apply(
        &mut self,
        event: Event,
        parsed: &Value,
        config: &IndexConfig,
        now: u64,
    ) -> (bool, u64, IndexStats) {
        let mut stats = self.stats;
        let entry = self.entry(event.execution_id(), config, now);
        let is_new = entry.apply(event, parsed, config.slim, now, &mut stats);
        let incarnation = entry.incarnation;
        self.stats = stats;
        (is_new, incarnation, stats)
    }

    /// `None` if absent (or not the `incarnation` asked for), `Some(false)` if gated.
    fn evict(
        &mut self,
        execution_id: ExecutionId,
        incarnation: Option<u64>,
        sink_gate: bool,
    ) -> Option<bool> {
        let entry = self.executions.get(&execution_id)?;
        if incarnation.is_some_and(|i| i != entry.incarnation) {
            return None;
        }
        if sink_gate && entry.pending_sink {
            return Some(false);
        }
        let entry = self.executions.remove(&execution_id)?;
        entry.subtract_from(&mut self.stats);
        Some(true)
    }

    fn build(
        &mut self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        now: u64,
    ) -> Built {
        match self.executions.get_mut(&execution_id) {
            Some(entry) => entry.build(expected_head, now),
            None => (
                AdvanceOutcome::Incomplete(
                    expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing),
                ),
                None,
            ),
        }
    }
}

/// One event on its way into the index: the drain's parse, done before the lock.
struct Prepared {
    event: Event,
    parsed: Value,
    applied: Applied,
}

impl MutexIndex {
    /// An empty index.
    pub fn new(config: IndexConfig) -> MutexIndex {
        MutexIndex::with_config(config)
    }

    /// Today's byte estimate of everything resident: the sum of each stored value's walk
    /// (today charges its ledger with it; every index here charges the engine's exact
    /// ledger, so evictions decide on the same figure: see docs/baseline.md).
    pub fn walked_bytes(&self) -> usize {
        self.inner
            .lock_blocking()
            .executions
            .values()
            .map(|e| e.walked_bytes)
            .sum()
    }

    fn nanos(&self, at: Instant) -> u64 {
        self.clock.at(at)
    }

    /// The work before the lock: parse the record (today's drain holds each record as a
    /// parsed value), and project our own chain's copy if the index is slim.
    fn prepare(&self, event: Event) -> Prepared {
        let parsed = entry::parse(&event);
        let event = if self.config.slim {
            event.to_slim()
        } else {
            event
        };
        let applied = Applied {
            execution_id: event.execution_id(),
            event_id: event.id(),
            is_new: false,
            is_terminal: event.is_terminal(),
        };
        Prepared {
            event,
            parsed,
            applied,
        }
    }

    /// The work after the lock: set the gauges, wake every waiting drive, and drop the
    /// drain's parsed record.
    fn applied(&self, prepared: Prepared, locked: (bool, u64, IndexStats)) -> (Applied, u64) {
        let (is_new, incarnation, stats) = locked;
        self.observer().residency(stats);
        self.appended.notify(usize::MAX);
        let mut applied = prepared.applied;
        applied.is_new = is_new;
        drop(prepared.parsed);
        (applied, incarnation)
    }

    /// Indexes one event under the global mutex, then wakes every waiting drive. Returns
    /// the incarnation of the entry it landed in.
    async fn apply_one(&self, event: Event) -> (Applied, u64) {
        self.apply_prepared(self.prepare(event)).await
    }

    /// The lock, today's apply under it, and the work after it.
    async fn apply_prepared(&self, prepared: Prepared) -> (Applied, u64) {
        let now = self.nanos(Instant::now());
        let locked = self.inner.lock().await.apply(
            prepared.event.clone(),
            &prepared.parsed,
            &self.config,
            now,
        );
        self.applied(prepared, locked)
    }

    /// The batch's terminal evictions, under the lock once more (as today's
    /// `finish_batch`); the gauges and the eviction count are reported after it.
    fn finish_batch(
        &self,
        inner: &mut Inner,
        terminal: Vec<(ExecutionId, u64)>,
        report: &mut BatchReport,
    ) {
        for (execution_id, incarnation) in terminal {
            match inner.evict(execution_id, Some(incarnation), self.config.sink_gate) {
                Some(true) => report.terminal_evicted.push(execution_id),
                Some(false) => report.terminal_kept_by_sink_gate.push(execution_id),
                None => {}
            }
        }
    }

    fn report_batch(&self, stats: Option<IndexStats>, report: &BatchReport) {
        if let Some(stats) = stats {
            self.observer().residency(stats);
        }
        if !report.terminal_evicted.is_empty() {
            self.observer()
                .evicted(EvictReason::Terminal, report.terminal_evicted.len());
        }
    }

    /// The end of a build, after the lock: serialize the cloned values (today's drive
    /// input), then report.
    fn finish_build(&self, built: Built, waited: std::time::Duration, started: Instant) -> Build {
        let (outcome, served) = built;
        let spine = served.map(|(spine, cloned)| {
            entry::serialize(cloned);
            spine
        });
        crate::observe::finish_build(self.observer(), outcome, spine, waited, started.elapsed())
    }
}

impl IndexHooks for MutexIndex {
    fn clock(&self) -> &crate::sync::Clock {
        &self.clock
    }

    /// Today's global signal: every applied event of any execution wakes this waiter.
    fn listen(&self, _execution_id: ExecutionId) -> Registered<'_> {
        Registered::on(self.appended.listen())
    }

    /// No: today's drain hands over whole envelopes (see the trait).
    fn drain_decodes_slim(&self) -> bool {
        false
    }

    /// One sweep under the global mutex; the gauges and evictions are reported after it.
    async fn enforce_limits_async(&self, now: Instant) -> EvictionStats {
        let policy = self.config.eviction;
        if policy == Default::default() {
            return EvictionStats::default();
        }
        let now = self.nanos(now);
        let mut inner = self.inner.lock().await;
        let candidates = inner
            .executions
            .iter()
            .map(|(&execution_id, e)| e.candidate(execution_id, self.config.sink_gate))
            .collect();
        let (plan, idle_empty) = eviction_plan::plan(candidates, &policy, now, self.clock.epoch());
        for execution_id in idle_empty {
            inner.evict(execution_id, None, self.config.sink_gate);
        }
        for victim in &plan.evicted {
            inner.evict(victim.execution_id, None, self.config.sink_gate);
        }
        let stats = inner.stats;
        drop(inner);
        self.observer().residency(stats);
        report_sweep(self.observer(), &plan);
        plan
    }

    /// Today's drain: each event applied on its own (lock, apply, unlock, wake everyone),
    /// then the lock once more to evict the batch's terminal executions.
    async fn apply_batch_async(&self, events: Vec<Event>) -> BatchReport {
        let mut tally = BatchTally::default();
        // Today's drain holds the whole pulled batch parsed before it applies any of it.
        let prepared: Vec<Prepared> = events.into_iter().map(|e| self.prepare(e)).collect();
        for prepared in prepared {
            let (applied, incarnation) = self.apply_prepared(prepared).await;
            tally.add(applied, incarnation);
        }
        let (mut report, terminal) = tally.finish();
        let stats = if terminal.is_empty() {
            None
        } else {
            let mut inner = self.inner.lock().await;
            self.finish_batch(&mut inner, terminal, &mut report);
            Some(inner.stats)
        };
        self.report_batch(stats, &report);
        report
    }

    /// Reports it to the observer and keeps nothing: this index's drives keep the
    /// worker's flow.
    fn note_backfill(&self, state: Backfill) {
        self.observer.backfill(state);
    }
}

impl StateIndex for MutexIndex {
    const NAME: &'static str = "mutex";

    /// An empty index reporting to `observer`.
    fn with_observer(
        config: IndexConfig,
        observer: std::sync::Arc<dyn IndexObserver>,
    ) -> MutexIndex {
        MutexIndex {
            config,
            observer,
            inner: AsyncMutex::new(Inner::default()),
            appended: sync::new_notify(),
            clock: Clock::new(),
        }
    }

    /// The configuration the index was built with.
    fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// The observer this index reports to.
    fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }

    /// Indexes one event under the global mutex, then wakes every waiting drive.
    fn apply(&self, event: Event) -> Applied {
        block_on(self.apply_async(event))
    }

    /// Applies each event as today's drain does (lock, apply, unlock, wake everyone, per
    /// event), then takes the lock once more to evict the batch's terminal executions.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        block_on(self.apply_batch_async(events))
    }

    /// Builds under the global mutex (the timer starts before the lock, as today).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        block_on(self.build_async(execution_id, expected_head))
    }

    /// Refreshes recency; false if not resident.
    fn touch(&self, execution_id: ExecutionId) -> bool {
        let now = self.nanos(Instant::now());
        let mut inner = self.inner.lock_blocking();
        inner
            .executions
            .get_mut(&execution_id)
            .map(|e| e.last_used = e.last_used.max(now))
            .is_some()
    }

    /// Evicts one execution; true if one holding events was removed.
    fn evict(&self, execution_id: ExecutionId) -> bool {
        let mut inner = self.inner.lock_blocking();
        let held_events = inner
            .executions
            .get(&execution_id)
            .is_some_and(|e| !e.chain.is_empty());
        let removed = inner.evict(execution_id, None, self.config.sink_gate) == Some(true);
        let stats = inner.stats;
        drop(inner);
        if removed {
            self.observer().residency(stats);
        }
        let evicted = removed && held_events;
        if evicted {
            self.observer().evicted(EvictReason::Explicit, 1);
        }
        evicted
    }

    /// One sweep under the global mutex.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
        block_on(self.enforce_limits_async(now))
    }

    /// Marks an execution as holding unsunk context.
    /// A no-op when the sink gate is off, as today.
    fn mark_pending_sink(&self, execution_id: ExecutionId) {
        if !self.config.sink_gate {
            return;
        }
        let now = self.nanos(Instant::now());
        self.inner
            .lock_blocking()
            .entry(execution_id, &self.config, now)
            .pending_sink = true;
    }

    /// Unmarks; returns whether it was marked.
    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool {
        let _ = reason;
        self.confirm_sunk(execution_id)
    }

    /// Unmarks after sinking; returns whether it was marked.
    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool {
        let mut inner = self.inner.lock_blocking();
        inner
            .executions
            .get_mut(&execution_id)
            .is_some_and(|e| std::mem::take(&mut e.pending_sink))
    }

    /// The resident totals.
    fn stats(&self) -> IndexStats {
        self.inner.lock_blocking().stats
    }

    /// Replays one execution's events as today does: one lock acquisition (and one wake of
    /// every waiter) per event.
    fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport {
        block_on(self.rehydrate_async(execution_id, events.into_iter().collect()))
    }

    /// A copy of one execution's chain.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        block_on(self.chain_async(execution_id))
    }

    /// Resident execution ids, ascending.
    fn execution_ids(&self) -> Vec<ExecutionId> {
        let inner = self.inner.lock_blocking();
        let mut ids: Vec<ExecutionId> = inner
            .executions
            .iter()
            .filter(|(_, e)| !e.chain.is_empty())
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    async fn chain_async(&self, execution_id: ExecutionId) -> Option<Chain> {
        let inner = self.inner.lock().await;
        inner.executions.get(&execution_id).map(|e| e.chain.clone())
    }

    async fn build_async(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
    ) -> Build {
        let started = Instant::now();
        let mut inner = self.inner.lock().await;
        let waited = started.elapsed();
        let built = inner.build(execution_id, expected_head, self.nanos(started));
        drop(inner);
        self.finish_build(built, waited, started)
    }

    async fn apply_async(&self, event: Event) -> Applied {
        self.apply_one(event).await.0
    }

    async fn rehydrate_async(
        &self,
        execution_id: ExecutionId,
        events: Vec<Event>,
    ) -> RehydrateReport {
        let (mut report, mine) = RehydrateReport::sorted(execution_id, events);
        for event in mine {
            report.new += usize::from(self.apply_one(event).await.0.is_new);
        }
        report
    }
}
