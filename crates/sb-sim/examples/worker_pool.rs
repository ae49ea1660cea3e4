//! A worker pool's wiring, end to end, the way a worker runs the index:
//!
//! - one Tokio runtime with two workers, shared by the WAL drain (a task) and the drives;
//! - `IndexConfig`, `DriveBudget` and `DrainConfig` read from today's environment variables;
//! - a dispatch loop: each dispatch is the worker's drive flow (its tail events, the
//!   deadline loop, rehydrate from the retained WAL on a miss, then fallback), at most two
//!   at a time, as a worker runs two commands;
//! - the `noetl_worker_state_builder_*` series on `/metrics` (Prometheus);
//! - state shards, with `NOETL_STATE_SHARD_READ` / `_WRITE` and `NOETL_STATE_SHARD_URL`
//!   (`state_shard::ShardSettings`): a drive's miss reads the execution's shard before the
//!   WAL, and a writer beside the drain keeps the shards;
//! - a warm start: with `NOETL_STATE_INDEX_CHECKPOINT_DIR` (or `_URL`) set, the pool starts
//!   from its newest checkpoint that the WAL still holds (`Drain::warm_start`), and
//!   checkpoints the index there (every 60 s by default, `NOETL_STATE_INDEX_CHECKPOINT_SECS`);
//! - production's `/ehdb/state-spine?execution=ID[&head=ID]` next to `/metrics`: the index's
//!   spine for the server, failing closed (`wal_index::state_spine`);
//! - the probes Kubernetes calls next to `/metrics`: `/ready` (503 until the drain has
//!   reached the WAL's head, restored or not) and `/livez` (503 once the drain has not
//!   returned from a step for 30 s);
//! - a graceful shutdown on SIGTERM or Ctrl-C, or after `--duration` seconds: dispatching
//!   stops, the drives in flight finish, the drain applies what the WAL holds, takes its last
//!   checkpoint (within `NOETL_STATE_INDEX_CHECKPOINT_LAST_SECS`, 10 s), and the run prints
//!   what it served.
//!
//! ```sh
//! cargo run --release -p sb-sim --example worker_pool                  # in-process WAL, 20 s
//! cargo run --release -p sb-sim --example worker_pool -- --wal nats://127.0.0.1:4222
//! cargo run --release -p sb-sim --example worker_pool -- --wal 'ehdb://127.0.0.1:7070?ingest=7071'
//! NOETL_STATE_INDEX_CHECKPOINT_DIR=/tmp/ckpt \
//!   cargo run --release -p sb-sim --example worker_pool -- --wal file:/tmp/wal.jsonl  # run it twice
//! curl -s 127.0.0.1:9464/metrics | grep drive_builds_total             # while it runs
//! curl -si 127.0.0.1:9464/ready | head -1
//! ```
//!
//! On its default the WAL is an in-process channel fed by the simulator's generator
//! (production-shaped executions, smaller envelopes so it runs anywhere); with `--wal
//! nats://HOST:PORT` the same events go through a JetStream stream made for the run (and
//! deleted afterwards), and the drain consumes it with a replay-on-boot `JetStreamSource` on
//! its own thread; with `--wal ehdb://…` they go through an EHDB writer's ingest face and the
//! drain reads its feed with an `EhdbSource`, from the run's own first sequence (or from its
//! checkpoint); with `--wal file:PATH` they are appended to a JSON-lines file that outlives
//! the run, which the drain follows (`JsonLinesSource::following`). The WALs that outlive a
//! run (the file, the writer) are where a second run restores the first one's checkpoint;
//! each run's executions have ids of their own (from the clock), as a new day's would.
//!
//! The simulator's `Feed` plays the server that publishes; the pool's side of the WAL (the
//! drain's source and the drives' per-execution read) is built in [`pool_side`] with each
//! source crate's own constructors, the code a pool author copies. A drive's rehydrate on a
//! miss reads what a pool on that WAL reads: the execution's subject on JetStream
//! (`JetStreamRehydrate`), on EHDB nothing unless `NOETL_STATE_INDEX_REHYDRATE_ON_MISS` is
//! on (then `EhdbRehydrate`, which costs the writer a replay of the whole log shard: an EHDB
//! pool reads state shards instead), and the records the
//! producer published on the in-process channel, which has no transport to read.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use sb_metrics::exporter::{self, PrometheusHandle};
use sb_metrics::{StateBuilderMetrics, series::DEFAULT_PREFIX};
use sb_sim::wal::{Feed, PoolWal, RetainedWal, WalTarget};
use sb_sim::workload::{Generator, Item, Shape};
use state_shard::{ShardSettings, ShardWriter};
use wal_index::checkpoint::{Checkpointing, LastCheckpoint};
use wal_index::ingest::{DrainHealth, DrainReport, JsonLinesSource, WarmStart};
use wal_index::labels::DriveLabel;
use wal_index::rehydrate::RehydrateGate;
use wal_index::state_spine;
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
    /// for an EHDB writer, `file:PATH` for a JSON-lines file; omitted, an in-process WAL.
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
    let target = Target::parse(args.wal.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // Metrics first: handles registered before the recorder is installed record nowhere.
    let metrics = exporter::install_recorder(DEFAULT_PREFIX)?;
    let consumed = Arc::new(ConsumedRecords::default());
    let observer: Arc<Observer> =
        Arc::new((StateBuilderMetrics::register(), Arc::clone(&consumed)));
    let index = Arc::new(Index::with_observer(IndexConfig::from_env()?, observer));

    // The producer side (the simulator's server), then the pool's start in one call.
    let mut wal = Producer::open(&target)?;
    let retained = Arc::new(RetainedWal::default());
    let (make_source, reads) = pool_side(&mut wal, Arc::clone(&retained))?;
    let (reads, shard_writer, verify_shards) = state_shards(reads)?;
    let checkpoints = checkpoints_from_env()?;
    // The probes answer from the start: not ready, and live, while the restore runs.
    let health = Arc::new(OnceLock::new());
    serve_probes(
        args.metrics_addr,
        metrics,
        Arc::clone(&health),
        Arc::clone(&index),
    )?;
    let (drain, start) = Drain::warm_start(
        Arc::clone(&index),
        checkpoints,
        make_source,
        DrainConfig::from_env()?,
    )?;
    report_start(&start, &index);
    let drain = match &shard_writer {
        Some(writer) => drain.on_batch(writer.feed()),
        None => drain,
    };
    let _ = health.set(drain.health());
    announce_ready(&runtime, drain.health(), Arc::clone(&consumed));
    let stop_drain = Arc::new(AtomicBool::new(false));
    let drain_task = start_drain(&runtime, target.blocks(), drain, &stop_drain);
    let interrupted = watch_signals(&runtime);
    announce(&args, &target);

    let started = Instant::now();
    let pool = Pool {
        index: Arc::clone(&index),
        retained,
        reads,
        gate: RehydrateGate::default(),
        slots: tokio::sync::Semaphore::new(args.concurrency.max(1)),
        served: Mutex::new(Served::default()),
        budget: DriveBudget::from_env(),
        verify_shards,
    };
    let pool = Arc::new(pool);
    let (drives, published) = dispatch(&args, &runtime, &mut wal, &pool, &interrupted)?;

    // Shutdown: no more dispatches; the drives in flight finish; the WAL is flushed and
    // the drain applies what it holds, then takes its last checkpoint.
    eprintln!(
        "worker pool: shutting down ({} drives in flight or queued)",
        { drives.iter().filter(|d| !d.is_finished()).count() }
    );
    finish_drives(&runtime, drives);
    close_wal(wal, &consumed, published, &stop_drain)?;
    let report = shut_down_drain(&runtime, drain_task)?;
    stop_shard_writer(shard_writer);
    let served = pool.served.lock().map_err(|_| "a drive panicked")?;
    summarize(&served, &report, published, started.elapsed(), &index);
    if served.latencies.is_empty() {
        return Err("no drive was dispatched".into());
    }
    Ok(())
}

