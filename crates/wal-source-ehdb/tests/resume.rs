//! Resuming after a checkpoint (`WalSource::resume`): the first record delivered must be
//! the checkpoint's last one, checked by its fingerprint and dropped; a writer whose log no
//! longer holds it (a lost tail refilled under the same numbers, or a head below the
//! position) is refused, and the drain stops rather than skip what it never saw.

mod common;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::{Behaviour, FakeWriter, LogRecord};
use wal_index::WalSource;
use wal_index::checkpoint::Position;
use wal_index::ingest::Pull;
use wal_source_ehdb::{EhdbConfig, EhdbSource};

/// How long a resume waits for the fake writer to deliver the checkpoint's records.
const WITHIN: Duration = Duration::from_secs(10);

/// Execution 7's chain 1 ← 2 ← … ← n, at global sequences 10, 20, …
fn chain(n: i64) -> Vec<LogRecord> {
    (1..=n)
        .map(|id| LogRecord::event(id as u64 * 10, 7, id, (id > 1).then(|| id - 1)))
        .collect()
}

fn fast(addr: &str) -> EhdbConfig {
    let mut config = EhdbConfig::new(addr);
    config.redial.first = Duration::from_millis(5);
    config.redial.max = Duration::from_millis(20);
    config
}

/// Pulls until `n` records arrived or `limit` passed; their sequences, or the error that
/// ended the pulls.
fn pull(source: &mut EhdbSource, n: usize, limit: Duration) -> Result<Vec<u64>, std::io::Error> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        match source.pull(n - got.len(), Duration::from_millis(50)) {
            Ok(Pull::Decoded(batch)) => got.extend(batch.iter().map(|d| d.position)),
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::InvalidInput => return Err(error),
            Err(_) => {}
        }
    }
    Ok(got)
}

