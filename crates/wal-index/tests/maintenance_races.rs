//! The maintenance paths under concurrency, each against the public API on every engine:
//! a sweep racing appliers and evictors, drives and marks for executions the index does not
//! hold, and recency kept by drives that keep missing. Each test reproduces a defect found
//! in use; the loom models beside the engine's code (`src/engine/loom_models.rs`) check the same protocols exhaustively
//! at small sizes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::ev;
use wal_index::config::EvictionPolicy;
use wal_index::labels::EvictReason;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, IndexObserver, StateIndex};

fn with_policy(eviction: EvictionPolicy) -> IndexConfig {
    IndexConfig {
        eviction,
        ..IndexConfig::default()
    }
}

/// Defect 1: a sweep plans from a snapshot, then evicts. An event applied after the plan
/// (by any applier but the sweeping thread) must never be evicted on that plan's word: after
/// the apply the execution is not idle, so no rule justifies removing it.
fn a_sweep_never_evicts_an_event_applied_after_its_plan<I: StateIndex>() {
    const EXECUTIONS: i64 = 20_000;
    let ttl = Duration::from_millis(100);
    let index = Arc::new(I::with_config(with_policy(EvictionPolicy {
        ttl: Some(ttl),
        ..EvictionPolicy::default()
    })));
    index.apply_batch((0..EXECUTIONS).map(|e| ev(e, 1, None)).collect());
    std::thread::sleep(ttl + Duration::from_millis(50));
    let sweeper = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.enforce_limits_at(Instant::now()))
    };
    for e in 0..EXECUTIONS {
        index.apply(ev(e, 2, Some(1)));
    }
    sweeper.join().unwrap();
    let lost: Vec<i64> = (0..EXECUTIONS)
        .filter(|&e| !index.chain(e).is_some_and(|chain| chain.contains(2)))
        .collect();
    assert!(
        lost.is_empty(),
        "{}: {} acknowledged events evicted by a stale plan (first: execution {:?})",
        I::NAME,
        lost.len(),
        lost.first()
    );
}

/// Counts evictions as the observer hears them.
#[derive(Default)]
struct EvictionCounter {
    evicted: AtomicUsize,
}

impl IndexObserver for EvictionCounter {
    fn evicted(&self, _reason: EvictReason, count: usize) {
        self.evicted.fetch_add(count, Ordering::Relaxed);
    }
}

/// Defects 2 and 5: a sweep racing an explicit evictor must not panic, must not evict young
/// executions under a ceiling they do not reach, and must report only the victims it
/// actually removed (each execution leaves exactly once).
fn a_sweep_racing_an_evictor_counts_each_eviction_once<I: StateIndex>() {
    const EXECUTIONS: i64 = 4_000;
    let counter = Arc::new(EvictionCounter::default());
    let index = Arc::new(I::with_observer(
        with_policy(EvictionPolicy {
            // Everything is idle past a zero TTL; the ceiling is far above what is held.
            ttl: Some(Duration::ZERO),
            max_bytes: Some(1 << 30),
            ..EvictionPolicy::default()
        }),
        counter.clone(),
    ));
    index.apply_batch((0..EXECUTIONS).map(|e| ev(e, 1, None)).collect());
    let evictor = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || (0..EXECUTIONS).filter(|&e| index.evict(e)).count())
    };
    let mut swept = 0;
    let mut byte_ceiling = 0;
    loop {
        let sweep = index.enforce_limits_at(Instant::now());
        assert_eq!(
            sweep.ttl + sweep.max_executions + sweep.byte_ceiling,
            sweep.evicted.len(),
            "{}: the per-reason counts must be the victims actually evicted",
            I::NAME
        );
        swept += sweep.evicted.len();
        byte_ceiling += sweep.byte_ceiling;
        if evictor.is_finished() && index.stats() == IndexStats::default() {
            break;
        }
    }
    let explicit = evictor.join().unwrap();
    assert_eq!(byte_ceiling, 0, "{}: nothing is over the ceiling", I::NAME);
    assert_eq!(explicit + swept, EXECUTIONS as usize, "{}", I::NAME);
    assert_eq!(
        counter.evicted.load(Ordering::Relaxed),
        EXECUTIONS as usize,
        "{}: the observer must hear each eviction exactly once",
        I::NAME
    );
}

