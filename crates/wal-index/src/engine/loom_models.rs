//! Loom models of `WalIndex` itself: the directory, the sweep, drive registration and its
//! waiting rooms, rehydrate, the finished set and the real drive loop all run over the
//! crate's loom shim here, not a copy of them. Time is the index's model clock, which moves
//! only when a model says so.
//!
//! Each model names the mutation (a feature of this crate) that re-introduces the bug it
//! guards against; `scripts/mutations.table` pairs them, and `scripts/loom.sh` runs every
//! model plain, then each mutation, and requires loom to fail on it.
use std::time::{Duration, Instant};

use loom::sync::Arc;
use loom::thread;

use crate::config::{DriveBudget, EvictionPolicy, IndexConfig};
use crate::engine::WalIndex;
use crate::index::flow::DriveFlow;
use crate::index::{IndexHooks, StateIndex};
use crate::report::IndexStats;
use crate::test_events::ev;

/// Moves `index`'s model clock forward by `by` (model time stands still otherwise).
fn advance_clock(index: &WalIndex, by: Duration) {
    index.clock().advance(by);
}

fn index(eviction: EvictionPolicy) -> WalIndex {
    WalIndex::new(IndexConfig {
        eviction,
        ..IndexConfig::default()
    })
}

/// Under loom a wait never times out and the model clock stands still, so a drive ends only
/// when served or when the engine knows its execution finished: a lost wake-up is a
/// deadlock loom reports. The budget itself bounds nothing here.
fn patient() -> DriveBudget {
    DriveBudget {
        attempts: 10,
        retry: Duration::from_secs(1),
    }
}

/// The resident totals must describe exactly what is resident.
fn assert_accounting_exact(index: &WalIndex) {
    let mut recount = IndexStats::default();
    for id in index.execution_ids() {
        let chain = index.chain(id).expect("listed");
        recount.executions += 1;
        recount.events += chain.len();
        recount.bytes += index.resident_bytes(id).expect("resident");
    }
    assert_eq!(index.stats(), recount);
}

/// Sweep vs apply. The execution is idle past its TTL when the sweep plans; an apply then
/// makes it recent. Whatever the interleaving, the acknowledged event stays resident: the
/// sweep either evicted the old chain before the apply (which then starts a fresh one) or
/// finds, under the slot's lock, that what it planned on changed.
///
/// Mutation: `sweep-trusts-plan` (evict the planned id without re-checking).
#[test]
fn sweep_vs_apply_keeps_every_acknowledged_event() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy {
            ttl: Some(Duration::from_millis(5)),
            ..EvictionPolicy::default()
        }));
        index.apply(ev(1, 1, None));
        advance_clock(&index, Duration::from_millis(10));
        let sweeper = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.enforce_limits_at(Instant::now()))
        };
        index.apply(ev(1, 2, Some(1)));
        let sweep = sweeper.join().unwrap();
        assert!(
            index.chain(1).is_some_and(|chain| chain.contains(2)),
            "an acknowledged event was evicted by a stale plan ({sweep:?})"
        );
        assert_eq!(sweep.ttl, sweep.evicted.len());
        assert_accounting_exact(&index);
    });
}

/// Sweep vs re-creation. The sweep walks the directory while another thread evicts an idle
/// execution and a new event re-creates it. A walk that raced the two could yield the
/// evicted slot (idle past its TTL) and its fresh successor; a plan made from both would
/// judge the successor by its predecessor and evict it. The walk holds the writers' lock, so
/// it sees one of the two: the re-applied event stays resident.
///
/// Mutation: `walk-without-writers-lock` (loom finds the successor evicted).
#[test]
fn sweep_vs_recreation_never_evicts_the_successor() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy {
            ttl: Some(Duration::from_millis(5)),
            ..EvictionPolicy::default()
        }));
        index.apply_batch(vec![ev(1, 1, None), ev(2, 1, None)]);
        advance_clock(&index, Duration::from_millis(10));
        index.touch(2);
        let sweeper = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.enforce_limits_at(Instant::now()))
        };
        index.evict(1);
        index.apply(ev(1, 2, None));
        sweeper.join().unwrap();
        assert!(
            index.chain(1).is_some_and(|chain| chain.contains(2)),
            "the successor was evicted on its predecessor's plan"
        );
    });
}

