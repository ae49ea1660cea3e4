//! Against the real EHDB writer (its harness is `scripts/ehdb-writer.sh`; `EHDB_WRITER`
//! names it; without it these tests skip, saying so, unless `SB_REQUIRE_EHDB` is set): what
//! the writer acknowledged reaches the index exactly once, also across a SIGKILL and a
//! restart on the same directory, and a replay reads one execution.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::LogRecord;
use wal_index::WalSource;
use wal_index::ingest::{DecodeMode, Pull};
use wal_index::{Drain, DrainConfig, DriveFallbacks, StateIndex, WalIndex};
use wal_source_ehdb::test_writer::{Cut, CutProxy, Writer};
use wal_source_ehdb::{EhdbConfig, EhdbPublisher, EhdbRehydrate, EhdbSource};

const EXECUTIONS: i64 = 10;

/// The `n`-th record of a workload of interleaved executions: execution `n % EXECUTIONS`,
/// its events chained 1 ← 2 ← …, at global sequence `n + 1`.
fn record(n: u64) -> LogRecord {
    let execution = 100 + (n as i64 % EXECUTIONS);
    let id = n as i64 / EXECUTIONS + 1;
    LogRecord::event(n + 1, execution, id, (id > 1).then(|| id - 1))
}

fn publish(writer: &Writer, range: std::ops::Range<u64>) {
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
    let Some(writer) = Writer::start("drain") else {
        return;
    };
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
    let Some(mut writer) = Writer::start("sigkill") else {
        return;
    };
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
    let Some(writer) = Writer::start("replay") else {
        return;
    };
    publish(&writer, 0..200);
    let feed = EhdbRehydrate::new(writer.feed.clone(), 1);
    let events =
        futures_lite::future::block_on(feed.retained(103, DecodeMode::Whole)).expect("reachable");
    assert_eq!(
        events.iter().map(|e| e.id()).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    assert!(events.iter().all(|e| e.execution_id() == 103));
}

/// `count` records of ~16 KB (execution `100 + n % EXECUTIONS`), published in one
/// connection: a first frame of tens of megabytes, over several sealed parts.
fn publish_large(writer: &Writer, count: u64) {
    let mut publisher = EhdbPublisher::connect(&writer.ingest, Duration::from_secs(10)).unwrap();
    for n in 0..count {
        let execution = 100 + (n as i64 % EXECUTIONS);
        let id = n as i64 / EXECUTIONS + 1;
        let r = LogRecord::padded(n + 1, execution, id, (id > 1).then(|| id - 1), 16 << 10);
        publisher
            .publish(r.global_sequence, execution, "t", &r.payload)
            .unwrap();
    }
}

/// Pulls until `until` says stop or 60 s pass; returns every position pulled, good or bad.
fn pull_until(source: &mut EhdbSource, mut until: impl FnMut(&[u64]) -> bool) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut positions = Vec::new();
    while !until(&positions) && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(64, Duration::from_millis(50)) {
            assert!(batch.iter().all(|d| d.event.is_ok()), "no bad record");
            positions.extend(batch.iter().map(|d| d.position));
        }
    }
    positions
}

/// What a subscription from 0 serves now: every global sequence, in order.
fn served(writer: &Writer) -> Vec<u64> {
    let mut positions = Vec::new();
    wal_source_ehdb::read_retained(
        &writer.feed,
        0,
        0,
        Duration::from_secs(60),
        Default::default(),
        |d| positions.push(d.position),
    )
    .unwrap();
    positions
}

#[test]
fn a_sigkill_mid_backfill_resumes_after_the_last_record_handed_over() {
    let Some(mut writer) = Writer::start("backfill-kill") else {
        return;
    };
    const COUNT: u64 = 3_000;
    publish_large(&writer, COUNT);
    let mut config = fast(&writer.feed);
    config.queue_records = 16;
    let mut source = EhdbSource::connect(config).unwrap();
    // The backlog is one frame of ~50 MB; a third of it is handed over, then the writer dies.
    let before = pull_until(&mut source, |p| p.len() >= 1_000);
    assert!(before.len() >= 1_000 && before.len() < COUNT as usize);
    writer.kill();
    writer.restart();
    let retained = served(&writer);
    eprintln!(
        "the writer acknowledged {COUNT} records and serves {} after the SIGKILL (its unsealed tail is lost)",
        retained.len()
    );
    let last_retained = retained.last().copied().unwrap_or(0);
    // The records queued before the kill, then what the restarted writer serves after the
    // cursor, until a second passes with nothing new.
    let mut after = Vec::new();
    let mut quiet_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    while quiet_since.elapsed() < Duration::from_secs(1) && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(64, Duration::from_millis(50)) {
            after.extend(batch.iter().map(|d| d.position));
            quiet_since = Instant::now();
        }
    }
    let all: Vec<u64> = before.iter().chain(&after).copied().collect();
    let last = *all.last().unwrap();
    assert!(
        last >= last_retained,
        "everything the writer still serves arrived"
    );
    let expected: Vec<u64> = (1..=last).collect();
    assert_eq!(
        all, expected,
        "every record once, in order, across the kill"
    );
    assert!(source.stats().redials >= 1);
}