/// Stops the state-shard writer, if the pool runs one, and says what it wrote.
fn stop_shard_writer(writer: Option<ShardWriter>) {
    if let Some(writer) = writer {
        eprintln!("worker pool: state shards: {:?}", writer.shut_down());
    }
}

/// Says where the pool runs and for how long.
fn announce(args: &Args, target: &Target) {
    eprintln!(
        "worker pool: WAL {}, metrics and probes on http://{}/metrics, /ready, /livez; {}",
        target.describe(),
        args.metrics_addr,
        if args.duration == 0 {
            "until SIGTERM or Ctrl-C".to_owned()
        } else {
            format!("{} s (SIGTERM or Ctrl-C stops it sooner)", args.duration)
        }
    );
}

/// Where the pool checkpoints (`NOETL_STATE_INDEX_CHECKPOINT_DIR` or `_URL`), said.
fn checkpoints_from_env() -> std::io::Result<Option<Checkpointing>> {
    let checkpoints = Checkpointing::from_env()?;
    if let Some(c) = &checkpoints {
        let (at, every) = (c.store.location(), c.every);
        eprintln!("worker pool: checkpoints in {at} every {every:?}");
    }
    Ok(checkpoints)
}

/// State shards, as `NOETL_STATE_SHARD_*` says (`ShardSettings`): the drives read a miss's
/// shard before `reads`, and a writer fed by the drain keeps the shards. Off by default.
fn state_shards(
    reads: Arc<dyn DriveFallbacks>,
) -> std::io::Result<(Arc<dyn DriveFallbacks>, Option<ShardWriter>, bool)> {
    let settings = ShardSettings::from_env();
    let Some(store) = settings.store(std::env::vars())? else {
        return Ok((reads, None, false));
    };
    eprintln!(
        "worker pool: state shards in {} (read {}, verify {}, write {})",
        store.location(),
        settings.read,
        settings.read_verify,
        settings.write
    );
    let reads: Arc<dyn DriveFallbacks> = match settings.reader(&store) {
        Some(reader) => Arc::new(reader.then_retained(reads)),
        None => reads,
    };
    let writer = settings.start_writer(&store)?;
    Ok((reads, writer, settings.read_verify))
}

