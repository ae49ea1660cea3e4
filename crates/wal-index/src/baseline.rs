//! [`MutexIndex`]: today's design, reproduced faithfully so every claim is measured against
//! it in the same run.

use std::collections::HashMap;
use std::time::Instant;

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete};

use crate::config::{DriveBudget, IndexConfig};
use crate::drive::{drive_loop, drive_loop_blocking, observed};
use crate::engine::report_sweep;
use crate::eviction;
use crate::locked_entry::{Entry, nanos_since};
use crate::observe::{IndexObserver, NoopObserver};
use crate::report::{
    Applied, ApplyError, BatchReport, Build, Drive, EvictReason, EvictionStats, IndexStats,
    RehydrateReport,
};

#[derive(Default)]
struct Inner {
    executions: HashMap<ExecutionId, Entry>,
    stats: IndexStats,
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
pub struct MutexIndex {
    config: IndexConfig,
    observer: std::sync::Arc<dyn IndexObserver>,
    inner: async_lock::Mutex<Inner>,
    appended: event_listener::Event,
    epoch: Instant,
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
        self.executions
            .entry(execution_id)
            .or_insert_with(|| Entry::new(config, now))
    }

    fn apply(
        &mut self,
        event: Event,
        config: &IndexConfig,
        now: u64,
        observer: &dyn IndexObserver,
    ) -> bool {
        let mut stats = self.stats;
        let is_new = self
            .entry(event.execution_id(), config, now)
            .apply(event, now, &mut stats);
        self.stats = stats;
        observer.residency(self.stats);
        is_new
    }

    /// `None` if absent, `Some(false)` if gated.
    fn evict(
        &mut self,
        execution_id: ExecutionId,
        sink_gate: bool,
        observer: &dyn IndexObserver,
    ) -> Option<bool> {
        let entry = self.executions.get(&execution_id)?;
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
        MutexIndex::with_observer(config, std::sync::Arc::new(NoopObserver))
    }

    /// An empty index reporting to `observer`.
    pub fn with_observer(
        config: IndexConfig,
        observer: std::sync::Arc<dyn IndexObserver>,
    ) -> MutexIndex {
        MutexIndex {
            config,
            observer,
            inner: async_lock::Mutex::new(Inner::default()),
            appended: event_listener::Event::new(),
            epoch: Instant::now(),
        }
    }

