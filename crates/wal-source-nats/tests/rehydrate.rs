//! One execution's events read from a real broker by subject, in both subject layouts, and
//! a drive behind a backfilling drain served through that read.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{chain, tip};
use wal_index::flow::ReadBounds;
use wal_index::ingest::{Backfill, DecodeMode};
use wal_index::labels::DriveLabel;
use wal_index::rehydrate::RehydrateGate;
use wal_index::{DriveBudget, DriveFlow, StateIndex, WalIndex};
use wal_source_nats::test_broker::Broker;
use wal_source_nats::{
    JetStreamConfig, JetStreamPublisher, JetStreamRehydrate, SubjectLayout, Subjects,
};

const LIMIT: Duration = Duration::from_secs(60);

fn ids(events: &[wal_index::Event]) -> Vec<i64> {
    events.iter().map(|e| e.id()).collect()
}

#[test]
fn an_execution_is_read_by_its_subject_in_either_layout() {
    let Some(broker) = Broker::start("an_execution_is_read_by_its_subject_in_either_layout") else {
        return;
    };
    let stream = "t_rehydrate_layouts";
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut publisher = JetStreamPublisher::connect(&config, Subjects::default(), 4).unwrap();
    publisher.ensure_stream(stream, LIMIT).unwrap();
    // This crate's layout for executions 1..=5, interleaved, and production's NATS-era
    // layout for execution 42 (tenant and org tokens the read does not know).
    let chains: Vec<_> = (1..=5).map(|e| chain(e, 6)).collect();
    for k in 0..6 {
        for c in &chains {
            let (execution, payload) = c[k].clone();
            publisher.publish(execution, payload).unwrap();
        }
    }
    for (k, (_, payload)) in chain(42, 4).into_iter().enumerate() {
        let subject = format!("noetl.events.acme.ops.42.{}", k % 2);
        publisher.publish_on(subject, payload).unwrap();
    }
    publisher.flush().unwrap();

    let ours = JetStreamRehydrate::connect(config.clone(), SubjectLayout::default()).unwrap();
    let events = ours.read(3, DecodeMode::Whole).unwrap();
    assert_eq!(ids(&events), (3001..=3006).collect::<Vec<_>>());
    assert!(events.iter().all(|e| e.execution_id() == 3));
    // A slim index's read decodes each record once, straight to its slim projection.
    let slim = ours.read(3, DecodeMode::Slim).unwrap();
    sb_test_kit::decoded::assert_slim_read_of(&slim, &events);
    assert_eq!(
        ours.read(99, DecodeMode::Whole).unwrap(),
        Vec::new(),
        "no messages: an empty history"
    );
    assert_eq!(
        ours.read(42, DecodeMode::Whole).unwrap(),
        Vec::new(),
        "not on this layout's subjects"
    );

    let production = JetStreamRehydrate::connect(config, SubjectLayout::tenant_org()).unwrap();
    assert_eq!(
        ids(&production.read(42, DecodeMode::Whole).unwrap()),
        vec![42001, 42002, 42003, 42004]
    );
    assert_eq!(production.read(3, DecodeMode::Whole).unwrap(), Vec::new());
}

#[test]
fn a_read_over_its_cap_is_refused_not_cut_short() {
    let Some(broker) = Broker::start("a_read_over_its_cap_is_refused_not_cut_short") else {
        return;
    };
    let stream = "t_rehydrate_cap";
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut publisher = JetStreamPublisher::connect(&config, Subjects::default(), 1).unwrap();
    publisher.ensure_stream(stream, LIMIT).unwrap();
    for (execution, payload) in chain(7, 10) {
        publisher.publish(execution, payload).unwrap();
    }
    publisher.flush().unwrap();
    let capped = JetStreamRehydrate::connect(config, SubjectLayout::default())
        .unwrap()
        .bounds(ReadBounds::DEFAULT.with_max_records(5));
    let error = capped.read(7, DecodeMode::Whole).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
}

#[test]
fn a_drive_behind_the_backfill_is_served_through_the_broker() {
    let Some(broker) = Broker::start("a_drive_behind_the_backfill_is_served_through_the_broker")
    else {
        return;
    };
    let stream = "t_rehydrate_drive";
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let mut publisher = JetStreamPublisher::connect(&config, Subjects::default(), 2).unwrap();
    publisher.ensure_stream(stream, LIMIT).unwrap();
    for (execution, payload) in chain(5, 8) {
        publisher.publish(execution, payload).unwrap();
    }
    publisher.flush().unwrap();

    // No drain has applied anything, and the index hears that one is backfilling.
    let index = Arc::new(WalIndex::default());
    index.note_backfill(Backfill::Behind { remaining: None });
    let retained = JetStreamRehydrate::connect(config, SubjectLayout::default()).unwrap();
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::default())
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    // The async drive on a two-worker runtime, as a worker pool runs it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let drive = runtime.block_on(index.drive_async(5, Some(tip(5, 8)), &flow));
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert!(drive.backfill_skip);
    assert_eq!(
        (drive.wakes, drive.timeouts),
        (0, 0),
        "no wait before the read"
    );
    assert_eq!(
        drive.outcome.spine().unwrap().ids(),
        (5001..=5008).collect::<Vec<_>>()
    );
}
