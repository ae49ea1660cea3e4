//! Soak: appliers (a drain of batches, single tail applies, rehydrate replays), builds,
//! drives, sweeps, explicit evictions and sink marks at random for a set time (`SOAK_SECS`
//! per index, default 60; `scripts/soak.sh`), then invariants: stats equal a recount, every
//! resident execution walks exactly as the model says, no drive or build was ever served a
//! spine other than the model's, and **nothing acknowledged is lost** (see [`Ledger`]).
//! Ignored by default: `cargo test --release -p wal-index --test soak -- --ignored`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chain_fold::{Event, ExecutionId, Incomplete};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
use wal_index::config::EvictionPolicy;
use wal_index::labels::EvictReason;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};

/// Every acknowledgement and every eviction, in one sequence order, so that at the end each
/// acknowledged event can be accounted for.
///
/// An event whose `apply` (or batch, or replay) returned must be resident at the end, or its
/// execution must have been evicted by an eviction justified for a state that held the
/// event. Let `M` be the apply of the event that began last; the apply that took effect last
/// either is `M` or was still running when `M` began (it acknowledged after `M`'s start).
/// The removing eviction ended after `M` began, and:
///
/// - an explicit or terminal eviction removes whatever is resident when it runs;
/// - a sweep's verdict names the last use it judged ([`Victim::last_used`]). Every apply
///   refreshes recency to a time no earlier than the instant taken before it, so a verdict
///   covered the event only if its last use is no earlier than that instant for one of those
///   candidate applies; for TTL the idle time must also reach the TTL.
///
/// The check never accuses a correct index (each condition is implied by a justified
/// eviction), and a sweep that evicts on a stale plan fails it: `scripts/mutations.sh` runs
/// it against the mutation `sweep-trusts-plan` build and requires the failure.
///
/// [`Victim::last_used`]: wal_index::report::Victim::last_used
#[derive(Default)]
struct Ledger {
    sequence: AtomicU64,
    acks: Mutex<HashMap<(ExecutionId, i64), Vec<Ack>>>,
    evictions: Mutex<Vec<Eviction>>,
}

/// One apply of one event: when it began (sequence and instant) and when it returned.
#[derive(Clone, Copy)]
struct Ack {
    started: u64,
    before: Instant,
    acknowledged: u64,
}

struct Eviction {
    execution_id: ExecutionId,
    ended: u64,
    /// `None` for explicit and terminal evictions; a sweep's verdict otherwise: its reason,
    /// its `now`, and the last use it judged.
    verdict: Option<(EvictReason, Instant, Instant)>,
}

impl Ledger {
    /// Runs one apply of `events` and records its acknowledgement.
    fn apply<R>(&self, events: &[(ExecutionId, i64)], apply: impl FnOnce() -> R) -> R {
        let before = Instant::now();
        let started = self.sequence.fetch_add(1, Ordering::SeqCst);
        let result = apply();
        let acknowledged = self.sequence.fetch_add(1, Ordering::SeqCst);
        let ack = Ack {
            started,
            before,
            acknowledged,
        };
        let mut acks = self.acks.lock().unwrap();
        for &key in events {
            let seen = acks.entry(key).or_default();
            seen.push(ack);
            // Keep what can still be a candidate: the latest-started apply, and those that
            // returned after it began.
            let last = seen.iter().map(|a| a.started).max().unwrap_or(started);
            seen.retain(|a| a.started == last || a.acknowledged > last);
        }
        result
    }

    fn evicted(&self, execution_id: ExecutionId, verdict: Option<(EvictReason, Instant, Instant)>) {
        let ended = self.sequence.fetch_add(1, Ordering::SeqCst);
        self.evictions.lock().unwrap().push(Eviction {
            execution_id,
            ended,
            verdict,
        });
    }

    /// How many distinct events were acknowledged.
    fn acknowledged(&self) -> usize {
        self.acks.lock().unwrap().len()
    }

