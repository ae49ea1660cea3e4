//! Lost writes made visible: an execution whose chain waits past the bound for a hop the
//! WAL never delivered is reported (reason, execution, missing id), once, and is still
//! never served short. The rule is docs/domain.md's "Chains and spines" (a walk that misses
//! a hop is incomplete) and the `wal_index::stall` module's.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ev, linear};
use wal_index::ingest::{Backfill, channel_wal};
use wal_index::labels::{DriveLabel, StallReason};
use wal_index::stall::StalledChain;
use wal_index::{
    Drain, DrainConfig, DriveBudget, DriveFlow, Event, IndexConfig, StateIndex, WalIndex,
};

const BOUND: Duration = Duration::from_secs(30);

fn index() -> WalIndex {
    WalIndex::new(IndexConfig {
        stall_after: Some(BOUND),
        ..IndexConfig::default()
    })
}

/// `(execution, reason, missing)` of each report.
fn seen(stalled: &[StalledChain]) -> Vec<(i64, StallReason, Option<i64>)> {
    stalled
        .iter()
        .map(|s| (s.execution_id, s.reason, s.missing_event_id))
        .collect()
}

/// Execution 7: 1 ← [2 lost] ← 3 ← 4.
fn with_a_hole(index: &WalIndex) {
    for event in linear(7, 1, 4).into_iter().filter(|e| e.id() != 2) {
        index.apply(event);
    }
}

#[test]
fn a_missing_hop_is_reported_once_after_the_bound_and_never_served_short() {
    let index = index();
    with_a_hole(&index);
    let t0 = Instant::now();
    assert!(index.stalled_chains_at(t0).is_empty(), "first seen now");
    assert!(index.stalled_chains_at(t0 + BOUND / 2).is_empty());
    let stalled = index.stalled_chains_at(t0 + BOUND + Duration::from_secs(1));
    assert_eq!(seen(&stalled), vec![(7, StallReason::MissingHop, Some(2))]);
    assert_eq!(stalled[0].newest_event_id, 4);
    assert!(stalled[0].waited > BOUND);
    assert!(
        index.stalled_chains_at(t0 + 3 * BOUND).is_empty(),
        "reported once"
    );
    // Never served short: the drive for the tip falls back.
    let drive = index.drive_blocking(7, Some(4), DriveBudget::new(1, Duration::from_millis(10)));
    assert!(drive.outcome.spine().is_none(), "{:?}", drive.outcome);
    // The hole filled: served whole, and nothing more is reported.
    index.apply(ev(7, 2, Some(1)));
    assert_eq!(
        index.build(7, Some(4)).spine.unwrap().ids(),
        vec![1, 2, 3, 4]
    );
    assert!(index.stalled_chains_at(t0 + 5 * BOUND).is_empty());
}

#[test]
fn events_behind_the_same_hole_do_not_restart_its_clock() {
    let index = index();
    with_a_hole(&index);
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    // The execution keeps running past the hole: a new event every tenth of the bound.
    for k in 1..=10u32 {
        index.apply(ev(7, 4 + i64::from(k), Some(3 + i64::from(k))));
        let found = index.stalled_chains_at(t0 + BOUND / 10 * k + Duration::from_millis(1));
        if k < 10 {
            assert!(found.is_empty(), "reported at {k}/10 of the bound");
        } else {
            assert_eq!(seen(&found), vec![(7, StallReason::MissingHop, Some(2))]);
            assert_eq!(found[0].newest_event_id, 14);
        }
    }
}

#[test]
fn a_hole_filled_within_the_bound_is_not_reported() {
    let index = index();
    with_a_hole(&index);
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    index.apply(ev(7, 2, Some(1))); // a reordering, not a loss
    assert!(index.stalled_chains_at(t0 + BOUND / 4).is_empty());
    assert!(index.stalled_chains_at(t0 + 2 * BOUND).is_empty());
}

#[test]
fn another_hole_is_a_new_case_with_its_own_clock() {
    let index = index();
    with_a_hole(&index);
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    // 2 arrives, but 5 is lost and 6 links to it: a different missing hop.
    index.apply(ev(7, 2, Some(1)));
    index.apply(ev(7, 6, Some(5)));
    assert!(index.stalled_chains_at(t0 + BOUND / 2).is_empty());
    assert!(
        index
            .stalled_chains_at(t0 + BOUND + Duration::from_secs(1))
            .is_empty(),
        "the clock of hole 5 started at its first sighting, half a bound in"
    );
    let found = index.stalled_chains_at(t0 + 2 * BOUND);
    assert_eq!(seen(&found), vec![(7, StallReason::MissingHop, Some(5))]);
}

#[test]
fn an_execution_evicted_and_recreated_starts_afresh() {
    let index = index();
    with_a_hole(&index);
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    assert!(index.evict(7));
    // Re-created with the same hole: a new slot, a new clock.
    with_a_hole(&index);
    assert!(index.stalled_chains_at(t0 + BOUND / 2).is_empty());
    assert!(
        index
            .stalled_chains_at(t0 + BOUND + Duration::from_secs(1))
            .is_empty()
    );
    let found = index.stalled_chains_at(t0 + 2 * BOUND);
    assert_eq!(seen(&found), vec![(7, StallReason::MissingHop, Some(2))]);
}

