//! Measures, against a running broker, for each engine side by side:
//! how long a restarted pool takes to rebuild its index from N retained events
//! (replay-on-boot), and how long a drive waits for a tip that goes through the broker.
//!
//! ```text
//! bash scripts/nats-bench.sh            # starts a throwaway nats-server, runs this
//! cargo run --release -p wal-source-nats --example broker_bench -- nats://127.0.0.1:4222 100000
//! ```
//!
//! Rebuild: publish N events (chains of 27, ~400 B payloads) once; then, three times per
//! engine, start an empty index with a replay-on-boot drain and time until it holds all N.
//! Drive latency: with the index caught up, 2,000 times in a row publish one new event that
//! extends an execution, and at once drive that execution at the new tip; the latency is
//! from just before the publish to the served spine (producer → broker → consumer → apply →
//! wake-up → build).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::{Drain, DrainConfig, DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};
use wal_source_nats::{JetStreamConfig, JetStreamPublisher, JetStreamSource, Subjects};

const CHAIN: i64 = 27;
const REBUILDS: usize = 3;
const DRIVES: i64 = 2_000;

fn event(execution: i64, k: i64) -> Bytes {
    let id = execution * 1_000 + k;
    let (prev, kind) = if k == 1 {
        ("null".to_owned(), "playbook_started")
    } else {
        ((id - 1).to_string(), "step_completed")
    };
    let filler = "x".repeat(300);
    Bytes::from(format!(
        r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{prev},"event_type":"{kind}","result":{{"filler":"{filler}"}}}}"#
    ))
}

/// A prefix of this run's own, so a stream left by an interrupted run cannot overlap.
fn subjects() -> Subjects {
    Subjects::with_prefix(format!("broker_bench.{}", std::process::id())).expect("valid prefix")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What the stream holds, and where each execution's chain continues.
struct Retained {
    events: usize,
    next_k: Vec<i64>,
}

fn measure<I: StateIndex>(url: &str, stream: &str, retained: &mut Retained) {
    let events = retained.events;
    let executions = retained.next_k.len() as i64;
    let config = JetStreamConfig::new(url).stream(stream);
    let mut rebuilds = Vec::new();
    let mut last = None;
    for _ in 0..REBUILDS {
        let index = Arc::new(I::with_config(IndexConfig::default()));
        let started = Instant::now();
        let source = JetStreamSource::connect(config.clone()).expect("source");
        let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
        while index.stats().events < events {
            std::thread::sleep(Duration::from_micros(200));
        }
        rebuilds.push(started.elapsed());
        if let Some((_, old)) = last.replace((index, drain)) {
            let _ = old.stop();
        }
    }
    rebuilds.sort();
    let (index, drain) = last.expect("at least one rebuild");

    // Drive latency through the broker: one live event at a time.
    let mut publisher = JetStreamPublisher::connect(&config, subjects(), 1).expect("publisher");
    let budget = DriveBudget {
        attempts: 50,
        retry: Duration::from_millis(200),
    };
    let mut latencies = Vec::with_capacity(DRIVES as usize);
    let mut served = 0;
    for n in 0..DRIVES {
        // Every live event is new to the stream: a drive can only be served by it.
        let execution = n % executions;
        let k = retained.next_k[execution as usize];
        retained.next_k[execution as usize] += 1;
        retained.events += 1;
        let tip = execution * 1_000 + k;
        let started = Instant::now();
        publisher
            .publish(execution, event(execution, k))
            .expect("publish");
        let drive = index.drive(execution, Some(tip), &DriveFlow::new(budget));
        latencies.push(started.elapsed());
        served += usize::from(drive.outcome.spine().is_some());
    }
    publisher.flush().expect("flush");
    let _ = drain.stop();
    latencies.sort();
    println!(
        "{:<9} rebuild of {events} retained events: median {:.0} ms (min {:.0}, max {:.0}; {:.2} M ev/s) | \
         tip through the broker → served: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({served}/{DRIVES} served)",
        I::NAME,
        ms(rebuilds[rebuilds.len() / 2]),
        ms(rebuilds[0]),
        ms(rebuilds[rebuilds.len() - 1]),
        events as f64 / rebuilds[rebuilds.len() / 2].as_secs_f64() / 1e6,
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies[latencies.len() - 1]),
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let requested: usize = args.next().map_or(100_000, |n| n.parse().expect("N"));
    // Whole chains only, so every live event extends a complete chain.
    let executions = (requested as i64 + CHAIN - 1) / CHAIN;
    let events = (executions * CHAIN) as usize;
    let stream = format!("broker_bench_{}", std::process::id());
    let config = JetStreamConfig::new(url.as_str()).stream(&stream);
    let mut publisher = JetStreamPublisher::connect(&config, subjects(), 1).expect("publisher");
    publisher
        .ensure_stream(&stream, Duration::from_secs(10))
        .expect("stream");
    let started = Instant::now();
    for execution in 0..executions {
        for k in 1..=CHAIN {
            publisher
                .publish(execution, event(execution, k))
                .expect("publish");
        }
    }
    publisher.flush().expect("flush");
    println!(
        "published {events} events ({executions} executions) in {:.0} ms to {url}, stream {stream}",
        ms(started.elapsed())
    );
    let mut retained = Retained {
        events,
        next_k: vec![CHAIN + 1; executions as usize],
    };
    // Twice each, interleaved, so an order effect would show. Each measurement's live
    // events stay in the stream, so later rebuilds replay slightly more.
    for _ in 0..2 {
        measure::<WalIndex>(&url, &stream, &mut retained);
        measure::<MutexIndex>(&url, &stream, &mut retained);
        measure::<ShardedMutexIndex>(&url, &stream, &mut retained);
    }
    let _ = publisher.delete_stream(&stream);
}