    /// The acknowledged events that are neither resident nor covered by an eviction.
    fn lost(&self, index: &impl StateIndex, ttl: Duration) -> Vec<(ExecutionId, i64)> {
        let mut by_execution: HashMap<ExecutionId, Vec<&Eviction>> = HashMap::new();
        let evictions = self.evictions.lock().unwrap();
        for ev in evictions.iter() {
            by_execution.entry(ev.execution_id).or_default().push(ev);
        }
        let acks = self.acks.lock().unwrap();
        let mut lost: Vec<_> = acks
            .iter()
            .filter(|&(&(e, id), seen)| {
                if index.chain(e).is_some_and(|chain| chain.contains(id)) {
                    return false;
                }
                let last = seen.iter().map(|a| a.started).max().unwrap_or(0);
                let earliest = seen
                    .iter()
                    .filter(|a| a.started == last || a.acknowledged > last)
                    .map(|a| a.before)
                    .min();
                let covered = by_execution.get(&e).into_iter().flatten().any(|ev| {
                    ev.ended > last
                        && ev.verdict.is_none_or(|(reason, now, last_used)| {
                            earliest.is_some_and(|earliest| last_used >= earliest)
                                && (reason != EvictReason::Ttl
                                    || now.saturating_duration_since(last_used) >= ttl)
                        })
                });
                !covered
            })
            .map(|(&key, _)| key)
            .collect();
        lost.sort_unstable();
        lost
    }
}

const EXECUTIONS: i64 = 48;
const LEN: i64 = 30;

/// Execution `e`'s event `id`: a linear chain 1..=LEN, genesis first, terminal last.
fn event(e: i64, id: i64) -> Event {
    let ty = match id {
        1 => "playbook_started",
        LEN => "playbook_completed",
        _ => "step",
    };
    Event::minimal(id, e, (id > 1).then(|| id - 1), ty)
}

/// Execution `e`'s event `id` in a chain that never ends (no terminal event, so only the
/// sweeps and the explicit evictor remove anything).
fn step(e: i64, id: i64) -> Event {
    let ty = if id == 1 { "playbook_started" } else { "step" };
    Event::minimal(id, e, (id > 1).then(|| id - 1), ty)
}

/// The resident totals, counted from what is resident.
fn recount(index: &impl StateIndex) -> IndexStats {
    let mut recount = IndexStats::default();
    for e in index.execution_ids() {
        let chain = index.chain(e).expect("listed executions are resident");
        recount.executions += 1;
        recount.events += chain.len();
        recount.bytes += index.resident_bytes(e).expect("resident");
    }
    recount
}

/// What a served spine for `tip` must be.
fn expected(tip: i64) -> Vec<i64> {
    (1..=tip).collect()
}

