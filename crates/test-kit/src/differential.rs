//! The sequential model of the differential tests: an op language over the index API, the
//! model's own implementation of it, and what every implementation must agree on after each
//! op. wal-index's `tests/differential.rs` draws ops with proptest, and
//! `fuzz/fuzz_targets/differential.rs` with cargo-fuzz.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chain_fold::{
    AdvanceOutcome, Chain, Event, ExecutionId, Incomplete, Spine, SpineCache, SpineOrder,
};
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
use wal_index::config::EvictionPolicy;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};

/// How many executions the ops draw from (ids `0..EXECUTIONS`).
pub const EXECUTIONS: i64 = 3;

/// How many kinds of event the pool has (`pool_event(exec, k)` reads `k % POOL`).
pub const POOL: u8 = 16;

/// The event pool, per execution, as producers write it (`pool_text`):
///
/// - a chain `1 playbook_started <- 2 <- 3 <- 50 <- 4` (an inversion: 4 arrived after 50),
///   a terminal 8, a fork 9 off 2, a self-loop 10 and a dangling hop 11;
/// - the odd chains: a root 60 that is not genesis, `60 <- 61 <- 62 playbook_started <- 63`
///   (a genesis in the middle: tips 60 and 61 have no spine, 62 and 63 do);
/// - redeliveries: 2 with another type (a rewrite), 3 with its `prev_event_id` moved to 1
///   (a rewrite of a link), and 4 written with its keys in another order and spacing (the
///   same value: an identical redelivery).
pub(crate) fn pool_text(exec: ExecutionId, k: u8) -> String {
    let (id, prev, ty) = match k % POOL {
        0 => (1, None, "playbook_started"),
        1 => (2, Some(1), "step"),
        2 => (3, Some(2), "step"),
        3 => (50, Some(3), "step"),
        4 => (4, Some(50), "step"),
        5 => (8, Some(4), "playbook_failed"),
        6 => (9, Some(2), "fork"),
        7 => (10, Some(10), "loop"),
        8 => (11, Some(20), "dangling"),
        9 => (2, Some(1), "rewritten"),
        10 => (60, None, "step"),
        11 => (61, Some(60), "step"),
        12 => (62, Some(61), "playbook_started"),
        13 => (63, Some(62), "step"),
        14 => (3, Some(1), "step"),
        _ => {
            return format!(
                "{{ \"execution_id\" : {exec},\n \"event_type\": \"step\", \"prev_event_id\":50, \"event_id\" : 4 }}"
            );
        }
    };
    let prev = prev.map_or("null".to_string(), |p: i64| p.to_string());
    format!(
        r#"{{"prev_event_id":{prev},"event_type":"{ty}","execution_id":{exec},"event_id":{id}}}"#
    )
}

/// `pool_text(exec, k)`, decoded.
pub(crate) fn pool_event(exec: ExecutionId, k: u8) -> Event {
    Event::from_json(pool_text(exec, k).as_bytes()).expect("the pool decodes")
}

/// Every id the pool has, as build targets.
pub const HEADS: [i64; 13] = [1, 2, 3, 50, 4, 8, 9, 10, 11, 60, 61, 62, 63];

/// The reference walk (docs/domain.md, "Chains and spines"), written from the domain alone:
/// over the last text delivered of each id, from the tip along `prev_event_id` to a root;
/// no spine if the tip or a hop is absent, if no `playbook_started` was passed or if an
/// event repeats. The served bytes are today's: each payload parsed into a
/// `serde_json::Value`, the spine's values serialized as one array.
pub(crate) fn reference_walk(
    texts: &BTreeMap<i64, String>,
    tip: i64,
    order: SpineOrder,
) -> Result<Vec<u8>, Incomplete> {
    let value = |id: &i64| -> Option<serde_json::Value> {
        texts
            .get(id)
            .map(|t| serde_json::from_str(t).expect("the pool parses"))
    };
    let mut walked: Vec<(i64, serde_json::Value)> = Vec::new();
    let mut at = tip;
    let mut current = value(&at).ok_or(Incomplete::TipMissing(tip))?;
    loop {
        if walked.iter().any(|(id, _)| *id == at) {
            // Which event of the loop a walk names depends on where it entered it.
            return Err(Incomplete::Cycle(0));
        }
        let prev = current["prev_event_id"].as_i64();
        walked.push((at, current));
        match prev {
            None => break,
            Some(prev) => {
                current = value(&prev).ok_or(Incomplete::MissingHop(prev))?;
                at = prev;
            }
        }
    }
    if !walked
        .iter()
        .any(|(_, v)| v["event_type"] == "playbook_started")
    {
        return Err(Incomplete::NoGenesis);
    }
    match order {
        SpineOrder::Causal => walked.reverse(),
        SpineOrder::EventId => walked.sort_by_key(|(id, _)| *id),
    }
    let values: Vec<serde_json::Value> = walked.into_iter().map(|(_, v)| v).collect();
    Ok(serde_json::to_vec(&values).expect("values serialize"))
}