/// The pool's drain source and its drives' per-execution read.
type PoolSide = (
    Box<dyn FnMut() -> std::io::Result<Box<dyn WalSource>>>,
    Arc<dyn DriveFallbacks>,
);

/// Says where the pool started: the checkpoint restored and what is left to replay, or a
/// replay from the WAL's start, and each checkpoint refused with its reason.
fn report_start(start: &WarmStart, index: &Index) {
    for (name, why) in &start.refused {
        eprintln!("worker pool: checkpoint {name} refused: {why}");
    }
    match &start.checkpoint {
        Some(name) => {
            let at = start.resumed_at.iter().flatten();
            let at: Vec<String> = at
                .map(|p| format!("{} {}", p.partition, p.last().sequence))
                .collect();
            let to_replay = start
                .to_replay
                .map_or("an unknown number of".to_owned(), |n| n.to_string());
            println!(
                "worker pool: restored {name} ({} bytes, {} executions, {} events) in {:.3} s; resumed after {}; {to_replay} records to replay",
                start.bytes,
                start.restore.restored,
                index.stats().events,
                start.took.as_secs_f64(),
                at.join(", "),
            );
        }
        None => println!("worker pool: no checkpoint restored; replaying the WAL from its start"),
    }
}

/// Says, once, when the drain has reached the WAL's head (what `/ready` answers), and how
/// many records it had consumed by then: after a restore, the ones it replayed (and any
/// published since the start).
fn announce_ready(
    runtime: &tokio::runtime::Runtime,
    health: Arc<DrainHealth>,
    consumed: Arc<ConsumedRecords>,
) {
    let started = Instant::now();
    runtime.spawn(async move {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!(
            "worker pool: ready {:.3} s after the start, {} records consumed by then",
            started.elapsed().as_secs_f64(),
            consumed.get()
        );
    });
}

