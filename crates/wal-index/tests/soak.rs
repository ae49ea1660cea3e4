//! Soak: threads applying, building, driving, evicting, sweeping and rehydrating at random
//! for a set time (`SOAK_SECS` per index, default 60; `scripts/soak.sh`), then invariants:
//! stats equal a recount, every resident execution walks exactly as the model says, and no
//! drive or build was ever served a spine that misses its tip.
//! Ignored by default: `cargo test --release -p wal-index --test soak -- --ignored`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chain_fold::{Event, Incomplete};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::config::EvictionPolicy;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, IndexConfig, StateIndex, WalIndex};

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

/// What a served spine for `tip` must be.
fn expected(tip: i64) -> Vec<i64> {
    (1..=tip).collect()
}

fn soak<I: StateIndex>() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let config = IndexConfig {
        sink_gate: true,
        eviction: EvictionPolicy {
            ttl: Some(Duration::from_millis(40)),
            max_executions: Some(32),
            max_bytes: Some(400_000),
        },
        ..IndexConfig::default()
    };
    let index = Arc::new(I::with_config(config));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let worker = |seed: u64, role: u8| {
        let (index, stop, served) = (Arc::clone(&index), Arc::clone(&stop), Arc::clone(&served));
        std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let e = rng.random_range(0..EXECUTIONS);
                let tip = rng.random_range(1..=LEN);
                match role {
                    0 => {
                        let n = rng.random_range(1..=8);
                        let batch = (tip..=(tip + n).min(LEN)).map(|id| event(e, id)).collect();
                        if rng.random_bool(0.7) {
                            index.apply_batch(batch);
                        } else {
                            batch.into_iter().for_each(|ev| {
                                index.apply(ev);
                            });
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
                            waits: 2,
                            wait: Duration::from_millis(3),
                        };
                        let drive = index.drive_blocking(e, Some(tip), budget);
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
                            index.evict(e);
                        }
                        1 => {
                            index.enforce_limits_at(Instant::now());
                        }
                        2 => {
                            index.rehydrate(e, (1..=tip).map(|id| event(e, id)));
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
    let threads: Vec<_> = (0..4u8)
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
        recount.bytes += chain.bytes();
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
    eprintln!(
        "soak {}: {secs}s, {} spines served and checked, {} executions resident at the end",
        I::NAME,
        served.load(Ordering::Relaxed),
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
fn soak_mutex() {
    soak::<MutexIndex>();
}
