//! Bench 2: tip to served. N drives are parked on N different executions, each waiting for
//! a tip that is not indexed; the drain indexes the tip of one; we time until that drive is
//! served and count how many *other* drives woke for nothing.
//!
//! A custom harness rather than criterion: every round needs the other drives to settle
//! back into their waits (untimed) before the next tip lands, which criterion's
//! iteration model cannot exclude from its run time. Reports the median and p99 over the
//! rounds, all engines in one run. `cargo bench -p sb-benches --bench wakeups`
//!
//! Two floor rows are measured the same way in the same run: `floor:task`, N tasks parked
//! on their own `tokio::sync::Notify` on the same two-worker runtime, one notified per
//! round (the bare Tokio task wake a drive cannot beat); and `floor:thread`, N threads
//! parked with `std::thread::park`, one unparked per round. Each engine row reports its
//! median as a multiple of the task floor's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Event};
use sb_benches::{linear, payload};
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
use wal_index::labels::WaitLabel;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, IndexObserver, StateIndex, WalIndex};

#[derive(Default)]
struct Counts {
    woken: AtomicU64,
    incomplete: AtomicU64,
}

impl IndexObserver for Counts {
    fn build(&self, outcome: &AdvanceOutcome, _: Duration, _: Duration) {
        if let AdvanceOutcome::Incomplete(_) = outcome {
            self.incomplete.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn drive_wait(&self, outcome: WaitLabel) {
        if outcome == WaitLabel::Woken {
            self.woken.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Row {
    engine: &'static str,
    parked: usize,
    p50: Duration,
    p99: Duration,
    others_woken: f64,
}

impl Row {
    fn of(
        engine: &'static str,
        parked: usize,
        mut latencies: Vec<Duration>,
        others_woken: f64,
    ) -> Row {
        latencies.sort_unstable();
        Row {
            engine,
            parked,
            p50: latencies[latencies.len() / 2],
            p99: latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)],
            others_woken,
        }
    }
}

fn settle(counts: &Counts) {
    // Wait until no drive has rebuilt for a while: every woken drive is parked again.
    let mut last = counts.incomplete.load(Ordering::Relaxed);
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let now = counts.incomplete.load(Ordering::Relaxed);
        if now == last {
            return;
        }
        last = now;
    }
}

/// The drives' runtime, and the task floor's: two workers, as a worker pool runs.
fn drives_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn run<I: StateIndex>(parked: usize, rounds: usize) -> Row {
    let counts = Arc::new(Counts::default());
    let index = Arc::new(I::with_observer(IndexConfig::default(), counts.clone()));
    let body = payload(256);
    let runtime = drives_runtime();
    let (done, served) = mpsc::channel::<(usize, Instant)>();
    let budget = DriveBudget {
        attempts: u32::MAX,
        retry: Duration::from_secs(600),
    };
    for k in 0..parked {
        index.apply_batch(linear(k as i64, 1, 3, false, &body));
        let (index, done) = (Arc::clone(&index), done.clone());
        runtime.spawn(async move {
            for round in 0i64.. {
                let drive = index
                    .drive_async(k as i64, Some(4 + round), &DriveFlow::new(budget))
                    .await;
                let at = Instant::now();
                if drive.outcome.spine().is_none() || done.send((k, at)).is_err() {
                    return;
                }
            }
        });
    }
    while counts.incomplete.load(Ordering::Relaxed) < parked as u64 {
        std::thread::sleep(Duration::from_millis(1));
    }
    settle(&counts);
    let mut next_tip = vec![4i64; parked];
    let mut latencies = Vec::with_capacity(rounds);
    let mut others = 0u64;
    for round in 0..rounds {
        let k = round % parked;
        let woken_before = counts.woken.load(Ordering::Relaxed);
        let tip = next_tip[k];
        next_tip[k] += 1;
        let event = Event::from_parts(tip, k as i64, Some(tip - 1), "step", body.clone());
        let started = Instant::now();
        index.apply(event);
        let (who, at) = served.recv().expect("the drive is served");
        assert_eq!(who, k);
        latencies.push(at - started);
        settle(&counts);
        others += counts.woken.load(Ordering::Relaxed) - woken_before - 1;
    }
    runtime.shutdown_background();
    Row::of(I::NAME, parked, latencies, others as f64 / rounds as f64)
}

/// The bare Tokio task wake: `parked` tasks on the drives' runtime shape, each awaiting its
/// own `Notify`; a round notifies one and times until it has sent its timestamp, with the
/// same channel and the same idle gap between rounds as the engine rows.
fn floor_task(parked: usize, rounds: usize) -> Row {
    let runtime = drives_runtime();
    let (done, served) = mpsc::channel::<(usize, Instant)>();
    let notifies: Vec<Arc<tokio::sync::Notify>> = (0..parked)
        .map(|_| Arc::new(tokio::sync::Notify::new()))
        .collect();
    for (k, notify) in notifies.iter().enumerate() {
        let (notify, done) = (Arc::clone(notify), done.clone());
        runtime.spawn(async move {
            loop {
                notify.notified().await;
                if done.send((k, Instant::now())).is_err() {
                    return;
                }
            }
        });
    }
    std::thread::sleep(Duration::from_millis(20));
    let latencies = floor_rounds(parked, rounds, &served, |k| notifies[k].notify_one());
    runtime.shutdown_background();
    Row::of("floor:task", parked, latencies, 0.0)
}

/// The bare thread unpark: `parked` threads in `std::thread::park`, one unparked per round.
fn floor_thread(parked: usize, rounds: usize) -> Row {
    let (done, served) = mpsc::channel::<(usize, Instant)>();
    let stop = Arc::new(AtomicBool::new(false));
    let flags: Vec<Arc<AtomicBool>> = (0..parked)
        .map(|_| Arc::new(AtomicBool::new(false)))
        .collect();
    let threads: Vec<_> = flags
        .iter()
        .enumerate()
        .map(|(k, flag)| {
            let (flag, done, stop) = (Arc::clone(flag), done.clone(), Arc::clone(&stop));
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    // Relaxed would do for `stop`; the flag's Acquire pairs with the Release
                    // store below, as a real handoff would.
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park();
                        if flag.swap(false, Ordering::Acquire)
                            && done.send((k, Instant::now())).is_err()
                        {
                            return;
                        }
                    }
                })
                .expect("thread")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let latencies = floor_rounds(parked, rounds, &served, |k| {
        flags[k].store(true, Ordering::Release);
        threads[k].thread().unpark();
    });
    stop.store(true, Ordering::Relaxed);
    for t in &threads {
        t.thread().unpark();
    }
    for t in threads {
        let _ = t.join();
    }
    Row::of("floor:thread", parked, latencies, 0.0)
}

fn floor_rounds(
    parked: usize,
    rounds: usize,
    served: &mpsc::Receiver<(usize, Instant)>,
    wake: impl Fn(usize),
) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let k = round % parked;
        let started = Instant::now();
        wake(k);
        let (who, at) = served.recv().expect("the waiter answers");
        assert_eq!(who, k);
        latencies.push(at - started);
        // The engine rows settle for at least 2 ms between rounds: the same idle gap, so
        // the runtime's workers are parked when each round starts, as there.
        std::thread::sleep(Duration::from_millis(2));
    }
    latencies
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need.
    let quick = std::env::args().any(|a| a == "--quick" || a == "--test");
    let rounds = if quick { 5 } else { 200 };
    println!(
        "tip_to_served: {rounds} rounds per row; median and p99 from applying the tip to the drive returning"
    );
    println!(
        "{:<12} {:>7} {:>12} {:>12} {:>22} {:>16}",
        "engine", "parked", "p50", "p99", "others woken per tip", "p50 / task floor"
    );
    for parked in [1, 100, 1_000] {
        let task = floor_task(parked, rounds);
        let rows = [
            run::<WalIndex>(parked, rounds),
            run::<PapayaIndex>(parked, rounds),
            run::<ShardedMutexIndex>(parked, rounds),
            run::<MutexIndex>(parked, rounds),
            floor_thread(parked, rounds),
        ];
        let floor = task.p50.as_secs_f64();
        for r in std::iter::once(task).chain(rows) {
            println!(
                "{:<12} {:>7} {:>9.1} µs {:>9.1} µs {:>22.1} {:>15.2}x",
                r.engine,
                r.parked,
                r.p50.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.others_woken,
                r.p50.as_secs_f64() / floor
            );
        }
    }
}