#[test]
fn a_connection_cut_mid_frame_resumes_after_the_last_record_handed_over() {
    let Some(writer) = Writer::start("proxy-cut") else {
        return;
    };
    const COUNT: u64 = 600;
    publish_large(&writer, COUNT);
    // The first connection is cut 3 MB into its ~10 MB frame.
    let proxy = CutProxy::start(&writer.feed, vec![Cut::After(3 << 20)]).unwrap();
    let mut source = EhdbSource::connect(fast(&proxy.addr)).unwrap();
    let positions = pull_until(&mut source, |p| p.len() >= COUNT as usize);
    assert_eq!(
        positions,
        (1..=COUNT).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    let cursors = proxy.cursors();
    assert_eq!(cursors.len(), 2, "one cut, one resume: {cursors:?}");
    assert!(
        cursors[1] > 100 && cursors[1] < COUNT,
        "the resume starts after the records handed over before the cut: {cursors:?}"
    );
}

#[test]
fn a_stopped_writer_is_an_outage_found_by_the_idle_deadline() {
    let Some(writer) = Writer::start("sigstop") else {
        return;
    };
    publish(&writer, 0..100);
    let mut config = fast(&writer.feed);
    config.idle_deadline = Some(Duration::from_millis(400));
    let mut source = EhdbSource::connect(config).unwrap();
    assert_eq!(pull_until(&mut source, |p| p.len() >= 100).len(), 100);
    writer.pause();
    let until = Instant::now() + Duration::from_secs(2);
    let mut outage = None;
    while Instant::now() < until && outage.is_none() {
        outage = source.pull(10, Duration::from_millis(50)).err();
    }
    writer.resume();
    let outage = outage.expect("the stopped writer was reported");
    assert_eq!(outage.kind(), std::io::ErrorKind::NotConnected, "{outage}");
    publish(&writer, 100..200);
    let after = pull_until(&mut source, |p| p.len() >= 100);
    assert_eq!(after, (101..=200).collect::<Vec<_>>());
    assert!(source.stats().outages >= 1);
}

/// The writer alone: a record re-sent under the sequence its first copy was stored with (a
/// producer whose acknowledgement was lost sends it again, as the simulator's producer
/// does) is stored twice. A subscription from 0 serves both copies; a live subscription
/// already past that sequence is never served the second one, because the feed serves
/// records *above* a cursor. So "records the writer holds" counted copy by copy exceeds what
/// any live drain receives, by the copies stored after the drain passed their sequence,
/// though no distinct record is missing.
#[test]
fn a_record_resent_under_its_sequence_is_served_live_once_and_stored_twice() {
    let Some(writer) = Writer::start("resent_record") else {
        return;
    };
    publish(&writer, 0..3);
    let mut source = EhdbSource::connect(fast(&writer.feed)).unwrap();
    assert_eq!(pull_until(&mut source, |p| p.len() >= 3), vec![1, 2, 3]);
    // Sequence 3 again (the first copy's acknowledgement was lost), then 4.
    let mut publisher = EhdbPublisher::connect(&writer.ingest, Duration::from_secs(10)).unwrap();
    for n in [2, 3] {
        let r = record(n);
        let execution: i64 = r.execution_id.parse().unwrap();
        publisher
            .publish(r.global_sequence, execution, "t", &r.payload)
            .unwrap();
    }
    assert_eq!(
        pull_until(&mut source, |p| p.contains(&4)),
        vec![4],
        "live: once"
    );
    assert_eq!(served(&writer), vec![1, 2, 3, 3, 4], "stored: twice");
}

/// Publishes `records` in order, each acknowledged under its own sequence.
fn publish_records(writer: &Writer, records: &[LogRecord]) {
    let mut publisher = EhdbPublisher::connect(&writer.ingest, Duration::from_secs(10)).unwrap();
    for r in records {
        let execution: i64 = r.execution_id.parse().unwrap();
        let ack = publisher
            .publish(r.global_sequence, execution, "t", &r.payload)
            .unwrap();
        assert_eq!(ack, r.global_sequence);
    }
}

/// The checkpoint position of a drain handed the writer's first `n` records.
fn position_after(writer: &Writer, n: usize) -> wal_index::checkpoint::Position {
    let mut source = EhdbSource::connect(fast(&writer.feed)).unwrap();
    let got = pull_until(&mut source, |got| got.len() >= n);
    assert_eq!(got.len(), n);
    source.position().unwrap().positions.remove(0)
}

/// The real writer, SIGKILLed with its 60 records unsealed: it comes back without them, and
/// producers publish again. Records 59 and 60 were re-sent unchanged (their
/// acknowledgements were lost), the others' numbers went to other records. The last two
/// records the checkpoint applied are the same; a record below them is not: refused.
#[test]
fn a_lost_tail_refilled_below_the_record_before_is_refused_on_the_real_writer() {
    let Some(mut writer) = Writer::start("refill_below") else {
        return;
    };
    publish(&writer, 0..60);
    let position = position_after(&writer, 60);
    writer.kill();
    writer.restart();
    let tip = writer.tip;
    assert!(
        tip < 58,
        "the unsealed tail was lost (tip {tip}): nothing to refill"
    );
    let refill: Vec<LogRecord> = (tip..60)
        .map(|n| {
            if n >= 58 {
                record(n)
            } else {
                LogRecord::event(n + 1, 900, n as i64 + 1, None)
            }
        })
        .collect();
    publish_records(&writer, &refill);
    let mut source = EhdbSource::connect(fast(&writer.feed)).unwrap();
    let refused = source
        .resume(&[position], Duration::from_secs(30))
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
}

/// A pool resumed on a real writer with nothing after its checkpoint reads as caught up
/// (stall clocks run, the backfilling gauge drops) without waiting for a next record.
#[test]
fn a_resumed_quiet_shard_is_caught_up_on_the_real_writer() {
    use wal_index::ingest::Backfill;
    let Some(writer) = Writer::start("quiet_resume") else {
        return;
    };
    publish(&writer, 0..30);
    let position = position_after(&writer, 30);
    let mut source = EhdbSource::connect(fast(&writer.feed)).unwrap();
    assert_eq!(source.resume(&[position], Duration::from_secs(30)), Ok(()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while source.backfill() != Backfill::CaughtUp {
        assert!(Instant::now() < deadline, "still {:?}", source.backfill());
        let _ = source.pull(10, Duration::from_millis(20));
    }
}

/// The writer's CPU time so far (user + system), from `/proc`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// What an abandoned per-execution read costs this writer: it cannot be told. A
/// subscription from cursor 0 makes the writer prepare the shard's whole log as one frame
/// under its engine's lock; a reader that gives up and closes its socket (here at 100 ms)
/// leaves the writer preparing until the frame is whole, and only the write that follows
/// fails and ends the subscription. So each abandoned read still costs a whole shard
/// replay, and the pool's defaults keep EHDB pools off this read (docs/migration.md):
/// the state shard is their read on a miss.
#[test]
fn an_abandoned_read_costs_the_writer_its_whole_shard_then_stops() {
    let dir = std::env::temp_dir().join(format!("sb-ehdb-abandoned-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let load = dir.join("load.jsonl");
    let pad = "x".repeat(1000);
    let mut lines = String::new();
    for n in 0..60_000u64 {
        let (execution, id) = (100 + (n % 50) as i64, (n / 50) as i64 + 1);
        let prev = if id > 1 {
            format!(r#","prev_event_id":{}"#, id - 1)
        } else {
            String::new()
        };
        lines.push_str(&format!(
            r#"{{"event_id":{id},"execution_id":{execution}{prev},"event_type":"step","pad":"{pad}"}}"#
        ));
        lines.push('\n');
    }
    std::fs::write(&load, lines).unwrap();
    let Some(writer) = Writer::start_loaded("abandoned-read", Some(&load)) else {
        return;
    };
    let pid = writer.pid().unwrap();
    let read = EhdbRehydrate::new(writer.feed.clone(), 1)
        .bounds(wal_index::flow::ReadBounds::DEFAULT.with_deadline(Duration::from_millis(100)));
    let before = cpu_seconds(pid);
    let started = Instant::now();
    let events = read.read(100, DecodeMode::Whole).unwrap();
    let gave_up = started.elapsed();
    assert!(events.is_empty(), "no frame within 100 ms");
    // The socket is closed; the writer goes on preparing the frame.
    let mut last = cpu_seconds(pid);
    let mut after_close = 0.0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = cpu_seconds(pid);
        after_close += now - last;
        let idle = now - last < 0.02;
        last = now;
        if idle {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the writer never stopped: {after_close} s"
        );
    }
    eprintln!(
        "gave up after {gave_up:?} (writer CPU {:.2} s by then); the writer spent {after_close:.2} s of CPU after the close, then stopped",
        last - before - after_close
    );
    assert!(
        after_close >= 0.2,
        "the writer kept preparing after the reader closed: {after_close} s"
    );
    std::fs::remove_dir_all(&dir).ok();
}
