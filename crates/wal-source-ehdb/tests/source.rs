//! The source against a writer of our own (`common`): records reach the index through the
//! drain, a cut connection resumes after the last record handed over (no gap, no
//! duplicate), and a writer that is not up yet is an outage, not an error.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Behaviour, FakeWriter, LogRecord, frame_of};
use wal_index::ingest::Pull;
use wal_index::{Drain, DrainConfig, StateIndex, WalIndex, WalSource};
use wal_source_ehdb::{EhdbConfig, EhdbSource};

/// Execution 7's chain 1 ← 2 ← … ← n, at global sequences 10, 20, …
fn chain(n: i64) -> Vec<LogRecord> {
    (1..=n)
        .map(|id| LogRecord::event(id as u64 * 10, 7, id, (id > 1).then(|| id - 1)))
        .collect()
}

/// Pulls until `events` good records arrived or `limit` passed; returns their positions.
fn pull_positions(source: &mut EhdbSource, events: usize, limit: Duration) -> Vec<u64> {
    let deadline = Instant::now() + limit;
    let mut positions = Vec::new();
    while positions.len() < events && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(100, Duration::from_millis(50)) {
            positions.extend(batch.iter().filter(|d| d.event.is_ok()).map(|d| d.position));
        }
    }
    positions
}

fn fast(addr: &str) -> EhdbConfig {
    let mut config = EhdbConfig::new(addr);
    config.redial.first = Duration::from_millis(5);
    config.redial.max = Duration::from_millis(20);
    config
}

#[test]
fn the_drain_indexes_the_feed() {
    let writer = FakeWriter::start(chain(5), vec![Behaviour::Serve]);
    let source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let index = Arc::new(WalIndex::default());
    let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
    let deadline = Instant::now() + Duration::from_secs(10);
    while index.build(7, Some(5)).spine.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = drain.stop().unwrap();
    assert_eq!(
        index.build(7, Some(5)).spine.map(|s| s.ids()),
        Some(vec![1, 2, 3, 4, 5])
    );
    assert_eq!((report.events, report.bad), (5, 0));
    assert_eq!(
        writer.cursors(),
        vec![0],
        "one subscription, from the beginning"
    );
}

#[test]
fn a_connection_cut_mid_frame_resumes_after_the_last_record_handed_over() {
    let log = chain(5);
    // The first connection is cut in the middle of the fourth record.
    let whole = frame_of(&log);
    let fourth = serde_json::to_string(&log[3].json()).unwrap();
    let text = String::from_utf8_lossy(&whole[4..]).into_owned();
    let cut = 4 + text.find(&fourth).unwrap() + fourth.len() / 2;
    let writer = FakeWriter::start(log, vec![Behaviour::CutAfter(cut), Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let positions = pull_positions(&mut source, 5, Duration::from_secs(10));
    assert_eq!(
        positions,
        vec![10, 20, 30, 40, 50],
        "no gap and no duplicate"
    );
    assert_eq!(
        writer.cursors(),
        vec![0, 30],
        "the second subscription starts after the last record handed over"
    );
    assert!(source.stats().redials >= 1);
}

#[test]
fn a_writer_that_is_not_up_yet_is_an_outage_until_it_is() {
    // Reserve a port, then free it: nothing listens there until the writer starts.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut source = EhdbSource::connect(fast(&addr)).unwrap();
    let error = loop {
        match source.pull(10, Duration::from_secs(5)) {
            Err(error) => break error,
            Ok(Pull::Idle) => continue,
            Ok(other) => panic!("nothing is listening, yet the source pulled {other:?}"),
        }
    };
    assert_eq!(error.kind(), std::io::ErrorKind::NotConnected);
    assert!(error.to_string().contains(&addr), "{error}");
    // The reported outage is one error, not one per pull.
    assert!(matches!(
        source.pull(10, Duration::from_millis(50)),
        Ok(Pull::Idle)
    ));
    let writer = FakeWriter::start_on(&addr, chain(3), vec![Behaviour::Serve]);
    let positions = pull_positions(&mut source, 3, Duration::from_secs(10));
    assert_eq!(positions, vec![10, 20, 30], "served once the writer is up");
    assert_eq!(writer.cursors(), vec![0]);
}

#[test]
fn hostile_frames_cost_bad_records_and_the_good_ones_arrive() {
    let good = frame_of(&chain(2));
    let mut raw = wal_source_ehdb::frame::frame(b"[1, {\"x\": 2}]");
    raw.extend(good);
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::Raw(raw)]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut good_records, mut bad_records) = (0, 0);
    while good_records < 2 && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(100, Duration::from_millis(50)) {
            good_records += batch.iter().filter(|d| d.event.is_ok()).count();
            bad_records += batch.iter().filter(|d| d.event.is_err()).count();
        }
    }
    assert_eq!((good_records, bad_records), (2, 2));
    assert_eq!(source.stats().frames, 2);
}
