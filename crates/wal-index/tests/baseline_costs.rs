//! `MutexIndex` keeps today's data path (docs/baseline.md): every payload is held as a
//! parsed value, walked for today's byte estimate, projected when slim, and dropped with its
//! execution.

use chain_fold::Event;
use wal_index::baseline::MutexIndex;
use wal_index::{IndexConfig, StateIndex};

fn envelope(id: i64, prev: Option<i64>, worker: &str) -> Event {
    let value = serde_json::json!({
        "event_id": id,
        "execution_id": 1,
        "prev_event_id": prev,
        "event_type": if prev.is_none() { "playbook_started" } else { "step" },
        "result": {"rows": [1, 2, 3]},
        "worker_id": worker,
    });
    Event::from_json(&serde_json::to_vec(&value).unwrap()).unwrap()
}

#[test]
fn the_walked_estimate_follows_the_stored_values() {
    let index = MutexIndex::new(IndexConfig::default());
    assert_eq!(index.walked_bytes(), 0);
    index.apply(envelope(1, None, "w"));
    let one = index.walked_bytes();
    assert!(one > 40, "the walk counts keys and values: {one}");
    index.apply(envelope(2, Some(1), "w"));
    let two = index.walked_bytes();
    assert!(
        two > one,
        "a second event adds its own estimate: {one} then {two}"
    );
    // A redelivery replaces its value: no double count, and a larger payload moves the
    // estimate by the difference.
    index.apply(envelope(2, Some(1), "w"));
    assert_eq!(index.walked_bytes(), two);
    index.apply(envelope(2, Some(1), "worker-with-a-longer-name"));
    assert_eq!(
        index.walked_bytes(),
        two + "worker-with-a-longer-name".len() - 1
    );
    assert!(index.evict(1));
    assert_eq!(index.walked_bytes(), 0, "evicted with its execution");
}

#[test]
fn the_slim_projection_is_what_today_stores() {
    let full = MutexIndex::new(IndexConfig::default());
    let slim = MutexIndex::new(IndexConfig {
        slim: true,
        ..IndexConfig::default()
    });
    for index in [&full, &slim] {
        index.apply(envelope(1, None, "a-worker-id-the-consumer-ignores"));
    }
    assert!(
        slim.walked_bytes() + "a-worker-id-the-consumer-ignores".len() < full.walked_bytes(),
        "slim {} vs full {}",
        slim.walked_bytes(),
        full.walked_bytes()
    );
    // Builds hand back the same bytes on every engine: the slim chain's own payloads.
    let spine = slim.build(1, Some(1)).spine.unwrap();
    let json = spine.json_array().to_bytes();
    assert!(!json.windows(9).any(|w| w == b"worker_id"), "{json:?}");
}
