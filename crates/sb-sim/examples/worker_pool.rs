//! A worker pool's wiring, end to end, the way a worker runs the index:
//!
//! - one Tokio runtime with two workers, shared by the WAL drain (a task) and the drives;
//! - `IndexConfig`, `DriveBudget` and `DrainConfig` read from today's environment variables;
//! - a dispatch loop: each dispatch is the worker's drive flow (its tail events, the
//!   deadline loop, rehydrate from the retained WAL on a miss, then fallback), at most two
//!   at a time, as a worker runs two commands;
//! - the `noetl_worker_state_builder_*` series on `/metrics` (Prometheus);
//! - checkpoints of the index where `NOETL_STATE_INDEX_CHECKPOINT_DIR` says (every 60 s by
//!   default, `NOETL_STATE_INDEX_CHECKPOINT_SECS`);
//! - a clean shutdown on Ctrl-C, or after `--duration` seconds: dispatching stops, the
//!   drives in flight finish, the drain drains, and the run prints what it served.
//!
//! ```sh
//! cargo run --release -p sb-sim --example worker_pool                  # in-process WAL, 20 s
//! cargo run --release -p sb-sim --example worker_pool -- --wal nats://127.0.0.1:4222
//! cargo run --release -p sb-sim --example worker_pool -- --wal 'ehdb://127.0.0.1:7070?ingest=7071'
//! curl -s 127.0.0.1:9464/metrics | grep drive_builds_total             # while it runs
//! ```
//!
//! On its default the WAL is an in-process channel fed by the simulator's generator
//! (production-shaped executions, smaller envelopes so it runs anywhere); with `--wal
//! nats://HOST:PORT` the same events go through a JetStream stream made for the run (and
//! deleted afterwards), and the drain consumes it with a replay-on-boot `JetStreamSource` on
//! its own thread; with `--wal ehdb://…` they go through an EHDB writer's ingest face and the
//! drain reads its feed with an `EhdbSource`, from the run's own first sequence.
//!
//! The simulator's `Feed` plays the server that publishes; the pool's side of the WAL (the
//! drain's source and the drives' per-execution read) is built in [`pool_side`] with each
//! source crate's own constructors, the code a pool author copies. A drive's rehydrate on a
//! miss reads what a pool on that WAL reads: the execution's subject on JetStream
//! (`JetStreamRehydrate`), the execution's shard of the writer's feed on EHDB
//! (`EhdbRehydrate`, which waits for the writer's replay of the shard), and the records the
//! producer published on the in-process channel, which has no transport to read.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use sb_metrics::{StateBuilderMetrics, exporter, series::DEFAULT_PREFIX};
use sb_sim::wal::{Feed, PoolWal, RetainedWal, WalTarget};
use sb_sim::workload::{Generator, Shape};
use wal_index::ingest::{Checkpointing, DrainReport};
use wal_index::labels::DriveLabel;
use wal_index::rehydrate::RehydrateGate;
use wal_index::{
    Drain, DrainConfig, DriveBudget, DriveFallbacks, DriveFlow, IndexConfig, IndexObserver,
    StateIndex, WalIndex, WalSource,
};
use wal_source_ehdb::{EhdbConfig, EhdbRehydrate, EhdbSource};
use wal_source_nats::{JetStreamRehydrate, JetStreamSource};

/// A worker pool on the state-builder index: drain, drives, metrics, shutdown.
#[derive(Parser)]
struct Args {
    /// The WAL: `nats://HOST:PORT` for a JetStream broker, `ehdb://HOST:FEED_PORT?ingest=PORT`
    /// for an EHDB writer; omitted, an in-process WAL.
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

/// Counts the records the drain consumed, so a shutdown over a broker knows when the drain
/// has caught up. Paired with the metrics observer: `(metrics, records)` is an observer.
#[derive(Default)]
struct ConsumedRecords(AtomicU64);

impl IndexObserver for ConsumedRecords {
    fn wal_events(&self, count: u64) {
        // Relaxed: a progress counter, read by the shutdown loop only.
        self.0.fetch_add(count, Ordering::Relaxed);
    }
}

impl ConsumedRecords {
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the dispatch loop saw.
#[derive(Default)]
struct Served {
    by_label: [u64; DriveLabel::ALL.len()],
    latencies: Vec<Duration>,
    tail_applied: u64,
}

type Observer = (Arc<StateBuilderMetrics>, Arc<ConsumedRecords>);
type Index = WalIndex;

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
    let consumed = Arc::new(ConsumedRecords::default());
    let observer: Arc<Observer> =
        Arc::new((StateBuilderMetrics::register(), Arc::clone(&consumed)));
    let index = Arc::new(Index::with_observer(IndexConfig::from_env()?, observer));