/// An incomplete reason as the reference can state it (a cycle without its event).
pub(crate) fn comparable(why: &Incomplete) -> Incomplete {
    match why {
        Incomplete::Cycle(_) => Incomplete::Cycle(0),
        other => other.clone(),
    }
}

/// One operation on every index and on the model. An event is named by its execution and
/// its kind in the pool (`k % POOL`); a head by its index in [`HEADS`].
#[derive(Debug, Clone)]
pub enum Op {
    /// `StateIndex::apply` of one pool event.
    Apply(ExecutionId, u8),
    /// `StateIndex::apply_batch` of pool events, terminal evictions included.
    Batch(Vec<(ExecutionId, u8)>),
    /// `StateIndex::build` at a head (`None`: at the largest indexed id).
    Build(ExecutionId, Option<usize>),
    /// A drive with a zero budget at a head (its builds, no wait, no fallback source).
    Drive(ExecutionId, usize),
    /// `StateIndex::evict`.
    Evict(ExecutionId),
    /// One sweep of the eviction policy an hour from the start, past every TTL.
    Sweep,
    /// `StateIndex::mark_pending_sink`.
    Mark(ExecutionId),
    /// `StateIndex::release_pending_sink`.
    Release(ExecutionId),
    /// `StateIndex::confirm_sunk`.
    Confirm(ExecutionId),
    /// `StateIndex::rehydrate` of pool events (other executions' are skipped).
    Rehydrate(ExecutionId, Vec<(ExecutionId, u8)>),
    /// Feed the index's snapshot of the execution (`StateIndex::chain`) to the runner's
    /// own `SpineCache`, one cache for every execution and incarnation, and build there.
    SnapshotBuild(ExecutionId, usize),
}

#[derive(Default)]
pub(crate) struct Entry {
    chain: Chain,
    /// What the reference walks: the last text delivered of each id.
    texts: BTreeMap<i64, String>,
    cache: SpineCache,
    /// The engine's cache: `chain_fold::advance`, where an ancestor of the cached head is
    /// served as a prefix and leaves the longer spine cached.
    engine_cache: Option<Spine>,
    pending: bool,
}

/// Which spine-cache policy a model follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CachePolicy {
    /// Today's (the lock-based comparators): every served build replaces the cache.
    Today,
    /// The engine's: an ancestor of the cached head keeps the longer spine cached.
    KeepsLongest,
    /// The engine's cache with today's ledger, which charges chains only (`PapayaIndex`).
    KeepsLongestChargesChains,
}

/// The sequential model: a map of chains and caches, nothing concurrent, stats recounted.
pub(crate) struct Model {
    pub(crate) config: IndexConfig,
    pub(crate) policy: CachePolicy,
    pub(crate) executions: BTreeMap<ExecutionId, Entry>,
}

impl Model {
    fn entry(&mut self, exec: ExecutionId) -> &mut Entry {
        let order = self.config.order;
        self.executions.entry(exec).or_insert_with(|| Entry {
            chain: Chain::new(order),
            ..Entry::default()
        })
    }

