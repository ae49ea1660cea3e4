//! The bad-input catalog at the index and drain level (the decoder-level entries are in
//! `crates/chain-fold/tests/decode.rs` and `scenarios.rs`; `docs/verification.md` lists all).
//! Each bad input gets a typed error or a documented outcome, never a panic, and the valid
//! events around it are never lost.

use std::sync::Arc;

use chain_fold::{AdvanceOutcome, Event, EventError, Incomplete};
use wal_index::baseline::MutexIndex;
use wal_index::ingest::{JsonLinesSource, RecordError};
use wal_index::{Drain, DrainConfig, IndexConfig, StateIndex, WalIndex};

fn line(id: i64, prev: Option<i64>, ty: &str) -> String {
    let prev = prev.map_or("null".to_owned(), |p| p.to_string());
    format!(r#"{{"event_id":{id},"execution_id":5,"prev_event_id":{prev},"event_type":"{ty}"}}"#)
}

fn drain_bytes<I: StateIndex>(wal: Vec<u8>) -> (Arc<I>, wal_index::ingest::DrainReport) {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    let report = Drain::new(
        Arc::clone(&index),
        JsonLinesSource::new(wal.as_slice()),
        DrainConfig::default(),
    )
    .run_until_closed()
    .expect("in-memory source")
    .clone();
    (index, report)
}

fn wal_file_with_invalid_utf8_and_truncated_lines_keeps_its_neighbours<I: StateIndex>() {
    let mut wal = Vec::new();
    wal.extend_from_slice(line(1, None, "playbook_started").as_bytes());
    wal.extend_from_slice(b"\n{\"event_id\":2,\"execution_id\":5,\"x\":\"\xff\xfe\"}\n");
    wal.extend_from_slice(line(2, Some(1), "step").as_bytes());
    wal.extend_from_slice(b"\n{\"event_id\":3,\"execution_id\":5,\"prev_ev\n\n\r\n");
    wal.extend_from_slice(line(3, Some(2), "step").as_bytes());
    wal.extend_from_slice(b"\r\n[\"not\",\"an\",\"object\"]\n");
    wal.extend_from_slice(line(4, Some(3), "step").as_bytes()); // no final newline
    let (index, report) = drain_bytes::<I>(wal);
    assert_eq!((report.events, report.bad), (4, 3));
    let positions: Vec<u64> = report.bad_samples.iter().map(|b| b.position).collect();
    assert_eq!(
        positions,
        vec![2, 4, 8],
        "bad records are reported by line number"
    );
    assert!(matches!(
        report.bad_samples[0].error,
        RecordError::Event(EventError::Json(_))
    ));
    assert!(matches!(
        report.bad_samples[2].error,
        RecordError::Event(EventError::NotAnObject { found: "array" })
    ));
    assert_eq!(
        index.build(5, Some(4)).spine.map(|s| s.ids()),
        Some(vec![1, 2, 3, 4])
    );
}

/// Applies `(id, prev)` links to execution 5: roots are `playbook_started`, the rest steps.
fn apply_links<I: StateIndex>(index: &I, links: &[(i64, Option<i64>)]) {
    for &(id, prev) in links {
        let kind = if prev.is_none() {
            "playbook_started"
        } else {
            "step"
        };
        index.apply(Event::minimal(id, 5, prev, kind));
    }
}

fn conflicting_redelivery_last_write_wins_and_rebuilds<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    apply_links(
        &index,
        &[(1, None), (2, Some(1)), (3, Some(2)), (4, Some(3))],
    );
    assert_eq!(
        index.build(5, Some(4)).outcome,
        AdvanceOutcome::ColdRebuild(4)
    );
    // Event 3 redelivered claiming prev 1: the chain now skips 2.
    index.apply(Event::minimal(3, 5, Some(1), "step"));
    let build = index.build(5, Some(4));
    assert_eq!(
        build.outcome,
        AdvanceOutcome::ColdRebuild(3),
        "the cached spine is not reused"
    );
    assert_eq!(build.spine.map(|s| s.ids()), Some(vec![1, 3, 4]));
    assert_eq!(index.stats().events, 4, "a redelivery never double counts");
}

fn a_fork_serves_each_branch_by_its_tip<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    apply_links(
        &index,
        &[(1, None), (2, Some(1)), (3, Some(2)), (4, Some(2))],
    );
    assert_eq!(
        index.build(5, Some(3)).spine.map(|s| s.ids()),
        Some(vec![1, 2, 3])
    );
    assert_eq!(
        index.build(5, Some(4)).spine.map(|s| s.ids()),
        Some(vec![1, 2, 4])
    );
}