fn soak<I: StateIndex>() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let ttl = Duration::from_millis(40);
    let config = IndexConfig {
        sink_gate: true,
        eviction: EvictionPolicy {
            ttl: Some(ttl),
            max_executions: Some(32),
            max_bytes: Some(400_000),
        },
        ..IndexConfig::default()
    };
    let index = Arc::new(I::with_config(config));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let ledger = Arc::new(Ledger::default());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let worker = |seed: u64, role: u8| {
        let (index, stop, served) = (Arc::clone(&index), Arc::clone(&stop), Arc::clone(&served));
        let ledger = Arc::clone(&ledger);
        std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let e = rng.random_range(0..EXECUTIONS);
                let tip = rng.random_range(1..=LEN);
                match role {
                    // The drain: batches, and the terminal evictions they cause.
                    0 => {
                        let n = rng.random_range(1..=8);
                        let ids: Vec<_> = (tip..=(tip + n).min(LEN)).map(|id| (e, id)).collect();
                        let batch = ids.iter().map(|&(e, id)| event(e, id)).collect();
                        let report = ledger.apply(&ids, || index.apply_batch(batch));
                        for e in report.terminal_evicted {
                            ledger.evicted(e, None);
                        }
                    }
                    // A drive's server-attached tail: single applies, concurrent with the drain.
                    4 => {
                        let n = rng.random_range(1..=3);
                        for id in tip..=(tip + n).min(LEN) {
                            ledger.apply(&[(e, id)], || index.apply(event(e, id)));
                        }
                    }
                    1 => {
                        let build = index.build(e, Some(tip));
                        if let Some(spine) = build.spine {
                            assert_eq!(
                                spine.ids(),
                                expected(tip),
                                "{} build of {e}@{tip}",
                                I::NAME
                            );
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    2 => {
                        let budget = DriveBudget {
                            attempts: 2,
                            retry: Duration::from_millis(3),
                        };
                        let drive = index.drive(e, Some(tip), &DriveFlow::new(budget));
                        if let Some(spine) = drive.outcome.spine() {
                            assert_eq!(spine.head(), tip);
                            assert_eq!(
                                spine.ids(),
                                expected(tip),
                                "{} drive of {e}@{tip}",
                                I::NAME
                            );
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ => match rng.random_range(0..6) {
                        0 => {
                            if index.evict(e) {
                                ledger.evicted(e, None);
                            }
                        }
                        1 => {
                            let now = Instant::now();
                            for victim in index.enforce_limits_at(now).evicted {
                                let verdict = (victim.reason, now, victim.last_used);
                                ledger.evicted(victim.execution_id, Some(verdict));
                            }
                        }
                        2 => {
                            let ids: Vec<_> = (1..=tip).map(|id| (e, id)).collect();
                            ledger.apply(&ids, || {
                                index.rehydrate(e, (1..=tip).map(|id| event(e, id)))
                            });
                        }
                        3 => index.mark_pending_sink(e),
                        4 => {
                            index.release_pending_sink(e, "soak");
                        }
                        _ => {
                            index.confirm_sunk(e);
                        }
                    },
                }
            }
        })
    };
    let threads: Vec<_> = (0..6u8)
        .map(|role| worker(0x5eed + u64::from(role), role))
        .collect();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a soak thread panicked");
    }
    // Invariants once quiescent.
    let mut recount = IndexStats::default();
    for e in index.execution_ids() {
        let chain = index.chain(e).expect("listed executions are resident");
        recount.executions += 1;
        recount.events += chain.len();
        recount.bytes += index.resident_bytes(e).expect("resident");
        for ev in chain.iter() {
            let id = ev.id();
            let complete = (1..id).all(|k| chain.contains(k));
            match chain.walk_from(id) {
                Ok(spine) => assert!(
                    complete && spine.ids() == expected(id),
                    "{} {e}@{id}",
                    I::NAME
                ),
                Err(Incomplete::MissingHop(missing)) => {
                    assert!(!complete && !chain.contains(missing))
                }
                Err(other) => panic!("{} {e}@{id}: {other}", I::NAME),
            }
        }
    }
    assert_eq!(index.stats(), recount, "{}: stats equal a recount", I::NAME);
    let acknowledged = ledger.acknowledged();
    let lost = ledger.lost(&*index, ttl);
    assert!(
        lost.is_empty(),
        "{}: {} of {acknowledged} acknowledged events lost without a justified eviction \
         (first: {:?})",
        I::NAME,
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "soak {}: {secs}s, {} spines served and checked, {} events acknowledged and \
         accounted for, {} evictions, {} executions resident at the end",
        I::NAME,
        served.load(Ordering::Relaxed),
        acknowledged,
        ledger.evictions.lock().unwrap().len(),
        recount.executions
    );
    assert!(served.load(Ordering::Relaxed) > 0);
}

#[test]
#[ignore = "runs for SOAK_SECS per index; scripts/soak.sh"]
fn soak_lockfree() {
    soak::<WalIndex>();
}

#[test]
#[ignore = "runs for SOAK_SECS per index; scripts/soak.sh"]
fn soak_sharded() {
    soak::<ShardedMutexIndex>();
}

#[test]
#[ignore = "runs for SOAK_SECS per index; scripts/soak.sh"]
fn soak_papaya() {
    soak::<PapayaIndex>();
}

#[test]
#[ignore = "runs for SOAK_SECS per index; scripts/soak.sh"]
fn soak_mutex() {
    soak::<MutexIndex>();
}

