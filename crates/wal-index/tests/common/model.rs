//! The sequential model of the differential tests: an op language over the index API, the
//! model's own implementation of it, and what every implementation must agree on after each
//! op. Shared by `tests/differential.rs` (proptest) and `fuzz/fuzz_targets/differential.rs`
//! (cargo-fuzz), which includes this file by path.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chain_fold::{
    AdvanceOutcome, Chain, Event, ExecutionId, Incomplete, Spine, SpineCache, SpineOrder,
};
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::config::EvictionPolicy;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, IndexConfig, StateIndex, WalIndex};

pub const EXECUTIONS: i64 = 3;

/// The event pool: per execution a chain 1..=7 with an inversion (6 <- 5 is stamped with
/// a lower id than 5? no: ids 1,2,3,50,4 in arrival order), a terminal 8, a fork, a
/// self-loop and a dangling hop.
pub fn pool_event(exec: ExecutionId, k: u8) -> Event {
    let (id, prev, ty) = match k % 10 {
        0 => (1, None, "playbook_started"),
        1 => (2, Some(1), "step"),
        2 => (3, Some(2), "step"),
        3 => (50, Some(3), "step"),
        4 => (4, Some(50), "step"),
        5 => (8, Some(4), "playbook_failed"),
        6 => (9, Some(2), "fork"),
        7 => (10, Some(10), "loop"),
        8 => (11, Some(20), "dangling"),
        _ => (2, Some(1), "rewritten"), // a conflicting redelivery of 2
    };
    Event::minimal(id, exec, prev, ty)
}

pub const HEADS: [i64; 8] = [1, 2, 3, 50, 4, 8, 9, 10];

#[derive(Debug, Clone)]
pub enum Op {
    Apply(ExecutionId, u8),
    Batch(Vec<(ExecutionId, u8)>),
    Build(ExecutionId, Option<usize>),
    Drive(ExecutionId, usize),
    Evict(ExecutionId),
    Sweep,
    Mark(ExecutionId),
    Release(ExecutionId),
    Confirm(ExecutionId),
    Rehydrate(ExecutionId, Vec<(ExecutionId, u8)>),
}

#[derive(Default)]
pub struct Entry {
    chain: Chain,
    cache: SpineCache,
    /// The engine's cache: `chain_fold::advance`, where an ancestor of the cached head is
    /// served as a prefix and leaves the longer spine cached.
    engine_cache: Option<Spine>,
    pending: bool,
}

/// Which spine-cache policy a model follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachePolicy {
    /// Today's (the lock-based comparators): every served build replaces the cache.
    Today,
    /// The engine's: an ancestor of the cached head keeps the longer spine cached.
    KeepsLongest,
}

/// The sequential model: a map of chains and caches, nothing concurrent, stats recounted.
pub struct Model {
    pub config: IndexConfig,
    pub policy: CachePolicy,
    pub executions: BTreeMap<ExecutionId, Entry>,
}

impl Model {
    fn entry(&mut self, exec: ExecutionId) -> &mut Entry {
        let order = self.config.order;
        self.executions.entry(exec).or_insert_with(|| Entry {
            chain: Chain::new(order),
            ..Entry::default()
        })
    }

    /// Applies one event; a rewrite empties the engine's cache, as the engine does (a spine
    /// of the old generation is never served again).
    fn apply(&mut self, exec: ExecutionId, event: Event) -> bool {
        let entry = self.entry(exec);
        let rewrites = entry.chain.rewrites();
        let new = entry.chain.apply(event);
        if entry.chain.rewrites() != rewrites {
            entry.engine_cache = None;
        }
        new
    }

    fn evict(&mut self, exec: ExecutionId) -> bool {
        let Some(entry) = self.executions.get(&exec) else {
            return false;
        };
        if self.config.sink_gate && entry.pending {
            return false;
        }
        let had = !entry.chain.is_empty();
        self.executions.remove(&exec);
        had
    }

    fn build(&mut self, exec: ExecutionId, head: Option<i64>) -> (AdvanceOutcome, Option<Vec<u8>>) {
        let Some(entry) = self.executions.get_mut(&exec) else {
            return (
                AdvanceOutcome::Incomplete(
                    head.map_or(Incomplete::NoEvents, Incomplete::TipMissing),
                ),
                None,
            );
        };
        let Some(target) = head.or_else(|| entry.chain.max_id()) else {
            return (AdvanceOutcome::Incomplete(Incomplete::NoEvents), None);
        };
        if self.policy == CachePolicy::KeepsLongest {
            let result = chain_fold::advance(&entry.chain, entry.engine_cache.as_ref(), target);
            let json = result
                .spine
                .as_ref()
                .map(|s| s.json_array().to_bytes().to_vec());
            if result.replaces_cache {
                entry.engine_cache = result.spine;
            }
            return (result.outcome, json);
        }
        let outcome = entry.cache.advance_to(&entry.chain, target);
        let json = match outcome {
            AdvanceOutcome::Incomplete(_) => None,
            _ => entry
                .cache
                .spine()
                .map(|s| s.json_array().to_bytes().to_vec()),
        };
        (outcome, json)
    }