/// Lets the drives in flight finish, for at most [`DRIVES_WITHIN`] (a drive's own budget is
/// a second by default): the shutdown's other steps need the rest of Kubernetes' grace
/// period. Drives still running then are abandoned, and said so.
fn finish_drives(runtime: &tokio::runtime::Runtime, drives: Vec<tokio::task::JoinHandle<()>>) {
    let deadline = tokio::time::Instant::now() + DRIVES_WITHIN;
    let abandoned = runtime.block_on(async {
        let mut abandoned = 0;
        for drive in drives {
            if tokio::time::timeout_at(deadline, drive).await.is_err() {
                abandoned += 1;
            }
        }
        abandoned
    });
    if abandoned > 0 {
        eprintln!("worker pool: {abandoned} drives abandoned after {DRIVES_WITHIN:?}");
    }
}

/// How long a shutdown waits for the drives in flight.
const DRIVES_WITHIN: Duration = Duration::from_secs(10);

/// Waits for the drain to stop, then shuts it down: its last checkpoint, said.
fn shut_down_drain(
    runtime: &tokio::runtime::Runtime,
    drain_task: tokio::task::JoinHandle<std::io::Result<PoolDrain>>,
) -> std::io::Result<DrainReport> {
    let mut drain = runtime
        .block_on(drain_task)
        .map_err(|_| std::io::Error::other("the drain task panicked"))??;
    report_last_checkpoint(drain.shut_down());
    Ok(drain.report().clone())
}

/// Says what became of the last checkpoint.
fn report_last_checkpoint(last: Option<LastCheckpoint>) {
    match last {
        None => {}
        Some(LastCheckpoint::Written { bytes, took }) => println!(
            "worker pool: last checkpoint written ({bytes} bytes in {:.3} s)",
            took.as_secs_f64()
        ),
        Some(other) => println!("worker pool: last checkpoint: {other:?}"),
    }
}

/// Where the run's WAL is: the simulator's targets, or a JSON-lines file.
enum Target {
    Feed(WalTarget),
    File(PathBuf),
}

impl Target {
    fn parse(wal: Option<&str>) -> Result<Target, String> {
        match wal.and_then(|w| w.strip_prefix("file:")) {
            Some(path) => Ok(Target::File(PathBuf::from(path))),
            None => WalTarget::parse(wal).map(Target::Feed),
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Feed(target) => target.describe(),
            Target::File(path) => format!("JSON-lines file {}", path.display()),
        }
    }

    /// Whether the drain's source blocks while it waits (and so runs on a thread).
    fn blocks(&self) -> bool {
        match self {
            Target::Feed(target) => target.blocks(),
            Target::File(_) => true,
        }
    }
}

/// The producer's end of the WAL.
enum Producer {
    Feed(Feed),
    /// A JSON-lines file, appended to; it outlives the run.
    File(PathBuf, std::io::BufWriter<std::fs::File>),
}

impl Producer {
    fn open(target: &Target) -> std::io::Result<Producer> {
        Ok(match target {
            Target::Feed(target) => Producer::Feed(Feed::open(target, "worker")?),
            Target::File(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                Producer::File(path.clone(), std::io::BufWriter::new(file))
            }
        })
    }

    fn append(&mut self, item: &Item) -> std::io::Result<()> {
        match self {
            Producer::Feed(feed) => feed.append(item),
            Producer::File(_, file) => {
                file.write_all(&item.payload)?;
                file.write_all(b"\n")?;
                // Each record is in the file once published, as a broker's would be.
                file.flush()
            }
        }
    }
}

