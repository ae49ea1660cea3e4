//! chain-fold: per-hop cost of a cold walk, cost of a cache hit, and an incremental
//! advance by one event, on chains of growing length; and the decode of one
//! production-sized envelope beside today's parse and serialization of it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chain_fold::{Chain, Event, SpineCache, advance};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sb_benches::{chain, payload};

fn cold_walk(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("chain_fold/cold_walk");
    for len in [11i64, 1_000, 100_000] {
        let chain = chain(len, &body);
        group.throughput(Throughput::Elements(len as u64));
        group.bench_with_input(BenchmarkId::from_parameter(len), &chain, |b, chain| {
            b.iter(|| black_box(chain.walk_from(len)).is_ok())
        });
    }
    group.finish();
}

fn cache_hit(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("chain_fold/cache_hit");
    for len in [10i64, 1_000, 100_000] {
        let chain = chain(len, &body);
        let spine = chain.walk_from(len).ok();
        group.bench_with_input(BenchmarkId::from_parameter(len), &chain, |b, chain| {
            b.iter(|| black_box(advance(chain, spine.as_ref(), len)).outcome)
        });
    }
    group.finish();
}

/// Advance by one event on a chain of `len` to `1.1 len + 10` events: each iteration
/// appends one event (untimed) and times the incremental advance, including serving the
/// JSON; the chain is rebuilt (untimed) when it outgrows the range, so every measured
/// advance extends a spine version exactly once, as a drain-driven build does.
fn incremental_by_one(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("chain_fold/incremental_1");
    for len in [10i64, 1_000, 100_000] {
        group.bench_function(BenchmarkId::from_parameter(len), |b| {
            b.iter_custom(|iters| {
                let limit = len + len / 10 + 10;
                let reset = || -> (Chain, SpineCache, i64) {
                    let chain = chain(len, &body);
                    let mut cache = SpineCache::default();
                    cache.advance_to(&chain, len);
                    (chain, cache, len)
                };
                let (mut chain, mut cache, mut tip) = reset();
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    if tip >= limit {
                        (chain, cache, tip) = reset();
                    }
                    chain.apply(Event::from_parts(
                        tip + 1,
                        1,
                        Some(tip),
                        "step",
                        body.clone(),
                    ));
                    tip += 1;
                    let started = Instant::now();
                    let outcome = cache.advance_to(&chain, tip);
                    let json = cache.spine().map(|s| s.json_array());
                    timed += started.elapsed();
                    black_box((outcome, json));
                }
                timed
            })
        });
    }
    group.finish();
}

/// Applies one linear chain of `hops` events in blocks of eight, calling `build` for each
/// block's events newest first (drives of one execution finishing out of order).
fn replay_out_of_order(hops: i64, body: &bytes::Bytes, mut build: impl FnMut(&Chain, i64)) {
    let mut chain = Chain::new(chain_fold::SpineOrder::Causal);
    for first in (1..=hops).step_by(8) {
        for id in first..first + 8 {
            let ty = if id == 1 { "playbook_started" } else { "step" };
            let prev = (id > 1).then(|| id - 1);
            chain.apply(Event::from_parts(id, 1, prev, ty, body.clone()));
        }
        for target in (first..first + 8).rev() {
            build(&chain, target);
        }
    }
}

/// Replaying one linear chain whose drives finish out of order (each block of eight built
/// newest first), through `advance` as the engine builds: each iteration applies the whole
/// chain and runs one build per event. The time per event must stay flat from 10,000 to
/// 1,000,000 hops; today's cache (`SpineCache`, which walks every ancestor from genesis) is
/// shown at 10,000 hops only, because it is quadratic.
fn out_of_order_replay(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("chain_fold/out_of_order_replay");
    group.sample_size(10);
    for hops in [10_000i64, 100_000, 1_000_000] {
        group.throughput(Throughput::Elements(hops as u64));
        group.bench_with_input(BenchmarkId::new("engine", hops), &hops, |b, &hops| {
            b.iter(|| {
                let mut cached: Option<chain_fold::Spine> = None;
                replay_out_of_order(hops, &body, |chain, target| {
                    let result = advance(chain, cached.as_ref(), target);
                    if result.replaces_cache {
                        cached = result.spine;
                    }
                });
                black_box(cached.map(|s| s.len()))
            })
        });
    }
    group.throughput(Throughput::Elements(10_000));
    group.bench_with_input(BenchmarkId::new("today", 10_000), &10_000i64, |b, &hops| {
        b.iter(|| {
            let mut cache = SpineCache::default();
            replay_out_of_order(hops, &body, |chain, target| {
                black_box(cache.advance_to(chain, target));
            });
        })
    });
    group.finish();
}

/// A production-sized envelope (~73 KB, the production note's average): the envelope's
/// fields, then most of its bytes in `result.rows`, small objects of strings and numbers.
fn production_envelope(id: i64) -> Vec<u8> {
    let mut rows = String::new();
    let mut n = 0;
    while rows.len() < 72_000 {
        if n > 0 {
            rows.push(',');
        }
        rows.push_str(&format!(
            r#"{{"row":{n},"name":"row-{n}","value":{n}.25,"ok":true,"tags":["a","b"],"note":null}}"#
        ));
        n += 1;
    }
    format!(
        concat!(
            r#"{{"event_id":{id},"execution_id":9,"catalog_id":7,"event_type":"step","#,
            r#""status":"COMPLETED","created_at":"2026-10-01T12:00:00Z","node_name":"step","#,
            r#""prev_event_id":{prev},"context":{{"vars":{{"region":"eu","attempt":1}}}},"#,
            r#""result":{{"status":"ok","rows":[{rows}]}},"meta":{{"attempt":1}},"error":null}}"#
        ),
        id = id,
        prev = id - 1,
        rows = rows
    )
    .into_bytes()
}

/// Decoding one production-sized envelope: `Event::from_json` (one parse that keeps the
/// canonical bytes) and `Event::from_json_slim` (the same parse, keeping the slim
/// projection, as the drain decodes for an index that stores slim events), beside today's consumer's parse into a `serde_json::Value` and its
/// serialization (what today's index does to every payload, in two steps), and a
/// validating scan that keeps nothing (serde_json skipping every value: the floor of any
/// decoder that checks its input).
fn decode(c: &mut Criterion) {
    let body = production_envelope(42);
    let mut group = c.benchmark_group("decode_production_envelope");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("event_from_json", |b| {
        b.iter(|| black_box(Event::from_json(black_box(&body)).unwrap()))
    });
    group.bench_function("event_from_json_slim", |b| {
        b.iter(|| black_box(Event::from_json_slim(black_box(&body)).unwrap()))
    });
    group.bench_function("todays_value_parse_and_serialize", |b| {
        b.iter(|| {
            let value: serde_json::Value = serde_json::from_slice(black_box(&body)).unwrap();
            black_box(serde_json::to_vec(&value).unwrap())
        })
    });
    group.bench_function("validating_scan", |b| {
        b.iter(|| {
            black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)).unwrap())
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = cold_walk, cache_hit, incremental_by_one, out_of_order_replay, decode
}
criterion_main!(benches);
