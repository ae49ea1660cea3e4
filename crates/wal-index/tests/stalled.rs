//! Lost writes made visible: a hole in an execution's chain (an id its events link to that
//! the WAL never delivered) still open past the bound is reported (reason, execution,
//! missing id), once, and the execution is still never served short. The rules are
//! docs/domain.md's ("Chains and spines": a walk that misses a hop is incomplete; "The
//! index": stalled chains) and the `wal_index::stall` module's.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{end, ev, linear};
use wal_index::ingest::{Backfill, channel_wal};
use wal_index::labels::DriveLabel;
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

/// `(execution, missing)` of each report.
fn seen(stalled: &[StalledChain]) -> Vec<(i64, i64)> {
    stalled
        .iter()
        .map(|s| (s.execution_id, s.missing_event_id))
        .collect()
}

/// Execution 7: 1 ← [2 lost] ← 3 ← 4.
fn with_a_hole(index: &WalIndex) {
    for event in linear(7, 1, 4).into_iter().filter(|e| e.id() != 2) {
        index.apply(event);
    }
}

/// The drain's checks, one every quarter bound, on a clock the test moves.
struct Checks<'a> {
    index: &'a WalIndex,
    at: Instant,
}

impl<'a> Checks<'a> {
    /// Starts the clock with a first check.
    fn start(index: &'a WalIndex) -> Checks<'a> {
        let at = Instant::now();
        assert!(index.check_stalls_at(at).is_empty());
        Checks { index, at }
    }

    /// Moves the clock on by `by`, checking every quarter bound; what the checks reported.
    fn advance(&mut self, by: Duration) -> Vec<StalledChain> {
        let end = self.at + by;
        let mut found = Vec::new();
        while self.at < end {
            self.at = (self.at + BOUND / 4).min(end);
            found.extend(self.index.check_stalls_at(self.at));
        }
        found
    }

    /// [`Checks::advance`] by `n` quarter bounds.
    fn quarters(&mut self, n: u32) -> Vec<StalledChain> {
        self.advance(BOUND / 4 * n)
    }
}

/// A little over a bound.
const OVER: Duration = Duration::from_secs(31);

#[test]
fn a_missing_hop_is_reported_once_after_the_bound_and_never_served_short() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    assert!(checks.quarters(4).is_empty(), "not past the bound yet");
    let stalled = checks.quarters(1);
    assert_eq!(seen(&stalled), vec![(7, 2)]);
    assert_eq!(stalled[0].newest_event_id, 4);
    assert!(stalled[0].waited > BOUND);
    assert!(checks.quarters(12).is_empty(), "once");
    // Never served short: the drive for the tip falls back.
    let drive = index.drive(
        7,
        Some(4),
        &DriveFlow::new(DriveBudget::new(1, Duration::from_millis(10))),
    );
    assert!(drive.outcome.spine().is_none(), "{:?}", drive.outcome);
    // The hole filled: served whole, and nothing more is reported.
    index.apply(ev(7, 2, Some(1)));
    assert_eq!(
        index.build(7, Some(4)).spine.unwrap().ids(),
        vec![1, 2, 3, 4]
    );
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn events_behind_the_hole_and_other_holes_do_not_restart_its_clock() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    // The execution keeps running past the hole, and meets another, brief, hole on the
    // way (6 arrives after 7).
    let mut found = Vec::new();
    for id in 5..=14 {
        match id {
            6 => {}
            7 => {
                index.apply(ev(7, 7, Some(6)));
            }
            8 => {
                index.apply(ev(7, 6, Some(5)));
                index.apply(ev(7, 8, Some(7)));
            }
            _ => {
                index.apply(ev(7, id, Some(id - 1)));
            }
        }
        found.extend(checks.advance(BOUND / 10));
    }
    assert!(found.is_empty(), "{found:?}");
    let found = checks.advance(Duration::from_secs(2));
    assert_eq!(seen(&found), vec![(7, 2)]);
    assert_eq!(found[0].newest_event_id, 14);
    assert!(checks.quarters(12).is_empty(), "once");
}