/// The pool's side of the WAL: how to make the drain's source at the WAL's start (again
/// after a refused checkpoint), and the drives' per-execution read, each built with its
/// source crate's own constructor from where the run's WAL is.
fn pool_side(wal: &mut Producer, retained: Arc<RetainedWal>) -> std::io::Result<PoolSide> {
    let feed = match wal {
        Producer::File(path, _) => {
            let path = path.clone();
            let make = move || -> std::io::Result<Box<dyn WalSource>> {
                Ok(Box::new(JsonLinesSource::open(&path)?.following()))
            };
            return Ok((Box::new(make), retained));
        }
        Producer::Feed(feed) => feed,
    };
    Ok(match feed.pool_wal()? {
        PoolWal::Channel => {
            let mut channel = Some(feed.source()?);
            let make = move || {
                channel
                    .take()
                    .ok_or_else(|| std::io::Error::other("an in-process WAL cannot be read again"))
            };
            (Box::new(make), retained)
        }
        PoolWal::JetStream { config, layout } => {
            let source_config = (*config).clone();
            let make = move || -> std::io::Result<Box<dyn WalSource>> {
                let source = JetStreamSource::connect(source_config.clone());
                Ok(Box::new(source.map_err(std::io::Error::other)?))
            };
            let reads = JetStreamRehydrate::connect(*config, layout);
            (
                Box::new(make),
                Arc::new(reads.map_err(std::io::Error::other)?),
            )
        }
        PoolWal::Ehdb {
            feed,
            shards,
            cursor,
        } => {
            let config = EhdbConfig::new(feed.clone())
                .shards(0..shards)
                .cursor(cursor);
            let make = move || -> std::io::Result<Box<dyn WalSource>> {
                Ok(Box::new(EhdbSource::connect(config.clone())?))
            };
            // The writer's feed has no read by execution: each read makes the writer prepare
            // the execution's whole log shard, and a read that gives up cannot stop it. An
            // EHDB pool reads state shards on a miss; the feed only when asked.
            let reads: Arc<dyn DriveFallbacks> = if rehydrate_on_miss() {
                Arc::new(EhdbRehydrate::new(feed, shards))
            } else {
                Arc::new(NoRead)
            };
            (Box::new(make), reads)
        }
    })
}

/// `NOETL_STATE_INDEX_REHYDRATE_ON_MISS` (truthy: `1`, `true`, `yes`, `on`): on EHDB, read a
/// miss's execution from the writer's feed. Off by default.
fn rehydrate_on_miss() -> bool {
    std::env::var("NOETL_STATE_INDEX_REHYDRATE_ON_MISS").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// No per-execution read (an EHDB pool without feed reads).
struct NoRead;

impl DriveFallbacks for NoRead {}

/// Flushes the WAL and ends it: an in-process WAL closes, and the drain ends when it has
/// consumed it; a broker stream, a writer or a file stays open, so the drain is stopped once
/// it has consumed every record published and the WAL has been quiet for a moment (or after
/// 60 s, saying so), then the run's stream is deleted (the file and the writer stay).
fn close_wal(
    wal: Producer,
    consumed: &ConsumedRecords,
    published: u64,
    stop_drain: &AtomicBool,
) -> std::io::Result<()> {
    let mut feed = match wal {
        Producer::Feed(mut feed) => {
            feed.flush()?;
            if feed.closes_on_drop() {
                drop(feed);
                return Ok(());
            }
            Some(feed)
        }
        Producer::File(_, mut file) => {
            file.flush()?;
            None
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut seen, mut quiet_since) = (consumed.get(), Instant::now());
    while Instant::now() < deadline
        && (seen < published || quiet_since.elapsed() < Duration::from_millis(300))
    {
        std::thread::sleep(Duration::from_millis(20));
        if consumed.get() != seen {
            (seen, quiet_since) = (consumed.get(), Instant::now());
        }
    }
    if seen < published {
        eprintln!("worker pool: the drain consumed {seen} of {published} records in 60 s");
    }
    // Relaxed: the flag carries no data (as in `Drain::run_until`).
    stop_drain.store(true, Ordering::Relaxed);
    if let Some(feed) = feed.take() {
        feed.close()?;
    }
    Ok(())
}

/// The drain: a task on the runtime over an in-process WAL; its own thread over a broker, a
/// writer or a file (their sources block while they wait for records), joined through a
/// task so both shapes shut down the same way. Either returns the drain, for its last
/// checkpoint.
fn start_drain(
    runtime: &tokio::runtime::Runtime,
    blocks: bool,
    mut drain: PoolDrain,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<std::io::Result<PoolDrain>> {
    let stop = Arc::clone(stop);
    if !blocks {
        runtime.spawn(async move {
            drain.run_until_async(&stop).await?;
            Ok(drain)
        })
    } else {
        let thread = std::thread::spawn(move || {
            drain.run_until(&stop)?;
            Ok(drain)
        });
        runtime.spawn_blocking(move || {
            thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the drain panicked")))
        })
    }
}

type PoolDrain = Drain<Index, Box<dyn WalSource>>;

/// Serves `/metrics` (the Prometheus exposition), `/ready` and `/livez` (200 or 503) and
/// production's `/ehdb/state-spine` (the index's spine for the server, JSON) on `addr`, one
/// request at a time on a thread of its own: a scrape, two probes and the server's rare
/// spine reads need no more.
fn serve_probes(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    health: Arc<OnceLock<Arc<DrainHealth>>>,
    index: Arc<Index>,
) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(addr)?;
    std::thread::Builder::new()
        .name("probes".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = answer(stream, &metrics, &health, &index);
            }
        })?;
    Ok(())
}