/// The acknowledged-events check on a workload where a lost event stays lost: each of many
/// executions receives its chain one event per round, so between rounds it idles past the
/// TTL and sweeps plan to evict it exactly while the next round's events arrive. The drain
/// applies each event once, a tail applier re-applies some shortly after, and a replayer
/// re-applies short prefixes; two sweepers and an explicit evictor run throughout. Runs for
/// `LEDGER_SECS` per index (default 2; `scripts/soak.sh` sets it longer).
fn nothing_acknowledged_is_lost<I: StateIndex>() {
    const EXECUTIONS: i64 = 4_000;
    const ROUNDS: i64 = 1_000;
    let secs: u64 = std::env::var("LEDGER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let ttl = Duration::from_millis(2);
    let config = IndexConfig {
        eviction: EvictionPolicy {
            ttl: Some(ttl),
            max_executions: Some(EXECUTIONS as usize * 3 / 4),
            max_bytes: None,
        },
        ..IndexConfig::default()
    };
    let index = Arc::new(I::with_config(config));
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let round = Arc::new(AtomicU64::new(1));
    let spawn = |seed: u64, role: u8| {
        let (index, ledger, stop, round) = (
            Arc::clone(&index),
            Arc::clone(&ledger),
            Arc::clone(&stop),
            Arc::clone(&round),
        );
        std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let r = round.load(Ordering::Relaxed) as i64;
                match role {
                    // The drain: round r's event of every execution, in batches of 200.
                    0 => {
                        if r > ROUNDS {
                            break;
                        }
                        for chunk in (0..EXECUTIONS).collect::<Vec<_>>().chunks(200) {
                            let ids: Vec<_> = chunk.iter().map(|&e| (e, r)).collect();
                            let batch = ids.iter().map(|&(e, id)| step(e, id)).collect();
                            let report = ledger.apply(&ids, || index.apply_batch(batch));
                            for e in report.terminal_evicted {
                                ledger.evicted(e, None);
                            }
                        }
                        round.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(ttl * 2);
                    }
                    // Drive tails: the current round's event again, for a random execution.
                    1 => {
                        let e = rng.random_range(0..EXECUTIONS);
                        ledger.apply(&[(e, r)], || index.apply(step(e, r)));
                    }
                    // Rehydrate: a short prefix ending at the current round.
                    2 => {
                        let e = rng.random_range(0..EXECUTIONS);
                        let from = (r - 2).max(1);
                        let ids: Vec<_> = (from..=r).map(|id| (e, id)).collect();
                        ledger.apply(&ids, || {
                            index.rehydrate(e, (from..=r).map(|id| step(e, id)))
                        });
                    }
                    // Sweeps.
                    3 | 4 => {
                        let now = Instant::now();
                        for victim in index.enforce_limits_at(now).evicted {
                            let verdict = (victim.reason, now, victim.last_used);
                            ledger.evicted(victim.execution_id, Some(verdict));
                        }
                    }
                    // Explicit evictions, now and then.
                    _ => {
                        let e = rng.random_range(0..EXECUTIONS);
                        if index.evict(e) {
                            ledger.evicted(e, None);
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        })
    };
    let threads: Vec<_> = (0..6u8)
        .map(|role| spawn(0x1ed9e7 + u64::from(role), role))
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a ledger thread panicked");
    }
    assert_eq!(
        index.stats(),
        recount(&*index),
        "{}: stats equal a recount",
        I::NAME
    );
    let lost = ledger.lost(&*index, ttl);
    let evictions = ledger.evictions.lock().unwrap().len();
    eprintln!(
        "ledger {}: {secs}s, {} rounds, {} events acknowledged, {evictions} evictions, {} lost",
        I::NAME,
        round.load(Ordering::Relaxed) - 1,
        ledger.acknowledged(),
        lost.len()
    );
    assert!(
        evictions > 0,
        "{}: the sweeps must have raced the drain",
        I::NAME
    );
    assert!(
        lost.is_empty(),
        "{}: {} acknowledged events lost without a justified eviction (first: {:?})",
        I::NAME,
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

#[test]
fn nothing_acknowledged_is_lost_lockfree() {
    nothing_acknowledged_is_lost::<WalIndex>();
}

#[test]
fn nothing_acknowledged_is_lost_sharded() {
    nothing_acknowledged_is_lost::<ShardedMutexIndex>();
}

#[test]
fn nothing_acknowledged_is_lost_papaya() {
    nothing_acknowledged_is_lost::<PapayaIndex>();
}

#[test]
fn nothing_acknowledged_is_lost_mutex() {
    nothing_acknowledged_is_lost::<MutexIndex>();
}
