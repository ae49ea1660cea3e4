//! A drive input is one function of the chain's events, whatever path supplied them and
//! however the producer wrote them: byte-identical from the drain, a tail, the state shard
//! and a rehydrate, on every index, and identical to today's bytes (today's index parses
//! each payload into a `serde_json::Value` and serializes the spine's values as one array).

mod common;

use bytes::Bytes;
use chain_fold::{Event, EventId};
use common::Sources;
use serde_json::Value;
use wal_index::labels::DriveLabel;
use wal_index::rehydrate::RehydrateGate;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, StateIndex};

const EXECUTION: i64 = 11;

/// Event `id` of a three-event chain, spelled one of two ways: `tidy` is compact with the
/// envelope's keys first; the other has the keys reversed, spaces, escapes where none are
/// needed and another spelling of the same float.
fn spelled(id: EventId, tidy: bool) -> Bytes {
    let ty = match id {
        1 => "playbook_started",
        _ => "step",
    };
    let prev = if id == 1 {
        "null".to_string()
    } else {
        (id - 1).to_string()
    };
    let text = if tidy {
        format!(
            r#"{{"event_id":{id},"execution_id":{EXECUTION},"prev_event_id":{prev},"event_type":"{ty}","result":{{"ok":true,"n":100,"f":0.5}},"note":"café/x"}}"#
        )
    } else {
        format!(
            "{{ \"note\" : \"caf\\u00e9\\/x\", \"result\" : {{ \"f\" : 5e-1, \"n\" :100 , \"ok\" : true }} ,\n \"event_type\":\"{ty}\", \"prev_event_id\" : {prev}, \"execution_id\" : {EXECUTION}, \"event_id\" : {id} }}"
        )
    };
    Bytes::from(text)
}

fn decoded(tidy: bool) -> Vec<Event> {
    (1..=3)
        .map(|id| Event::from_json(&spelled(id, tidy)).unwrap())
        .collect()
}

/// Today's drive input for the chain: each payload parsed, the spine's values serialized.
fn todays_bytes() -> String {
    let values: Vec<Value> = (1..=3)
        .map(|id| serde_json::from_slice(&spelled(id, false)).unwrap())
        .collect();
    serde_json::to_string(&values).unwrap()
}

fn served_bytes(drive: &wal_index::Drive) -> String {
    let bytes = drive
        .outcome
        .spine()
        .expect("served")
        .json_array()
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn one_function_of_the_events_on_every_path<I: StateIndex>() {
    let today = todays_bytes();
    let no_wait = DriveBudget::new(0, std::time::Duration::ZERO);
    // The drain, tidy spelling.
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(decoded(true));
    let drive = index.drive(EXECUTION, Some(3), &DriveFlow::new(no_wait));
    assert_eq!(drive.label, DriveLabel::Served);
    assert_eq!(served_bytes(&drive), today, "drain");
    // A tail, the other spelling.
    let index = I::with_config(IndexConfig::default());
    let tail = (1..=3).map(|id| spelled(id, false)).collect();
    let drive = index.drive(
        EXECUTION,
        Some(3),
        &DriveFlow::new(no_wait).tail_events(tail),
    );
    assert_eq!(drive.label, DriveLabel::Served);
    assert_eq!(served_bytes(&drive), today, "tail");
    // A tail over a drained index, each in its own spelling: an identical redelivery.
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(decoded(true));
    let tail = (1..=3).map(|id| spelled(id, false)).collect();
    let drive = index.drive(
        EXECUTION,
        Some(3),
        &DriveFlow::new(no_wait).tail_events(tail),
    );
    assert_eq!(served_bytes(&drive), today, "tail over the drain");
    assert_eq!(
        index.chain(EXECUTION).unwrap().rewrites(),
        0,
        "not a rewrite"
    );
    // The state shard, the other spelling, over a drained index: no mismatch either.
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(decoded(true)[..2].to_vec());
    let sources = Sources {
        shard: Some(decoded(false)),
        retained: None,
    };
    let drive = index.drive(
        EXECUTION,
        Some(3),
        &DriveFlow::new(no_wait).fallbacks(&sources),
    );
    assert_eq!(drive.label, DriveLabel::ServedShard);
    assert_eq!(served_bytes(&drive), today, "shard");
    // A rehydrate, the other spelling.
    let index = I::with_config(IndexConfig::default());
    let sources = Sources {
        shard: None,
        retained: Some(decoded(false)),
    };
    let gate = RehydrateGate::default();
    let drive = index.drive(
        EXECUTION,
        Some(3),
        &DriveFlow::new(no_wait)
            .fallbacks(&sources)
            .rehydrate_gate(&gate),
    );
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert_eq!(served_bytes(&drive), today, "rehydrate");
    // The slim projection of either spelling is today's slim value, serialized.
    let index = I::with_config(IndexConfig {
        slim: true,
        ..IndexConfig::default()
    });
    index.apply_batch(decoded(false));
    let drive = index.drive(EXECUTION, Some(3), &DriveFlow::new(no_wait));
    let slim_today: Vec<Value> = (1..=3)
        .map(|id| {
            let Value::Object(map) = serde_json::from_slice(&spelled(id, true)).unwrap() else {
                unreachable!()
            };
            Value::Object(
                map.into_iter()
                    .filter(|(k, _)| chain_fold::SLIM_KEYS.contains(&k.as_str()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        served_bytes(&drive),
        serde_json::to_string(&slim_today).unwrap(),
        "slim"
    );
}

for_each_engine!(one_function_of_the_events_on_every_path);