/// Answers one HTTP/1.1 request on `stream`, then closes it. Before the drain exists (the
/// restore is running) the pool is live and not ready.
fn answer(
    mut stream: std::net::TcpStream,
    metrics: &PrometheusHandle,
    health: &OnceLock<Arc<DrainHealth>>,
    index: &Index,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let ready = health.get().is_some_and(|h| h.is_ready());
    let live = health.get().is_none_or(|h| h.is_live(LIVE_WITHIN));
    if path.split('?').next() == Some(state_spine::PATH) {
        let spine = state_spine::answer(Some(index), path);
        return write!(
            stream,
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
            spine.status,
            spine.reason(),
            spine.body.len(),
            spine.body
        );
    }
    let (status, body) = match path.split('?').next() {
        Some("/metrics") => ("200 OK", metrics.render()),
        Some("/ready") if ready => ("200 OK", "ready\n".to_owned()),
        Some("/ready") => ("503 Service Unavailable", "not caught up\n".to_owned()),
        Some("/livez") if live => ("200 OK", "live\n".to_owned()),
        Some("/livez") => ("503 Service Unavailable", "the drain is stuck\n".to_owned()),
        _ => ("404 Not Found", "not found\n".to_owned()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A drain that has not begun a step for this long is stuck (a step waits at most the
/// drain's idle wait, 25 ms by default, plus one batch's apply).
const LIVE_WITHIN: Duration = Duration::from_secs(30);

/// A flag SIGTERM (a Kubernetes roll) or Ctrl-C sets.
fn watch_signals(runtime: &tokio::runtime::Runtime) -> Arc<AtomicBool> {
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    runtime.spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(term) => term.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
        // Relaxed: the flag carries no data; the loop only needs to see it eventually.
        flag.store(true, Ordering::Relaxed);
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
    /// Compare a served state shard with the retained WAL (`NOETL_STATE_SHARD_READ_VERIFY`).
    verify_shards: bool,
}

/// Publishes events at the configured rate and dispatches a drive (a task) for each one the
/// server would dispatch, until the duration passes or Ctrl-C. Returns the drives and the
/// number of events published.
fn dispatch(
    args: &Args,
    runtime: &tokio::runtime::Runtime,
    wal: &mut Producer,
    pool: &Arc<Pool>,
    interrupted: &AtomicBool,
) -> std::io::Result<(Vec<tokio::task::JoinHandle<()>>, u64)> {
    // Ids of this run's own (from the clock), so a run after a restart does not reuse the
    // previous run's.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as i64);
    let shape = Shape {
        payload_bytes: args.payload_bytes,
        ..Shape::default()
    };
    let mut generator = Generator::starting_at(shape, base, base.saturating_mul(1000));
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
                    .rehydrate_gate(&pool.gate)
                    .verify_shard(pool.verify_shards);
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
