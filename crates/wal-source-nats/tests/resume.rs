//! Resuming after a checkpoint on a real `nats-server -js` (`WalSource::resume`): the
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
    assert_eq!(at.log, source.log().unwrap().unwrap());
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
    assert_eq!(position.last().sequence, 6);
    assert_eq!(
        position.records.len(),
        1,
        "a stream never reuses a sequence"
    );
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut source = JetStreamSource::connect(config).unwrap();
    source.resume(&[position], LIMIT).unwrap();
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
        .log()
        .unwrap()
        .unwrap();

    // Deleted and re-created with other records: another log, whatever its sequences.
    let publisher = JetStreamPublisher::connect(&config, Subjects::default(), 1).unwrap();
    publisher.delete_stream(stream).unwrap();
    publish(&broker, stream, 8, 10);
    let after = JetStreamSource::connect(config.clone())
        .unwrap()
        .log()
        .unwrap()
        .unwrap();
    assert_ne!(before, after, "the creation time tells them apart");
    // And the record at the checkpoint's sequence is not the one it fingerprinted.
    let refused = JetStreamSource::connect(config.clone())
        .unwrap()
        .resume(std::slice::from_ref(&position), LIMIT)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");

    // A sequence the stream does not hold: refused too.
    let mut beyond = position.clone();
    beyond.records = vec![wal_index::checkpoint::Fingerprint {
        sequence: 1_000,
        ..position.last()
    }];
    let refused = JetStreamSource::connect(config)
        .unwrap()
        .resume(&[beyond], LIMIT)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
}

/// A stream that keeps at most `max_messages` (older ones are discarded), over every
/// event subject.
fn limited_stream(broker: &Broker, name: &str, max_messages: i64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(broker.url()).await.unwrap();
        let context = async_nats::jetstream::new(client);
        context
            .create_stream(async_nats::jetstream::stream::Config {
                name: name.to_owned(),
                subjects: vec![Subjects::default().all()],
                max_messages,
                ..Default::default()
            })
            .await
            .unwrap();
    });
}

/// The checkpoint's last message expired (the stream's limits discarded it and all before
/// it) and the stream's first sequence is the next one: nothing after the position is
/// missing, so the pool resumes. Once a message after the position expired too, it is a
/// gap, and refused.
#[test]
fn an_expired_last_message_resumes_and_a_gap_after_it_is_refused() {
    let Some(broker) = Broker::start("resume_expired") else {
        return;
    };
    let stream = "t_resume_expired";
    limited_stream(&broker, stream, 4);
    publish(&broker, stream, 7, 6); // holds 3..=6
    let position = position_after(&broker, stream, 4);
    assert_eq!(position.last().sequence, 6);
    publish(&broker, stream, 8, 4); // holds 7..=10: 6 expired, nothing after it lost
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut source = JetStreamSource::connect(config.clone()).unwrap();
    source
        .resume(std::slice::from_ref(&position), LIMIT)
        .expect("nothing after the position is missing");
    assert_eq!(pull(&mut source, 4), vec![7, 8, 9, 10], "the rest, once");
    publish(&broker, stream, 9, 1); // holds 8..=11: 7, after the position, is gone
    let refused = JetStreamSource::connect(config)
        .unwrap()
        .resume(&[position], LIMIT)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
}