    pub fn stats(&self) -> IndexStats {
        let mut stats = IndexStats::default();
        for entry in self.executions.values().filter(|e| !e.chain.is_empty()) {
            stats.executions += 1;
            stats.events += entry.chain.len();
            stats.bytes += entry.chain.bytes();
            if self.policy == CachePolicy::KeepsLongest {
                // The engine also charges its slot and its cached spine.
                stats.bytes += wal_index::SLOT_FIXED_BYTES
                    + entry.engine_cache.as_ref().map_or(0, Spine::heap_bytes);
            }
        }
        stats
    }

    pub fn ids(&self) -> Vec<ExecutionId> {
        self.executions
            .iter()
            .filter(|(_, e)| !e.chain.is_empty())
            .map(|(&id, _)| id)
            .collect()
    }
}

/// What every implementation must agree on after one op.
#[derive(Debug, PartialEq)]
pub enum Seen {
    Applied(bool, bool),
    Batch(usize, usize, Vec<ExecutionId>, Vec<ExecutionId>),
    Build(AdvanceOutcome, Option<Vec<u8>>),
    Flag(bool),
    Sweep(Vec<ExecutionId>, usize),
    Rehydrate(usize, usize, usize),
    Nothing,
}

pub fn run_index<I: StateIndex>(index: &I, op: &Op, far: Instant) -> Seen {
    let json = |b: wal_index::report::Build| {
        Seen::Build(
            b.outcome,
            b.spine.map(|s| s.json_array().to_bytes().to_vec()),
        )
    };
    match op {
        Op::Apply(e, k) => {
            let a = index.apply(pool_event(*e, *k));
            Seen::Applied(a.is_new, a.is_terminal)
        }
        Op::Batch(v) => {
            let r = index.apply_batch(v.iter().map(|&(e, k)| pool_event(e, k)).collect());
            Seen::Batch(
                r.applied,
                r.new,
                r.terminal_evicted,
                r.terminal_kept_by_sink_gate,
            )
        }
        Op::Build(e, h) => json(index.build(*e, h.map(|i| HEADS[i]))),
        Op::Drive(e, h) => {
            let budget = DriveBudget {
                attempts: 0,
                retry: Duration::ZERO,
            };
            let d = index.drive_blocking(*e, Some(HEADS[*h]), budget);
            Seen::Flag(d.outcome.spine().is_some())
        }
        Op::Evict(e) => Seen::Flag(index.evict(*e)),
        Op::Sweep => {
            let s = index.enforce_limits_at(far);
            let mut ids: Vec<_> = s.evicted.iter().map(|x| x.execution_id).collect();
            ids.sort_unstable();
            Seen::Sweep(ids, s.kept_by_sink_gate)
        }
        Op::Mark(e) => {
            index.mark_pending_sink(*e);
            Seen::Nothing
        }
        Op::Release(e) => Seen::Flag(index.release_pending_sink(*e, "test")),
        Op::Confirm(e) => Seen::Flag(index.confirm_sunk(*e)),
        Op::Rehydrate(e, v) => {
            let r = index.rehydrate(*e, v.iter().map(|&(x, k)| pool_event(x, k)));
            Seen::Rehydrate(r.applied, r.new, r.other_execution)
        }
    }
}

pub fn run_model(m: &mut Model, op: &Op) -> Seen {
    match op {
        Op::Apply(e, k) => {
            let ev = pool_event(*e, *k);
            let terminal = ev.is_terminal();
            Seen::Applied(m.apply(*e, ev), terminal)
        }
        Op::Batch(v) => {
            let (mut new, mut terminal) = (0, Vec::new());
            for &(e, k) in v {
                let ev = pool_event(e, k);
                if ev.is_terminal() && !terminal.contains(&e) {
                    terminal.push(e);
                }
                new += usize::from(m.apply(e, ev));
            }
            terminal.sort_unstable();
            let (mut evicted, mut kept) = (Vec::new(), Vec::new());
            for e in terminal {
                if m.evict(e) {
                    evicted.push(e)
                } else {
                    kept.push(e)
                }
            }
            Seen::Batch(v.len(), new, evicted, kept)
        }
        Op::Build(e, h) => {
            let (o, j) = m.build(*e, h.map(|i| HEADS[i]));
            Seen::Build(o, j)
        }
        Op::Drive(e, h) => Seen::Flag(m.build(*e, Some(HEADS[*h])).1.is_some()),
        Op::Evict(e) => Seen::Flag(m.evict(*e)),
        Op::Sweep => {
            let all: Vec<ExecutionId> = m.executions.keys().copied().collect();
            let (mut evicted, mut kept) = (Vec::new(), 0);
            for e in all {
                let entry = &m.executions[&e];
                let (empty, gated) = (entry.chain.is_empty(), m.config.sink_gate && entry.pending);
                if gated {
                    kept += usize::from(!empty);
                } else {
                    m.executions.remove(&e);
                    if !empty {
                        evicted.push(e);
                    }
                }
            }
            Seen::Sweep(evicted, kept)
        }
        // The reference (docs/domain.md): with the sink gate off, marking is a no-op and
        // confirm/release report "was not pending".
        Op::Mark(e) => {
            if m.config.sink_gate {
                m.entry(*e).pending = true;
            }
            Seen::Nothing
        }
        Op::Release(e) | Op::Confirm(e) => Seen::Flag(
            m.executions
                .get_mut(e)
                .is_some_and(|x| std::mem::take(&mut x.pending)),
        ),
        Op::Rehydrate(e, v) => {
            let (mut applied, mut new, mut other) = (0, 0, 0);
            for &(x, k) in v {
                if x != *e {
                    other += 1;
                    continue;
                }
                applied += 1;
                new += usize::from(m.apply(x, pool_event(x, k)));
            }
            Seen::Rehydrate(applied, new, other)
        }
    }
}

