//! Concurrency: readers against a backfilling drain, targeted wake-ups, async and blocking
//! waits, concurrent builders, and exact accounting once threads quiesce.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chain_fold::AdvanceOutcome;
use common::{ev, linear};
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};

/// A build of an already-indexed execution keeps being served while another thread
/// backfills 200,000 events of other executions (the benches' read-while-backfilling
/// group runs the million).
fn reader_serves_during_a_long_backfill<I: StateIndex>() {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    index.apply_batch(linear(0, 1, 27));
    let done = Arc::new(AtomicBool::new(false));
    let backfill = {
        let (index, done) = (Arc::clone(&index), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut id = 1_000_000i64;
            for batch in 0..1_000i64 {
                // 200-event batches over 25 executions of 8 events each.
                let mut events = Vec::with_capacity(200);
                for e in 0..25 {
                    let exec = 1 + batch * 25 + e;
                    events.extend((0..8).map(|k| ev(exec, id + k, (k > 0).then(|| id + k - 1))));
                    id += 8;
                }
                index.apply_batch(events);
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut builds = 0u64;
    while !done.load(Ordering::Acquire) {
        let build = index.build(0, Some(27));
        assert!(build.spine.is_some(), "{:?}", build.outcome);
        builds += 1;
    }
    backfill.join().unwrap();
    assert!(builds > 0);
    assert_eq!(index.stats().events, 27 + 200_000);
}

#[test]
fn lockfree_reader_serves_during_a_long_backfill() {
    reader_serves_during_a_long_backfill::<WalIndex>();
}

#[test]
fn mutex_reader_serves_during_a_long_backfill() {
    reader_serves_during_a_long_backfill::<MutexIndex>();
}

/// Parks a drive on execution 1's missing tip, applies 10,000 events of execution 2, then
/// the tip. Returns the drive.
fn drive_across_noise<I: StateIndex>(budget: DriveBudget) -> wal_index::Drive {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    index.apply_batch(linear(1, 1, 3));
    index.apply(ev(2, 100, None));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(1, Some(4), &DriveFlow::new(budget)));
        std::thread::sleep(Duration::from_millis(50));
        for id in 101..10_101 {
            index.apply(ev(2, id, Some(id - 1)));
        }
        index.apply(ev(1, 4, Some(3)));
        waiter.join().unwrap()
    })
}

#[test]
fn lockfree_drive_on_a_is_not_woken_by_10k_events_of_b() {
    let budget = DriveBudget {
        attempts: 1,
        retry: Duration::from_secs(30),
    };
    let drive = drive_across_noise::<WalIndex>(budget);
    assert_eq!(drive.outcome.spine().map(|s| s.len()), Some(4));
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (2, 1, 0));
}

/// Today's design (`MutexIndex`) reproduces today's global notification and today's deadline loop: the same
/// drive is woken by the other execution's events, rebuilds after every wake (a wake-up
/// costs nothing against a deadline), and is served when the tip lands.
#[test]
fn mutex_drive_on_a_is_woken_by_events_of_b_and_rebuilds_until_served_as_today() {
    let budget = DriveBudget {
        attempts: 1,
        retry: Duration::from_secs(30),
    };
    let drive = drive_across_noise::<MutexIndex>(budget);
    assert_eq!(drive.outcome.spine().map(|s| s.len()), Some(4));
    assert!(drive.wakes > 1, "woken by the other execution: {drive:?}");
    assert_eq!(drive.builds, drive.wakes + 1, "one build after every wake");
    assert_eq!(drive.timeouts, 0);
}

fn drive_is_served_when_the_tip_lands<I: StateIndex>() {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    index.apply_batch(linear(1, 1, 2));
    let budget = DriveBudget {
        attempts: 5,
        retry: Duration::from_secs(10),
    };
    // Blocking.
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(1, Some(3), &DriveFlow::new(budget)));
        std::thread::sleep(Duration::from_millis(20));
        index.apply(ev(1, 3, Some(2)));
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
    assert_eq!(drive.timeouts, 0);
    // Async under tokio.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let drive = rt.block_on(async {
        let waiting = {
            let index = Arc::clone(&index);
            tokio::spawn(
                async move { index.drive_async(1, Some(4), &DriveFlow::new(budget)).await },
            )
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        index.apply(ev(1, 4, Some(3)));
        waiting.await.unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().len(), 4);
    assert_eq!(drive.timeouts, 0);
    // Async under a plain executor (no runtime at all).
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            futures_lite::future::block_on(index.drive_async(1, Some(5), &DriveFlow::new(budget)))
        });
        std::thread::sleep(Duration::from_millis(20));
        index.apply(ev(1, 5, Some(4)));
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().len(), 5);
    assert_eq!(drive.timeouts, 0);
}

#[test]
fn lockfree_drive_is_served_when_the_tip_lands() {
    drive_is_served_when_the_tip_lands::<WalIndex>();
}

#[test]
fn mutex_drive_is_served_when_the_tip_lands() {
    drive_is_served_when_the_tip_lands::<MutexIndex>();
}

#[test]
fn sharded_drive_is_served_when_the_tip_lands() {
    drive_is_served_when_the_tip_lands::<ShardedMutexIndex>();
}

#[test]
fn papaya_drive_is_served_when_the_tip_lands() {
    drive_is_served_when_the_tip_lands::<PapayaIndex>();
}

