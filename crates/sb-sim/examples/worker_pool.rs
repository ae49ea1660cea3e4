//! A worker pool's wiring, end to end, the way a worker runs the index:
//!
//! - one Tokio runtime with two workers, shared by the WAL drain (a task) and the drives;
//! - `IndexConfig`, `DriveBudget` and `DrainConfig` read from today's environment variables;
//! - a dispatch loop: each dispatch is the worker's drive flow (its tail events, the
//!   deadline loop, rehydrate from the retained WAL on a miss, then fallback), at most two
//!   at a time, as a worker runs two commands;
//! - the `noetl_worker_state_builder_*` series on `/metrics` (Prometheus);
//! - a clean shutdown on Ctrl-C, or after `--duration` seconds: dispatching stops, the
//!   drives in flight finish, the drain drains, and the run prints what it served.
//!
//! ```sh
//! cargo run --release -p sb-sim --example worker_pool                  # in-process WAL, 20 s
//! cargo run --release -p sb-sim --example worker_pool -- --wal nats://127.0.0.1:4222
//! curl -s 127.0.0.1:9464/metrics | grep drive_builds_total             # while it runs
//! ```
//!
//! On its default the WAL is an in-process channel fed by the simulator's generator
//! (production-shaped executions, smaller envelopes so it runs anywhere); with `--wal
//! nats://HOST:PORT` the same events go through a JetStream stream made for the run (and
//! deleted afterwards), and the drain consumes it with a replay-on-boot `JetStreamSource` on
//! its own thread.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use sb_metrics::{StateBuilderMetrics, exporter, series::DEFAULT_PREFIX};
use sb_sim::wal::{Feed, WalTarget};
use sb_sim::workload::{Generator, Shape};
use wal_index::labels::EvictReason;
use wal_index::labels::{DriveLabel, RehydrateLabel, WaitLabel};
use wal_index::rehydrate::RehydrateGate;
use wal_index::report::IndexStats;
use wal_index::{
    AdvanceOutcome, Drain, DrainConfig, DriveBudget, DriveFallbacks, DriveFlow, Event, ExecutionId,
    IndexConfig, IndexObserver, StateIndex, WalIndex,
};

/// A worker pool on the state-builder index: drain, drives, metrics, shutdown.
#[derive(Parser)]
struct Args {
    /// The WAL: `nats://HOST:PORT` for a JetStream broker; omitted, an in-process WAL.
    #[arg(long)]
    wal: Option<String>,
    /// Seconds of dispatches before a clean shutdown (0: until Ctrl-C).
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Events per second the producer publishes.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Mean envelope size in bytes.
    #[arg(long, default_value_t = 4096)]
    payload_bytes: usize,
    /// Drives at once (a worker runs two commands).
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// Where `/metrics` is served.
    #[arg(long, default_value = "127.0.0.1:9464")]
    metrics_addr: SocketAddr,
}

/// The retained WAL a drive replays from on a miss: here, every record the producer
/// published, by execution.
#[derive(Default)]
struct RetainedWal(Mutex<HashMap<ExecutionId, Vec<Bytes>>>);

impl DriveFallbacks for RetainedWal {
    fn retained(&self, execution_id: ExecutionId) -> Option<Vec<Event>> {
        let records = self.0.lock().ok()?;
        Some(
            records
                .get(&execution_id)?
                .iter()
                .filter_map(|payload| Event::from_json_bytes(payload.clone()).ok())
                .collect(),
        )
    }
}

/// The metrics observer, and a count of the records the drain consumed (so a shutdown over
/// a broker knows when the drain has caught up).
struct Consumed {
    metrics: Arc<StateBuilderMetrics>,
    records: AtomicU64,
}

impl IndexObserver for Consumed {
    fn build(&self, outcome: &AdvanceOutcome, elapsed: Duration, waited: Duration) {
        self.metrics.build(outcome, elapsed, waited);
    }
    fn drive_wait(&self, outcome: WaitLabel) {
        self.metrics.drive_wait(outcome);
    }
    fn drive(&self, outcome: DriveLabel) {
        self.metrics.drive(outcome);
    }
    fn drive_tail(&self, applied: u32, rejected: u32) {
        self.metrics.drive_tail(applied, rejected);
    }
    fn residency(&self, stats: IndexStats) {
        self.metrics.residency(stats);
    }
    fn evicted(&self, reason: EvictReason, count: usize) {
        self.metrics.evicted(reason, count);
    }
    fn rehydrate(&self, outcome: RehydrateLabel) {
        self.metrics.rehydrate(outcome);
    }
    fn wal_events(&self, count: u64) {
        // Relaxed: a progress counter, read by the shutdown loop only.
        self.records.fetch_add(count, Ordering::Relaxed);
        self.metrics.wal_events(count);
    }
    fn healthy(&self, up: bool) {
        self.metrics.healthy(up);
    }
}

