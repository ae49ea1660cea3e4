//! One execution as the lock-based indexes keep it, with today's data path: a chain and
//! its spine cache, plus every payload as a parsed JSON value, mutated in place under
//! whatever lock the index uses. Shared by `MutexIndex` (one global lock) and
//! `ShardedMutexIndex` (one lock per execution), so the two differ only in their locking.
//!
//! Today's index, per applied event, deep-clones the drain's parsed envelope (or its slim
//! projection) into the index and walks the clone for its approximate byte cost, under
//! its lock; per build, it clones every payload value of the spine out under the lock and
//! serializes after it. [`Entry::apply`] and [`Entry::build`] do exactly that work, under
//! the caller's lock; [`serialize`] is the part after it. The chain (with the original
//! payload bytes, shared with the WAL record) is what the comparators walk and hand back,
//! so every index returns identical bytes to the differential tests.

use std::collections::HashMap;

use chain_fold::{
    AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete, SLIM_KEYS, Spine, SpineCache,
};
use serde_json::Value;

use crate::config::IndexConfig;
use crate::eviction_plan::Candidate;
use crate::report::IndexStats;

pub(crate) struct Entry {
    pub(crate) chain: Chain,
    /// Today's second map: each event's payload as the parsed value the index keeps.
    values: HashMap<EventId, Value>,
    /// Today's byte estimate of `values`, from walking each value when it was applied.
    pub(crate) walked_bytes: usize,
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

/// A build's payload values, cloned under the lock, to be serialized after it.
pub(crate) struct Cloned(Vec<Value>);

/// The drain's side of today's apply, done before the lock: the record parsed into a JSON
/// value (the payload was validated by the decoder, so this parse succeeds).
pub(crate) fn parse(event: &Event) -> Value {
    serde_json::from_slice(event.payload()).unwrap_or(Value::Null)
}

/// Today's byte estimate of one value: a walk over the whole tree.
fn walk_bytes(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(b) => 4 + usize::from(!*b),
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| walk_bytes(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + walk_bytes(v))
                .sum::<usize>()
        }
    }
}

/// The value today's index stores for `parsed`: a deep clone of the envelope, or of its
/// slim projection.
fn stored_value(parsed: &Value, slim: bool) -> Value {
    match parsed {
        Value::Object(map) if slim => Value::Object(
            map.iter()
                .filter(|(k, _)| SLIM_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Today's step after the lock: the cloned payload values serialized as the drive's JSON
/// array. Its bytes are what today's consumer receives; the comparators hand back the
/// spine over the original payload bytes instead (see the module documentation), so the
/// serialized array is returned only for its size.
pub(crate) fn serialize(cloned: Cloned) -> usize {
    serde_json::to_vec(&cloned.0).map_or(0, |json| std::hint::black_box(json).len())
}

impl Entry {
    pub(crate) fn new(config: &IndexConfig, now: u64) -> Entry {
        Entry {
            chain: Chain::new(config.order),
            values: HashMap::new(),
            walked_bytes: 0,
            cache: SpineCache::default(),
            last_used: now,
            pending_sink: false,
            evicted: false,
            incarnation: 0,
            version: 0,
        }
    }

    /// Today's apply, under the caller's lock: deep-clone `parsed` (or its slim
    /// projection) into the index, walk the clone for its byte estimate, update both maps.
    /// Moves `stats` by exactly what the chain changed (the ledger every index shares).
    /// Returns whether the event was new.
    pub(crate) fn apply(
        &mut self,
        event: Event,
        parsed: &Value,
        slim: bool,
        now: u64,
        stats: &mut IndexStats,
    ) -> bool {
        let value = stored_value(parsed, slim);
        let cost = walk_bytes(&value);
        if let Some(old) = self.values.insert(event.id(), value) {
            self.walked_bytes -= walk_bytes(&old);
        }
        self.walked_bytes += cost;
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

    /// Today's build, under the caller's lock: advance the cache, then clone every payload
    /// value of the spine out (what production does on every build; [`serialize`] them
    /// after the lock). Every build refreshes the entry's recency, served or not, as today.
    pub(crate) fn build(
        &mut self,
        expected_head: Option<EventId>,
        now: u64,
    ) -> (AdvanceOutcome, Option<(Spine, Cloned)>) {
        self.last_used = self.last_used.max(now);
        let Some(target) = expected_head.or_else(|| self.chain.max_id()) else {
            return (AdvanceOutcome::Incomplete(Incomplete::NoEvents), None);
        };
        let outcome = self.cache.advance_to(&self.chain, target);
        if let AdvanceOutcome::Incomplete(_) = outcome {
            return (outcome, None);
        }
        let Some(spine) = self.cache.spine().cloned() else {
            return (outcome, None);
        };
        let cloned = spine
            .events()
            .map(|e| self.values.get(&e.id()).cloned().unwrap_or(Value::Null))
            .collect();
        (outcome, Some((spine, Cloned(cloned))))
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
    let mut tally = BatchTally::default();
    for event in events {
        let (applied, landed) = apply_one(event);
        tally.add(applied, landed);
    }
    tally.finish()
}

/// The counts of a batch applied one event at a time (shared by the blocking and the
/// awaiting drain loops).
pub(crate) struct BatchTally<T> {
    report: crate::report::BatchReport,
    touched: Vec<ExecutionId>,
    terminal: Vec<(ExecutionId, T)>,
}

impl<T> Default for BatchTally<T> {
    fn default() -> Self {
        BatchTally {
            report: crate::report::BatchReport::default(),
            touched: Vec::new(),
            terminal: Vec::new(),
        }
    }
}

impl<T> BatchTally<T> {
    pub(crate) fn add(&mut self, applied: crate::report::Applied, landed: T) {
        self.report.applied += 1;
        self.report.new += usize::from(applied.is_new);
        if !self.touched.contains(&applied.execution_id) {
            self.touched.push(applied.execution_id);
        }
        if applied.is_terminal {
            self.terminal.retain(|(id, _)| *id != applied.execution_id);
            self.terminal.push((applied.execution_id, landed));
        }
    }

    pub(crate) fn finish(mut self) -> (crate::report::BatchReport, Vec<(ExecutionId, T)>) {
        self.report.executions = self.touched.len();
        self.terminal.sort_unstable_by_key(|(id, _)| *id);
        (self.report, self.terminal)
    }
}