fn self_loop_and_cycle_are_incomplete_not_hangs<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply(Event::minimal(7, 5, Some(7), "step"));
    assert_eq!(
        index.build(5, Some(7)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::Cycle(7))
    );
    for id in 10..20 {
        index.apply(Event::minimal(
            id,
            6,
            Some(if id == 10 { 19 } else { id - 1 }),
            "step",
        ));
    }
    assert!(matches!(
        index.build(6, Some(15)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::Cycle(_))
    ));
}

#[test]
fn lockfree_wal_file_with_invalid_utf8_and_truncated_lines_keeps_its_neighbours() {
    wal_file_with_invalid_utf8_and_truncated_lines_keeps_its_neighbours::<WalIndex>();
}
#[test]
fn mutex_wal_file_with_invalid_utf8_and_truncated_lines_keeps_its_neighbours() {
    wal_file_with_invalid_utf8_and_truncated_lines_keeps_its_neighbours::<MutexIndex>();
}
#[test]
fn lockfree_conflicting_redelivery_last_write_wins_and_rebuilds() {
    conflicting_redelivery_last_write_wins_and_rebuilds::<WalIndex>();
}
#[test]
fn mutex_conflicting_redelivery_last_write_wins_and_rebuilds() {
    conflicting_redelivery_last_write_wins_and_rebuilds::<MutexIndex>();
}
#[test]
fn lockfree_a_fork_serves_each_branch_by_its_tip() {
    a_fork_serves_each_branch_by_its_tip::<WalIndex>();
}
#[test]
fn mutex_a_fork_serves_each_branch_by_its_tip() {
    a_fork_serves_each_branch_by_its_tip::<MutexIndex>();
}
#[test]
fn lockfree_self_loop_and_cycle_are_incomplete_not_hangs() {
    self_loop_and_cycle_are_incomplete_not_hangs::<WalIndex>();
}
#[test]
fn mutex_self_loop_and_cycle_are_incomplete_not_hangs() {
    self_loop_and_cycle_are_incomplete_not_hangs::<MutexIndex>();
}

/// A large pull is decoded on several threads: the events reach the index in log order
/// (a redelivery that rewrites an earlier event, in a later run of the same pull, wins as it
/// would applied one by one), every bad record is counted at its own position, and what the
/// index serves is what the same records applied one at a time give, slim or not.
#[test]
fn a_parallel_decode_keeps_log_order_and_every_bad_record() {
    let filler = "y".repeat(8_000);
    let envelope = |id: i64, n: usize, extra: &str| {
        let prev = if id == 1 {
            "null".to_owned()
        } else {
            (id - 1).to_string()
        };
        let ty = if id == 1 { "playbook_started" } else { "step" };
        format!(
            r#"{{"event_id":{id},"execution_id":5,"prev_event_id":{prev},"event_type":"{ty}","result":"{filler}","context":{{"k":{n}{extra}}},"dropped_by_slim":1}}"#
        )
    };
    let mut lines = Vec::new();
    let mut id = 0;
    for n in 1..=300 {
        if n % 37 == 0 {
            lines.push("{not json".to_owned());
        } else if n == 290 {
            // Event 5 again, with another payload: a rewrite, in the last run of the pull.
            lines.push(envelope(5, n, r#","rewritten":true"#));
        } else {
            id += 1;
            lines.push(envelope(id, n, ""));
        }
    }
    let wal = lines.join("\n");
    for slim in [false, true] {
        let config = IndexConfig {
            slim,
            ..IndexConfig::default()
        };
        // The reference: every record applied on its own, in log order.
        let reference = WalIndex::new(config);
        for line in &lines {
            let _ = reference.apply_json(line.as_bytes());
        }
        let expected = reference.build(5, Some(id)).spine.expect("linked");
        let index = Arc::new(WalIndex::new(config));
        let drain = DrainConfig {
            decode_threads: 4,
            ..DrainConfig::default()
        };
        let report = Drain::new(
            Arc::clone(&index),
            JsonLinesSource::new(wal.as_bytes()),
            drain,
        )
        .run_until_closed()
        .unwrap()
        .clone();
        let served = index
            .build(5, Some(id))
            .spine
            .expect("every good event, linked");
        assert_eq!(
            (report.events, report.bad),
            (id as u64 + 1, 8),
            "slim {slim}"
        );
        let positions: Vec<u64> = report.bad_samples.iter().map(|b| b.position).collect();
        assert_eq!(positions, (1..=8).map(|k| 37 * k).collect::<Vec<u64>>());
        let bytes = served.json_array().to_bytes();
        assert_eq!(bytes, expected.json_array().to_bytes(), "slim {slim}");
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(text.contains(r#""rewritten":true"#), "the later record won");
        assert_eq!(text.contains("dropped_by_slim"), !slim, "slim {slim}");
    }
}
