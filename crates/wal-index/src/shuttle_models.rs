//! Every engine under shuttle's randomized and PCT schedulers, with more threads and more
//! executions than loom can explore: a drain, a rehydrating replayer and a drive tail apply
//! concurrently, while a sweeper, an explicit evictor and drives run. Shuttle switches
//! threads at every lock, atomic and wait of the index (its sync shim is shuttle's in this
//! build), and reports a deadlock if a drive is left waiting for a wake-up nobody sends.
//!
//! What must hold after each schedule:
//!
//! - every acknowledged event of an execution that no rule may evict is resident (the
//!   sweep's TTL passes only while an execution is idle, and every apply makes it recent on
//!   the model clock, which stands still while the threads run);
//! - every drive for such an execution is served;
//! - the totals equal a recount, and no drive left a waiting room behind.
use std::time::{Duration, Instant};

use shuttle::sync::Arc;
use shuttle::thread;

use crate::config::{DriveBudget, EvictionPolicy, IndexConfig};
use crate::index::StateIndex;
use crate::index::flow::DriveFlow;
use crate::report::IndexStats;
use crate::test_events::ev;
use chain_fold::Event;

/// Moves `index`'s model clock forward by `by` (model time stands still otherwise).
fn advance_clock<I: StateIndex>(index: &I, by: Duration) {
    index.clock().advance(by);
}

const EXECUTIONS: i64 = 24;
/// Executions the index has never seen when the threads start: their drives wait in rooms.
const UNSEEN: std::ops::Range<i64> = 100..103;
/// Executions that finish: one batch holds their tip and their terminal event.
const FINISHING: std::ops::Range<i64> = 200..203;

/// Only these executions are evicted explicitly; the others may lose nothing acknowledged.
fn evictable(e: i64) -> bool {
    e % 6 == 0
}

fn workload<I: StateIndex>() {
    let index = Arc::new(I::with_config(IndexConfig {
        eviction: EvictionPolicy {
            ttl: Some(Duration::from_millis(5)),
            ..EvictionPolicy::default()
        },
        ..IndexConfig::default()
    }));
    for e in (0..EXECUTIONS).chain(FINISHING) {
        index.apply(ev(e, 1, None));
    }
    // Every execution is idle past the TTL when the threads start: a sweep may evict any
    // of them until an apply makes it recent again.
    advance_clock(&*index, Duration::from_millis(10));
    let spawn = |work: Box<dyn FnOnce(&I) + Send>| {
        let index = Arc::clone(&index);
        thread::spawn(move || work(&index))
    };
    let mut threads = vec![
        // The drain: event 2 of every execution, in batches of 8.
        spawn(Box::new(|index: &I| {
            for chunk in (0..EXECUTIONS).collect::<Vec<_>>().chunks(8) {
                index.apply_batch(chunk.iter().map(|&e| ev(e, 2, Some(1))).collect());
            }
        })),
        // The drain again: the finishing executions' tips with their terminal events.
        spawn(Box::new(|index: &I| {
            for e in FINISHING {
                let end = Event::minimal(3, e, Some(2), "playbook_completed");
                index.apply_batch(vec![ev(e, 2, Some(1)), end]);
            }
        })),
        // A rehydrating replayer: the whole chain of every execution, last first, and of
        // the unseen ones.
        spawn(Box::new(|index: &I| {
            for e in (0..EXECUTIONS).chain(UNSEEN).rev() {
                index.rehydrate(e, vec![ev(e, 1, None), ev(e, 2, Some(1))]);
            }
        })),
        // Drive tails: event 2 again, in another order.
        spawn(Box::new(|index: &I| {
            for k in 0..EXECUTIONS {
                let e = (k * 7) % EXECUTIONS;
                index.apply(ev(e, 2, Some(1)));
            }
        })),
        spawn(Box::new(|index: &I| {
            for _ in 0..3 {
                index.enforce_limits_at(Instant::now());
            }
        })),
        spawn(Box::new(|index: &I| {
            for e in (0..EXECUTIONS).filter(|&e| evictable(e)) {
                index.evict(e);
            }
        })),
        // Drives for tip 2 of executions nothing may evict: each must be served. Under the
        // model a wait ends only by a wake-up and the model clock stands still, so the
        // deadline never passes and a lost wake-up is a deadlock shuttle reports.
        spawn(Box::new(|index: &I| {
            let budget = DriveBudget {
                attempts: 10_000,
                retry: Duration::from_secs(1),
            };
            let served = (0..EXECUTIONS).filter(|&e| e % 4 == 1 && !evictable(e));
            for e in UNSEEN.chain(served) {
                let drive = index.drive(e, Some(2), &DriveFlow::new(budget));
                assert_eq!(
                    drive.outcome.spine().map(|s| s.ids()),
                    Some(vec![1, 2]),
                    "{}: drive for {e}",
                    I::NAME
                );
            }
        })),
    ];
    // Drives for the finishing executions' tips end, served or not: shuttle reports a
    // deadlock if one waits for a wake-up that the terminal eviction never sends. Only the
    // engine knows that an execution finished; the comparators' drives, like today's, wait
    // out their budget (which has no clock under the model), so they are not run there.
    if I::NAME == crate::engine::WalIndex::NAME {
        threads.push(spawn(Box::new(|index: &I| {
            let budget = DriveBudget {
                attempts: 10_000,
                retry: Duration::from_secs(1),
            };
            for e in FINISHING {
                let drive = index.drive(e, Some(3), &DriveFlow::new(budget));
                if let Some(spine) = drive.outcome.spine() {
                    assert_eq!(spine.ids(), vec![1, 2, 3], "{}: drive for {e}", I::NAME);
                }
            }
        })));
    }
    for t in threads {
        t.join().expect("a workload thread panicked");
    }
    let mut recount = IndexStats::default();
    for e in index.execution_ids() {
        let chain = index.chain(e).expect("listed");
        recount.executions += 1;
        recount.events += chain.len();
        recount.bytes += index.resident_bytes(e).expect("listed");
    }
    assert_eq!(
        index.stats(),
        recount,
        "{}: totals equal a recount",
        I::NAME
    );
    for e in (0..EXECUTIONS).filter(|&e| !evictable(e)).chain(UNSEEN) {
        let chain = index.chain(e);
        assert!(
            chain
                .as_ref()
                .is_some_and(|c| c.contains(1) && c.contains(2)),
            "{}: execution {e} lost an acknowledged event: {:?}",
            I::NAME,
            chain.map(|c| c.iter().map(|ev| ev.id()).collect::<Vec<_>>())
        );
    }
}

