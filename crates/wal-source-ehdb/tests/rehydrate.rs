//! Rehydrate through the feed, against a writer of our own (`common`): one execution's
//! events from a shared log, other executions' payloads never decoded, and both bounds.

mod common;

use std::time::{Duration, Instant};

use common::{Behaviour, FakeWriter, LogRecord};
use wal_index::flow::ReadBounds;
use wal_index::ingest::DecodeMode;
use wal_index::rehydrate::RehydrateGate;
use wal_index::{DriveBudget, DriveFallbacks, DriveFlow, StateIndex, WalIndex};
use wal_source_ehdb::EhdbRehydrate;

/// Executions 7 and 8 interleaved, and one record of 8 whose payload is not JSON at all.
fn shared_log() -> Vec<LogRecord> {
    let mut log = Vec::new();
    for id in 1..=4 {
        let prev = (id > 1).then(|| id - 1);
        log.push(LogRecord::event(log.len() as u64 + 1, 7, id, prev));
        log.push(LogRecord::event(log.len() as u64 + 1, 8, id, prev));
    }
    log.push(LogRecord {
        global_sequence: 100,
        execution_id: "8".into(),
        payload: "not json: never decoded for a replay of 7".into(),
    });
    log
}

#[test]
fn a_replay_reads_its_execution_alone_and_serves_the_drive() {
    let writer = FakeWriter::start(shared_log(), vec![Behaviour::Serve]);
    let retained = EhdbRehydrate::new(writer.addr.clone(), 1);
    let events =
        futures_lite::future::block_on(retained.retained(7, DecodeMode::Whole)).expect("reachable");
    assert_eq!(
        events.iter().map(|e| e.id()).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert!(events.iter().all(|e| e.execution_id() == 7));
    // A slim index's read decodes each record once, straight to its slim projection.
    let slim =
        futures_lite::future::block_on(retained.retained(7, DecodeMode::Slim)).expect("reachable");
    sb_test_kit::decoded::assert_slim_read_of(&slim, &events);

    let index = WalIndex::default();
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(0, Duration::ZERO))
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(4), &flow);
    assert_eq!(
        drive.outcome.spine().map(|s| s.ids()),
        Some(vec![1, 2, 3, 4])
    );
}

#[test]
fn the_message_cap_bounds_the_records_read_of_any_execution() {
    let writer = FakeWriter::start(shared_log(), vec![Behaviour::Serve]);
    let retained =
        EhdbRehydrate::new(writer.addr.clone(), 1).bounds(ReadBounds::DEFAULT.with_max_records(3));
    // Records 1 (7), 2 (8), 3 (7): the cap stops the read before 7's third and fourth.
    let events =
        futures_lite::future::block_on(retained.retained(7, DecodeMode::Whole)).expect("reachable");
    assert_eq!(
        events.iter().map(|e| e.id()).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn the_deadline_bounds_a_writer_that_stops_mid_frame() {
    let log = shared_log();
    let whole = common::frame_of(&log);
    // The frame announces its whole length but only its first half is ever sent.
    let writer = FakeWriter::start(
        Vec::new(),
        vec![Behaviour::Raw(whole[..whole.len() / 2].to_vec())],
    );
    let retained = EhdbRehydrate::new(writer.addr.clone(), 1)
        .bounds(ReadBounds::DEFAULT.with_deadline(Duration::from_millis(300)));
    let started = Instant::now();
    let events =
        futures_lite::future::block_on(retained.retained(7, DecodeMode::Whole)).expect("reachable");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(!events.is_empty(), "what arrived before the stall is kept");
    assert!(events.iter().all(|e| e.execution_id() == 7));
}

#[test]
fn an_unreachable_writer_is_no_replay() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let retained = EhdbRehydrate::new(format!("127.0.0.1:{port}"), 1)
        .bounds(ReadBounds::DEFAULT.with_deadline(Duration::from_millis(100)));
    assert!(futures_lite::future::block_on(retained.retained(7, DecodeMode::Whole)).is_none());
}

/// At most `max_running` reads of the writer at once, counted until each read's thread ends:
/// a drive that stops waiting does not free its place while its subscription still runs.
#[test]
fn reads_past_the_cap_answer_at_once_until_a_running_one_ends() {
    // A writer that accepts and never answers: each read runs to its deadline.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let retained = EhdbRehydrate::new(addr, 1)
        .bounds(ReadBounds::DEFAULT.with_deadline(Duration::from_millis(600)))
        .max_running(1);
    // The first read starts, and its drive stops waiting at once (the future is dropped).
    drop(retained.retained(7, DecodeMode::Whole));
    let started = Instant::now();
    let refused = futures_lite::future::block_on(retained.retained(8, DecodeMode::Whole));
    assert!(refused.is_none(), "over the cap: no replay");
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "answered at once"
    );
    // Once the first read's thread ended at its deadline, a read runs again (to its own
    // deadline, and finds nothing: an empty replay, not a refusal).
    std::thread::sleep(Duration::from_millis(900));
    let started = Instant::now();
    let ran = futures_lite::future::block_on(retained.retained(9, DecodeMode::Whole));
    assert_eq!(ran, Some(Vec::new()));
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "it ran to its deadline"
    );
    drop(silent);
}
