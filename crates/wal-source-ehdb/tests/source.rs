//! The source against a writer of our own (`common`): records reach the index through the
//! drain, a cut connection resumes after the last record handed over (no gap, no
//! duplicate), and a writer that is not up yet is an outage, not an error.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Behaviour, FakeWriter, LogRecord, frame_of};
use std::io::ErrorKind;
use wal_index::ingest::{Backfill, Pull};
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
    // Every pull reports it while the shard stays down, so `healthy` stays 0.
    for _ in 0..3 {
        let again = source.pull(10, Duration::from_millis(50)).unwrap_err();
        assert_eq!(again.kind(), std::io::ErrorKind::NotConnected);
    }
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

#[test]
fn a_bad_record_is_not_asked_for_again_after_a_reconnect() {
    let mut log = chain(2);
    log.push(LogRecord {
        global_sequence: 30,
        execution_id: "7".into(),
        payload: "not an event".into(),
    });
    // The first connection closes right after its whole frame, the last record a bad one.
    let whole = frame_of(&log).len();
    let writer = FakeWriter::start(log, vec![Behaviour::CutAfter(whole), Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut positions = Vec::new();
    while writer.cursors().len() < 2 && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(100, Duration::from_millis(50)) {
            positions.extend(batch.iter().map(|d| (d.position, d.event.is_ok())));
        }
    }
    // Whatever the second subscription brings (nothing) has had time to arrive.
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        if let Ok(Pull::Decoded(batch)) = source.pull(100, Duration::from_millis(50)) {
            positions.extend(batch.iter().map(|d| (d.position, d.event.is_ok())));
        }
    }
    assert_eq!(positions, vec![(10, true), (20, true), (30, false)]);
    assert_eq!(
        writer.cursors(),
        vec![0, 30],
        "resumed after the bad record"
    );
}

#[test]
fn a_frame_over_the_cap_stops_the_drain_instead_of_redialling_forever() {
    let mut raw = u32::MAX.to_be_bytes().to_vec();
    raw.extend_from_slice(b"[");
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::Raw(raw)]);
    let source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let index = Arc::new(WalIndex::default());
    let mut drain = Drain::new(index, source, DrainConfig::default());
    let error = drain.run_until_closed().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    assert!(error.to_string().contains("cap"), "{error}");
    assert_eq!(
        writer.cursors(),
        vec![0],
        "the writer was not dialled again"
    );
}

#[test]
fn a_writer_that_accepts_and_never_sends_is_redialled_after_the_idle_deadline() {
    let writer = FakeWriter::start(chain(3), vec![Behaviour::Raw(Vec::new()), Behaviour::Serve]);
    let mut config = fast(&writer.addr);
    config.idle_deadline = Some(Duration::from_millis(300));
    let mut source = EhdbSource::connect(config).unwrap();
    let positions = pull_positions(&mut source, 3, Duration::from_secs(10));
    assert_eq!(positions, vec![10, 20, 30]);
    assert_eq!(writer.cursors(), vec![0, 0]);
    let stats = source.stats();
    // The silent connection never came up; the second ended its outage.
    assert_eq!((stats.connects, stats.redials, stats.outages), (1, 1, 1));
}

/// Drops `source` on a thread of its own; whether that returned within `limit`.
fn drops_within(source: EhdbSource, limit: Duration) -> bool {
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(source);
        let _ = done.send(());
    });
    dropped.recv_timeout(limit).is_ok()
}

#[test]
fn dropping_the_source_returns_while_its_reader_waits_on_a_silent_writer() {
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::Raw(Vec::new())]);
    for pause in [0, 5, 50, 300] {
        let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
        source.start().unwrap();
        std::thread::sleep(Duration::from_millis(pause));
        assert!(
            drops_within(source, Duration::from_secs(5)),
            "dropping the source {pause} ms after it started did not return within 5 s"
        );
    }
}

