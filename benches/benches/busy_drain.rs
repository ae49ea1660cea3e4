//! An incomplete build under a busy drain: a drain thread applies 200-event batches
//! continuously while the measured thread builds an execution whose tip is not indexed.
//! Production: 381.6 µs per build, 376.6 µs of it waiting for the index.
//!
//! Series: `total` per engine (the whole build, as `build_duration_seconds` times it), and
//! `waited` for engines that can block (the time blocked before the index could be read,
//! as `index_lock_wait_seconds_total` times it; the lock-free engine's is zero by
//! construction).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sb_benches::{interleaved, linear, payload};
use wal_index::{IndexConfig, MutexIndex, StateIndex, WalIndex};

const TARGET: i64 = -1;

struct BusyDrain {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl BusyDrain {
    /// Starts a drain that cycles over a WAL of 2,000 executions × 27 events (each ending
    /// in a terminal event, so the index stays at steady state) until dropped.
    fn start<I: StateIndex>(index: Arc<I>) -> BusyDrain {
        let body = payload(256);
        let wal = interleaved(2_000, 27, 50, &body);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut applied = 0u64;
            // Relaxed: a stop flag carries no data.
            while !flag.load(Ordering::Relaxed) {
                for batch in wal.chunks(200) {
                    index.apply_batch(batch.to_vec());
                    applied += batch.len() as u64;
                }
            }
            applied
        });
        BusyDrain {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BusyDrain {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn bench_engine<I: StateIndex>(c: &mut Criterion) {
    let index = Arc::new(I::with_config(IndexConfig::default()));
    index.apply_batch(linear(TARGET, 1, 10, false, &payload(256)));
    let _drain = BusyDrain::start(Arc::clone(&index));
    let mut group = c.benchmark_group("incomplete_build_under_busy_drain");
    group.bench_function(BenchmarkId::new(I::NAME, "total"), |b| {
        b.iter(|| black_box(index.build(TARGET, Some(11))).outcome)
    });
    // The engine's build has no blocking step (its `waited` is zero by construction), so
    // only engines that can block report the wait part.
    if index.build(TARGET, Some(11)).waited > Duration::ZERO || I::NAME == "mutex" {
        group.bench_function(BenchmarkId::new(I::NAME, "waited"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| index.build(TARGET, Some(11)).waited)
                    .sum::<Duration>()
            })
        });
    }
    group.finish();
}

fn busy_drain(c: &mut Criterion) {
    bench_engine::<WalIndex>(c);
    bench_engine::<MutexIndex>(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = busy_drain
}
criterion_main!(benches);
