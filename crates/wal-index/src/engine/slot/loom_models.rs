//! Loom models of one slot and the ledger: each runs the real slot and accounting code over
//! loom's primitives and explores every interleaving up to the preemption bound
//! (`LOOM_MAX_PREEMPTIONS`). mutation `relaxed-publish` weakens the model of a snapshot's
//! publication to Relaxed, and the torn-snapshot model must then fail.

use std::sync::Arc as StdArc;

use super::{Empties, Slot, SlotEviction};
use crate::engine::accounting::Accounting;
use crate::observe::NoopObserver;
use crate::report::IndexStats;
use chain_fold::{Event, SpineOrder, advance};
use loom::sync::Arc;
use loom::thread;

fn ev(id: i64, prev: Option<i64>) -> Event {
    let ty = if prev.is_none() {
        "playbook_started"
    } else {
        "step"
    };
    Event::minimal(id, 1, prev, ty)
}

fn accounting() -> Accounting {
    Accounting::new(StdArc::new(NoopObserver))
}

fn slot_with_genesis(accounting: &Accounting) -> Slot {
    let slot = Slot::new(1, 1, &Empties::new(SpineOrder::Causal), 0);
    slot.apply(&mut std::iter::once(ev(1, None)), accounting, 0)
        .expect("fresh slot");
    slot
}

/// Publish vs read: a reader sees the old snapshot or the new one, whole, never a mix.
#[test]
fn a_reader_sees_the_old_or_the_new_snapshot_never_a_torn_one() {
    loom::model(|| {
        let accounting = Arc::new(accounting());
        let slot = Arc::new(slot_with_genesis(&accounting));
        let writer = {
            let (slot, accounting) = (Arc::clone(&slot), Arc::clone(&accounting));
            thread::spawn(move || {
                let batch = vec![ev(2, Some(1)), ev(3, Some(2))];
                slot.apply(&mut batch.into_iter(), &accounting, 1)
                    .expect("live");
            })
        };
        // Read until the new snapshot shows up (yielding lets loom schedule the writer
        // without spending a preemption), checking every snapshot seen on the way.
        loop {
            let seen = slot.chain();
            match seen.len() {
                1 => {
                    assert!(!seen.contains(2) && !seen.contains(3));
                    thread::yield_now();
                }
                3 => {
                    assert_eq!(seen.walk_from(3).map(|s| s.ids()), Ok(vec![1, 2, 3]));
                    break;
                }
                n => panic!("torn snapshot of {n} events"),
            }
        }
        writer.join().expect("writer");
    });
}

/// Register-then-check vs publish-then-notify: a waiter that registers before it checks is
/// never left waiting for a publish that already happened. Loom reports a deadlock if a
/// wake-up can be lost: it does with mutation `notify-unfenced` (the wait list's flag
/// without its two fences, `sync::Notify`).
#[test]
fn no_lost_wake_up_for_a_blocking_waiter() {
    loom::model(|| {
        let accounting = Arc::new(accounting());
        let slot = Arc::new(slot_with_genesis(&accounting));
        let waiter = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || {
                loop {
                    let listener = slot.listen().expect("a live slot");
                    if slot.with_chain(|chain| chain.contains(2)) {
                        return;
                    }
                    listener.wait();
                }
            })
        };
        slot.apply(&mut std::iter::once(ev(2, Some(1))), &accounting, 1)
            .expect("live");
        waiter.join().expect("waiter");
    });
}

/// Concurrent builds publishing the spine cache: every build returns the correct spine,
/// and the cache ends holding one of them, never a stale or torn value.
#[test]
fn concurrent_builds_share_the_spine_cache_by_compare_and_swap() {
    loom::model(|| {
        let accounting = Arc::new(accounting());
        let slot = Arc::new(slot_with_genesis(&accounting));
        slot.apply(&mut std::iter::once(ev(2, Some(1))), &accounting, 1)
            .expect("live");
        let build = |slot: Arc<Slot>, accounting: Arc<Accounting>| {
            // As a build does (`engine::read::build`): the cache lent, then the chain,
            // then the compare-and-swap against what was lent.
            move || {
                slot.with_cached_spine(|seen| {
                    let result = slot.with_chain(|chain| advance(chain, Option::as_ref(seen), 2));
                    let spine = result.spine.expect("indexed");
                    slot.publish_spine(seen, spine.clone(), &accounting);
                    spine.ids()
                })
            }
        };
        let a = thread::spawn(build(Arc::clone(&slot), Arc::clone(&accounting)));
        let b = thread::spawn(build(Arc::clone(&slot), Arc::clone(&accounting)));
        assert_eq!(a.join().expect("a"), vec![1, 2]);
        assert_eq!(b.join().expect("b"), vec![1, 2]);
        let cached = slot.cached_spine();
        assert_eq!(Option::as_ref(&cached).map(|s| s.ids()), Some(vec![1, 2]));
    });
}