#[test]
fn a_drop_while_a_frame_is_still_streaming_in_returns_promptly() {
    // A frame that announces 10,000 bytes and trickles a byte every 20 ms: its end is
    // minutes away.
    let mut trickle = 10_000u32.to_be_bytes().to_vec();
    trickle.push(b'[');
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::Trickle(trickle)]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    source.start().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        drops_within(source, Duration::from_secs(5)),
        "dropping the source waited for the frame's end"
    );
}

#[test]
fn a_writer_that_accepts_and_closes_is_one_outage_not_one_per_attempt() {
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::CutAfter(0)]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let until = Instant::now() + Duration::from_millis(800);
    let mut errors = 0;
    while Instant::now() < until {
        match source.pull(10, Duration::from_millis(20)) {
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::NotConnected);
                errors += 1;
            }
            Ok(Pull::Idle) => {}
            Ok(other) => panic!("nothing was served, yet the source pulled {other:?}"),
        }
    }
    let stats = source.stats();
    assert!(writer.cursors().len() >= 3, "it redialled");
    assert!(errors >= 3, "each pull while down reports the outage");
    assert_eq!((stats.connects, stats.redials, stats.outages), (0, 0, 1));
}

#[test]
fn a_shard_named_twice_is_refused() {
    let error = EhdbSource::connect(EhdbConfig::new("127.0.0.1:1").shards([0, 3, 0])).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(
        error.to_string().contains("shard 0 is named twice"),
        "{error}"
    );
}

#[test]
fn with_an_idle_deadline_a_connection_that_ends_without_a_byte_never_brings_its_shard_up() {
    // Each connection stays open 1.2 s (past the quiet second that counts as up without an
    // idle deadline), sends nothing and closes.
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::CloseAfterMs(1_200)]);
    let mut config = fast(&writer.addr);
    config.idle_deadline = Some(Duration::from_secs(5));
    let mut source = EhdbSource::connect(config).unwrap();
    let until = Instant::now() + Duration::from_millis(3_000);
    while Instant::now() < until {
        let _ = source.pull(10, Duration::from_millis(50));
    }
    assert!(writer.cursors().len() >= 2, "it redialled");
    let stats = source.stats();
    assert_eq!((stats.connects, stats.redials, stats.outages), (0, 0, 1));
}