/// Two pools of one stream, each on its own subject filter: their logs are not the same
/// (a checkpoint of one is refused by the other as another log, even from a shared
/// directory), and a position whose message is on another filter's subject is refused by
/// the resume itself.
#[test]
fn a_checkpoint_taken_through_another_subject_filter_is_refused() {
    use wal_index::WalIndex;
    use wal_index::checkpoint::{Checkpoint, CheckpointStore, DirStore, SourcePosition};

    let Some(broker) = Broker::start("resume_filter") else {
        return;
    };
    let stream = "t_resume_filter";
    let subjects = Subjects::default();
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut publisher = JetStreamPublisher::connect(&config, subjects.clone(), 2).unwrap();
    publisher.ensure_stream(stream, LIMIT).unwrap();
    for execution in [2, 3, 4, 5] {
        for (execution, payload) in chain(execution, 3) {
            publisher.publish(execution, payload).unwrap();
        }
    }
    publisher.flush().unwrap();
    let pool = |shard| config.clone().filter(subjects.shard_filter(shard, 2));

    let mut first = JetStreamSource::connect(pool(0)).unwrap();
    assert_eq!(pull(&mut first, 6).len(), 6);
    let at: SourcePosition = first.position().unwrap();
    let mut other = JetStreamSource::connect(pool(1)).unwrap();
    assert_ne!(
        at.log,
        other.log().unwrap().unwrap(),
        "the filter is part of the log"
    );

    // Pool 0 checkpoints into a directory pool 1 also reads: pool 1 never restores it.
    let dir = std::env::temp_dir().join(format!("sb-nats-filter-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = DirStore::open(&dir, 3).unwrap();
    store
        .write(&Checkpoint::capture(&WalIndex::default(), at.clone()).encode())
        .unwrap();
    let restored = wal_index::checkpoint::restore_newest(
        &store,
        &WalIndex::default(),
        &other.log().unwrap().unwrap(),
        |_| Ok(()),
    );
    assert!(restored.positions.is_none());
    assert_eq!(restored.refused[0].1.label(), "other_log");
    std::fs::remove_dir_all(&dir).unwrap();

    // Pool 0's position handed to a source on pool 1's filter: the message there is not
    // one pool 1 reads.
    let refused = JetStreamSource::connect(pool(1))
        .unwrap()
        .resume(std::slice::from_ref(&at.positions[0]), LIMIT)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    assert!(refused.to_string().contains("does not read"), "{refused}");
}

/// A stream deleted and re-created under a running source: another log, so the source
/// stops (a fatal error, not retried) rather than carry the new stream's sequences under
/// the old identity.
#[test]
fn a_stream_re_created_under_a_running_source_stops_it() {
    let Some(broker) = Broker::start("resume_recreated_running") else {
        return;
    };
    let stream = "t_resume_recreated_running";
    publish(&broker, stream, 7, 5);
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut source = JetStreamSource::connect(config.clone()).unwrap();
    assert_eq!(pull(&mut source, 5).len(), 5);
    let publisher = JetStreamPublisher::connect(&config, Subjects::default(), 1).unwrap();
    publisher.delete_stream(stream).unwrap();
    publish(&broker, stream, 8, 5);
    let deadline = Instant::now() + Duration::from_secs(30);
    let error = loop {
        assert!(Instant::now() < deadline, "the source never noticed");
        match source.pull(10, Duration::from_millis(100)) {
            Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => break error,
            Ok(Pull::Records(batch)) => panic!("records of another log: {batch:?}"),
            _ => {}
        }
    };
    assert!(error.to_string().contains("re-created"), "{error}");
}

/// After a break, a record the stream no longer holds at a sequence the source returned is
/// found once the source's verify window has passed, and the source resumes there. On a
/// cluster this is a deposed stream leader that served the replacement consumer records it
/// never committed (the new leader gave those sequences to other records: the drill's loss
/// on nats-server 2.9); on one server the way to take records from under sequences the
/// source returned is to delete them while the broker restarts. Without the check
/// (`verify_window` zero) the source never looks back and never rewinds.
#[test]
fn records_gone_from_under_returned_sequences_rewind_the_source_there() {
    let Some(mut broker) = Broker::start("gone_under_the_source") else {
        return;
    };
    let stream = "t_gone_under_the_source";
    publish(&broker, stream, 7, 40);
    let config = JetStreamConfig::new(broker.url())
        .stream(stream)
        .verify_window(Duration::from_secs(2));
    let mut source = JetStreamSource::connect(config.clone()).unwrap();
    assert_eq!(pull(&mut source, 40), (1..=40).collect::<Vec<_>>());

    // A break (the broker is killed, the source finds it down, the broker comes back),
    // and records 30..=35 are gone from the stream.
    broker.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while source.pull(100, Duration::from_millis(50)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the source never saw the broker go"
        );
    }
    broker.restart();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(broker.url()).await.unwrap();
        let stream = async_nats::jetstream::new(client)
            .get_stream(stream)
            .await
            .unwrap();
        for sequence in 30..=35 {
            stream.delete_message(sequence).await.unwrap();
        }
    });

    let mut again = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && source.stats().rewinds == 0 {
        if let Ok(Pull::Records(batch)) = source.pull(100, Duration::from_millis(100)) {
            again.extend(batch.iter().map(|r| r.position));
        }
    }
    assert_eq!(source.stats().rewinds, 1, "{:?}", source.stats());
    while Instant::now() < deadline && again.len() < 5 {
        if let Ok(Pull::Records(batch)) = source.pull(100, Duration::from_millis(100)) {
            again.extend(batch.iter().map(|r| r.position));
        }
    }
    assert_eq!(
        again,
        vec![36, 37, 38, 39, 40],
        "resumed at the first record gone"
    );
}
