//! The drain alone over a backlog of the simulator's production-sized envelopes, in
//! process: how fast the engine indexes a restart's backlog with one decode thread and with
//! several, side by side in one run with four references on the same bytes, each on one
//! thread: the floor (one `memchr` pass over every byte), today's decode (each payload
//! parsed into a `serde_json::Value`, as today's worker does before its lock), serde_json's
//! validation of every payload (`IgnoredAny`), and the engine's decode alone
//! (`Event::from_json_slim`, nothing indexed); and the engine's decode alone on two
//! threads, each event dropped as soon as it is made (the parse's own ceiling on two
//! cores: no event is kept, so no fresh memory is faulted in).
//!
//! ```sh
//! cargo run --release -p sb-sim --example drain_throughput -- 17803 3
//! ```
//!
//! Arguments: the backlog's events (default 17,803, production's retained volume) and the
//! rounds (default 3; each round runs every setting once, in turn). Prints each round's
//! time and MB/s per setting, and the medians.

use std::sync::Arc;
use std::time::Instant;

use sb_sim::SimConfig;
use sb_sim::workload::{Generator, Item, Shape};
use wal_index::ingest::channel_wal;
use wal_index::{Drain, DrainConfig, StateIndex, WalIndex};

/// One drain of `items` into a fresh engine with `threads` decode threads; its seconds.
fn drain_once(items: &[Item], threads: usize, round: usize, bytes: usize) -> f64 {
    let index = Arc::new(WalIndex::new(SimConfig::production_index()));
    let (wal, source) = channel_wal();
    for item in items {
        wal.append(item.payload.clone());
    }
    drop(wal);
    let config = DrainConfig {
        decode_threads: threads,
        ..DrainConfig::default()
    };
    let started = Instant::now();
    let report = Drain::new(Arc::clone(&index), source, config)
        .run_until_closed()
        .expect("in-process")
        .clone();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "round {round}: {threads} decode thread(s): {:.0} ms, {:.0} MB/s ({} events, {} resident)",
        secs * 1e3,
        bytes as f64 / 1e6 / secs,
        report.events,
        index.stats().events
    );
    secs
}

/// A reference's name and what it does to one payload (true when the payload passes).
type Reference = (&'static str, fn(&[u8]) -> bool);

/// The references timed beside the drain, each over every payload on one thread: its name,
/// and what it does to one payload (true when the payload passes).
const REFERENCES: [Reference; 4] = [
    ("floor (memchr pass)", |p| {
        memchr::memchr_iter(b'"', p).count() > 0
    }),
    ("today's decode (serde_json::Value)", |p| {
        serde_json::from_slice::<serde_json::Value>(p).is_ok()
    }),
    ("serde_json's validation (IgnoredAny), one thread", |p| {
        serde_json::from_slice::<serde::de::IgnoredAny>(p).is_ok()
    }),
    (
        "the engine's decode alone (Event::from_json_slim), one thread",
        |p| chain_fold::Event::from_json_slim(p).is_ok(),
    ),
];

/// One round of every reference over `items`: each one's seconds, printed.
fn references_once(items: &[Item], round: usize) -> Vec<f64> {
    REFERENCES
        .iter()
        .map(|(name, run)| {
            let started = Instant::now();
            let passed = items.iter().filter(|i| run(&i.payload)).count();
            let secs = started.elapsed().as_secs_f64();
            println!(
                "round {round}: {name}: {:.0} ms ({passed} passed)",
                secs * 1e3
            );
            secs
        })
        .collect()
}

/// The engine's decode alone over `items` on `threads` threads (contiguous runs of about
/// equal count), each event dropped at once; its seconds, printed.
fn decode_alone_on(items: &[Item], threads: usize, round: usize) -> f64 {
    let started = Instant::now();
    let passed: usize = std::thread::scope(|scope| {
        let runs: Vec<_> = items
            .chunks(items.len().div_ceil(threads.max(1)).max(1))
            .map(|run| {
                scope.spawn(move || {
                    run.iter()
                        .filter(|i| chain_fold::Event::from_json_slim(&i.payload).is_ok())
                        .count()
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap_or(0)).sum()
    });
    let secs = started.elapsed().as_secs_f64();
    println!(
        "round {round}: the engine's decode alone, {threads} threads, nothing kept: {:.0} ms ({passed} passed)",
        secs * 1e3
    );
    secs
}

fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(17_803);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let items = Generator::new(Shape::default()).take(events);
    let bytes: usize = items.iter().map(|i| i.payload.len()).sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let settings: Vec<usize> = [1, 2, cores.min(4)]
        .into_iter()
        .fold(Vec::new(), |mut v, t| {
            if !v.contains(&t) {
                v.push(t);
            }
            v
        });
    println!(
        "{events} envelopes, {:.0} MB, {cores} cores; decode threads {settings:?}",
        bytes as f64 / 1e6
    );
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
    let mut references: Vec<Vec<f64>> = vec![Vec::new(); REFERENCES.len()];
    let mut alone_on_two = Vec::new();
    for round in 0..rounds {
        for (k, secs) in references_once(&items, round).into_iter().enumerate() {
            references[k].push(secs);
        }
        alone_on_two.push(decode_alone_on(&items, 2, round));
        for (k, &threads) in settings.iter().enumerate() {
            let secs = drain_once(&items, threads, round, bytes);
            times[k].push(secs);
        }
    }
    let median = |t: &[f64]| {
        let mut t = t.to_vec();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let line = |what: &str, secs: f64| {
        println!(
            "median, {what}: {:.0} ms, {:.0} MB/s",
            secs * 1e3,
            bytes as f64 / 1e6 / secs
        );
    };
    for ((name, _), secs) in REFERENCES.iter().zip(&references) {
        line(name, median(secs));
    }
    line(
        "the engine's decode alone, 2 threads, nothing kept",
        median(&alone_on_two),
    );
    for (k, &threads) in settings.iter().enumerate() {
        line(
            &format!("the drain, {threads} decode thread(s)"),
            median(&times[k]),
        );
    }
}
