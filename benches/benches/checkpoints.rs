//! What checkpoints cost the drain and the builds beside it, side by side with the same
//! drain taking none.
//!
//! `cargo bench -p sb-benches --bench checkpoints`
//!
//! - `drain_checkpoints`: a `Drain` over an in-process WAL of 20,000 events (740 executions
//!   of 27, 1 KiB payloads, 50 running at once, each ending in a terminal event) in
//!   200-record batches, into a fresh engine: without checkpoints, at the default cadence
//!   (every 60 s or 512 MiB applied: within one pass none comes due, so this is the
//!   per-batch check), and with one due after every batch (each captured when the writer
//!   is free, encoded and written durably to a temporary directory on the writer's thread,
//!   which competes for the machine's cores);
//! - `build_beside_checkpoints`: a cache-hit build of an indexed 27-event execution while
//!   that drain runs over and over on another thread, without checkpoints and with one
//!   after every batch.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sb_benches::{interleaved, linear, payload};
use wal_index::checkpoint::{Checkpointing, DirStore};
use wal_index::ingest::channel_wal;
use wal_index::{Drain, DrainConfig, IndexConfig, StateIndex, WalIndex};

/// How often a checkpoint comes due.
#[derive(Clone, Copy)]
enum Cadence {
    None,
    Default,
    EveryBatch,
}

impl Cadence {
    fn label(self) -> &'static str {
        match self {
            Cadence::None => "no_checkpoints",
            Cadence::Default => "default_cadence",
            Cadence::EveryBatch => "every_batch",
        }
    }

    fn checkpointing(self, dir: &std::path::Path) -> Option<Checkpointing> {
        let store = || DirStore::open(dir, 2).expect("a temporary directory");
        match self {
            Cadence::None => None,
            Cadence::Default => Some(Checkpointing::new(store())),
            Cadence::EveryBatch => Some(Checkpointing::new(store()).every(Duration::ZERO)),
        }
    }
}

/// The WAL: whole envelopes (as a drain reads them) of 740 executions of 27 events with
/// 1 KiB results, interleaved 50 at a time, execution ids from `offset`.
fn wal(offset: i64) -> Vec<Bytes> {
    let pad = "x".repeat(1000);
    interleaved(740, 27, 50, &payload(0))
        .iter()
        .map(|e| {
            let prev = e.prev().map_or(String::new(), |p| format!(r#","prev_event_id":{p}"#));
            Bytes::from(format!(
                r#"{{"event_id":{},"execution_id":{}{prev},"event_type":"{}","result":{{"pad":"{pad}"}}}}"#,
                e.id(),
                e.execution_id() + offset,
                e.event_type()
            ))
        })
        .collect()
}

/// Drains `payloads` into `index` through a channel, checkpointing as `cadence` says.
fn drain_once(index: &Arc<WalIndex>, payloads: &[Bytes], cadence: Cadence, dir: &std::path::Path) {
    let (writer, source) = channel_wal();
    for p in payloads {
        writer.append(p.clone());
    }
    drop(writer);
    let config = DrainConfig {
        batch_max: 200,
        ..DrainConfig::default()
    };
    let mut drain = Drain::new(Arc::clone(index), source, config);
    if let Some(checkpointing) = cadence.checkpointing(dir) {
        drain = drain
            .checkpoint_to(checkpointing)
            .expect("the writer thread");
    }
    black_box(drain.run_until_closed().expect("an in-process WAL").events);
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sb-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn drain_checkpoints(c: &mut Criterion) {
    let payloads = wal(0);
    let dir = temp_dir("drain-checkpoints");
    let mut group = c.benchmark_group("drain_checkpoints");
    group.throughput(Throughput::Elements(payloads.len() as u64));
    group.sample_size(20);
    for cadence in [Cadence::None, Cadence::Default, Cadence::EveryBatch] {
        group.bench_function(BenchmarkId::new("lockfree", cadence.label()), |b| {
            b.iter_batched(
                || Arc::new(WalIndex::new(IndexConfig::default())),
                |index| drain_once(&index, &payloads, cadence, &dir),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn build_beside_checkpoints(c: &mut Criterion) {
    let mut group = c.benchmark_group("build_beside_checkpoints");
    for cadence in [Cadence::None, Cadence::EveryBatch] {
        let index = Arc::new(WalIndex::new(IndexConfig::default()));
        index.apply_batch(linear(-1, 1, 27, false, &payload(1024)));
        let stop = Arc::new(AtomicBool::new(false));
        let dir = temp_dir(&format!("beside-{}", cadence.label()));
        let background = {
            let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
            std::thread::spawn(move || {
                // Each pass new executions (a finished one's late events would be dropped).
                let mut offset = 1_000;
                // Relaxed: the flag carries no data.
                while !stop.load(Ordering::Relaxed) {
                    drain_once(&index, &wal(offset), cadence, &dir);
                    offset += 1_000;
                }
                let _ = std::fs::remove_dir_all(&dir);
            })
        };
        group.bench_function(BenchmarkId::new("lockfree", cadence.label()), |b| {
            b.iter(|| black_box(index.build(-1, Some(27))).outcome)
        });
        stop.store(true, Ordering::Relaxed);
        let _ = background.join();
    }
    group.finish();
}

criterion_group!(benches, drain_checkpoints, build_beside_checkpoints);
criterion_main!(benches);