/// What the dispatch loop saw.
#[derive(Default)]
struct Served {
    by_label: [u64; DriveLabel::ALL.len()],
    latencies: Vec<Duration>,
    tail_applied: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let target = WalTarget::parse(args.wal.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // Metrics first: handles registered before the recorder is installed record nowhere.
    {
        let _inside = runtime.enter();
        exporter::install(args.metrics_addr, DEFAULT_PREFIX)?;
    }
    let observer = Arc::new(Consumed {
        metrics: StateBuilderMetrics::register(),
        records: AtomicU64::new(0),
    });
    let index = Arc::new(WalIndex::with_observer(
        IndexConfig::from_env()?,
        observer.clone(),
    ));
    let budget = DriveBudget::from_env();
    let drain_config = DrainConfig::from_env()?;

    // The drain: a task on the runtime over an in-process WAL; its own thread over a
    // broker (the JetStream source blocks while it waits for messages).
    let (mut wal, source) = Feed::open(&target, "worker")?;
    let stop_drain = Arc::new(AtomicBool::new(false));
    let mut drain = Drain::new(Arc::clone(&index), source, drain_config);
    let drain_task = match &target {
        WalTarget::InProcess => {
            let stop = Arc::clone(&stop_drain);
            Some(runtime.spawn(async move { drain.run_until_async(&stop).await.cloned() }))
        }
        WalTarget::Nats(_) => {
            let stop = Arc::clone(&stop_drain);
            let thread = std::thread::spawn(move || drain.run_until(&stop).cloned());
            // Joined below through a task so both shapes shut down the same way.
            Some(runtime.spawn_blocking(move || {
                thread
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("the drain panicked")))
            }))
        }
    };

    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let interrupted = Arc::clone(&interrupted);
        runtime.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, Ordering::Relaxed);
            }
        });
    }
    eprintln!(
        "worker pool: WAL {}, metrics on http://{}/metrics, {}",
        target.describe(),
        args.metrics_addr,
        if args.duration == 0 {
            "until Ctrl-C".to_owned()
        } else {
            format!("{} s (Ctrl-C stops it sooner)", args.duration)
        }
    );

    let retained = Arc::new(RetainedWal::default());
    let gate = Arc::new(RehydrateGate::default());
    let slots = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let served = Arc::new(Mutex::new(Served::default()));
    let mut generator = Generator::new(Shape {
        payload_bytes: args.payload_bytes,
        ..Shape::default()
    });
    let started = Instant::now();
    let pace = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
    let mut drives = Vec::new();
    let mut published = 0u64;
    // Relaxed: the flag carries no data; the loop only needs to see it eventually.
    while !interrupted.load(Ordering::Relaxed)
        && (args.duration == 0 || started.elapsed() < Duration::from_secs(args.duration))
    {
        let item = generator.next_item();
        let Some((execution_id, head)) = item.ids else {
            continue;
        };
        if let Ok(mut records) = retained.0.lock() {
            records
                .entry(execution_id)
                .or_default()
                .push(item.payload.clone());
        }
        wal.append(&item)?;
        published += 1;
        if item.triggers {
            // The dispatch, the moment the server published its tip.
            let dispatched = Instant::now();
            let (index, retained, gate, slots, served) = (
                Arc::clone(&index),
                Arc::clone(&retained),
                Arc::clone(&gate),
                Arc::clone(&slots),
                Arc::clone(&served),
            );
            let tail = item.tail.clone();
            drives.push(runtime.spawn(async move {
                let Ok(_slot) = slots.acquire_owned().await else {
                    return;
                };
                let flow = DriveFlow::new(budget)
                    .tail_events(tail)
                    .fallbacks(&*retained)
                    .rehydrate_gate(&gate);
                let drive = index.drive_flow(execution_id, Some(head), &flow).await;
                if let Ok(mut served) = served.lock() {
                    served.by_label[drive.label.index()] += 1;
                    served.latencies.push(dispatched.elapsed());
                    served.tail_applied += u64::from(drive.tail_applied);
                }
            }));
        }
        std::thread::sleep(pace);
    }

    // Shutdown: no more dispatches; the drives in flight finish; the WAL is flushed and
    // the drain consumes what it holds, then stops.
    eprintln!(
        "worker pool: shutting down ({} drives in flight or queued)",
        { drives.iter().filter(|d| !d.is_finished()).count() }
    );
    runtime.block_on(async {
        for drive in drives {
            let _ = drive.await;
        }
    });
    wal.flush()?;
    let closes = wal.closes_on_drop();
    if closes {
        drop(wal);
    } else {
        // A broker stream stays open: stop the drain once it consumed every record
        // (or after 60 s, saying so), then delete the run's stream.
        let deadline = Instant::now() + Duration::from_secs(60);
        while observer.records.load(Ordering::Relaxed) < published && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let consumed = observer.records.load(Ordering::Relaxed);
        if consumed < published {
            eprintln!("worker pool: the drain consumed {consumed} of {published} records in 60 s");
        }
        stop_drain.store(true, Ordering::Relaxed);
        wal.close()?;
    }
    let report = match drain_task {
        Some(task) => runtime.block_on(task)??,
        None => unreachable!("a drain is always started"),
    };

    let served = served.lock().map_err(|_| "a drive panicked")?;
    let mut latencies = served.latencies.clone();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "worker pool: {published} events published in {:.1} s; the drain applied {} ({} bad, {} batches)",
        started.elapsed().as_secs_f64(),
        report.events,
        report.bad,
        report.batches
    );
    let labels: Vec<String> = DriveLabel::ALL
        .iter()
        .filter(|l| served.by_label[l.index()] > 0)
        .map(|l| format!("{} {}", served.by_label[l.index()], l.label()))
        .collect();
    println!(
        "drives: {} ({}); {} tail events applied; dispatch → end p50 {:.2} ms, p99 {:.2} ms",
        served.latencies.len(),
        labels.join(", "),
        served.tail_applied,
        at(0.5),
        at(0.99)
    );
    let stats = index.stats();
    println!(
        "resident at the end: {} executions, {} events, {} bytes",
        stats.executions, stats.events, stats.bytes
    );
    if served.latencies.is_empty() {
        return Err("no drive was dispatched".into());
    }
    Ok(())
}