/// The retained WAL of the backfill models: a fixed answer after `yields` trips through
/// the scheduler (none for a blocking drive; for an async one the read is pending while
/// the drain applies and the drive's wait races it), counting its reads.
struct Retained(Vec<Event>, usize, std::sync::atomic::AtomicU32);

impl crate::index::flow::DriveFallbacks for Retained {
    fn retained(
        &self,
        _: chain_fold::ExecutionId,
        _: crate::ingest::DecodeMode,
    ) -> crate::index::flow::FallbackRead<'_> {
        self.2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (events, yields) = (self.0.clone(), self.1);
        Box::pin(async move {
            for _ in 0..yields {
                shuttle::future::yield_now().await;
            }
            Some(events)
        })
    }
}

/// A restart: the engine's drain backfills one execution's history event by event, saying
/// it caught up before it applies the last one (as the drain does: it notes after the pull,
/// before the apply), while three drives for its tip run, each of which the engine sends
/// to its per-execution read at once, under one replay cap of 1. One reads the whole
/// history, racing the drain's apply of the same events; one reads nothing (the retained
/// WAL lost it); one reads the history without its tip. Throttled or not, each must be
/// served, with the whole spine and the bytes the drain applies (never a short chain, never
/// a byte the drain's replay changes), and none may read its execution early twice. (The
/// model clock stands still, so no deadline passes and the read after it is not reached:
/// `tests/backfill.rs` covers that step.)
fn backfill_workload() {
    restart_behind_the_drain(false);
}

/// The restart of [`backfill_workload`] with *async* drives: each drive's early read races
/// its own wait for the drain (the race `early_read` runs on an executor), and the read
/// takes one or three trips through the scheduler to answer, so schedules where the drain
/// serves the drive first, where the read answers first, and where both land together are
/// all explored.
fn async_backfill_workload() {
    restart_behind_the_drain(true);
}