impl Model {
    /// An empty model following `policy`.
    pub fn new(config: IndexConfig, policy: CachePolicy) -> Model {
        Model {
            config,
            policy,
            executions: BTreeMap::new(),
        }
    }
}

/// What one implementation shows after one op: the op's result, its stats, its resident
/// executions, and its name.
pub type Observed = (Seen, IndexStats, Vec<ExecutionId>, &'static str);

/// Runs one op on one implementation.
pub type Runner<'a> = &'a dyn Fn(&Op, Instant) -> Observed;

/// Runs `ops` on every implementation and on the model of its cache policy; returns the
/// first disagreement.
pub fn check_all(
    config: IndexConfig,
    ops: &[Op],
    indexes: &[(Runner<'_>, CachePolicy)],
) -> Result<(), String> {
    let mut today = Model::new(config, CachePolicy::Today);
    let mut engine = Model::new(config, CachePolicy::KeepsLongest);
    let far = Instant::now() + Duration::from_secs(3600);
    for (step, op) in ops.iter().enumerate() {
        let expected_today = run_model(&mut today, op);
        let expected_engine = run_model(&mut engine, op);
        let ids = today.ids();
        assert_eq!(engine.ids(), ids);
        for (index, policy) in indexes {
            // The two policies hold the same chains, but the engine's ledger also charges
            // its slots and cached spines.
            let (expected, stats) = match policy {
                CachePolicy::Today => (&expected_today, today.stats()),
                CachePolicy::KeepsLongest => (&expected_engine, engine.stats()),
            };
            let (seen, seen_stats, seen_ids, name) = index(op, far);
            if seen != *expected || seen_stats != stats || seen_ids != ids {
                return Err(format!(
                    "{name} disagrees at step {step} ({op:?}): {seen:?} vs {expected:?}, {seen_stats:?} vs {stats:?}, {seen_ids:?} vs {ids:?}"
                ));
            }
        }
    }
    Ok(())
}

/// One implementation as `check_all` drives it.
pub fn observe<I: StateIndex>(
    index: &I,
    op: &Op,
    far: Instant,
) -> (Seen, IndexStats, Vec<ExecutionId>, &'static str) {
    let seen = run_index(index, op, far);
    (seen, index.stats(), index.execution_ids(), I::NAME)
}

/// The configuration the model implements: a TTL that every `Op::Sweep` (run an hour in the
/// future) exceeds, the sink gate and the spine order as chosen.
pub fn config(sink_gate: bool, by_id: bool) -> IndexConfig {
    IndexConfig {
        order: if by_id {
            SpineOrder::EventId
        } else {
            SpineOrder::Causal
        },
        sink_gate,
        eviction: EvictionPolicy {
            ttl: Some(Duration::from_secs(1)),
            ..EvictionPolicy::default()
        },
        ..IndexConfig::default()
    }
}

/// Runs `ops` on fresh `WalIndex`, `MutexIndex` and `ShardedMutexIndex` and the model;
/// returns the first disagreement.
pub fn check_every_index(ops: &[Op], sink_gate: bool, by_id: bool) -> Result<(), String> {
    let config = config(sink_gate, by_id);
    let lockfree = WalIndex::new(config);
    let mutex = MutexIndex::new(config);
    let sharded = ShardedMutexIndex::new(config);
    check_all(
        config,
        ops,
        &[
            (
                &|op, far| observe(&lockfree, op, far),
                CachePolicy::KeepsLongest,
            ),
            (&|op, far| observe(&mutex, op, far), CachePolicy::Today),
            (&|op, far| observe(&sharded, op, far), CachePolicy::Today),
        ],
    )
}