#[test]
fn drive_for_an_execution_never_seen_is_woken_by_its_first_events() {
    let index = WalIndex::default();
    let budget = DriveBudget {
        attempts: 3,
        retry: Duration::from_secs(10),
    };
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(77, Some(2), &DriveFlow::new(budget)));
        std::thread::sleep(Duration::from_millis(20));
        index.apply_batch(linear(77, 1, 2));
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().len(), 2);
    assert_eq!(drive.timeouts, 0);
    assert_eq!(
        index.stats().executions,
        1,
        "the waiting slot is not an extra execution"
    );
}

#[test]
fn a_waiter_on_an_evicted_execution_is_woken_and_served_by_its_successor() {
    let index = WalIndex::default();
    index.apply_batch(linear(5, 1, 2));
    let budget = DriveBudget {
        attempts: 3,
        retry: Duration::from_secs(10),
    };
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(5, Some(3), &DriveFlow::new(budget)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(index.evict(5));
        std::thread::sleep(Duration::from_millis(20));
        index.rehydrate(5, linear(5, 1, 3));
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().len(), 3);
    assert_eq!(drive.timeouts, 0);
}

fn many_threads_building_one_execution_agree<I: StateIndex>() {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    index.apply_batch(linear(1, 1, 50));
    let expected = index.chain(1).unwrap().walk_from(200).ok();
    assert!(expected.is_none());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let builders: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut served = Vec::new();
                    while !stop.load(Ordering::Acquire) {
                        for head in [10, 25, 50] {
                            let build = index.build(1, Some(head));
                            served.push((head, build.spine.expect("indexed head").ids()));
                        }
                    }
                    served
                })
            })
            .collect();
        for id in 51..=200 {
            index.apply(ev(1, id, Some(id - 1)));
        }
        stop.store(true, Ordering::Release);
        for builder in builders {
            for (head, ids) in builder.join().unwrap() {
                assert_eq!(ids, (1..=head).collect::<Vec<_>>());
            }
        }
    });
    let final_build = index.build(1, Some(200));
    assert!(matches!(
        final_build.outcome,
        AdvanceOutcome::Incremental(_) | AdvanceOutcome::ColdRebuild(200)
    ));
    assert_eq!(
        final_build.spine.unwrap().ids(),
        (1..=200).collect::<Vec<_>>()
    );
}

#[test]
fn lockfree_many_threads_building_one_execution_agree() {
    many_threads_building_one_execution_agree::<WalIndex>();
}

#[test]
fn mutex_many_threads_building_one_execution_agree() {
    many_threads_building_one_execution_agree::<MutexIndex>();
}

#[test]
fn sharded_many_threads_building_one_execution_agree() {
    many_threads_building_one_execution_agree::<ShardedMutexIndex>();
}

#[test]
fn papaya_many_threads_building_one_execution_agree() {
    many_threads_building_one_execution_agree::<PapayaIndex>();
}

fn recount<I: StateIndex>(index: &I) -> IndexStats {
    let mut stats = IndexStats::default();
    for exec in index.execution_ids() {
        let chain = index.chain(exec).unwrap();
        stats.executions += 1;
        stats.events += chain.len();
        stats.bytes += index.resident_bytes(exec).expect("resident");
    }
    stats
}

fn stats_are_exact_when_threads_quiesce<I: StateIndex>() {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    std::thread::scope(|s| {
        for t in 0..4i64 {
            let index = &index;
            s.spawn(move || {
                for round in 0..200i64 {
                    let exec = (t * 7 + round) % 23;
                    let base = round * 10;
                    index.apply_batch(linear(exec, base, 5));
                    index.apply(ev(exec, base, None)); // redelivery
                    if round % 5 == 0 {
                        index.evict((exec + 3) % 23);
                    }
                    if round % 9 == 0 {
                        index.rehydrate(exec, linear(exec, base + 5, 3));
                    }
                    let _ = index.build(exec, Some(base + 4));
                }
            });
        }
    });
    assert_eq!(index.stats(), recount(&*index));
    assert!(index.stats().events > 0);
}

#[test]
fn lockfree_stats_are_exact_when_threads_quiesce() {
    stats_are_exact_when_threads_quiesce::<WalIndex>();
}

#[test]
fn mutex_stats_are_exact_when_threads_quiesce() {
    stats_are_exact_when_threads_quiesce::<MutexIndex>();
}

#[test]
fn sharded_stats_are_exact_when_threads_quiesce() {
    stats_are_exact_when_threads_quiesce::<ShardedMutexIndex>();
}

#[test]
fn papaya_stats_are_exact_when_threads_quiesce() {
    stats_are_exact_when_threads_quiesce::<PapayaIndex>();
}

#[test]
fn a_reader_holding_a_snapshot_of_an_evicted_execution_keeps_it() {
    let index = WalIndex::default();
    index.apply_batch(linear(3, 1, 10));
    let snapshot = index.chain(3).unwrap();
    let spine = index.build(3, Some(10)).spine.unwrap();
    assert!(index.evict(3));
    assert_eq!(index.stats(), IndexStats::default());
    assert_eq!(snapshot.walk_from(10).unwrap(), spine);
    assert_eq!(
        spine.json_array().to_bytes().len(),
        spine.json_array().len()
    );
}

#[test]
fn sharded_drive_on_a_is_not_woken_by_10k_events_of_b() {
    let budget = DriveBudget {
        attempts: 1,
        retry: Duration::from_secs(30),
    };
    let drive = drive_across_noise::<ShardedMutexIndex>(budget);
    assert_eq!(drive.outcome.spine().map(|s| s.len()), Some(4));
    assert_eq!((drive.wakes, drive.timeouts), (1, 0));
}
