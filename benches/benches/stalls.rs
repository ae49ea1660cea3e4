//! What the stall checks (`wal_index::stall`) cost the engine, side by side with the same
//! work with the checks off (`IndexConfig::stall_after: None`).
//!
//! `cargo bench -p sb-benches --bench stalls`
//!
//! - `drain_with_terminal_evictions`: the drain's batches over 740 executions of 27 events
//!   that each end in a terminal event (every eviction scans its chain for holes);
//! - `check_unchanged`: one check over resident executions none of which changed since the
//!   last (each snapshot is loaded and its version compared);
//! - `check_every_chain_changed`: one check that scans every resident chain of 27 events
//!   (the first check of a fresh index, as after every execution changed).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sb_benches::{interleaved, linear, payload};
use wal_index::{IndexConfig, StateIndex, WalIndex};

fn config(stall: bool) -> IndexConfig {
    IndexConfig {
        stall_after: stall.then_some(IndexConfig::DEFAULT_STALL_AFTER),
        ..IndexConfig::default()
    }
}

fn label(stall: bool) -> &'static str {
    if stall { "checks_on" } else { "checks_off" }
}

fn drain_with_terminal_evictions(c: &mut Criterion) {
    let wal = interleaved(740, 27, 50, &payload(64));
    let mut group = c.benchmark_group("drain_with_terminal_evictions");
    group.throughput(Throughput::Elements(wal.len() as u64));
    group.sample_size(20);
    for stall in [true, false] {
        let index = WalIndex::new(config(stall));
        group.bench_function(BenchmarkId::new("lockfree", label(stall)), |b| {
            b.iter(|| {
                for batch in wal.chunks(200) {
                    index.apply_batch(batch.to_vec());
                }
            })
        });
    }
    group.finish();
}

/// An index holding `executions` resident chains of 27 events (no terminal event).
fn resident(executions: i64) -> WalIndex {
    let index = WalIndex::new(config(true));
    let body = payload(64);
    for execution in 0..executions {
        index.apply_batch(linear(execution, execution * 1_000 + 1, 27, false, &body));
    }
    index
}

fn checks(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_unchanged");
    for executions in [1_000i64, 10_000] {
        let index = resident(executions);
        let t0 = Instant::now();
        index.check_stalls_at(t0);
        group.throughput(Throughput::Elements(executions as u64));
        let mut k = 0u32;
        group.bench_function(BenchmarkId::new("lockfree", executions), |b| {
            b.iter(|| {
                // A quarter of a second apart: never a gap, never a report.
                k += 1;
                black_box(index.check_stalls_at(t0 + Duration::from_millis(250) * k))
            })
        });
    }
    group.finish();

    // The first check of a fresh index scans every chain, as a check does after every
    // resident execution changed.
    let mut group = c.benchmark_group("check_every_chain_changed");
    group.sample_size(10);
    for executions in [1_000i64, 10_000] {
        group.throughput(Throughput::Elements(executions as u64));
        group.bench_function(BenchmarkId::new("lockfree", executions), |b| {
            b.iter_batched(
                || resident(executions),
                |index| black_box(index.check_stalls_at(Instant::now())),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    targets = drain_with_terminal_evictions, checks
}
criterion_main!(benches);