    let mut wal = Feed::open(&target, "worker")?;
    let retained = Arc::new(RetainedWal::default());
    let (source, reads) = pool_side(&mut wal, Arc::clone(&retained))?;
    let stop_drain = Arc::new(AtomicBool::new(false));
    let drain = checkpointed(Drain::new(
        Arc::clone(&index),
        source,
        DrainConfig::from_env()?,
    ))?;
    let drain_task = start_drain(&runtime, &target, drain, &stop_drain);
    let interrupted = watch_ctrl_c(&runtime);
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

    let started = Instant::now();
    let pool = Pool {
        index: Arc::clone(&index),
        retained,
        reads,
        gate: RehydrateGate::default(),
        slots: tokio::sync::Semaphore::new(args.concurrency.max(1)),
        served: Mutex::new(Served::default()),
        budget: DriveBudget::from_env(),
    };
    let pool = Arc::new(pool);
    let (drives, published) = dispatch(&args, &runtime, &mut wal, &pool, &interrupted)?;

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
    close_wal(wal, &consumed, published, &stop_drain)?;
    let report = runtime.block_on(drain_task)??;
    let served = pool.served.lock().map_err(|_| "a drive panicked")?;
    summarize(&served, &report, published, started.elapsed(), &index);
    if served.latencies.is_empty() {
        return Err("no drive was dispatched".into());
    }
    Ok(())
}

/// The drain, checkpointing where `NOETL_STATE_INDEX_CHECKPOINT_DIR` (or, with wal-index's
/// `object-store-aws` feature, `_URL`) says. A pool restarted on the same WAL restores the
/// newest (`CheckpointStore::restore_newest`, docs/deployment.md); this example's WAL is
/// made for the run, so it only writes them.
fn checkpointed(
    drain: Drain<Index, Box<dyn WalSource>>,
) -> std::io::Result<Drain<Index, Box<dyn WalSource>>> {
    let Some(checkpointing) = Checkpointing::from_env()? else {
        return Ok(drain);
    };
    eprintln!(
        "worker pool: checkpoints to {} every {:?}",
        checkpointing.store.location(),
        checkpointing.every
    );
    drain.checkpoint_to(checkpointing)
}

/// The pool's side of the WAL: the drain's source and the drives' per-execution read, each
/// built with its source crate's own constructor from where the run's WAL is.
fn pool_side(
    wal: &mut Feed,
    retained: Arc<RetainedWal>,
) -> std::io::Result<(Box<dyn WalSource>, Arc<dyn DriveFallbacks>)> {
    Ok(match wal.pool_wal()? {
        PoolWal::Channel => (wal.source()?, retained),
        PoolWal::JetStream { config, layout } => (
            Box::new(JetStreamSource::connect((*config).clone()).map_err(std::io::Error::other)?),
            Arc::new(JetStreamRehydrate::connect(*config, layout).map_err(std::io::Error::other)?),
        ),
        PoolWal::Ehdb {
            feed,
            shards,
            cursor,
        } => (
            Box::new(EhdbSource::connect(
                EhdbConfig::new(feed.clone())
                    .shards(0..shards)
                    .cursor(cursor),
            )?),
            Arc::new(EhdbRehydrate::new(feed, shards)),
        ),
    })
}

/// Flushes the WAL and ends it: an in-process WAL closes, and the drain ends when it has
/// consumed it; a broker stream stays open, so the drain is stopped once it consumed every
/// record (or after 60 s, saying so), then the run's stream is deleted.
fn close_wal(
    mut wal: Feed,
    consumed: &ConsumedRecords,
    published: u64,
    stop_drain: &AtomicBool,
) -> std::io::Result<()> {
    wal.flush()?;
    if wal.closes_on_drop() {
        drop(wal);
    } else {
        let deadline = Instant::now() + Duration::from_secs(60);
        while consumed.get() < published && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if consumed.get() < published {
            eprintln!(
                "worker pool: the drain consumed {} of {published} records in 60 s",
                consumed.get()
            );
        }
        stop_drain.store(true, Ordering::Relaxed);
        wal.close()?;
    }
    Ok(())
}

/// The drain: a task on the runtime over an in-process WAL; its own thread over a broker or
/// a writer (their sources block while they wait for records), joined through a task so
/// both shapes shut down the same way.
fn start_drain(
    runtime: &tokio::runtime::Runtime,
    target: &WalTarget,
    mut drain: Drain<Index, Box<dyn wal_index::WalSource>>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<std::io::Result<DrainReport>> {
    let stop = Arc::clone(stop);
    if !target.blocks() {
        runtime.spawn(async move { drain.run_until_async(&stop).await.cloned() })
    } else {
        let thread = std::thread::spawn(move || drain.run_until(&stop).cloned());
        runtime.spawn_blocking(move || {
            thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the drain panicked")))
        })
    }
}

/// A flag Ctrl-C sets.
fn watch_ctrl_c(runtime: &tokio::runtime::Runtime) -> Arc<AtomicBool> {
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    runtime.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            // Relaxed: the flag carries no data; the loop only needs to see it eventually.
            flag.store(true, Ordering::Relaxed);
        }
    });
    interrupted
}