    /// Applies pool event `k`; a rewrite empties the engine's cache, as the engine does (a
    /// spine built before a rewrite is never served again).
    fn apply(&mut self, exec: ExecutionId, k: u8) -> bool {
        let event = pool_event(exec, k);
        let entry = self.entry(exec);
        entry.texts.insert(event.id(), pool_text(exec, k));
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
        if self.policy != CachePolicy::Today {
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

    pub(crate) fn stats(&self) -> IndexStats {
        let mut stats = IndexStats::default();
        for entry in self.executions.values().filter(|e| !e.chain.is_empty()) {
            stats.executions += 1;
            stats.events += entry.chain.len();
            stats.bytes += entry.chain.bytes();
            if self.policy == CachePolicy::KeepsLongest {
                // The engine also charges its slot and its cached spine: the spine's heap
                // and the allocation that holds it (an `Arc<Option<Spine>>`: two counts
                // and the value).
                let cache_allocation =
                    2 * std::mem::size_of::<usize>() + std::mem::size_of::<Option<Spine>>();
                stats.bytes += slot_fixed_bytes()
                    + entry
                        .engine_cache
                        .as_ref()
                        .map_or(0, |spine| spine.heap_bytes() + cache_allocation);
            }
        }
        stats
    }

    pub(crate) fn ids(&self) -> Vec<ExecutionId> {
        self.executions
            .iter()
            .filter(|(_, e)| !e.chain.is_empty())
            .map(|(&id, _)| id)
            .collect()
    }
}

/// What every implementation must agree on after one op.
#[derive(Debug, PartialEq)]
pub(crate) enum Seen {
    Applied(bool, bool),
    Batch(usize, usize, Vec<ExecutionId>, Vec<ExecutionId>),
    Build(AdvanceOutcome, Option<Vec<u8>>),
    Flag(bool),
    Sweep(Vec<ExecutionId>, usize),
    Rehydrate(usize, usize, usize),
    /// A build's result as the reference states it: the served bytes, or why none.
    Reference(Result<Vec<u8>, Incomplete>),
    Nothing,
}

pub(crate) fn run_index<I: StateIndex>(
    index: &I,
    op: &Op,
    far: Instant,
    snapshots: &std::cell::RefCell<SpineCache>,
) -> Seen {
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
            let d = index.drive(*e, Some(HEADS[*h]), &DriveFlow::new(budget));
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
        Op::SnapshotBuild(e, h) => {
            let snapshot = index
                .chain(*e)
                .unwrap_or_else(|| Chain::new(index.config().order));
            let mut cache = snapshots.borrow_mut();
            Seen::Reference(match cache.advance_to(&snapshot, HEADS[*h]) {
                AdvanceOutcome::Incomplete(why) => Err(comparable(&why)),
                _ => Ok(cache
                    .spine()
                    .expect("served")
                    .json_array()
                    .to_bytes()
                    .to_vec()),
            })
        }
    }
}

pub(crate) fn run_model(m: &mut Model, op: &Op) -> Seen {
    match op {
        Op::Apply(e, k) => {
            let terminal = pool_event(*e, *k).is_terminal();
            Seen::Applied(m.apply(*e, *k), terminal)
        }
        Op::Batch(v) => {
            let (mut new, mut terminal) = (0, Vec::new());
            for &(e, k) in v {
                let ev = pool_event(e, k);
                if ev.is_terminal() && !terminal.contains(&e) {
                    terminal.push(e);
                }
                new += usize::from(m.apply(e, k));
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
                new += usize::from(m.apply(x, k));
            }
            Seen::Rehydrate(applied, new, other)
        }
        Op::SnapshotBuild(e, h) => Seen::Reference(m.reference(*e, Some(HEADS[*h]))),
    }
}

impl Model {
    /// The reference walk of `exec` at `head` (the largest id when `None`).
    pub(crate) fn reference(
        &self,
        exec: ExecutionId,
        head: Option<i64>,
    ) -> Result<Vec<u8>, Incomplete> {
        let empty = BTreeMap::new();
        let texts = self.executions.get(&exec).map_or(&empty, |e| &e.texts);
        let Some(target) = head.or_else(|| texts.keys().next_back().copied()) else {
            return Err(Incomplete::NoEvents);
        };
        reference_walk(texts, target, self.config.order)
    }
}

/// Checks one index's result of a build (or a drive) against the reference walk.
fn check_reference(seen: &Seen, reference: &Result<Vec<u8>, Incomplete>) -> Result<(), String> {
    let agrees = match (seen, reference) {
        (Seen::Build(AdvanceOutcome::Incomplete(why), None), Err(expected)) => {
            comparable(why) == *expected
        }
        (Seen::Build(outcome, Some(json)), Ok(expected)) => {
            !matches!(outcome, AdvanceOutcome::Incomplete(_)) && json == expected
        }
        (Seen::Flag(served), reference) => *served == reference.is_ok(),
        _ => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!(
            "{seen:?} but the reference walk says {reference:?}"
        ))
    }
}

