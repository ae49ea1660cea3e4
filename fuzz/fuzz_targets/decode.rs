//! Arbitrary bytes into `Event::from_json`, `Event::from_json_slim` and the JSON-lines WAL source: never a panic, a
//! decoded event holds today's bytes for its value, and every line either decodes or is
//! reported bad, with the decoded events intact.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use chain_fold::Event;
use libfuzzer_sys::fuzz_target;
use wal_index::{Drain, DrainConfig, StateIndex, WalIndex, WalSource};
use wal_index::ingest::{JsonLinesSource, Pull};

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = Event::from_json(data) {
        // A decoded event keeps its canonical bytes (today's parse and serialization of
        // the input), which decode to themselves, and survives the slim projection.
        let todays: serde_json::Value = serde_json::from_slice(data).expect("it decoded");
        assert_eq!(event.payload(), serde_json::to_vec(&todays).unwrap().as_slice());
        let again = Event::from_json(event.payload()).expect("canonical bytes decode");
        assert_eq!(again, event);
        let slim = event.to_slim();
        assert_eq!(
            (slim.id(), slim.execution_id(), slim.prev()),
            (event.id(), event.execution_id(), event.prev())
        );
        // The one-pass slim decode is the two-pass one.
        let fused = Event::from_json_slim(data).expect("it decoded");
        assert_eq!(fused, slim);
        assert_eq!(fused.payload(), slim.payload());
    } else {
        assert!(Event::from_json_slim(data).is_err(), "slim decode rejects it too");
    }
    // As a WAL file: count the lines the source yields, then drain them.
    let mut source = JsonLinesSource::new(data);
    let mut lines = 0u64;
    while let Ok(Pull::Records(records)) = source.pull(7, Duration::ZERO) {
        lines += records.len() as u64;
    }
    let index = Arc::new(WalIndex::default());
    let mut drain = Drain::new(
        index.clone(),
        JsonLinesSource::new(data),
        DrainConfig::default(),
    );
    let report = drain
        .run_until_closed()
        .expect("reading from memory cannot fail")
        .clone();
    assert_eq!(
        report.events + report.bad,
        lines,
        "every line is applied or reported"
    );
    assert!(index.stats().events as u64 <= report.events);
});