/// What every drive of the pool shares.
struct Pool {
    index: Arc<Index>,
    /// Every record the producer published: the in-process WAL's per-execution read.
    retained: Arc<RetainedWal>,
    /// What a drive reads its execution from on a miss.
    reads: Arc<dyn DriveFallbacks>,
    gate: RehydrateGate,
    /// Drives at once.
    slots: tokio::sync::Semaphore,
    served: Mutex<Served>,
    budget: DriveBudget,
}

/// Publishes events at the configured rate and dispatches a drive (a task) for each one the
/// server would dispatch, until the duration passes or Ctrl-C. Returns the drives and the
/// number of events published.
fn dispatch(
    args: &Args,
    runtime: &tokio::runtime::Runtime,
    wal: &mut Feed,
    pool: &Arc<Pool>,
    interrupted: &AtomicBool,
) -> std::io::Result<(Vec<tokio::task::JoinHandle<()>>, u64)> {
    let mut generator = Generator::new(Shape {
        payload_bytes: args.payload_bytes,
        ..Shape::default()
    });
    let started = Instant::now();
    let pace = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
    let (mut drives, mut published) = (Vec::new(), 0u64);
    // Relaxed: as in `watch_ctrl_c`.
    while !interrupted.load(Ordering::Relaxed)
        && (args.duration == 0 || started.elapsed() < Duration::from_secs(args.duration))
    {
        let item = generator.next_item();
        let Some((execution_id, head)) = item.ids else {
            continue;
        };
        pool.retained.record(&item);
        wal.append(&item)?;
        published += 1;
        if item.triggers {
            // The dispatch, the moment the server published its tip.
            let (pool, tail, dispatched) = (Arc::clone(pool), item.tail.clone(), Instant::now());
            drives.push(runtime.spawn(async move {
                let Ok(_slot) = pool.slots.acquire().await else {
                    return;
                };
                let flow = DriveFlow::new(pool.budget)
                    .tail_events(tail)
                    .fallbacks(&*pool.reads)
                    .rehydrate_gate(&pool.gate);
                let drive = pool
                    .index
                    .drive_async(execution_id, Some(head), &flow)
                    .await;
                if let Ok(mut served) = pool.served.lock() {
                    served.by_label[drive.label.index()] += 1;
                    served.latencies.push(dispatched.elapsed());
                    served.tail_applied += u64::from(drive.tail_applied);
                }
            }));
        }
        std::thread::sleep(pace);
    }
    Ok((drives, published))
}

/// Prints what the run did.
fn summarize(
    served: &Served,
    report: &DrainReport,
    published: u64,
    elapsed: Duration,
    index: &Index,
) {
    let mut latencies = served.latencies.clone();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "worker pool: {published} events published in {:.1} s; the drain applied {} ({} bad, {} batches)",
        elapsed.as_secs_f64(),
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
}