/// Defect 3: a drive for an execution the index does not hold leaves nothing behind, and is
/// still woken by that execution's first event.
fn drives_for_unknown_executions_leave_no_state<I: StateIndex>() {
    const DRIVES: i64 = 20_000;
    let index = I::with_config(IndexConfig::default());
    let no_wait = DriveBudget {
        attempts: 0,
        ..DriveBudget::default()
    };
    for e in 0..DRIVES {
        assert!(
            index
                .drive(e, Some(1), &DriveFlow::new(no_wait))
                .outcome
                .spine()
                .is_none()
        );
    }
    let left: Vec<i64> = (0..DRIVES).filter(|&e| index.chain(e).is_some()).collect();
    assert!(
        left.is_empty(),
        "{}: {} drives left a trace (first: {:?})",
        I::NAME,
        left.len(),
        left.first()
    );
    assert_eq!(index.stats(), IndexStats::default());

    // A waiting drive is still served by the execution's first events.
    let index = Arc::new(index);
    let waiter = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || {
            index.drive(
                DRIVES,
                Some(2),
                &DriveFlow::new(DriveBudget {
                    attempts: 3,
                    retry: Duration::from_secs(10),
                }),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    index.apply_batch(vec![ev(DRIVES, 1, None), ev(DRIVES, 2, Some(1))]);
    let drive = waiter.join().unwrap();
    assert_eq!(drive.outcome.spine().map(|s| s.ids()), Some(vec![1, 2]));
    assert_eq!(drive.timeouts, 0, "{}: woken, not timed out", I::NAME);
}

/// Defect 3, the sink gate: with the gate off (the default) marking is a no-op, as today:
/// it creates nothing, and confirm/release report "was not pending".
fn marks_with_the_gate_off_are_no_ops<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    for e in 0..1_000 {
        index.mark_pending_sink(e);
    }
    assert!((0..1_000).all(|e| index.chain(e).is_none()), "{}", I::NAME);
    assert!(!index.confirm_sunk(1) && !index.release_pending_sink(2, "test"));
    index.apply(ev(7, 1, None));
    index.mark_pending_sink(7);
    assert!(!index.confirm_sunk(7), "{}", I::NAME);
    assert!(
        index.evict(7),
        "{}: an unmarked execution is evictable",
        I::NAME
    );
}

/// Defect 5: every build of a resident execution refreshes its recency, served or not, so a
/// drive that keeps missing does not age its execution into a TTL eviction.
fn unserved_builds_keep_an_execution_recent<I: StateIndex>() {
    let ttl = Duration::from_millis(150);
    let index = I::with_config(with_policy(EvictionPolicy {
        ttl: Some(ttl),
        ..EvictionPolicy::default()
    }));
    index.apply(ev(1, 1, None));
    let started = Instant::now();
    while started.elapsed() < ttl * 2 {
        assert!(index.build(1, Some(2)).spine.is_none());
        std::thread::sleep(Duration::from_millis(10));
    }
    let sweep = index.enforce_limits_at(Instant::now());
    assert!(
        sweep.evicted.is_empty(),
        "{}: evicted while builds kept asking for it",
        I::NAME
    );
}

/// A terminal eviction removes the execution its terminal event landed in, not whatever
/// holds the execution's id by the time the batch ends: if another evictor removed it and
/// another applier re-created it meanwhile (a rehydrate, a drive's tail), the new state
/// holds no terminal event and an acknowledged event in it must survive.
fn a_terminal_eviction_spares_an_execution_recreated_meanwhile<I: StateIndex>() {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    index.apply(ev(1, 1, None));
    // Execution 1's terminal event, then a long tail of execution 2 in the same batch: the
    // batch evicts its terminal executions only after applying all of it.
    let mut batch = vec![wal_index::Event::minimal(
        2,
        1,
        Some(1),
        "playbook_completed",
    )];
    batch.extend(common::linear(2, 1, 200_000));
    let drain = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.apply_batch(batch))
    };
    while !index.chain(1).is_some_and(|chain| chain.contains(2)) {
        std::thread::yield_now();
    }
    let raced = index.evict(1);
    index.apply(ev(1, 7, None));
    let report = drain.join().unwrap();
    assert!(
        raced,
        "{}: the eviction ran before the batch ended",
        I::NAME
    );
    assert!(
        index.chain(1).is_some_and(|chain| chain.contains(7)),
        "{}: the batch's terminal eviction removed the re-created execution ({report:?})",
        I::NAME
    );
}

for_each_engine!(
    a_terminal_eviction_spares_an_execution_recreated_meanwhile,
    a_sweep_never_evicts_an_event_applied_after_its_plan,
    a_sweep_racing_an_evictor_counts_each_eviction_once,
    drives_for_unknown_executions_leave_no_state,
    marks_with_the_gate_off_are_no_ops,
    unserved_builds_keep_an_execution_recent,
);

/// The engine's own gauges of the same: no slot and no waiting room outlives the drives for
/// executions it does not hold.
#[test]
fn lockfree_drives_for_unknown_executions_leave_no_slot_and_no_room() {
    let index = Arc::new(wal_index::WalIndex::default());
    let no_wait = DriveBudget {
        attempts: 1,
        retry: Duration::from_millis(1),
    };
    let drivers: Vec<_> = (0..4)
        .map(|t| {
            let index = Arc::clone(&index);
            std::thread::spawn(move || {
                for e in (0..2_000).map(|k| k * 4 + t) {
                    index.drive(e, Some(1), &DriveFlow::new(no_wait));
                }
            })
        })
        .collect();
    drivers.into_iter().for_each(|d| d.join().unwrap());
    assert_eq!(index.slots(), 0);
    assert_eq!(index.awaited_unknown_executions(), 0);
}