#[test]
fn an_execution_that_finishes_with_a_hole_is_reported_as_it_is_evicted() {
    let index = index();
    let mut events = linear(7, 1, 4);
    events.retain(|e| e.id() != 2);
    events.push(common::end(7, 5, 4));
    let batch = index.apply_batch(events);
    assert_eq!(batch.terminal_evicted, vec![7]);
    assert_eq!(
        seen(&batch.finished_stalled),
        vec![(7, StallReason::MissingHop, Some(2))]
    );
    assert_eq!(batch.finished_stalled[0].newest_event_id, 5);
    // A whole execution that finishes is not reported.
    let mut whole = linear(8, 1, 4);
    whole.push(common::end(8, 5, 4));
    assert!(index.apply_batch(whole).finished_stalled.is_empty());
    // One a check already reported is not reported again as it finishes.
    with_a_hole(&index);
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    assert_eq!(index.stalled_chains_at(t0 + 2 * BOUND).len(), 1);
    let batch = index.apply_batch(vec![common::end(7, 5, 4)]);
    assert_eq!(batch.terminal_evicted, vec![7]);
    assert!(
        batch.finished_stalled.is_empty(),
        "{:?}",
        batch.finished_stalled
    );
}

#[test]
fn other_reasons_a_chain_never_connects() {
    let index = index();
    // A root that is not genesis.
    index.apply(Event::minimal(1, 8, None, "step"));
    index.apply(Event::minimal(2, 8, Some(1), "step"));
    // A loop: 3 → 4 → 3, entered from 5.
    index.apply(Event::minimal(3, 9, Some(4), "step"));
    index.apply(Event::minimal(4, 9, Some(3), "step"));
    index.apply(Event::minimal(5, 9, Some(4), "step"));
    // Connected: never reported.
    for event in linear(10, 1, 3) {
        index.apply(event);
    }
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    let found = index.stalled_chains_at(t0 + 2 * BOUND);
    assert_eq!(
        seen(&found),
        vec![
            (8, StallReason::NoGenesis, None),
            (9, StallReason::Cycle, Some(4)),
        ]
    );
}

#[test]
fn nothing_is_judged_while_the_drain_backfills_and_off_means_off() {
    let index = index();
    with_a_hole(&index);
    index.note_backfill(Backfill::Behind {
        remaining: Some(100),
    });
    let t0 = Instant::now();
    index.stalled_chains_at(t0);
    assert!(index.stalled_chains_at(t0 + 2 * BOUND).is_empty(), "behind");
    index.note_backfill(Backfill::CaughtUp);
    assert!(
        index.stalled_chains_at(t0 + 2 * BOUND).is_empty(),
        "the clock starts once caught up"
    );
    let found = index.stalled_chains_at(t0 + 3 * BOUND + Duration::from_secs(1));
    assert_eq!(seen(&found), vec![(7, StallReason::MissingHop, Some(2))]);

    let off = WalIndex::new(IndexConfig {
        stall_after: None,
        ..IndexConfig::default()
    });
    with_a_hole(&off);
    off.stalled_chains_at(t0);
    assert!(off.stalled_chains_at(t0 + 10 * BOUND).is_empty());
}

/// Records what the index reports.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<StalledChain>>);

impl wal_index::IndexObserver for Reports {
    fn stalled_chain(&self, stalled: &StalledChain) {
        self.0.lock().unwrap().push(stalled.clone());
    }
}

/// Through a drain, in real time: the WAL withholds one event mid-chain; the drain's own
/// checks report it, and a drive dispatched at the tip falls back instead of being served
/// a spine that skips the hole.
#[test]
fn the_drain_reports_a_withheld_event_and_drives_fall_back() {
    let bound = Duration::from_millis(200);
    let reports = Arc::new(Reports::default());
    let config = IndexConfig {
        stall_after: Some(bound),
        ..IndexConfig::default()
    };
    let index = Arc::new(WalIndex::with_observer(config, reports.clone()));
    let (wal, source) = channel_wal();
    let config = DrainConfig {
        idle_wait: Duration::from_millis(5),
        ..DrainConfig::default()
    };
    let drain = Drain::new(Arc::clone(&index), source, config).spawn();
    for event in linear(7, 1, 6).into_iter().filter(|e| e.id() != 3) {
        wal.append(event.payload_bytes());
    }
    for event in linear(8, 100, 3) {
        wal.append(event.payload_bytes());
    }
    let flow = DriveFlow::new(DriveBudget::new(2, Duration::from_millis(50)));
    let drive = index.drive_flow_blocking(7, Some(6), &flow);
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert!(drive.outcome.spine().is_none());
    // Reported within a bound and a half of the drain applying 4; the limit leaves room
    // for a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(20);
    while reports.0.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no stall reported");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(wal);
    let report = drain.join().unwrap();
    assert_eq!(report.stalled, 1, "{:?}", report.stalled_samples);
    assert_eq!(report.stalled_samples, *reports.0.lock().unwrap());
    assert_eq!(
        seen(&report.stalled_samples),
        vec![(7, StallReason::MissingHop, Some(3))]
    );
    assert_eq!(report.stalled_samples[0].newest_event_id, 6);
}
