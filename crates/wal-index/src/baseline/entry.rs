//! One execution as the lock-based indexes keep it: a chain and its spine cache, mutated in
//! place under whatever lock the index uses. Shared by `MutexIndex` (one global lock) and
//! `ShardedMutexIndex` (one lock per execution), so the two differ only in their locking.

use chain_fold::{
    AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete, Spine, SpineCache,
};

use crate::config::IndexConfig;
use crate::eviction_plan::Candidate;
use crate::report::IndexStats;

pub(crate) struct Entry {
    pub(crate) chain: Chain,
    cache: SpineCache,
    pub(crate) last_used: u64,
    pub(crate) pending_sink: bool,
    /// Set when a per-execution index removed this entry while an applier held it.
    pub(crate) evicted: bool,
    /// Which entry of its execution this is (`MutexIndex` numbers them; 0 elsewhere).
    pub(crate) incarnation: u64,
    /// Moves on every apply: a sweep evicts only an entry whose version is the one it
    /// planned on.
    pub(crate) version: u64,
}

impl Entry {
    pub(crate) fn new(config: &IndexConfig, now: u64) -> Entry {
        Entry {
            chain: Chain::new(config.order),
            cache: SpineCache::default(),
            last_used: now,
            pending_sink: false,
            evicted: false,
            incarnation: 0,
            version: 0,
        }
    }

    /// Applies `event` and moves `stats` by exactly what changed. Returns whether it was new.
    pub(crate) fn apply(&mut self, event: Event, now: u64, stats: &mut IndexStats) -> bool {
        let (len, bytes) = (self.chain.len(), self.chain.bytes());
        let is_new = self.chain.apply(event);
        self.version += 1;
        self.last_used = self.last_used.max(now);
        if len == 0 && !self.chain.is_empty() {
            stats.executions += 1;
        }
        stats.events += self.chain.len() - len;
        stats.bytes = stats.bytes + self.chain.bytes() - bytes;
        is_new
    }

    /// Subtracts what this entry holds from `stats` (it is being removed).
    pub(crate) fn subtract_from(&self, stats: &mut IndexStats) {
        if !self.chain.is_empty() {
            stats.executions -= 1;
        }
        stats.events -= self.chain.len();
        stats.bytes -= self.chain.bytes();
    }

    /// Today's build, under the caller's lock: advance the cache, then copy every payload
    /// of the spine out (what production does on every build). Every build refreshes the
    /// entry's recency, served or not, as today.
    pub(crate) fn build(
        &mut self,
        expected_head: Option<EventId>,
        now: u64,
    ) -> (AdvanceOutcome, Option<Spine>) {
        self.last_used = self.last_used.max(now);
        let Some(target) = expected_head.or_else(|| self.chain.max_id()) else {
            return (AdvanceOutcome::Incomplete(Incomplete::NoEvents), None);
        };
        let outcome = self.cache.advance_to(&self.chain, target);
        if let AdvanceOutcome::Incomplete(_) = outcome {
            return (outcome, None);
        }
        (outcome, self.cache.spine().map(Spine::deep_copy))
    }

    pub(crate) fn candidate(&self, execution_id: ExecutionId, sink_gate: bool) -> Candidate {
        Candidate {
            execution_id,
            last_used: self.last_used,
            events: self.chain.len(),
            bytes: self.chain.bytes(),
            gated: sink_gate && self.pending_sink,
        }
    }
}

/// Today's drain over a batch: each event applied on its own by `apply_one` (lock, apply,
/// unlock, wake, per event). Returns the batch's counts and, for each execution whose
/// terminal event the batch held, what `apply_one` returned for the last of them (which
/// entry or slot it landed in: only that one may be evicted, since one re-created by
/// another applier meanwhile holds no terminal event), ascending by execution.
pub(crate) fn apply_each<T>(
    events: Vec<Event>,
    mut apply_one: impl FnMut(Event) -> (crate::report::Applied, T),
) -> (crate::report::BatchReport, Vec<(ExecutionId, T)>) {
    let mut report = crate::report::BatchReport::default();
    let mut touched: Vec<ExecutionId> = Vec::new();
    let mut terminal: Vec<(ExecutionId, T)> = Vec::new();
    for event in events {
        let (applied, landed) = apply_one(event);
        report.applied += 1;
        report.new += usize::from(applied.is_new);
        if !touched.contains(&applied.execution_id) {
            touched.push(applied.execution_id);
        }
        if applied.is_terminal {
            terminal.retain(|(id, _)| *id != applied.execution_id);
            terminal.push((applied.execution_id, landed));
        }
    }
    report.executions = touched.len();
    terminal.sort_unstable_by_key(|(id, _)| *id);
    (report, terminal)
}
