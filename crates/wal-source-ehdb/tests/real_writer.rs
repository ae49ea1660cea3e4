//! Against the real EHDB writer (its harness is `scripts/ehdb-writer.sh`; `EHDB_WRITER`
//! names it; without it these tests skip, saying so, unless `SB_REQUIRE_EHDB` is set): what
//! the writer acknowledged reaches the index exactly once, also across a SIGKILL and a
//! restart on the same directory, and a replay reads one execution.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{LogRecord, RealWriter, real_writer_binary};
use wal_index::{Drain, DrainConfig, DriveFallbacks, StateIndex, WalIndex};
use wal_source_ehdb::{EhdbConfig, EhdbPublisher, EhdbSource, FeedRehydrate};

const EXECUTIONS: i64 = 10;

/// The `n`-th record of a workload of interleaved executions: execution `n % EXECUTIONS`,
/// its events chained 1 ← 2 ← …, at global sequence `n + 1`.
fn record(n: u64) -> LogRecord {
    let execution = 100 + (n as i64 % EXECUTIONS);
    let id = n as i64 / EXECUTIONS + 1;
    LogRecord::event(n + 1, execution, id, (id > 1).then(|| id - 1))
}

fn publish(writer: &RealWriter, range: std::ops::Range<u64>) {
    let mut publisher = EhdbPublisher::connect(&writer.ingest, Duration::from_secs(10)).unwrap();
    for n in range {
        let r = record(n);
        let execution: i64 = r.execution_id.parse().unwrap();
        let ack = publisher
            .publish(r.global_sequence, execution, "t", &r.payload)
            .unwrap();
        assert_eq!(
            ack, r.global_sequence,
            "the writer acknowledges the record's sequence"
        );
    }
}

fn fast(addr: &str) -> EhdbConfig {
    let mut config = EhdbConfig::new(addr);
    config.redial.first = Duration::from_millis(10);
    config.redial.max = Duration::from_millis(100);
    config
}

/// Waits until every execution's chain reaches `per_execution` events.
fn wait_indexed(index: &WalIndex, per_execution: i64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let done = (0..EXECUTIONS).all(|e| {
            index
                .build(100 + e, Some(per_execution))
                .spine
                .is_some_and(|s| s.len() == per_execution as usize)
        });
        if done {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn what_the_writer_acknowledged_reaches_the_index_once() {
    let Some(binary) = real_writer_binary() else {
        return;
    };
    let writer = RealWriter::start(binary, "drain");
    publish(&writer, 0..200);
    let index = Arc::new(WalIndex::default());
    let source = EhdbSource::connect(fast(&writer.feed)).unwrap();
    let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
    assert!(wait_indexed(&index, 20), "every chain complete");
    let report = drain.stop().unwrap();
    assert_eq!((report.events, report.bad), (200, 0));
}

#[test]
fn a_sigkill_mid_publication_and_a_restart_apply_every_record_once() {
    let Some(binary) = real_writer_binary() else {
        return;
    };
    let mut writer = RealWriter::start(binary, "sigkill");
    let index = Arc::new(WalIndex::default());
    let source = EhdbSource::connect(fast(&writer.feed)).unwrap();
    let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
    publish(&writer, 0..100);
    assert!(
        wait_indexed(&index, 10),
        "the first half is indexed before the kill"
    );
    writer.kill();
    std::thread::sleep(Duration::from_millis(200));
    writer.restart();
    // What the writer still serves after a SIGKILL is its own affair: this version keeps
    // only sealed, uploaded parts (its unsealed tail is lost), so its tip may be below 100.
    // The drain already applied those records, and resumes after them either way.
    eprintln!(
        "the restarted writer's tip: {} (100 were acknowledged)",
        writer.tip
    );
    assert!(writer.tip <= 100);
    publish(&writer, 100..200);
    assert!(
        wait_indexed(&index, 20),
        "the drain resumed on the restarted writer"
    );
    let report = drain.stop().unwrap();
    assert_eq!(report.events, 200, "nothing was applied twice");
    assert_eq!(report.bad, 0);
    assert!(report.source_errors >= 1, "the outage was reported");
}

#[test]
fn a_replay_reads_one_execution_from_the_real_writer() {
    let Some(binary) = real_writer_binary() else {
        return;
    };
    let writer = RealWriter::start(binary, "replay");
    publish(&writer, 0..200);
    let events = FeedRehydrate::new(writer.feed.clone(), 1)
        .retained(103)
        .expect("reachable");
    assert_eq!(
        events.iter().map(|e| e.id()).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    assert!(events.iter().all(|e| e.execution_id() == 103));
}