    /// The configuration the index was built with.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// The observer this index reports to.
    pub fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }

    fn nanos(&self, at: Instant) -> u64 {
        nanos_since(self.epoch, at)
    }

    fn prepare(&self, event: Event) -> Event {
        if self.config.slim {
            event.to_slim()
        } else {
            event
        }
    }

    /// Indexes one event under the global mutex, then wakes every waiting drive.
    pub fn apply(&self, event: Event) -> Applied {
        let event = self.prepare(event);
        let mut applied = Applied {
            execution_id: event.execution_id(),
            event_id: event.id(),
            is_new: false,
            is_terminal: event.is_terminal(),
        };
        let now = self.nanos(Instant::now());
        applied.is_new =
            self.inner
                .lock_blocking()
                .apply(event, &self.config, now, self.observer());
        self.appended.notify(usize::MAX);
        applied
    }

    /// Decodes and applies one WAL payload.
    pub fn apply_json(&self, payload: &[u8]) -> Result<Applied, ApplyError> {
        Ok(self.apply(Event::from_json(payload)?))
    }

    /// Applies each event as today's drain does (lock, apply, unlock, wake everyone, per
    /// event), then takes the lock once more to evict the batch's terminal executions.
    pub fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        let mut report = BatchReport::default();
        let mut touched: Vec<ExecutionId> = Vec::new();
        let mut terminal: Vec<ExecutionId> = Vec::new();
        for event in events {
            let applied = self.apply(event);
            report.applied += 1;
            report.new += usize::from(applied.is_new);
            if !touched.contains(&applied.execution_id) {
                touched.push(applied.execution_id);
            }
            if applied.is_terminal && !terminal.contains(&applied.execution_id) {
                terminal.push(applied.execution_id);
            }
        }
        report.executions = touched.len();
        if !terminal.is_empty() {
            terminal.sort_unstable();
            let mut inner = self.inner.lock_blocking();
            for execution_id in terminal {
                match inner.evict(execution_id, self.config.sink_gate, self.observer()) {
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
        finish_build(self.observer(), outcome, spine, waited, started)
    }

    /// Builds under the global mutex (the timer starts before the lock, as today).
    pub fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        let started = Instant::now();
        let mut inner = self.inner.lock_blocking();
        self.build_locked(&mut inner, execution_id, expected_head, started)
    }

    /// [`build`](MutexIndex::build), awaiting the mutex instead of blocking.
    pub async fn build_async(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
    ) -> Build {
        let started = Instant::now();
        let mut inner = self.inner.lock().await;
        self.build_locked(&mut inner, execution_id, expected_head, started)
    }

    /// Today's drive: register on the global notification, build, wait, repeat.
    pub async fn drive(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive {
        let drive = drive_loop(
            budget,
            self.observer(),
            || self.appended.listen(),
            || self.build_async(execution_id, expected_head),
            // Today's design has no notion of a finished execution: waits run out.
            || false,
        )
        .await;
        observed(drive, self.observer())
    }

    /// [`drive`](MutexIndex::drive), parking the calling thread.
    pub fn drive_blocking(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive {
        observed(
            self.drive_blocking_unobserved(execution_id, expected_head, budget),
            self.observer(),
        )
    }

    pub(crate) fn drive_blocking_unobserved(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive {
        drive_loop_blocking(
            budget,
            self.observer(),
            || self.appended.listen(),
            || self.build(execution_id, expected_head),
            // Today's design has no notion of a finished execution: waits run out.
            || false,
        )
    }

    /// Refreshes recency; false if not resident.
    pub fn touch(&self, execution_id: ExecutionId) -> bool {
        let now = self.nanos(Instant::now());
        let mut inner = self.inner.lock_blocking();
        inner
            .executions
            .get_mut(&execution_id)
            .map(|e| e.last_used = e.last_used.max(now))
            .is_some()
    }

    /// Evicts one execution; true if one holding events was removed.
    pub fn evict(&self, execution_id: ExecutionId) -> bool {
        let mut inner = self.inner.lock_blocking();
        let held_events = inner
            .executions
            .get(&execution_id)
            .is_some_and(|e| !e.chain.is_empty());
        let evicted = inner.evict(execution_id, self.config.sink_gate, self.observer())
            == Some(true)
            && held_events;
        if evicted {
            self.observer().evicted(EvictReason::Explicit, 1);
        }
        evicted
    }

    /// One sweep under the global mutex.
    pub fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
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
        let (plan, idle_empty) = eviction::plan(candidates, &policy, now, inner.stats);
        for execution_id in idle_empty {
            inner.evict(execution_id, self.config.sink_gate, self.observer());
        }
        for (execution_id, _) in &plan.evicted {
            inner.evict(*execution_id, self.config.sink_gate, self.observer());
        }
        drop(inner);
        report_sweep(self.observer(), &plan);
        plan
    }

    /// Marks an execution as holding unsunk context.
    pub fn mark_pending_sink(&self, execution_id: ExecutionId) {
        let now = self.nanos(Instant::now());
        self.inner
            .lock_blocking()
            .entry(execution_id, &self.config, now)
            .pending_sink = true;
    }

    /// Unmarks; returns whether it was marked.
    pub fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool {
        let _ = reason;
        self.confirm_sunk(execution_id)
    }

    /// Unmarks after sinking; returns whether it was marked.
    pub fn confirm_sunk(&self, execution_id: ExecutionId) -> bool {
        let mut inner = self.inner.lock_blocking();
        inner
            .executions
            .get_mut(&execution_id)
            .is_some_and(|e| std::mem::take(&mut e.pending_sink))
    }

    /// The resident totals.
    pub fn stats(&self) -> IndexStats {
        self.inner.lock_blocking().stats
    }

    /// Replays one execution's events under the mutex (held for the whole replay, as
    /// today), then wakes every waiter.
    pub fn rehydrate(
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
                report.new += usize::from(inner.apply(event, &self.config, now, self.observer()));
            }
        }
        self.appended.notify(usize::MAX);
        report
    }

    /// A copy of one execution's chain.
    pub fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        self.inner
            .lock_blocking()
            .executions
            .get(&execution_id)
            .map(|e| e.chain.clone())
    }

    /// Resident execution ids, ascending.
    pub fn execution_ids(&self) -> Vec<ExecutionId> {
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

/// Assembles a lock-based build's result and reports it.
pub(crate) fn finish_build(
    observer: &dyn IndexObserver,
    outcome: AdvanceOutcome,
    spine: Option<chain_fold::Spine>,
    waited: std::time::Duration,
    started: Instant,
) -> Build {
    let build = Build {
        outcome,
        spine,
        waited,
        elapsed: started.elapsed(),
    };
    observer.build(&build.outcome, build.elapsed, build.waited);
    build
}