/// The body of both restart models: the drain applies one execution's history while three
/// drives (blocking, or `asynchronous`) read it whole, read nothing, or read it without its
/// tip, under one replay cap of 1. Each drive must be served with the whole spine and the
/// drain's bytes, none may read early twice, and every replay permit is given back.
fn restart_behind_the_drain(asynchronous: bool) {
    use crate::ingest::Backfill;
    let index = Arc::new(crate::engine::WalIndex::default());
    index.note_backfill(Backfill::Behind { remaining: None });
    let history: Vec<Event> = (1..=3)
        .map(|id| ev(7, id, (id > 1).then(|| id - 1)))
        .collect();
    let expected = whole_spine(&history, 3);
    let drain = {
        let (index, history) = (Arc::clone(&index), history.clone());
        thread::spawn(move || {
            let last = history.len() - 1;
            for (k, event) in history.into_iter().enumerate() {
                if k == last {
                    index.note_backfill(Backfill::CaughtUp);
                }
                index.apply_batch(vec![event]);
            }
        })
    };
    let gate = Arc::new(crate::rehydrate::RehydrateGate::new(1));
    let reads = [
        (history.clone(), 1),
        (Vec::new(), 3),
        (history[..2].to_vec(), 1),
    ];
    let drives: Vec<_> = reads
        .into_iter()
        .map(|(read, yields)| {
            let (index, expected, gate) = (Arc::clone(&index), expected.clone(), Arc::clone(&gate));
            thread::spawn(move || {
                let yields = if asynchronous { yields } else { 0 };
                let retained = Retained(read, yields, Default::default());
                let flow = crate::index::flow::DriveFlow::new(DriveBudget {
                    attempts: 10_000,
                    retry: Duration::from_secs(1),
                })
                .fallbacks(&retained)
                .rehydrate_gate(&*gate);
                let drive = if asynchronous {
                    shuttle::future::block_on(index.drive_async(7, Some(3), &flow))
                } else {
                    index.drive(7, Some(3), &flow)
                };
                let served = drive.outcome.spine().map(|s| s.json_array().to_bytes());
                assert_eq!(
                    served.as_deref(),
                    Some(&expected[..]),
                    "drive for 7 behind the backfill (async: {asynchronous}): {:?}",
                    drive.label
                );
                let reads = retained.2.load(std::sync::atomic::Ordering::Relaxed);
                assert!(reads <= 1, "drive for 7 read its execution {reads} times");
            })
        })
        .collect();
    drain.join().expect("the drain panicked");
    for drive in drives {
        drive.join().expect("a drive was not served");
    }
    assert!(
        gate.try_enter().is_some(),
        "a replay permit was kept after its drive ended"
    );
}

/// The bytes of `history`'s whole spine at `tip`.
fn whole_spine(history: &[Event], tip: i64) -> Vec<u8> {
    let mut chain = chain_fold::Chain::new(chain_fold::SpineOrder::Causal);
    history.iter().cloned().for_each(|e| {
        chain.apply(e);
    });
    chain
        .walk_from(tip)
        .expect("whole")
        .json_array()
        .to_bytes()
        .to_vec()
}

/// Iterations per scheduler; `SHUTTLE_ITERATIONS` raises it for long runs.
fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

macro_rules! engines {
    ($($name:ident: $engine:ty),* $(,)?) => {
        mod random {
            $( #[test] fn $name() { shuttle::check_random(super::workload::<$engine>, super::iterations()) } )*
        }
        mod pct {
            $( #[test] fn $name() { shuttle::check_pct(super::workload::<$engine>, super::iterations(), 3) } )*
        }
    };
}

#[test]
fn backfill_random() {
    shuttle::check_random(backfill_workload, iterations());
}

#[test]
fn backfill_pct() {
    shuttle::check_pct(backfill_workload, iterations(), 3);
}

#[test]
fn async_backfill_random() {
    shuttle::check_random(async_backfill_workload, iterations());
}

#[test]
fn async_backfill_pct() {
    shuttle::check_pct(async_backfill_workload, iterations(), 3);
}

engines!(
    lockfree: crate::engine::WalIndex,
    papaya: crate::baseline::PapayaIndex,
    sharded: crate::baseline::ShardedMutexIndex,
    mutex: crate::baseline::MutexIndex,
);