#[test]
fn the_backfill_ends_when_the_first_frame_is_pulled_through() {
    // The writer's first frame holds the log at subscription: 5 records.
    let writer = FakeWriter::start(chain(5), vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    assert_eq!(
        source.backfill(),
        Backfill::Behind { remaining: None },
        "behind until the first frame ends"
    );
    let mut positions = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while positions.len() < 5 && Instant::now() < deadline {
        // Two at a time: the drain is behind until it has pulled the frame's last record.
        if let Ok(Pull::Decoded(batch)) = source.pull(2, Duration::from_millis(50)) {
            positions.extend(batch.iter().map(|d| d.position));
            if positions.len() < 5 {
                assert!(source.backfill().is_behind(), "after {positions:?}");
            }
        }
    }
    assert_eq!(positions, vec![10, 20, 30, 40, 50]);
    assert!(wait(Duration::from_secs(10), || source.backfill()
        == Backfill::CaughtUp));
}

/// Polls `done` every 10 ms up to `limit`.
fn wait(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Pulls one record at a time until `n` arrived, asserting the source reads as behind
/// before the last; the positions pulled.
fn pull_through_behind(source: &mut EhdbSource, n: usize) -> Vec<u64> {
    let mut positions = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while positions.len() < n && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(1, Duration::from_millis(50)) {
            positions.extend(batch.iter().map(|d| d.position));
            if positions.len() < n {
                assert!(
                    source.backfill().is_behind(),
                    "caught up after {positions:?} of {n}"
                );
            }
        }
    }
    positions
}

/// A source that asks for heartbeats every 100 ms, as a test's clock goes.
fn beating(addr: &str) -> EhdbConfig {
    let mut config = fast(addr);
    config.heartbeat = Some(Duration::from_millis(100));
    config.feed_batch_limit = Some(2);
    config
}

/// The writer production runs (a heartbeat at once, then the backlog two records to a
/// batch): behind through every batch of the backlog, caught up once its last one is
/// pulled; the heartbeat is counted as one, never handed to the drain as a bad record.
#[test]
fn a_capped_backlog_is_behind_until_its_last_frame_whatever_came_first() {
    let writer = FakeWriter::start(chain(5), vec![Behaviour::Capped { limit: 2 }]);
    let mut source = EhdbSource::connect(beating(&writer.addr)).unwrap();
    // Let the heartbeat and the first frames arrive before the drain pulls anything.
    source.start().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(source.backfill().is_behind(), "a heartbeat is not the head");
    assert_eq!(
        pull_through_behind(&mut source, 5),
        vec![10, 20, 30, 40, 50]
    );
    assert!(wait(Duration::from_secs(10), || source.backfill()
        == Backfill::CaughtUp));
    let stats = source.stats();
    assert!(stats.heartbeats >= 1, "{stats:?}");
    assert_eq!(stats.frames_abandoned, 0, "{stats:?}");
    assert_eq!(stats.records, 5, "no heartbeat is a record: {stats:?}");
}

/// The subscription asks for heartbeats at the configured interval (5 s by default, as
/// upstream's client does), and for none when they are turned off.
#[test]
fn the_subscription_asks_for_heartbeats() {
    let writer = FakeWriter::start(chain(2), vec![Behaviour::Capped { limit: 2 }]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    source.start().unwrap();
    assert!(wait(Duration::from_secs(10), || !writer
        .heartbeats_asked
        .lock()
        .unwrap()
        .is_empty()));
    drop(source);
    let mut off = fast(&writer.addr);
    off.heartbeat = None;
    let mut source = EhdbSource::connect(off).unwrap();
    source.start().unwrap();
    assert!(wait(Duration::from_secs(10), || writer
        .heartbeats_asked
        .lock()
        .unwrap()
        .len()
        == 2));
    drop(source);
    assert_eq!(
        *writer.heartbeats_asked.lock().unwrap(),
        vec![Some(5_000), None]
    );
}

/// Heartbeats on every frame the protocol allows, none of them a record: a heartbeat
/// before, between and after batches.
#[test]
fn heartbeats_between_batches_are_never_records() {
    let mut raw = common::heartbeat();
    raw.extend(common::frame_of(&chain(2)));
    raw.extend(common::heartbeat());
    raw.extend(common::frame_of(&chain(4)[2..]));
    raw.extend(common::heartbeat());
    // An empty array and an object of a newer protocol: harmless.
    raw.extend(wal_source_ehdb::frame::frame(b"[]"));
    raw.extend(wal_source_ehdb::frame::frame(
        br#"{"mode":"future","n":[1,{"a":2}]}"#,
    ));
    let writer = FakeWriter::start(Vec::new(), vec![Behaviour::Raw(raw)]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let mut records = Vec::new();
    assert!(wait(Duration::from_secs(10), || {
        if let Ok(Pull::Decoded(batch)) = source.pull(10, Duration::from_millis(20)) {
            records.extend(batch);
        }
        source.stats().frames == 7
    }));
    assert!(records.iter().all(|r| r.event.is_ok()), "{records:?}");
    assert_eq!(
        records.iter().map(|r| r.position).collect::<Vec<_>>(),
        vec![10, 20, 30, 40]
    );
    let stats = source.stats();
    assert_eq!(
        (stats.heartbeats, stats.empty_frames, stats.frames_abandoned),
        (3, 2, 0)
    );
}

/// A backlog that fills its last batch exactly: the heartbeat after it tells it ended.
#[test]
fn a_backlog_of_whole_capped_frames_ends_at_the_heartbeat_after_it() {
    let writer = FakeWriter::start(chain(4), vec![Behaviour::Capped { limit: 2 }]);
    let mut source = EhdbSource::connect(beating(&writer.addr)).unwrap();
    assert_eq!(pull_through_behind(&mut source, 4), vec![10, 20, 30, 40]);
    assert!(wait(Duration::from_secs(10), || source.backfill()
        == Backfill::CaughtUp));
}

/// Two shards, one of them quiet (only heartbeats): the quiet one does not hold the source
/// behind once the other's backlog is pulled.
#[test]
fn a_quiet_shard_that_heartbeats_does_not_hold_the_backfill() {
    let writer = FakeWriter::start(chain(3), vec![Behaviour::Capped { limit: 2 }]);
    let mut source = EhdbSource::connect(beating(&writer.addr).shards([0, 1])).unwrap();
    assert_eq!(pull_through_behind(&mut source, 3), vec![10, 20, 30]);
    assert!(wait(Duration::from_secs(10), || source.backfill()
        == Backfill::CaughtUp));
}

/// A writer that heartbeated and then fell silent with the socket open (a half-open
/// connection, as far as the subscriber can tell): three missed beats are an outage, and
/// the shard is redialled from the last record handed over.
#[test]
fn three_missed_heartbeats_are_an_outage_and_the_shard_is_redialled_from_its_last_record() {
    let writer = FakeWriter::start(
        chain(6),
        vec![
            Behaviour::GoesSilentAfter { limit: 2, beats: 2 },
            Behaviour::Capped { limit: 2 },
        ],
    );
    let mut source = EhdbSource::connect(beating(&writer.addr)).unwrap();
    let got = pull_positions(&mut source, 6, Duration::from_secs(10));
    assert_eq!(got, vec![10, 20, 30, 40, 50, 60]);
    // Let the silence pass three intervals.
    assert!(wait(Duration::from_secs(10), || writer.cursors().len() >= 2));
    assert_eq!(
        writer.cursors(),
        vec![0, 60],
        "redialled after the last record"
    );
    assert!(source.stats().outages >= 1);
    // A writer that never heartbeats (older versions) is never held to it.
    let quiet = FakeWriter::start(chain(2), vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(beating(&quiet.addr)).unwrap();
    assert_eq!(
        pull_positions(&mut source, 2, Duration::from_secs(10)),
        vec![10, 20]
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(quiet.cursors(), vec![0], "not redialled");
}

/// A drain into a slim index asks the source for slim events, and the readers decode each
/// payload straight to its projection: the event is already slim (its own projection is
/// itself), so the index does not parse it again.
#[test]
fn a_source_told_slim_hands_over_events_already_slim() {
    use wal_index::ingest::DecodeMode;
    let writer = FakeWriter::start(chain(3), vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    source.decode_as(DecodeMode::Slim);
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while events.len() < 3 && Instant::now() < deadline {
        if let Ok(Pull::Decoded(batch)) = source.pull(8, Duration::from_millis(50)) {
            events.extend(batch.into_iter().map(|d| d.event.unwrap()));
        }
    }
    assert_eq!(events.len(), 3);
    for event in &events {
        assert!(event.to_slim().ptr_eq(event), "decoded slim: {event:?}");
    }
    // And whole, by default.
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline);
        if let Ok(Pull::Decoded(batch)) = source.pull(8, Duration::from_millis(50)) {
            assert!(
                !batch[0]
                    .event
                    .as_ref()
                    .unwrap()
                    .to_slim()
                    .ptr_eq(batch[0].event.as_ref().unwrap())
            );
            break;
        }
    }
}

/// The writer's first heartbeat comes before its first poll, and a poll of a slow store can
/// take longer than three intervals: that silence is not an outage. The deadline holds only
/// once the writer is parked (a heartbeat past the first).
#[test]
fn a_slow_first_poll_after_the_first_heartbeat_is_not_an_outage() {
    let writer = FakeWriter::start(
        chain(3),
        vec![Behaviour::SlowFirstPoll { limit: 2, ms: 800 }],
    );
    let mut source = EhdbSource::connect(beating(&writer.addr)).unwrap();
    assert_eq!(
        pull_positions(&mut source, 3, Duration::from_secs(10)),
        vec![10, 20, 30]
    );
    assert_eq!(writer.cursors(), vec![0], "never redialled");
    assert_eq!(source.stats().outages, 0);
}