/// Sweep vs evict. An explicit eviction between the sweep's candidate scan and its plan
/// must neither make the plan's arithmetic wrap nor be counted twice.
///
/// Mutation: `sweep-totals-from-stats` (plan against totals read after the scan:
/// the subtraction underflows).
#[test]
fn sweep_vs_evict_counts_each_execution_once() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy {
            ttl: Some(Duration::ZERO),
            ..EvictionPolicy::default()
        }));
        index.apply_batch(vec![ev(1, 1, None), ev(2, 1, None)]);
        let evictor = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.evict(2))
        };
        let sweep = index.enforce_limits_at(Instant::now());
        let explicit = evictor.join().unwrap();
        assert_eq!(sweep.ttl, sweep.evicted.len());
        let swept_2 = sweep.evicted.iter().any(|v| v.execution_id == 2);
        assert!(explicit != swept_2, "execution 2 left exactly once");
        assert!(sweep.evicted.iter().any(|v| v.execution_id == 1));
        assert_eq!(index.stats(), IndexStats::default());
    });
}

/// Drive registration vs eviction. A drive waits for tip 2 while the execution is evicted
/// and replayed with the tip. The drive must be served: a registration that raced the
/// eviction sees the slot retired and registers again, instead of listening on a slot
/// nobody will ever notify.
///
/// Mutation: `listen-ignores-retirement` (loom finds the drive parked forever).
#[test]
fn drive_registration_vs_eviction_is_never_stranded() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy::default()));
        index.apply(ev(1, 1, None));
        let drive = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.drive(1, Some(2), &DriveFlow::new(patient())))
        };
        index.evict(1);
        index.rehydrate(1, vec![ev(1, 1, None), ev(1, 2, Some(1))]);
        let drive = drive.join().unwrap();
        assert_eq!(drive.outcome.spine().map(|s| s.ids()), Some(vec![1, 2]));
        assert_accounting_exact(&index);
    });
}

/// Slot creation vs eviction. An applier that found the slot an evictor is retiring must
/// apply to a fresh slot, never to the orphan: afterwards the totals equal a recount and
/// the event is resident unless the eviction came after it.
///
/// Mutation: `apply-to-retired-slot` (the event lands on the orphan; the totals
/// count an event no slot holds).
#[test]
fn apply_vs_eviction_never_writes_to_an_orphan() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy::default()));
        index.apply(ev(1, 1, None));
        let applier = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.apply(ev(1, 2, Some(1))))
        };
        let evicted = index.evict(1);
        applier.join().unwrap();
        assert!(evicted);
        assert_accounting_exact(&index);
    });
}

/// A build publishing its spine vs an eviction of the execution. The ledger charges cached
/// spines, so whatever the interleaving it must end at zero: the evictor takes out (and
/// subtracts) whatever spine the cache holds after it retired the slot, and a build that
/// comes after that publishes nothing into the retired slot.
///
/// Mutations: `spine-publish-ignores-retirement` (the build publishes into the
/// retired slot after the evictor emptied its cache; its bytes stay in the ledger forever)
/// and `first-cache-is-the-retired-one` (the new slot starts with the empty cache evictions
/// install: the build loads it before the eviction, and its compare-and-swap succeeds
/// after the eviction's swap).
#[test]
fn spine_publish_vs_eviction_leaves_the_ledger_exact() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy::default()));
        index.apply(ev(1, 1, None));
        index.apply(ev(1, 2, Some(1)));
        let builder = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.build(1, Some(2)).spine.map(|s| s.ids()))
        };
        assert!(index.evict(1));
        // Served from the snapshot it found, or not at all if the eviction came first.
        let served = builder.join().unwrap();
        assert!(served.is_none_or(|ids| ids == vec![1, 2]));
        assert_eq!(index.stats(), IndexStats::default());
        // `stats()` clamps a negative spine sum to zero, so a double subtraction would
        // pass the line above: the entry itself must be exactly zero.
        assert_eq!(index.accounting.cached_spines_unclamped(), 0);
    });
}

/// Rehydrate vs the drain. Two appliers of one execution (a replay and a drain batch)
/// serialize on its slot: both events are resident afterwards.
///
/// Mutation: `unserialized-apply` (each publishes a copy without the other's event).
#[test]
fn rehydrate_vs_drain_apply_keeps_both() {
    loom::model(|| {
        let index = Arc::new(index(EvictionPolicy::default()));
        index.apply(ev(1, 1, None));
        let replay = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.rehydrate(1, vec![ev(1, 2, Some(1))]))
        };
        index.apply_batch(vec![ev(1, 3, Some(2))]);
        replay.join().unwrap();
        let chain = index.chain(1).expect("resident");
        assert!(chain.contains(2) && chain.contains(3));
        assert_accounting_exact(&index);
    });
}

