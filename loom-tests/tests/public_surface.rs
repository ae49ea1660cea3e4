//! Loom models of the surface a worker pool relies on, through `wal-index`'s public API
//! only. Under loom a wait never times out and the index's model clock stands still, so a
//! drive ends only when it is served or when the index knows its execution finished: a lost
//! wake-up is a deadlock loom reports. Each model names the mutation (a feature of this
//! crate, passed on to `wal-index`) that re-introduces the bug it guards against.
#![cfg(wal_index_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, DriveFlow, Event, IndexConfig, StateIndex, WalIndex};

fn ev(execution: i64, id: i64, prev: Option<i64>) -> Event {
    let ty = if prev.is_none() {
        "playbook_started"
    } else {
        "step"
    };
    Event::minimal(id, execution, prev, ty)
}

fn index() -> WalIndex {
    WalIndex::new(IndexConfig::default())
}

/// Bounds nothing under loom (see the module documentation).
fn patient() -> DriveBudget {
    DriveBudget {
        attempts: 10,
        retry: Duration::from_secs(1),
    }
}

/// Terminal eviction vs a drive. The tip arrives with the terminal event in one batch, so the
/// execution is evicted right after. The drive ends either served (it built in between) or
/// at once as finished; it never waits for a wake-up nobody will send.
///
/// Mutation: `finished-after-wake` (the drive, woken before the execution is
/// recorded as finished, parks in a waiting room forever).
#[test]
fn terminal_eviction_vs_a_drive_ends_the_drive() {
    loom::model(|| {
        let index = Arc::new(index());
        index.apply(ev(1, 1, None));
        let drive = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.drive(1, Some(3), &DriveFlow::new(patient())))
        };
        let batch = index.apply_batch(vec![
            ev(1, 2, Some(1)),
            Event::minimal(3, 1, Some(2), "playbook_completed"),
        ]);
        assert_eq!(batch.terminal_evicted, vec![1]);
        let drive = drive.join().unwrap();
        if let Some(spine) = drive.outcome.spine() {
            assert_eq!(spine.ids(), vec![1, 2, 3]);
        }
        assert_eq!(index.stats(), IndexStats::default());
    });
}

/// The real drive loop vs a publish: the loop registers before it builds, so the publish of
/// the tip is seen by the build or wakes the wait.
///
/// Mutations: mutation `listen-after-build` (a publish between the build and the
/// registration is lost; loom finds the drive parked forever), mutation `max-id-after-notify`
/// (a woken drive still reads the old largest id and waits again) and
/// mutation `notify-unfenced` (the wait list's flag without its fences: the publish reads
/// "nobody listened" while the drive reads the old chain).
#[test]
fn drive_loop_vs_publish_never_misses_the_tip() {
    loom::model(|| {
        let index = Arc::new(index());
        index.apply(ev(1, 1, None));
        let drive = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.drive(1, Some(2), &DriveFlow::new(patient())))
        };
        index.apply(ev(1, 2, Some(1)));
        let drive = drive.join().unwrap();
        assert_eq!(drive.outcome.spine().map(|s| s.ids()), Some(vec![1, 2]));
    });
}

/// A drive for an execution the index has never seen vs that execution's first event: the
/// drive waits in a room (creating no slot) and is woken by the slot's creation or finds it.
/// Afterwards no room is left.
///
/// Mutation: `room-ignores-residency` (the drive enters a room after the slot was
/// created, builds before the event lands, and waits in a room nobody will wake).
#[test]
fn drive_for_an_unseen_execution_vs_its_first_event() {
    loom::model(|| {
        let index = Arc::new(index());
        let drive = {
            let index = Arc::clone(&index);
            thread::spawn(move || index.drive(5, Some(1), &DriveFlow::new(patient())))
        };
        index.apply(ev(5, 1, None));
        let drive = drive.join().unwrap();
        assert_eq!(drive.outcome.spine().map(|s| s.ids()), Some(vec![1]));
        assert_eq!(index.awaited_unknown_executions(), 0);
    });
}
