//! The engine against the design a user would build instead and the two lock-based designs,
//! side by side in one criterion group per path: `lockfree` (`WalIndex`), `papaya`
//! (`PapayaIndex`), `sharded` (`ShardedMutexIndex`), `mutex` (`MutexIndex`).
//!
//! Two groups measure scaling, for a larger machine to report with the same command:
//! `drain_scaling` (the drain while 1, 2, 4, 8 and 16 threads build) and `build_scaling`
//! (cache-hit builds on 1 thread and on as many as the machine has). The run prints the
//! machine's core count first.
//!
//! `cargo bench -p sb-benches --bench engines` (add `-- <filter>` for one group).
//!
//! Every group also has a `floor` row, measured in the same run under the same conditions,
//! for what no design can beat on that path: a bare `HashMap` miss (the incomplete build),
//! a bare append of the same events to a `Vec` (the drain), a `memcpy` of the bytes the
//! build serves (the incremental build, and the cold rebuild: its whole spine's bytes),
//! a `HashMap` hit handing out a shared value (the cache-hit build during a backfill).
//! `docs/benchmarks.md` reports each engine's ratio to its group's floor. A `part` row
//! times one piece of a path that every design pays (the incomplete build's two clock
//! reads, the directory read's guard pin), to say how much of the gap to the floor it explains.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chain_fold::Event;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sb_benches::{interleaved, linear, payload, time_incremental_builds, timed_index};
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
use wal_index::{IndexConfig, StateIndex, WalIndex};

