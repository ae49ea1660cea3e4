//! Resuming after a checkpoint on a real `nats-server -js` (`JetStreamSource::resume`): the
//! next consumer starts right after the checkpoint's record, which the stream must still
//! hold with the same payload; a stream deleted and re-created under the same name is
//! another log. Skips (with a message) where no `nats-server` exists, unless
//! `SB_REQUIRE_NATS` is set.

mod common;

use std::time::{Duration, Instant};

use common::chain;
use wal_index::WalSource;
use wal_index::checkpoint::Position;
use wal_index::ingest::Pull;
use wal_source_nats::test_broker::Broker;
use wal_source_nats::{JetStreamConfig, JetStreamPublisher, JetStreamSource, Subjects};

const LIMIT: Duration = Duration::from_secs(60);

fn publish(broker: &Broker, stream: &str, execution: i64, len: i64) {
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut publisher = JetStreamPublisher::connect(&config, Subjects::default(), 1).unwrap();
    publisher.ensure_stream(stream, LIMIT).unwrap();
    for (execution, payload) in chain(execution, len) {
        publisher.publish(execution, payload).unwrap();
    }
    publisher.flush().unwrap();
}

/// Pulls until `n` records arrived or 20 s passed; their stream sequences.
fn pull(source: &mut JetStreamSource, n: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        if let Ok(Pull::Records(batch)) = source.pull(n - got.len(), Duration::from_millis(100)) {
            got.extend(batch.iter().map(|r| r.position));
        }
    }
    got
}

fn position_after(broker: &Broker, stream: &str, n: usize) -> Position {
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut source = JetStreamSource::connect(config).unwrap();
    assert_eq!(pull(&mut source, n).len(), n);
    let mut at = source
        .position()
        .expect("a position once the consumer exists");
    assert_eq!(at.log, source.log_identity().unwrap());
    at.positions.remove(0)
}

#[test]
fn a_resumed_source_starts_right_after_the_checkpoints_record() {
    let Some(broker) = Broker::start("resume_after") else {
        return;
    };
    let stream = "t_resume_after";
    publish(&broker, stream, 7, 10);
    let position = position_after(&broker, stream, 6);
    assert_eq!(position.last.sequence, 6);
    assert_eq!(position.before.map(|b| b.sequence), Some(5));
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut source = JetStreamSource::connect(config)
        .unwrap()
        .resume(&position)
        .unwrap();
    assert_eq!(pull(&mut source, 4), vec![7, 8, 9, 10], "the rest, once");
}

#[test]
fn a_stream_re_created_under_its_name_is_another_log_and_a_lost_record_is_refused() {
    let Some(broker) = Broker::start("resume_recreated") else {
        return;
    };
    let stream = "t_resume_recreated";
    publish(&broker, stream, 7, 10);
    let position = position_after(&broker, stream, 6);
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let before = JetStreamSource::connect(config.clone())
        .unwrap()
        .log_identity()
        .unwrap();

    // Deleted and re-created with other records: another log, whatever its sequences.
    let publisher = JetStreamPublisher::connect(&config, Subjects::default(), 1).unwrap();
    publisher.delete_stream(stream).unwrap();
    publish(&broker, stream, 8, 10);
    let after = JetStreamSource::connect(config.clone())
        .unwrap()
        .log_identity()
        .unwrap();
    assert_ne!(before, after, "the creation time tells them apart");
    // And the record at the checkpoint's sequence is not the one it fingerprinted.
    let refused = JetStreamSource::connect(config.clone())
        .unwrap()
        .resume(&position)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");

    // A sequence the stream does not hold: refused too.
    let mut beyond = position.clone();
    beyond.last.sequence = 1_000;
    let refused = JetStreamSource::connect(config)
        .unwrap()
        .resume(&beyond)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
}
