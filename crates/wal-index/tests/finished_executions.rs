//! A drive for an execution that already finished (terminal event applied, execution
//! evicted) ends at once on the engine instead of waiting out its budget for a tip that came
//! and went; today's design waits (or is woken by unrelated events) as before.

use std::time::Duration;

use chain_fold::Event;
use wal_index::baseline::MutexIndex;
use wal_index::{DriveBudget, DriveFlow, StateIndex, WalIndex};

fn finished_execution<I: StateIndex>() -> I {
    let index = I::with_config(Default::default());
    let report = index.apply_batch(vec![
        Event::minimal(1, 7, None, "playbook_started"),
        Event::minimal(2, 7, Some(1), "step"),
        Event::minimal(3, 7, Some(2), "playbook_completed"),
    ]);
    assert_eq!(report.terminal_evicted, vec![7]);
    index
}

fn budget() -> DriveBudget {
    DriveBudget {
        attempts: 3,
        retry: Duration::from_millis(100),
    }
}

#[test]
fn the_engine_ends_a_drive_for_a_finished_execution_at_once() {
    let index = finished_execution::<WalIndex>();
    let drive = index.drive(7, Some(2), &DriveFlow::new(budget()));
    assert!(drive.outcome.spine().is_none());
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (1, 0, 0));

    // A late redelivery re-creates the execution: its drives wait and are served again.
    index.apply(Event::minimal(1, 7, None, "playbook_started"));
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(7, Some(2), &DriveFlow::new(budget())));
        std::thread::sleep(Duration::from_millis(20));
        index.apply(Event::minimal(2, 7, Some(1), "step"));
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
}

/// Re-created after its terminal eviction, then evicted explicitly: nothing says it finished
/// again (only a terminal eviction does), so its drives wait as for any execution.
#[test]
fn a_re_created_execution_evicted_explicitly_is_not_finished() {
    let index = finished_execution::<WalIndex>();
    index.apply(Event::minimal(1, 7, None, "playbook_started"));
    assert!(index.evict(7));
    let drive = index.drive(7, Some(2), &DriveFlow::new(budget()));
    assert!(drive.outcome.spine().is_none());
    assert_waited_out_its_deadline(&drive);
    // The same execution finishing again is remembered again.
    let report = index.apply_batch(vec![
        Event::minimal(1, 7, None, "playbook_started"),
        Event::minimal(3, 7, Some(1), "playbook_completed"),
    ]);
    assert_eq!(report.terminal_evicted, vec![7]);
    let drive = index.drive(7, Some(2), &DriveFlow::new(budget()));
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (1, 0, 0));
}

#[test]
fn an_execution_never_seen_still_waits_its_budget() {
    let index = finished_execution::<WalIndex>();
    let drive = index.drive(8, Some(2), &DriveFlow::new(budget()));
    assert!(drive.outcome.spine().is_none());
    assert_waited_out_its_deadline(&drive);
}

#[test]
fn the_baseline_waits_out_its_budget_as_today() {
    let index = finished_execution::<MutexIndex>();
    let drive = index.drive(7, Some(2), &DriveFlow::new(budget()));
    assert!(drive.outcome.spine().is_none());
    assert_waited_out_its_deadline(&drive);
}

/// The drive ran until its deadline: every wait timed out and it built after each (at most
/// one build per `retry`; fewer if this machine is slow to wake the thread).
fn assert_waited_out_its_deadline(drive: &wal_index::Drive) {
    assert_eq!(drive.builds, drive.timeouts + 1, "{drive:?}");
    assert!(
        (2..=budget().attempts + 1).contains(&drive.builds),
        "{drive:?}"
    );
    assert!(drive.elapsed >= budget().deadline(), "{drive:?}");
}