/// Eviction vs a reader holding a snapshot, and vs a late applier: the reader's snapshot
/// stays valid (a reader that reads after the eviction finds the slot emptied), the totals drop to zero, and an apply after the eviction is refused (so the
/// caller retries on a fresh slot) rather than landing in the orphan.
#[test]
fn eviction_leaves_readers_valid_and_refuses_late_appliers() {
    loom::model(|| {
        let accounting = Arc::new(accounting());
        let slot = Arc::new(slot_with_genesis(&accounting));
        let reader = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || {
                let chain = slot.chain();
                chain.walk_from(1).map(|s| s.len())
            })
        };
        let applier = {
            let (slot, accounting) = (Arc::clone(&slot), Arc::clone(&accounting));
            thread::spawn(move || {
                slot.apply(&mut std::iter::once(ev(2, Some(1))), &accounting, 1)
                    .is_ok()
            })
        };
        let evicted = slot.evict(&accounting, false);
        assert!(matches!(evicted, SlotEviction::Evicted { .. }));
        // A reader that loaded the chain before the eviction walks it whole; one that loads
        // it after finds it emptied (the evicted slot keeps no events), as a lookup would.
        let read = reader.join().expect("reader");
        assert!(
            read == Ok(1) || read == Err(chain_fold::Incomplete::TipMissing(1)),
            "{read:?}"
        );
        let _applied_before_eviction = applier.join().expect("applier");
        assert_eq!(
            accounting.get(),
            IndexStats::default(),
            "eviction subtracts exactly"
        );
        assert!(
            slot.apply(&mut std::iter::once(ev(3, Some(2))), &accounting, 2)
                .is_err()
        );
    });
}

/// Accounting vs a concurrent `stats()`: two appliers on two executions, each adding one
/// execution of two events; a reader always sees the three totals of one state.
#[test]
fn stats_never_mix_two_states() {
    loom::model(|| {
        let accounting = Arc::new(accounting());
        let batch = |k: i64| {
            vec![
                Event::minimal(1, k, None, "playbook_started"),
                Event::minimal(2, k, Some(1), "step"),
            ]
        };
        // Executions 0 and 1 encode to payloads of the same length, so each costs the
        // ledger what one of them costs alone.
        let per_execution = {
            let alone = Accounting::new(StdArc::new(NoopObserver));
            Slot::new(0, 1, &Empties::new(SpineOrder::Causal), 0)
                .apply(&mut batch(0).into_iter(), &alone, 0)
                .expect("live");
            alone.get().bytes
        };
        assert_eq!(
            batch(0).iter().map(Event::resident_bytes).sum::<usize>(),
            batch(1).iter().map(Event::resident_bytes).sum::<usize>()
        );
        // The two slots start from one index's shared empties, as the engine's do: their
        // first appends race for the shared empty chain's line.
        let empties = Arc::new(Empties::new(SpineOrder::Causal));
        let appliers: Vec<_> = (0..2)
            .map(|k| {
                let (accounting, empties) = (Arc::clone(&accounting), Arc::clone(&empties));
                thread::spawn(move || {
                    let slot = Slot::new(k, 1, &empties, 0);
                    slot.apply(&mut batch(k).into_iter(), &accounting, 0)
                        .expect("live");
                })
            })
            .collect();
        // Read until both appliers are visible, checking every state seen on the way.
        loop {
            let seen = accounting.get();
            assert_eq!(seen.events, 2 * seen.executions, "{seen:?}");
            assert_eq!(seen.bytes, seen.executions * per_execution, "{seen:?}");
            if seen.executions == 2 {
                break;
            }
            thread::yield_now();
        }
        for a in appliers {
            a.join().expect("applier");
        }
        assert_eq!(accounting.get().executions, 2);
    });
}