/// A thread applying `wal` in 200-event batches, over and over, until dropped.
struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    fn drain<I: StateIndex>(index: Arc<I>, wal: Vec<Event>) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            // Relaxed: a stop flag carries no data.
            while !flag.load(Ordering::Relaxed) {
                for batch in wal.chunks(200) {
                    index.apply_batch(batch.to_vec());
                }
            }
        });
        Background {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Bench 1. A drain applies 200-event batches continuously — 2,000 executions × 27
/// events, plus, in every batch, one more event of the *target* execution (production's
/// case: the drain is busy with the very execution the build waits for) — while the
/// measured thread builds the target at a tip that is not indexed.
fn incomplete_build_under_busy_drain<I: StateIndex>(c: &mut Criterion) {
    const TARGET: i64 = -1;
    let body = payload(256);
    // Timed builds, as a pool with metrics has them: the wait share below reads them.
    let index = Arc::new(timed_index::<I>());
    index.apply_batch(linear(TARGET, 1, 10, false, &body));
    let mut wal = Vec::new();
    for (next, batch) in (11..).zip(interleaved(2_000, 27, 50, &body).chunks(199)) {
        wal.extend_from_slice(batch);
        wal.push(Event::from_parts(
            next,
            TARGET,
            Some(next - 1),
            "step",
            body.clone(),
        ));
    }
    let _drain = Background::drain(Arc::clone(&index), wal);
    let missing = i64::MAX;
    // The wait part alone, measured first, while the drain is busiest, as the build itself
    // reports it (production's lock-wait series).
    // Not a criterion benchmark: the engine's is zero by construction, and a distribution of
    // identical samples breaks criterion's comparison with a saved baseline on the next run.
    const BUILDS: u32 = 20_000;
    let (waited, total) = (0..BUILDS)
        .map(|_| index.build(TARGET, Some(missing)))
        .fold((Duration::ZERO, Duration::ZERO), |(w, t), b| {
            (w + b.waited, t + b.elapsed)
        });
    println!(
        "incomplete_build_under_busy_drain/{}/waited: mean {:.0} ns of {:.0} ns per build \
         ({:.1}% waiting, {BUILDS} builds)",
        I::NAME,
        waited.as_nanos() as f64 / f64::from(BUILDS),
        total.as_nanos() as f64 / f64::from(BUILDS),
        100.0 * waited.as_secs_f64() / total.as_secs_f64().max(f64::MIN_POSITIVE)
    );
    let mut group = c.benchmark_group("incomplete_build_under_busy_drain");
    group.bench_function(BenchmarkId::new(I::NAME, "total"), |b| {
        b.iter(|| black_box(index.build(TARGET, Some(missing))).outcome)
    });
    group.finish();
}

/// Bench 3. An incremental build by one event, through the index, including handing the
/// consumer the spine's JSON (as a `Buf`), on chains of ~N events (N to 1.1 N + 10, rebuilt
/// untimed when outgrown).
fn incremental_build<I: StateIndex>(c: &mut Criterion) {
    let body = payload(64);
    let mut group = c.benchmark_group("incremental_build");
    group.sample_size(20);
    for len in [10i64, 1_000, 100_000] {
        group.bench_function(BenchmarkId::new(I::NAME, len), |b| {
            b.iter_custom(|iters| {
                let fresh = || {
                    let index = timed_index::<I>();
                    index.apply_batch(linear(1, 1, len, false, &body));
                    index.build(1, Some(len));
                    index
                };
                time_incremental_builds(
                    iters,
                    len,
                    &body,
                    fresh,
                    |index, event| {
                        index.apply(event);
                    },
                    |index, tip| {
                        let build = index.build(1, Some(tip));
                        build.spine.map(|s| s.json_array().into_buf())
                    },
                )
            })
        });
    }
    group.finish();
}

/// Bench 4. A cold rebuild: the cache holds one branch of a fork, the build asks for the
/// other, so every build walks the whole spine (11 events, production's mean; and 1,000 /
/// 10,000 for the per-hop cost).
fn cold_rebuild<I: StateIndex>(c: &mut Criterion) {
    let body = payload(256);
    let mut group = c.benchmark_group("cold_rebuild");
    for len in [11i64, 1_000, 10_000] {
        let index = timed_index::<I>();
        index.apply_batch(linear(1, 1, len - 1, false, &body));
        let (a, b_tip) = (len, len + 1);
        index.apply(Event::from_parts(a, 1, Some(len - 1), "step", body.clone()));
        index.apply(Event::from_parts(
            b_tip,
            1,
            Some(len - 1),
            "step",
            body.clone(),
        ));
        group.throughput(Throughput::Elements(len as u64));
        group.bench_function(BenchmarkId::new(I::NAME, len), |b| {
            let mut flip = false;
            b.iter(|| {
                flip = !flip;
                black_box(index.build(1, Some(if flip { a } else { b_tip }))).outcome
            })
        });
    }
    group.finish();
}

/// Threads building an indexed 27-event execution (id -1) continuously until stopped.
struct Readers {
    stop: Arc<AtomicBool>,
    built: Arc<AtomicU64>,
    started: Instant,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Readers {
    fn start<I: StateIndex>(index: &Arc<I>, count: usize) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let built = Arc::new(AtomicU64::new(0));
        let threads = (0..count)
            .map(|_| {
                let (index, stop, built) =
                    (Arc::clone(index), Arc::clone(&stop), Arc::clone(&built));
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    // Relaxed: a stop flag carries no data.
                    while !stop.load(Ordering::Relaxed) {
                        black_box(index.build(-1, Some(27)));
                        n += 1;
                    }
                    // Relaxed: read after the join.
                    built.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        Readers {
            stop,
            built,
            started: Instant::now(),
            threads,
        }
    }

    /// Stops and joins them; the builds per second they made.
    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.built.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64()
    }
}

/// Bench 5. Drain throughput: 20,000 slim events (64-byte payloads, 740 executions ending
/// in a terminal event, 50 live at a time) in 200-event batches; alone, and while two
/// threads build an indexed 27-event execution with 1 KiB payloads continuously.
fn drain_throughput<I: StateIndex>(c: &mut Criterion) {
    let slim = payload(64);
    let wal = interleaved(740, 27, 50, &slim);
    let mut group = c.benchmark_group("drain_throughput");
    group.throughput(Throughput::Elements(wal.len() as u64));
    group.sample_size(20);
    for readers in [0usize, 2] {
        let index = Arc::new(timed_index::<I>());
        index.apply_batch(linear(-1, 1, 27, false, &payload(1024)));
        let threads = Readers::start(&index, readers);
        let id = if readers == 0 {
            "alone"
        } else {
            "with_2_readers"
        };
        group.bench_function(BenchmarkId::new(I::NAME, id), |b| {
            b.iter(|| {
                for batch in wal.chunks(200) {
                    index.apply_batch(batch.to_vec());
                }
            })
        });
        threads.stop();
    }
    group.finish();
}

/// Bench 6. A build (cache hit) of an indexed 27-event execution (1 KiB payloads) on an
/// idle index, and while a drain backfills: a million events in 200-event batches, over and
/// over (executions end in a terminal event, so the index stays bounded).
fn build_during_backfill<I: StateIndex>(c: &mut Criterion, backfill: &[Event]) {
    let mut group = c.benchmark_group("build_during_backfill");
    let index = Arc::new(timed_index::<I>());
    index.apply_batch(linear(-1, 1, 27, false, &payload(1024)));
    group.bench_function(BenchmarkId::new(I::NAME, "idle"), |b| {
        b.iter(|| black_box(index.build(-1, Some(27))).outcome)
    });
    let _drain = Background::drain(Arc::clone(&index), backfill.to_vec());
    group.bench_function(BenchmarkId::new(I::NAME, "backfilling"), |b| {
        b.iter(|| black_box(index.build(-1, Some(27))).outcome)
    });
    group.finish();
}

/// Bench 7. Creating executions: 100,000 executions the index has never seen, one event
/// each (a `playbook_started`, 64-byte payload), applied in 200-event batches to an empty
/// index. Each apply creates the execution's slot, so this is the directory's insert path
/// plus one append per execution; the index is dropped outside the timed part.
fn create_executions<I: StateIndex>(c: &mut Criterion) {
    const EXECUTIONS: i64 = 100_000;
    let body = payload(64);
    let wal: Vec<Event> = (0..EXECUTIONS)
        .map(|exec| Event::from_parts(exec + 1, exec, None, "playbook_started", body.clone()))
        .collect();
    let mut group = c.benchmark_group("create_executions");
    group.throughput(Throughput::Elements(EXECUTIONS as u64));
    group.sample_size(10);
    group.bench_function(BenchmarkId::new(I::NAME, EXECUTIONS), |b| {
        b.iter_batched(
            || (timed_index::<I>(), wal.clone()),
            |(index, wal)| {
                for batch in wal.chunks(200) {
                    index.apply_batch(batch.to_vec());
                }
                index
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// Bench 8. The drain of bench 5 (20,000 slim events in 200-event batches) while 1, 2, 4, 8
/// and 16 threads build an indexed 27-event execution continuously. On a machine with
/// fewer cores than threads, the readers take turns with the drain for the cores: the row
/// says how well each design's drain holds up when it does.
fn drain_scaling<I: StateIndex>(c: &mut Criterion) {
    let slim = payload(64);
    let wal = interleaved(740, 27, 50, &slim);
    let mut group = c.benchmark_group("drain_scaling");
    group.throughput(Throughput::Elements(wal.len() as u64));
    group.sample_size(10);
    for readers in [1usize, 2, 4, 8, 16] {
        let index = Arc::new(timed_index::<I>());
        index.apply_batch(linear(-1, 1, 27, false, &payload(1024)));
        let threads = Readers::start(&index, readers);
        let id = format!("{readers}_readers");
        let mut measured = false;
        group.bench_function(BenchmarkId::new(I::NAME, &id), |b| {
            measured = true;
            b.iter(|| {
                for batch in wal.chunks(200) {
                    index.apply_batch(batch.to_vec());
                }
            })
        });
        let rate = threads.stop();
        // What the readers got done meanwhile: a design whose readers queue on a lock leaves
        // its drain more of the cores, so the drain's time alone would flatter it.
        if !measured {
            continue; // filtered out of this run
        }
        println!(
            "drain_scaling/{}/{id}: readers built {:.2} M builds/s meanwhile",
            I::NAME,
            rate / 1e6
        );
    }
    group.finish();
}

/// Bench 9. Cache-hit builds of an indexed 27-event execution (1 KiB payloads) on 1 thread
/// and on as many threads as the machine has, all building at once; throughput is builds
/// per second summed over the threads.
fn build_scaling<I: StateIndex>(c: &mut Criterion) {
    let index = timed_index::<I>();
    index.apply_batch(linear(-1, 1, 27, false, &payload(1024)));
    index.build(-1, Some(27));
    let mut group = c.benchmark_group("build_scaling");
    for threads in [1, cores()] {
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_function(
            BenchmarkId::new(I::NAME, format!("{threads}_threads")),
            |b| {
                b.iter_custom(|iters| {
                    let started = Instant::now();
                    std::thread::scope(|s| {
                        for _ in 0..threads {
                            s.spawn(|| {
                                for _ in 0..iters {
                                    black_box(index.build(-1, Some(27)));
                                }
                            });
                        }
                    });
                    started.elapsed()
                })
            },
        );
    }
    group.finish();
}

/// The cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn all<I: StateIndex>(c: &mut Criterion, backfill: &[Event]) {
    incomplete_build_under_busy_drain::<I>(c);
    incremental_build::<I>(c);
    cold_rebuild::<I>(c);
    drain_throughput::<I>(c);
    build_during_backfill::<I>(c, backfill);
    create_executions::<I>(c);
    drain_scaling::<I>(c);
    build_scaling::<I>(c);
}

/// The floor rows, each in its engines' group.
fn floors(c: &mut Criterion, backfill: &[Event]) {
    // Incomplete build: a miss in a std `HashMap` holding as many executions as the
    // directory does (2,001), while the same drain keeps the other core busy.
    {
        let body = payload(256);
        let index = Arc::new(WalIndex::with_config(IndexConfig::default()));
        let wal = interleaved(2_000, 27, 50, &body);
        let _drain = Background::drain(Arc::clone(&index), wal);
        let map: HashMap<i64, u64> = (-1..2_000).map(|k| (k, k as u64)).collect();
        let mut group = c.benchmark_group("incomplete_build_under_busy_drain");
        group.bench_function(BenchmarkId::new("floor", "hashmap_miss"), |b| {
            b.iter(|| black_box(&map).get(&black_box(i64::MAX)).is_none())
        });
        // Not a floor of the whole path but of one part every design pays: a build times
        // itself (`build_duration_seconds`) and refreshes its execution's recency, which
        // reads the monotonic clock twice even when the tip is absent.
        group.bench_function(BenchmarkId::new("part", "two_clock_reads"), |b| {
            b.iter(|| black_box(Instant::now()).elapsed())
        });
        // The engine reads its directory (a papaya map) under the map's reclamation guard:
        // one pin and unpin.
        let directory = papaya::HashMap::<i64, u64>::new();
        group.bench_function(BenchmarkId::new("part", "guard_pin"), |b| {
            b.iter(|| drop(black_box(directory.guard())))
        });
        group.finish();
    }
    // Incremental build: copying the bytes the build serves, one event's JSON (the body
    // and the comma the array adds), into a buffer.
    {
        let body = payload(64);
        let mut group = c.benchmark_group("incremental_build");
        group.sample_size(20);
        let mut out = Vec::with_capacity(body.len() + 1);
        group.bench_function(BenchmarkId::new("floor", "memcpy_served_bytes"), |b| {
            b.iter(|| {
                out.clear();
                out.push(b',');
                out.extend_from_slice(black_box(&body));
                black_box(out.len())
            })
        });
        group.finish();
    }
    // Cold rebuild: copying the bytes of the whole spine the build serves (its payloads,
    // comma-separated), for the same lengths.
    {
        let body = payload(256);
        let mut group = c.benchmark_group("cold_rebuild");
        for len in [11usize, 1_000, 10_000] {
            let mut out = Vec::with_capacity(len * (body.len() + 1) + 2);
            group.throughput(Throughput::Elements(len as u64));
            group.bench_function(BenchmarkId::new("floor", format!("memcpy_{len}")), |b| {
                b.iter(|| {
                    out.clear();
                    out.push(b'[');
                    for _ in 0..len {
                        out.extend_from_slice(black_box(&body));
                        out.push(b',');
                    }
                    black_box(out.len())
                })
            });
        }
        group.finish();
    }
    // A cache-hit build: a `HashMap` hit handing out a shared value (an `Arc` clone), on
    // an idle index and while the same backfill drain runs.
    {
        let map: HashMap<i64, Arc<Vec<Event>>> = (-1..2_000)
            .map(|k| (k, Arc::new(linear(k, 1, 27, false, &payload(64)))))
            .collect();
        let mut group = c.benchmark_group("build_during_backfill");
        group.bench_function(BenchmarkId::new("floor", "hashmap_hit_idle"), |b| {
            b.iter(|| black_box(&map).get(&black_box(-1)).map(Arc::clone))
        });
        let index = Arc::new(WalIndex::with_config(IndexConfig::default()));
        let _drain = Background::drain(Arc::clone(&index), backfill.to_vec());
        group.bench_function(BenchmarkId::new("floor", "hashmap_hit_backfilling"), |b| {
            b.iter(|| black_box(&map).get(&black_box(-1)).map(Arc::clone))
        });
        group.finish();
    }
    // Drain: appending the same events, in the same batches, to a `Vec`.
    {
        let wal = interleaved(740, 27, 50, &payload(64));
        let mut group = c.benchmark_group("drain_throughput");
        group.throughput(Throughput::Elements(wal.len() as u64));
        group.sample_size(20);
        group.bench_function(BenchmarkId::new("floor", "vec_append"), |b| {
            b.iter(|| {
                let mut log: Vec<Event> = Vec::new();
                for batch in wal.chunks(200) {
                    log.extend(batch.to_vec());
                }
                black_box(log)
            })
        });
        group.finish();
    }
}

fn engines(c: &mut Criterion) {
    println!("engines: {} cores available to this process", cores());
    let backfill = interleaved(37_037, 27, 500, &Bytes::from_static(br#"{"slim":true}"#));
    all::<WalIndex>(c, &backfill);
    all::<PapayaIndex>(c, &backfill);
    all::<ShardedMutexIndex>(c, &backfill);
    all::<MutexIndex>(c, &backfill);
    floors(c, &backfill);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    targets = engines
}
criterion_main!(benches);
