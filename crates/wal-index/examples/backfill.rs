//! Times a cold-start backfill: one million pre-decoded events applied in batches of 200,
//! through each engine, with no reader. `cargo run --release -p wal-index --example backfill`

use std::time::Instant;

use chain_fold::Event;
use wal_index::baseline::MutexIndex;
use wal_index::{IndexConfig, StateIndex, WalIndex};

fn events(total: i64, per_execution: i64) -> Vec<Event> {
    let payload = bytes::Bytes::from_static(br#"{"slim":true}"#);
    let executions = total / per_execution;
    // Interleave executions the way a busy WAL does: round-robin over 500 live ones.
    let live = 500;
    let mut out = Vec::with_capacity(total as usize);
    for group in 0..executions / live {
        for k in 0..per_execution {
            for e in 0..live {
                let exec = group * live + e;
                let id = exec * per_execution + k + 1;
                let (prev, ty) = if k == 0 {
                    (None, "playbook_started")
                } else {
                    (Some(id - 1), "step")
                };
                out.push(Event::from_parts(id, exec, prev, ty, payload.clone()));
            }
        }
    }
    out
}

fn run<I: StateIndex>(events: &[Event]) -> f64 {
    let index = I::with_config(IndexConfig::default());
    let started = Instant::now();
    for batch in events.chunks(200) {
        index.apply_batch(batch.to_vec());
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(index.stats().events, events.len());
    events.len() as f64 / secs
}

fn main() {
    let events = events(1_000_000, 27);
    for _ in 0..2 {
        println!("lockfree: {:>12.0} events/s", run::<WalIndex>(&events));
        println!("mutex:    {:>12.0} events/s", run::<MutexIndex>(&events));
    }
}