#[test]
fn a_hole_filled_within_the_bound_is_not_reported() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    checks.quarters(1);
    index.apply(ev(7, 2, Some(1))); // a reordering, not a loss
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn each_hole_has_its_own_clock_whatever_the_arrival_order() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    // 6 (linking to 5, lost) arrives first, then 2 fills the first hole: the newest event
    // by arrival is now below the remaining hole.
    index.apply(ev(7, 6, Some(5)));
    checks.quarters(2);
    index.apply(ev(7, 2, Some(1)));
    assert!(checks.quarters(3).is_empty(), "5 seen half a bound in");
    let found = checks.quarters(3);
    assert_eq!(seen(&found), vec![(7, 5)]);
    assert_eq!(found[0].newest_event_id, 2);
}

#[test]
fn a_rewrite_that_closes_the_hole_is_seen() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    checks.quarters(1);
    // A conflicting redelivery of 3 that links it to 1: no new id, the chain connects.
    index.apply(ev(7, 3, Some(1)));
    assert_eq!(index.build(7, Some(4)).spine.unwrap().ids(), vec![1, 3, 4]);
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn an_execution_that_finishes_with_a_hole_is_reported_after_the_bound() {
    let index = index();
    let mut checks = Checks::start(&index);
    let mut events = linear(7, 1, 4);
    events.retain(|e| e.id() != 2);
    events.push(end(7, 5, 4));
    assert_eq!(index.apply_batch(events).terminal_evicted, vec![7]);
    assert!(checks.quarters(2).is_empty(), "not before the bound");
    let found = checks.advance(OVER);
    assert_eq!(seen(&found), vec![(7, 2)]);
    assert_eq!(found[0].newest_event_id, 5);
    assert!(checks.quarters(12).is_empty(), "once");
    // A whole execution that finishes is not reported.
    let mut whole = linear(8, 1, 4);
    whole.push(end(8, 5, 4));
    index.apply_batch(whole);
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn a_late_hop_after_the_execution_finished_withdraws_the_hole() {
    let index = index();
    let mut checks = Checks::start(&index);
    index.apply_batch(vec![ev(7, 1, None), ev(7, 3, Some(2)), end(7, 4, 3)]);
    // 2 arrives late: it re-creates the execution, without its genesis.
    index.apply(ev(7, 2, Some(1)));
    assert!(checks.quarters(12).is_empty());
    // The same, and the re-created execution is evicted before any check saw it.
    index.apply_batch(vec![ev(9, 1, None), ev(9, 3, Some(2)), end(9, 4, 3)]);
    index.apply(ev(9, 2, Some(1)));
    assert!(index.evict(9));
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn a_late_hop_during_the_backfill_withdraws_the_hole_too() {
    let index = index();
    index.note_backfill(Backfill::Behind { remaining: None });
    let mut checks = Checks::start(&index);
    index.apply_batch(vec![ev(7, 1, None), ev(7, 3, Some(2)), end(7, 4, 3)]);
    index.apply(ev(7, 2, Some(1)));
    checks.quarters(1);
    assert!(index.evict(7));
    index.note_backfill(Backfill::CaughtUp);
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn executions_the_index_evicted_are_not_taken_for_lost_writes() {
    let index = index();
    let mut checks = Checks::start(&index);
    // A whole execution finishes; its last events are redelivered (at least once).
    let mut whole = linear(7, 1, 4);
    whole.push(end(7, 5, 4));
    index.apply_batch(whole);
    index.apply_batch(vec![ev(7, 4, Some(3)), end(7, 5, 4)]);
    index.apply(ev(7, 4, Some(3)));
    // A whole execution evicted (as by TTL), then its next event arrives.
    for event in linear(8, 1, 4) {
        index.apply(event);
    }
    assert!(index.evict(8));
    index.apply(ev(8, 5, Some(4)));
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn a_hole_reported_is_not_reported_again_when_the_execution_comes_back() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    assert_eq!(seen(&checks.advance(OVER)), vec![(7, 2)]);
    // Evicted, then replayed whole from a retained WAL that lost the same event.
    assert!(index.evict(7));
    with_a_hole(&index);
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn a_departed_hole_and_the_same_hole_resident_again_are_one_report() {
    let index = index();
    let mut checks = Checks::start(&index);
    with_a_hole(&index);
    assert!(index.evict(7)); // before any check saw it: on record as departed
    checks.quarters(2);
    with_a_hole(&index); // back with its genesis (a rehydrate) and the same hole
    let found = checks.advance(OVER);
    assert_eq!(seen(&found), vec![(7, 2)], "one report");
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn an_execution_back_with_one_of_its_holes_keeps_the_other_on_record() {
    let index = index();
    let mut checks = Checks::start(&index);
    // Holes 2 and 5; evicted; back with its genesis and 6 only: it links past 5, not 2.
    for id in [1, 3, 4, 6] {
        index.apply(ev(9, id, (id > 1).then(|| id - 1)));
    }
    assert!(index.evict(9));
    index.apply(ev(9, 1, None));
    index.apply(ev(9, 6, Some(5)));
    let found = checks.advance(OVER + BOUND / 4);
    assert_eq!(seen(&found), vec![(9, 2), (9, 5)]);
    assert!(checks.quarters(12).is_empty(), "once each");
}

#[test]
fn a_hole_evicted_before_any_check_saw_it_is_still_reported() {
    let index = index();
    let mut checks = Checks::start(&index);
    with_a_hole(&index);
    assert!(index.evict(7));
    let found = checks.advance(OVER);
    assert_eq!(seen(&found), vec![(7, 2)]);
}

#[test]
fn a_chain_without_its_genesis_is_not_judged() {
    let index = index();
    index.apply(Event::minimal(1, 8, None, "step"));
    index.apply(Event::minimal(3, 8, Some(2), "step"));
    let mut checks = Checks::start(&index);
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn the_sink_gate_keeps_a_finished_hole_resident_and_it_is_reported_once() {
    let index = WalIndex::new(IndexConfig {
        stall_after: Some(BOUND),
        sink_gate: true,
        ..IndexConfig::default()
    });
    index.mark_pending_sink(7);
    let mut checks = Checks::start(&index);
    let batch = index.apply_batch(vec![ev(7, 1, None), ev(7, 3, Some(2)), end(7, 4, 3)]);
    assert_eq!(batch.terminal_kept_by_sink_gate, vec![7]);
    // First seen by the next check, a quarter bound on; due a bound after that.
    assert!(checks.quarters(5).is_empty());
    assert_eq!(seen(&checks.quarters(1)), vec![(7, 2)]);
    assert!(index.confirm_sunk(7));
    assert!(index.evict(7));
    assert!(checks.quarters(12).is_empty());
}

#[test]
fn nothing_is_reported_until_the_drain_has_been_caught_up_for_a_bound() {
    let index = index();
    with_a_hole(&index);
    index.note_backfill(Backfill::Behind {
        remaining: Some(100),
    });
    let mut checks = Checks::start(&index);
    // An execution that finishes with a hole during the backfill is kept on record.
    index.apply_batch(vec![ev(9, 1, None), ev(9, 3, Some(2)), end(9, 4, 3)]);
    assert!(checks.quarters(12).is_empty(), "behind");
    index.note_backfill(Backfill::CaughtUp);
    // The clocks count from the first check that finds the drain caught up.
    assert!(
        checks.quarters(5).is_empty(),
        "not a bound since the catch-up"
    );
    let found = checks.quarters(1);
    assert_eq!(seen(&found), vec![(7, 2), (9, 2)]);
}

#[test]
fn a_gap_between_checks_restarts_the_clocks() {
    let index = index();
    with_a_hole(&index);
    let mut checks = Checks::start(&index);
    checks.quarters(3);
    // The drain checked nothing for two bounds (it was failing or stuck).
    checks.at += 2 * BOUND;
    assert!(index.check_stalls_at(checks.at).is_empty());
    assert!(checks.quarters(4).is_empty());
    assert_eq!(seen(&checks.quarters(1)), vec![(7, 2)]);
}

#[test]
fn off_means_off() {
    for off in [None, Some(Duration::ZERO)] {
        let index = WalIndex::new(IndexConfig {
            stall_after: off,
            ..IndexConfig::default()
        });
        with_a_hole(&index);
        let mut checks = Checks::start(&index);
        assert!(checks.quarters(40).is_empty(), "{off:?}");
    }
}

/// Records what the index reports.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<StalledChain>>);

impl wal_index::IndexObserver for Reports {
    fn stalled_chain(&self, stalled: &StalledChain) {
        self.0.lock().unwrap().push(stalled.clone());
    }
}

/// Through a drain, in real time: the WAL withholds one event mid-chain of a running
/// execution and one of an execution that finishes; the drain's own checks report both,
/// and a drive dispatched at the running one's tip falls back instead of being served a
/// spine that skips the hole.
#[test]
fn the_drain_reports_withheld_events_and_drives_fall_back() {
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
    let mut events: Vec<Event> = linear(7, 1, 6)
        .into_iter()
        .filter(|e| e.id() != 3)
        .collect();
    events.extend(linear(8, 100, 3));
    events.extend([ev(9, 1, None), ev(9, 3, Some(2)), end(9, 4, 3)]);
    for event in events {
        wal.append(event.payload_bytes());
    }
    let flow = DriveFlow::new(DriveBudget::new(2, Duration::from_millis(50)));
    let drive = index.drive(7, Some(6), &flow);
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert!(drive.outcome.spine().is_none());
    let deadline = Instant::now() + Duration::from_secs(20);
    while reports.0.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "not reported");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(wal);
    let report = drain.join().unwrap();
    assert_eq!(report.stalled, 2, "{:?}", report.stalled_samples);
    assert_eq!(report.stalled_samples, *reports.0.lock().unwrap());
    let mut found = report.stalled_samples.clone();
    found.sort_by_key(|s| s.execution_id);
    assert_eq!(seen(&found), vec![(7, 3), (9, 2)]);
    assert_eq!((found[0].newest_event_id, found[1].newest_event_id), (6, 4));
    for stalled in &report.stalled_samples {
        assert!(stalled.waited > bound, "{stalled:?}");
    }
}

/// docs/domain.md: a hole is an id the chain links to and does not hold; an execution that
/// leaves with no hole has nothing to report. A check saw the hole, the missing event then
/// arrived (a drive's tail ahead of a slightly late drain), and the execution left before
/// the next check: by an explicit eviction, by its terminal event, or by a sweep.
#[test]
fn a_hole_filled_before_the_execution_left_is_not_reported() {
    let index = WalIndex::new(IndexConfig {
        stall_after: Some(BOUND),
        eviction: wal_index::config::EvictionPolicy {
            max_executions: Some(1),
            ..Default::default()
        },
        ..IndexConfig::default()
    });
    let mut checks = Checks::start(&index);
    // Explicit eviction.
    with_a_hole(&index);
    assert!(checks.quarters(1).is_empty(), "hole 2 seen, not yet due");
    index.apply(ev(7, 2, Some(1)));
    assert_eq!(
        index.build(7, Some(4)).spine.unwrap().ids(),
        vec![1, 2, 3, 4]
    );
    assert!(index.evict(7));
    quiet_for_two_bounds(&mut checks);
    // Its terminal event.
    for event in linear(8, 1, 4).into_iter().filter(|e| e.id() != 2) {
        index.apply(event);
    }
    assert!(checks.quarters(1).is_empty());
    index.apply(ev(8, 2, Some(1)));
    assert_eq!(
        index.apply_batch(vec![end(8, 5, 4)]).terminal_evicted,
        vec![8]
    );
    quiet_for_two_bounds(&mut checks);
    // A sweep (one execution at most: the older of two goes).
    for event in linear(9, 1, 4).into_iter().filter(|e| e.id() != 2) {
        index.apply(event);
    }
    assert!(checks.quarters(1).is_empty());
    index.apply(ev(9, 2, Some(1)));
    index.apply(ev(10, 1, None));
    let swept = index.enforce_limits_at(checks.at).evicted;
    assert_eq!(
        swept.iter().map(|v| v.execution_id).collect::<Vec<_>>(),
        vec![9]
    );
    quiet_for_two_bounds(&mut checks);
}

/// A departed hole is judged against the chain the execution comes back with: a
/// redelivery that moved the link past it (docs/domain.md: the redelivered event replaces
/// the one before) closes it, as it would have while the execution was resident.
#[test]
fn a_departed_hole_whose_link_moved_is_not_reported() {
    let index = index();
    let mut checks = Checks::start(&index);
    with_a_hole(&index);
    assert!(index.evict(7)); // hole 2 on record as departed
    checks.quarters(1);
    // Back whole, with 3 redelivered linking to 1: nothing names 2 any more.
    index.apply(ev(7, 1, None));
    index.apply(ev(7, 3, Some(1)));
    index.apply(ev(7, 4, Some(3)));
    assert_eq!(index.build(7, Some(4)).spine.unwrap().ids(), vec![1, 3, 4]);
    quiet_for_two_bounds(&mut checks);
    // The same, evicted again before any check saw it back.
    let mut checks = Checks::start(&index);
    for event in linear(11, 1, 4).into_iter().filter(|e| e.id() != 2) {
        index.apply(event);
    }
    assert!(index.evict(11));
    checks.quarters(1);
    index.apply(ev(11, 1, None));
    index.apply(ev(11, 3, Some(1)));
    assert!(index.evict(11));
    quiet_for_two_bounds(&mut checks);
}

/// Two bounds of checks that report nothing.
fn quiet_for_two_bounds(checks: &mut Checks<'_>) {
    let found = checks.advance(OVER * 2);
    assert!(found.is_empty(), "{found:?}");
}

/// A departed hole named by an event that came back linking elsewhere stays on record
/// while another event that named it did not come back: judged by every event that named
/// it when the execution last left, not by the first one ever seen.
#[test]
fn a_departed_hole_stays_while_an_event_that_named_it_is_away() {
    let index = index();
    let mut checks = Checks::start(&index);
    // Left with 1 ← [2] ← 3; came back with 3 linking to 1 and 4 naming 2; left again.
    index.apply(ev(7, 1, None));
    index.apply(ev(7, 3, Some(2)));
    assert!(index.evict(7));
    index.apply(ev(7, 1, None));
    index.apply(ev(7, 3, Some(1)));
    index.apply(ev(7, 4, Some(2)));
    assert!(index.evict(7));
    // Back without 4.
    index.apply(ev(7, 1, None));
    index.apply(ev(7, 3, Some(1)));
    // Two events named 2 (a conflicting redelivery made a fork); back with one of them
    // moved, the other away.
    index.apply(ev(8, 1, None));
    index.apply(ev(8, 3, Some(2)));
    index.apply(ev(8, 4, Some(2)));
    assert!(index.evict(8));
    index.apply(ev(8, 1, None));
    index.apply(ev(8, 3, Some(1)));
    let found = checks.advance(OVER + BOUND / 4);
    assert_eq!(seen(&found), vec![(7, 2), (8, 2)]);
}
