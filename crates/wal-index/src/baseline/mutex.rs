//! [`MutexIndex`]: today's design, reproduced faithfully so every claim is measured against
//! it in the same run.

use std::collections::HashMap;
use std::time::Instant;

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete};

use super::entry::{Entry, apply_each};
use crate::config::IndexConfig;
use crate::drive::DriveHooks;
use crate::eviction_plan::{self, report_sweep};
use crate::observe::IndexObserver;
use crate::report::{
    Applied, BatchReport, Build, EvictReason, EvictionStats, IndexStats, RehydrateReport,
};
use crate::state_index::StateIndex;
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
/// What it reproduces, on purpose:
///
/// - the drain takes the mutex **for every applied event**, and again to evict a batch's
///   terminal executions;
/// - every applied event, of any execution, wakes **every** waiting drive;
/// - a build's timer starts **before** it takes the mutex, so `Build::waited` is the
///   lock wait production's `index_lock_wait_seconds_total` reports;
/// - a build copies **every payload of the spine** out under the lock
///   ([`chain_fold::Spine::deep_copy`]).
///
/// What it does not do: sleep, spin, or take the lock more often than today. It uses the
/// same pure core (`chain-fold`) as the engine, so a difference measured between them is
/// the concurrency design, not the chain code. Its synchronous methods block the calling
/// thread on the async mutex (`async_lock`'s `lock_blocking`); `drive` awaits it.
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

impl std::fmt::Debug for MutexIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexIndex")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for MutexIndex {
    fn default() -> Self {
        MutexIndex::new(IndexConfig::default())
    }
}

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

    fn apply(
        &mut self,
        event: Event,
        config: &IndexConfig,
        now: u64,
        observer: &dyn IndexObserver,
    ) -> (bool, u64) {
        let mut stats = self.stats;
        let entry = self.entry(event.execution_id(), config, now);
        let is_new = entry.apply(event, now, &mut stats);
        let incarnation = entry.incarnation;
        self.stats = stats;
        observer.residency(self.stats);
        (is_new, incarnation)
    }

    /// `None` if absent (or not the `incarnation` asked for), `Some(false)` if gated.
    fn evict(
        &mut self,
        execution_id: ExecutionId,
        incarnation: Option<u64>,
        sink_gate: bool,
        observer: &dyn IndexObserver,
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
        observer.residency(self.stats);
        Some(true)
    }
}

impl MutexIndex {
    /// An empty index.
    pub fn new(config: IndexConfig) -> MutexIndex {
        MutexIndex::with_config(config)
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

    /// Indexes one event under the global mutex, then wakes every waiting drive. Returns
    /// the incarnation of the entry it landed in.
    fn apply_one(&self, event: Event) -> (Applied, u64) {
        let event = self.prepare(event);
        let mut applied = Applied {
            execution_id: event.execution_id(),
            event_id: event.id(),
            is_new: false,
            is_terminal: event.is_terminal(),
        };
        let now = self.nanos(Instant::now());
        let (is_new, incarnation) =
            self.inner
                .lock_blocking()
                .apply(event, &self.config, now, self.observer());
        applied.is_new = is_new;
        self.appended.notify(usize::MAX);
        (applied, incarnation)
    }

    fn build_locked(
        &self,
        inner: &mut Inner,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        started: Instant,
    ) -> Build {
        let waited = started.elapsed();
        let (outcome, spine) = match inner.executions.get_mut(&execution_id) {
            Some(entry) => entry.build(expected_head, self.nanos(started)),
            None => (
                AdvanceOutcome::Incomplete(
                    expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing),
                ),
                None,
            ),
        };
        Build::finish(self.observer(), outcome, spine, waited, started)
    }
}

impl DriveHooks for MutexIndex {
    #[cfg(any(wal_index_loom, wal_index_shuttle))]
    fn clock(&self) -> &crate::sync::Clock {
        &self.clock
    }

    /// Today's global signal: every applied event of any execution wakes this waiter.
    fn listen(&self, _execution_id: ExecutionId) -> Registered<'_> {
        Registered::on(self.appended.listen())
    }

    async fn build_async(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
    ) -> Build {
        let started = Instant::now();
        let mut inner = self.inner.lock().await;
        self.build_locked(&mut inner, execution_id, expected_head, started)
    }

    fn build_blocking(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        self.build(execution_id, expected_head)
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
        self.apply_one(event).0
    }

    /// Applies each event as today's drain does (lock, apply, unlock, wake everyone, per
    /// event), then takes the lock once more to evict the batch's terminal executions.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        let (mut report, terminal) = apply_each(events, |event| self.apply_one(event));
        if !terminal.is_empty() {
            let mut inner = self.inner.lock_blocking();
            for (execution_id, incarnation) in terminal {
                let evicted = inner.evict(
                    execution_id,
                    Some(incarnation),
                    self.config.sink_gate,
                    self.observer(),
                );
                match evicted {
                    Some(true) => report.terminal_evicted.push(execution_id),
                    Some(false) => report.terminal_kept_by_sink_gate.push(execution_id),
                    None => {}
                }
            }
        }
        if !report.terminal_evicted.is_empty() {
            self.observer()
                .evicted(EvictReason::Terminal, report.terminal_evicted.len());
        }
        report
    }

    /// Builds under the global mutex (the timer starts before the lock, as today).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        let started = Instant::now();
        let mut inner = self.inner.lock_blocking();
        self.build_locked(&mut inner, execution_id, expected_head, started)
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
        let evicted = inner.evict(execution_id, None, self.config.sink_gate, self.observer())
            == Some(true)
            && held_events;
        if evicted {
            self.observer().evicted(EvictReason::Explicit, 1);
        }
        evicted
    }

    /// One sweep under the global mutex.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
        let policy = self.config.eviction;
        if policy == Default::default() {
            return EvictionStats::default();
        }
        let now = self.nanos(now);
        let mut inner = self.inner.lock_blocking();
        let candidates = inner
            .executions
            .iter()
            .map(|(&execution_id, e)| e.candidate(execution_id, self.config.sink_gate))
            .collect();
        let (plan, idle_empty) = eviction_plan::plan(candidates, &policy, now, self.clock.epoch());
        for execution_id in idle_empty {
            inner.evict(execution_id, None, self.config.sink_gate, self.observer());
        }
        for victim in &plan.evicted {
            inner.evict(
                victim.execution_id,
                None,
                self.config.sink_gate,
                self.observer(),
            );
        }
        drop(inner);
        report_sweep(self.observer(), &plan);
        plan
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

    /// Replays one execution's events under the mutex (held for the whole replay, as
    /// today), then wakes every waiter.
    fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport {
        let mut report = RehydrateReport::default();
        let now = self.nanos(Instant::now());
        {
            let mut inner = self.inner.lock_blocking();
            for event in events {
                if event.execution_id() != execution_id {
                    report.other_execution += 1;
                    continue;
                }
                report.applied += 1;
                let event = self.prepare(event);
                report.new += usize::from(inner.apply(event, &self.config, now, self.observer()).0);
            }
        }
        self.appended.notify(usize::MAX);
        report
    }

    /// A copy of one execution's chain.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        self.inner
            .lock_blocking()
            .executions
            .get(&execution_id)
            .map(|e| e.chain.clone())
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
}