/// The directory alone: two creators of one execution vs a drive registering for it. Both
/// creators may miss the lock-free lookup; the check under the writers' lock keeps one slot
/// per execution (mutation `create-without-recheck` skips it: two slots). The drive either
/// finds the slot or waits in the room, which the creator wakes after it publishes the slot
/// (mutation `room-woken-before-publish` wakes it first: a drive that enters the room
/// between the wake and the publication is never woken, a loom deadlock).
#[test]
fn two_creators_of_one_execution_share_one_slot() {
    use super::directory::Directory;
    use super::slot::Slot;
    loom::model(|| {
        let directory = Arc::new(Directory::new());
        let creators: Vec<_> = (0..2)
            .map(|_| {
                let directory = Arc::clone(&directory);
                thread::spawn(move || {
                    directory.get_or_create(5, |g| {
                        Slot::new(
                            5,
                            g,
                            &super::slot::Empties::new(chain_fold::SpineOrder::default()),
                            0,
                        )
                    })
                })
            })
            .collect();
        let registered = directory.register(5);
        if registered.ticket.is_some() {
            assert!(crate::sync::wait_timeout(
                registered.listener,
                Duration::MAX
            ));
        }
        drop(registered.ticket);
        let slots: Vec<_> = creators
            .into_iter()
            .map(|c| c.join().expect("creator"))
            .collect();
        assert!(
            Arc::ptr_eq(&slots[0], &slots[1]),
            "two slots for one execution"
        );
        assert!(Arc::ptr_eq(
            &directory.lookup(5).expect("published"),
            &slots[0]
        ));
        assert_eq!(directory.awaited_unknown(), 0);
    });
}

/// A stall check vs an execution leaving. Execution 7 is `1 ← [2] ← 3`; a check runs while
/// another thread applies 2 (filling the hole, or not) and then evicts the execution.
/// Whatever the interleaving, a later check past the bound reports the hole exactly when
/// the chain left with it (docs/domain.md: an execution that leaves keeps the holes it
/// left with on record): never a filled hole, never a lost report of an open one.
///
/// Mutation: `gone-slot-departs-seen-holes` (the check hands the holes it saw of
/// a slot gone since to the departed record, whatever the chain left with).
#[test]
fn stall_check_vs_fill_and_eviction_reports_only_what_left_open() {
    const BOUND: Duration = Duration::from_secs(1);
    for fill in [true, false] {
        loom::model(move || {
            let index = Arc::new(WalIndex::new(IndexConfig {
                stall_after: Some(BOUND),
                ..IndexConfig::default()
            }));
            index.apply(ev(7, 1, None));
            index.apply(ev(7, 3, Some(2)));
            let leaver = {
                let index = Arc::clone(&index);
                thread::spawn(move || {
                    if fill {
                        index.apply(ev(7, 2, Some(1)));
                    }
                    assert!(index.evict(7));
                })
            };
            let early = index.check_stalls_at(Instant::now());
            leaver.join().unwrap();
            assert!(early.is_empty(), "nothing is due before the bound");
            // Checks every half bound (a longer gap would restart the clocks).
            let mut later = Vec::new();
            for _ in 0..3 {
                advance_clock(&index, BOUND / 2);
                later.extend(index.check_stalls_at(Instant::now()));
            }
            let reported: Vec<(i64, i64)> = later
                .iter()
                .map(|s| (s.execution_id, s.missing_event_id))
                .collect();
            let expected = if fill { vec![] } else { vec![(7, 2)] };
            assert_eq!(reported, expected, "filled before leaving: {fill}");
        });
    }
}

/// A stall check vs an eviction of a chain with a hole, the check landing between the
/// eviction's removal from the directory and its record of what the chain left with: the
/// hole keeps the clock an earlier check started (reported one bound after it was first
/// seen, not one bound after the eviction).
///
/// Mutation: `gone-slot-forgets-clocks` (a check drops what it saw of a slot that
/// has left, so the eviction's record starts the clock again).
#[test]
fn stall_check_vs_eviction_keeps_the_hole_clock() {
    const BOUND: Duration = Duration::from_secs(1);
    loom::model(|| {
        let index = Arc::new(WalIndex::new(IndexConfig {
            stall_after: Some(BOUND),
            ..IndexConfig::default()
        }));
        index.apply(ev(7, 1, None));
        index.apply(ev(7, 3, Some(2)));
        assert!(index.check_stalls_at(Instant::now()).is_empty()); // hole 2 seen at 0
        advance_clock(&index, BOUND * 3 / 4);
        let leaver = {
            let index = Arc::clone(&index);
            thread::spawn(move || assert!(index.evict(7)))
        };
        let early = index.check_stalls_at(Instant::now());
        leaver.join().unwrap();
        assert!(early.is_empty(), "not due at three quarters of the bound");
        advance_clock(&index, BOUND / 2);
        let due: Vec<(i64, i64)> = index
            .check_stalls_at(Instant::now())
            .iter()
            .map(|s| (s.execution_id, s.missing_event_id))
            .collect();
        assert_eq!(due, vec![(7, 2)], "due one bound after it was first seen");
    });
}
