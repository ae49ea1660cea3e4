//! Bench 2: tip to served. N drives are parked on N different executions, each waiting for
//! a tip that is not indexed; the drain indexes the tip of one; we time until that drive is
//! served and count how many *other* drives woke for nothing.
//!
//! A custom harness rather than criterion: every round needs the other drives to settle
//! back into their waits (untimed) before the next tip lands, which criterion's
//! iteration model cannot exclude from its run time. Reports the median and p99 over the
//! rounds, all engines in one run. `cargo bench -p sb-benches --bench wakeups`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Event};
use sb_benches::{linear, payload};
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::observe::WaitLabel;
use wal_index::{DriveBudget, IndexConfig, IndexObserver, StateIndex, WalIndex};

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

fn run<I: StateIndex>(parked: usize, rounds: usize) -> Row {
    let counts = Arc::new(Counts::default());
    let index = Arc::new(I::with_observer(IndexConfig::default(), counts.clone()));
    let body = payload(256);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
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
                let drive = index.drive(k as i64, Some(4 + round), budget).await;
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
    latencies.sort_unstable();
    Row {
        engine: I::NAME,
        parked,
        p50: latencies[latencies.len() / 2],
        p99: latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)],
        others_woken: others as f64 / rounds as f64,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need.
    let quick = std::env::args().any(|a| a == "--quick" || a == "--test");
    let rounds = if quick { 5 } else { 200 };
    println!(
        "tip_to_served: {rounds} rounds per row; median and p99 from applying the tip to the drive returning"
    );
    println!(
        "{:<9} {:>7} {:>12} {:>12} {:>22}",
        "engine", "parked", "p50", "p99", "others woken per tip"
    );
    for parked in [1, 100, 1_000] {
        let rows = [
            run::<WalIndex>(parked, rounds),
            run::<ShardedMutexIndex>(parked, rounds),
            run::<MutexIndex>(parked, rounds),
        ];
        for r in rows {
            println!(
                "{:<9} {:>7} {:>9.1} µs {:>9.1} µs {:>22.1}",
                r.engine,
                r.parked,
                r.p50.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.others_woken
            );
        }
    }
}