impl Model {
    /// An empty model following `policy`.
    pub(crate) fn new(config: IndexConfig, policy: CachePolicy) -> Model {
        Model {
            config,
            policy,
            executions: BTreeMap::new(),
        }
    }
}

/// What one implementation shows after one op: the op's result, its stats, its resident
/// executions, and its name.
pub(crate) type Observed = (Seen, IndexStats, Vec<ExecutionId>, &'static str);

/// Runs one op on one implementation.
pub(crate) type Runner<'a> = &'a dyn Fn(&Op, Instant) -> Observed;

/// Runs `ops` on every implementation and on the model of its cache policy; returns the
/// first disagreement.
pub(crate) fn check_all(
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
        let reference = match *op {
            Op::Build(e, h) => Some(today.reference(e, h.map(|i| HEADS[i]))),
            Op::Drive(e, h) => Some(today.reference(e, Some(HEADS[h]))),
            _ => None,
        };
        for (index, policy) in indexes {
            // The two policies hold the same chains, but the engine's ledger also charges
            // its slots and cached spines.
            let (expected, stats) = match policy {
                CachePolicy::Today => (&expected_today, today.stats()),
                CachePolicy::KeepsLongest => (&expected_engine, engine.stats()),
                CachePolicy::KeepsLongestChargesChains => (&expected_engine, today.stats()),
            };
            let (seen, seen_stats, seen_ids, name) = index(op, far);
            if let Some(reference) = &reference {
                check_reference(&seen, reference)
                    .map_err(|why| format!("{name} at step {step} ({op:?}): {why}"))?;
            }
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
pub(crate) fn observe<I: StateIndex>(
    index: &I,
    op: &Op,
    far: Instant,
    snapshots: &std::cell::RefCell<SpineCache>,
) -> (Seen, IndexStats, Vec<ExecutionId>, &'static str) {
    let seen = run_index(index, op, far, snapshots);
    (seen, index.stats(), index.execution_ids(), I::NAME)
}

/// The configuration the model implements: a TTL that every `Op::Sweep` (run an hour in the
/// future) exceeds, the sink gate and the spine order as chosen.
pub(crate) fn config(sink_gate: bool, by_id: bool) -> IndexConfig {
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

/// Runs `ops` on fresh `WalIndex`, `MutexIndex`, `ShardedMutexIndex` and `PapayaIndex` and
/// the model;
/// returns the first disagreement.
pub fn check_every_index(ops: &[Op], sink_gate: bool, by_id: bool) -> Result<(), String> {
    let config = config(sink_gate, by_id);
    let lockfree = WalIndex::new(config);
    let mutex = MutexIndex::new(config);
    let sharded = ShardedMutexIndex::new(config);
    let papaya = PapayaIndex::with_config(config);
    let caches: [std::cell::RefCell<SpineCache>; 4] = Default::default();
    check_all(
        config,
        ops,
        &[
            (
                &|op, far| observe(&lockfree, op, far, &caches[0]),
                CachePolicy::KeepsLongest,
            ),
            (
                &|op, far| observe(&mutex, op, far, &caches[1]),
                CachePolicy::Today,
            ),
            (
                &|op, far| observe(&sharded, op, far, &caches[2]),
                CachePolicy::Today,
            ),
            (
                &|op, far| observe(&papaya, op, far, &caches[3]),
                CachePolicy::KeepsLongestChargesChains,
            ),
        ],
    )
}

/// What the engine charges per resident execution beyond its chain and cached spine,
/// measured through the public API: one event's execution, never built (no cached spine),
/// charged its `resident_bytes` less its chain's bytes.
fn slot_fixed_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let index = WalIndex::default();
        index.apply(Event::minimal(1, 1, None, "playbook_started"));
        index.resident_bytes(1).unwrap() - index.chain(1).unwrap().bytes()
    })
}
