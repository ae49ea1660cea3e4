//! The engine against the lean design (`sb_benches::lean::LeanIndex`: a papaya map of
//! slots, chain and spine cache behind `ArcSwap`, no bookkeeping) and the `PapayaIndex`
//! comparator, side by side in one run, on the rows where the lean design is the floor:
//!
//! - `lean_incremental_build`: a build by one event, the spine's JSON handed out, at 10 and
//!   10,000 events; and `part` rows, each one piece of that build timed alone (the two
//!   clock reads a timed build makes, the map's pin and lookup, the snapshot loads, the
//!   spine's extension by one event, the cache's compare-and-swap, the JSON hand-out);
//! - `lean_drain`: 20,000 events of 740 executions (27 each, ending in a terminal event,
//!   50 live at a time) in 200-event batches, the same executions every pass (each
//!   re-created after it finished) and fresh ones every pass, alone and while two threads
//!   build an indexed execution.
//!
//! `cargo bench -p sb-benches --bench lean` (about 4 minutes; add `-- <filter>` for one
//! group).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use chain_fold::{Chain, SpineOrder, advance};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sb_benches::lean::LeanIndex;
use sb_benches::rows::{Indexed, Readers, Rows, drain_index, drain_pass, drain_wal};
use sb_benches::{linear, payload, time_incremental_builds};
use wal_index::WalIndex;
use wal_index::baseline::PapayaIndex;

/// An incremental build by one event and the JSON handed out, on a chain of ~`len`
/// events (rebuilt untimed past 1.1 `len` + 10): the same loop as `engines`' bench 3.
fn incremental<R: Rows>(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("lean_incremental_build");
    for len in [10i64, 10_000] {
        group.bench_function(BenchmarkId::new(R::NAME, len), |b| {
            b.iter_custom(|iters| {
                let fresh = || {
                    let index = R::empty();
                    index.apply_batch(linear(1, 1, len, false, &body));
                    index.spine(1, len);
                    index
                };
                time_incremental_builds(iters, len, &body, fresh, R::apply, |index, tip| {
                    index.spine(1, tip).map(|s| s.json_array().into_buf())
                })
            })
        });
    }
    group.finish();
}

/// Each piece of an incremental build alone, on the lean design's own types.
fn parts(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("lean_incremental_build");
    group.bench_function(BenchmarkId::new("part", "two_clock_reads"), |b| {
        b.iter(|| black_box(Instant::now()).elapsed())
    });
    let map = papaya::HashMap::<i64, Arc<u64>>::new();
    for k in 0..64 {
        map.pin().insert(k, Arc::new(k as u64));
    }
    group.bench_function(BenchmarkId::new("part", "pin_and_lookup"), |b| {
        b.iter(|| map.pin().get(&black_box(7)).map(|v| **v))
    });
    let chain = Arc::new(linear(1, 1, 10, false, &body).into_iter().fold(
        Chain::new(SpineOrder::default()),
        |mut chain, event| {
            chain.apply(event);
            chain
        },
    ));
    let cached = chain.walk_from(9).ok();
    let chain_swap = ArcSwap::new(Arc::clone(&chain));
    let spine_swap = ArcSwap::from_pointee(cached.clone());
    group.bench_function(BenchmarkId::new("part", "two_snapshot_loads"), |b| {
        b.iter(|| {
            let spine = spine_swap.load();
            let chain = chain_swap.load();
            black_box((spine.is_some(), chain.len()))
        })
    });
    group.bench_function(BenchmarkId::new("part", "extend_by_one"), |b| {
        b.iter(|| black_box(advance(&chain, cached.as_ref(), black_box(10)).spine))
    });
    let longer = advance(&chain, cached.as_ref(), 10).spine;
    group.bench_function(BenchmarkId::new("part", "cache_compare_and_swap"), |b| {
        b.iter(|| {
            let seen = spine_swap.load();
            spine_swap.compare_and_swap(&seen, Arc::new(longer.clone()));
        })
    });
    let spine = longer.expect("reaches genesis");
    group.bench_function(BenchmarkId::new("part", "json_into_buf"), |b| {
        b.iter(|| black_box(spine.json_array().into_buf()))
    });
    group.finish();
}

/// The drain, same executions every pass and fresh ones, alone and with two readers.
fn drain<R: Rows>(c: &mut Criterion) {
    let slim = payload(64);
    let same = drain_wal(0, &slim);
    let mut group = c.benchmark_group("lean_drain");
    group.throughput(Throughput::Elements(same.len() as u64));
    group.sample_size(20);
    for readers in [0usize, 2] {
        let index = drain_index::<R>();
        let _readers = Readers::start(&index, readers);
        let with = if readers == 0 { "alone" } else { "2_readers" };
        group.bench_function(BenchmarkId::new(R::NAME, format!("same_ids_{with}")), |b| {
            b.iter(|| drain_pass(&*index, &same))
        });
        let mut pass = 0;
        group.bench_function(
            BenchmarkId::new(R::NAME, format!("fresh_ids_{with}")),
            |b| {
                b.iter_batched(
                    || {
                        pass += 1;
                        drain_wal(pass, &slim)
                    },
                    |wal| drain_pass(&*index, &wal),
                    BatchSize::PerIteration,
                )
            },
        );
    }
    group.finish();
}

fn lean(c: &mut Criterion) {
    incremental::<Indexed<WalIndex>>(c);
    incremental::<Indexed<WalIndex, true>>(c);
    incremental::<Indexed<PapayaIndex>>(c);
    incremental::<LeanIndex>(c);
    parts(c);
    drain::<Indexed<WalIndex>>(c);
    drain::<Indexed<PapayaIndex>>(c);
    drain::<LeanIndex>(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    targets = lean
}
criterion_main!(benches);