/// The position after the drain was handed the first `n` records of `log`.
fn position_after(log: Vec<LogRecord>, n: usize) -> Position {
    let writer = FakeWriter::start(log, vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let got = pull(&mut source, n, Duration::from_secs(10)).unwrap();
    assert_eq!(got.len(), n);
    let mut at = source.position().expect("the source says where it stands");
    assert_eq!(at.log.transport, "ehdb");
    assert_eq!(at.positions.len(), 1);
    at.positions.remove(0)
}

#[test]
fn a_resumed_shard_starts_after_the_checkpoints_record_and_drops_it() {
    let position = position_after(chain(10), 6);
    assert_eq!(position.partition, "shard 0");
    assert_eq!(position.last().sequence, 60);
    assert_eq!(
        position
            .records
            .iter()
            .map(|r| r.sequence)
            .collect::<Vec<_>>(),
        vec![10, 20, 30, 40, 50, 60],
        "every record handed over, up to the resume depth"
    );

    let writer = FakeWriter::start(chain(10), vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    assert_eq!(
        source.resume(std::slice::from_ref(&position), WITHIN),
        Ok(())
    );
    // Before anything new arrives, a checkpoint would carry the same position.
    assert_eq!(source.position().unwrap().positions, vec![position]);
    let got = pull(&mut source, 4, Duration::from_secs(10)).unwrap();
    assert_eq!(
        got,
        vec![70, 80, 90, 100],
        "the rest, once, and not the checkpoint's record"
    );
    assert_eq!(
        writer.cursors(),
        vec![9],
        "subscribed from below the oldest record the position names"
    );
    assert!(source.refusal().is_none());
}

#[test]
fn a_log_refilled_under_the_checkpoints_numbers_is_refused() {
    let position = position_after(chain(10), 6);
    // The writer lost its tail from 60 on and wrote another execution's records there.
    let mut refilled: Vec<LogRecord> = chain(5);
    refilled.extend((6..=10).map(|id| LogRecord::event(id * 10, 8, id as i64, None)));
    let writer = FakeWriter::start(refilled, vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let refused = source.resume(&[position], WITHIN).unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    // A pool drops a source that refused; one pulled anyway stops rather than serve.
    let error = pull(&mut source, 1, Duration::from_secs(10)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    let refusal = source.refusal().expect("refused");
    assert_eq!(refusal.label(), "fingerprint", "{refusal}");
}

#[test]
fn a_log_that_lost_the_record_before_is_refused_before_anything_is_served() {
    let position = position_after(chain(10), 6);
    // The record before the checkpoint's last one (50) was replaced; 60 is the same.
    let mut refilled = chain(10);
    refilled[4] = LogRecord::event(50, 8, 5, None);
    let writer = FakeWriter::start(refilled, vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let refused = source.resume(&[position], WITHIN).unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
}

#[test]
fn a_writer_whose_log_ends_below_the_position_is_refused() {
    let position = position_after(chain(10), 6);
    // Restarted having lost everything after 40: its backlog ends below the position.
    let writer = FakeWriter::start(chain(4), vec![Behaviour::Capped { limit: 2000 }]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    source
        .resume(&[position], WITHIN)
        .expect_err("a log that ends below the position");
    let error = pull(&mut source, 1, Duration::from_secs(10)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    assert!(source.refusal().is_some());
}

/// The writer lost its tail from 30 on; producers re-sent 50 and 60 (unacknowledged
/// before the crash), stored again under their first copies' numbers, and 30 went to
/// another record: the last two records the checkpoint applied are the same, the one it
/// applied at 30 is gone. Refused: a record is never skipped, a lost one never served.
#[test]
fn a_log_refilled_below_the_record_before_is_refused() {
    let position = position_after(chain(10), 6);
    let mut refilled = chain(10);
    refilled[2] = LogRecord::event(30, 8, 1, None);
    let writer = FakeWriter::start(refilled, vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let refused = source.resume(&[position], WITHIN).unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    // A record added between two of the checkpoint's (a number reused where this shard
    // held none) is refused too.
    let position = position_after(chain(10), 6);
    let mut grown = chain(10);
    grown.insert(3, LogRecord::event(35, 7, 99, Some(3)));
    let writer = FakeWriter::start(grown, vec![Behaviour::Serve]);
    let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
    let refused = source.resume(&[position], WITHIN).unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
}

/// The fingerprint covers the record's payload as the log holds it: a record at the
/// checkpoint's last position whose link changed, or whose field a slim index does not
/// keep changed, is another record.
#[test]
fn a_changed_link_or_whole_only_field_at_the_checkpoints_record_is_refused() {
    for change in ["link", "whole-only field"] {
        let position = position_after(chain(10), 6);
        let mut changed = chain(10);
        changed[5].payload = match change {
            "link" => r#"{"event_id":6,"execution_id":7,"prev_event_id":4,"event_type":"step"}"#
                .to_owned(),
            _ => r#"{"event_id":6,"execution_id":7,"prev_event_id":5,"event_type":"step","result":{"rows":1}}"#
                .to_owned(),
        };
        let writer = FakeWriter::start(changed, vec![Behaviour::Serve]);
        let mut config = fast(&writer.addr);
        config.heartbeat = None;
        let mut source = EhdbSource::connect(config).unwrap();
        source.decode_as(wal_index::ingest::DecodeMode::Slim);
        let refused = source.resume(&[position], WITHIN).unwrap_err();
        assert_eq!(refused.label(), "fingerprint", "{change}: {refused}");
    }
}

/// A resumed shard with nothing after the checkpoint (a quiet shard) reads as caught up
/// once its log confirmed the checkpoint, not behind until its next record.
#[test]
fn a_resumed_quiet_shard_is_caught_up() {
    use wal_index::ingest::Backfill;
    let position = position_after(chain(6), 6);
    for behaviour in [Behaviour::Serve, Behaviour::Capped { limit: 2000 }] {
        let writer = FakeWriter::start(chain(6), vec![behaviour.clone()]);
        let mut source = EhdbSource::connect(fast(&writer.addr)).unwrap();
        assert_eq!(
            source.resume(std::slice::from_ref(&position), WITHIN),
            Ok(())
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while source.backfill() != Backfill::CaughtUp {
            assert!(
                Instant::now() < deadline,
                "{behaviour:?}: still {:?}",
                source.backfill()
            );
            let _ = source.pull(10, Duration::from_millis(20));
        }
    }
}

/// The log identity does not depend on the order a pool lists its shards in.
#[test]
fn the_log_identity_does_not_depend_on_the_order_of_the_shards() {
    assert_eq!(
        EhdbConfig::new("w:1").shards([3, 1, 2]).log_identity(),
        EhdbConfig::new("w:1").shards([1, 2, 3]).log_identity()
    );
}

/// A writer whose cap is below the configured one (500 against 2,000, say) sends full
/// batches that look short: the resume is not refused for them; only a heartbeat past the
/// first says the log ended.
#[test]
fn a_writer_capped_below_the_configured_cap_is_not_taken_for_a_short_log() {
    let position = position_after(chain(10), 6);
    let writer = FakeWriter::start(chain(10), vec![Behaviour::Capped { limit: 2 }]);
    let mut config = fast(&writer.addr);
    config.heartbeat = Some(Duration::from_millis(100));
    let mut source = EhdbSource::connect(config).unwrap();
    assert_eq!(source.resume(&[position], WITHIN), Ok(()));
    assert_eq!(
        pull(&mut source, 4, Duration::from_secs(10)).unwrap(),
        vec![70, 80, 90, 100]
    );
}
