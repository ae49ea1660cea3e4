//! A worker roll mid-run (`simulate --roll-at SECS`): a pool that has caught up with the
//! backlog runs the live phase, and SECS into it is stopped (its drives in flight
//! abandoned); a new pool starts while the producer keeps publishing. Four rolls of the
//! same plan, side by side: the engine shut down gracefully (its drain's last checkpoint,
//! as on SIGTERM) and restoring it; the engine dropped without a goodbye and restoring its
//! newest periodic checkpoint; the engine replaying the WAL from its start; and today's
//! design replaying it. Every new pool starts with [`Drain::warm_start`], as a pool does.
//!
//! Timed from the new process's start: its first served drive, the drives dispatched until
//! its drain caught up with the log's head (the roll's drives), and the catch-up itself.
//! A drive's per-execution read is the transport's ([`Feed::per_execution_reads`]), as a
//! pool on that WAL has it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use state_shard::{CellSettings, ShardStore, ShardWriter, StateShardReader, WriterConfig};
use wal_index::baseline::MutexIndex;
use wal_index::checkpoint::{Checkpointable, Checkpointing, DirStore, Position};
use wal_index::ingest::ChannelSource;
use wal_index::labels::DriveLabel;
use wal_index::{Drain, DriveFallbacks, StateIndex, WalIndex, WalSource};
use wal_source_ehdb::{EhdbConfig, EhdbSource};
use wal_source_nats::JetStreamSource;

use crate::observer::SimObserver;
use crate::report::Latency;
use crate::run::{CheckpointDir, Dispatch, DrainRun, DriveContext, DriveRecord, Plan, SimConfig};

/// The drives' hand-over: `None` until the new pool has started.
type Ready<I> = tokio::sync::watch::Sender<Option<Arc<DriveContext<I>>>>;
use crate::wal::{Feed, PoolWal, RetainedWal};
use crate::{Engine, report};

/// When the roll happens, and how often the pool checkpoints before it.
#[derive(Debug, Clone, Copy)]
pub struct Roll {
    /// Time into the live phase at which the pool is dropped.
    pub at: Duration,
    /// The checkpointing pool's cadence.
    pub every: Duration,
}

/// How the new pool starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Start {
    /// The old pool shut down gracefully (SIGTERM: its drain took a last checkpoint);
    /// the new one restores it and resumes the WAL after it.
    Graceful,
    /// From the newest checkpoint that verifies, the WAL resumed after it (the old pool
    /// was dropped without a goodbye: its newest periodic checkpoint).
    Checkpoint,
    /// Empty, replaying the WAL from its start.
    Replay,
}

/// A roll's state shards (`--state-shards`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ShardFigures {
    /// The new pool's drives served from a state shard.
    pub served_shard: usize,
    /// `open` shards written over the roll.
    pub open_written: u64,
    /// `sealed` shards written.
    pub sealed_written: u64,
    /// Failed writes, and shards not written because the store's could not be merged.
    pub errors: u64,
    /// Events the writer's queue dropped.
    pub dropped: u64,
}

/// One roll's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RollFigures {
    /// The index.
    pub engine: Engine,
    /// How the new pool started.
    pub start: Start,
    /// Checkpoints the old pool wrote before the roll.
    pub checkpoints_written: u64,
    /// Reading, verifying and seeding the checkpoint, the source's check included
    /// (seconds); `None` where none was used.
    pub restore_s: Option<f64>,
    /// Its size.
    pub restore_bytes: u64,
    /// Checkpoints refused, with their reasons.
    pub refused: Vec<String>,
    /// Records the new pool had to replay: in the log at its start and not in its
    /// checkpoint.
    pub replayed: u64,
    /// From the new process's start to its first served drive (seconds).
    pub first_served_s: Option<f64>,
    /// From the new process's start to its drain's catch-up (seconds).
    pub caught_up_s: Option<f64>,
    /// Drives dispatched before the catch-up, tip → end.
    pub during: Latency,
    /// Of those, not served.
    pub during_fell_back: usize,
    /// Every drive of the new pool.
    pub drives: usize,
    /// Of those, not served.
    pub fell_back: usize,
    /// Drives in flight or queued on the old pool when it was dropped.
    pub abandoned: usize,
    /// With `--state-shards`: the new pool's drives the state shard served, and what the
    /// shard writer did over the whole roll.
    pub shards: Option<ShardFigures>,
    /// How long the old pool took to stop (its step, and a checkpoint write in flight).
    pub old_pool_stop_s: f64,
}

/// The four rolls' report.
#[derive(Debug, Clone, Serialize)]
pub struct RollReport {
    /// What was run.
    pub workload: String,
    /// The machine.
    pub machine: String,
    /// Seconds into the live phase.
    pub at_s: f64,
    /// The checkpointing pool's cadence, seconds.
    pub every_s: f64,
    /// One row per roll.
    pub rolls: Vec<RollFigures>,
}

/// Runs the four rolls of `plan`, one after another.
pub fn run_rolls(
    plan: &Plan,
    config: &SimConfig,
    roll: Roll,
    workload: String,
) -> std::io::Result<RollReport> {
    let rolls = vec![
        roll_one::<WalIndex>(Engine::Lockfree, plan, config, roll, Start::Graceful)?,
        roll_one::<WalIndex>(Engine::Lockfree, plan, config, roll, Start::Checkpoint)?,
        roll_one::<WalIndex>(Engine::Lockfree, plan, config, roll, Start::Replay)?,
        roll_one::<MutexIndex>(Engine::Mutex, plan, config, roll, Start::Replay)?,
    ];
    Ok(RollReport {
        workload,
        machine: report::machine(),
        at_s: roll.at.as_secs_f64(),
        every_s: roll.every.as_secs_f64(),
        rolls,
    })
}

/// The pool before the roll.
struct OldPool<I> {
    drain: DrainRun,
    drives: Arc<DriveContext<I>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the old pool starts from.
struct OldStart<'a> {
    wal: &'a mut Feed,
    observer: Arc<SimObserver>,
    checkpoints: &'a CheckpointDir,
    retained: Arc<RetainedWal>,
    reads: Arc<dyn DriveFallbacks>,
    config: &'a SimConfig,
    runtime: &'a tokio::runtime::Handle,
}

impl<I: StateIndex + Checkpointable + Send + Sync + 'static> OldPool<I> {
    /// Its index, its drain (checkpointing, when the roll has checkpoints) and its drives.
    fn start(with: OldStart<'_>) -> std::io::Result<OldPool<I>> {
        let config = with.config;
        let source = with.wal.source()?;
        let index = Arc::new(I::with_observer(config.index, with.observer));
        let mut drain = Drain::new(Arc::clone(&index), source, config.drain);
        if let Some(checkpointing) = with.checkpoints.checkpointing()? {
            drain = drain.checkpoint_to(checkpointing)?;
        }
        Ok(OldPool {
            drives: Arc::new(DriveContext::new(
                index,
                config,
                with.retained,
                with.reads,
                Instant::now(),
            )),
            drain: DrainRun::start(with.runtime, drain, config),
            tasks: Vec::new(),
        })
    }
}

/// The pool after the roll, once started.
struct NewPool<I> {
    drain: DrainRun,
    drives: Arc<DriveContext<I>>,
    observer: Arc<SimObserver>,
    restore: Restore,
}

/// What the new pool's start found.
#[derive(Default)]
struct Restore {
    seconds: Option<f64>,
    bytes: u64,
    refused: Vec<String>,
    /// Records at or before the checkpoint's position.
    covered: u64,
}

/// What the roll itself left: the old pool's end, and the new pool's start.
struct Rolled<I> {
    new_pool: Option<std::thread::JoinHandle<std::io::Result<NewPool<I>>>>,
    abandoned: usize,
    stop_s: f64,
    written: u64,
    published: u64,
}

/// One roll: the old pool drains the backlog and the live phase up to `roll.at`, is dropped,
/// and a new pool started as `start` says takes the rest.
fn roll_one<I: StateIndex + Checkpointable + Send + Sync + 'static>(
    engine: Engine,
    plan: &Plan,
    config: &SimConfig,
    roll: Roll,
    start: Start,
) -> std::io::Result<RollFigures> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut wal = Feed::open(&config.wal, I::NAME)?;
    let retained = Arc::new(RetainedWal::default());
    let shards = Arc::new(StateShards::open(
        config,
        &format!("{}-{start:?}", I::NAME),
    )?);
    for item in &plan.backlog {
        wal.append(item)?;
        retained.record(item);
        shards.offer(item);
    }
    wal.flush()?;
    let every = (start != Start::Replay).then_some(roll.every);
    let checkpoints = CheckpointDir::new(every, &format!("{}-roll", I::NAME));
    let reads = wal.per_execution_reads(Arc::clone(&retained), config.ehdb_feed_reads)?;
    let new_start = NewStart {
        pool_wal: wal.pool_wal()?,
        channel: None,
        reads: shards.reads(Arc::clone(&reads)),
        retained: Arc::clone(&retained),
        start,
        dir: checkpoints.path().to_path_buf(),
        shards: Arc::clone(&shards),
    };
    let observer = Arc::new(SimObserver::new(0, Vec::new()));
    let old_observer = Arc::clone(&observer);
    let old = OldPool::<I>::start(OldStart {
        wal: &mut wal,
        observer,
        checkpoints: &checkpoints,
        retained: Arc::clone(&retained),
        reads,
        config,
        runtime: runtime.handle(),
    })?;
    // The roll comes in a steady state: the old pool has caught up with the backlog.
    let deadline = Instant::now() + Duration::from_secs(600);
    while old_observer.caught_up_after().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ready, tasks, mut rolled) =
        live_phase(plan, config, roll, &runtime, &mut wal, old, new_start)?;
    let new = rolled
        .new_pool
        .take()
        .ok_or_else(|| std::io::Error::other("the new pool was not started"))?
        .join()
        .map_err(|_| std::io::Error::other("the new pool's start panicked"))??;
    drop(ready);
    runtime.block_on(async {
        for task in tasks {
            let _ = task.await;
        }
    });
    drop(wal);
    let records = new.drives.take_records();
    let served_shard = (records.iter())
        .filter(|r| r.label == DriveLabel::ServedShard)
        .count();
    let mut figures = figures(engine, start, &rolled, records, &new);
    let _ = new.drain.stop(runtime.handle());
    figures.shards = Arc::try_unwrap(shards)
        .ok()
        .and_then(|shards| shards.finish(served_shard));
    Ok(figures)
}

/// The roll's state shards (`--state-shards`): a store of the roll's own under the
/// location, a writer fed by whichever pool's drain runs, and the new pool's reads.
///
/// The writer plays production's system pool: a consumer of the log that the roll does not
/// stop, fed each event as it is published (decoded slim, as the pools store it).
struct StateShards {
    store: Option<ShardStore>,
    writer: Option<ShardWriter>,
    feed: Option<std::sync::Mutex<ShardFeed>>,
}

/// The writer's feed ([`ShardWriter::feed`]).
type ShardFeed = Box<dyn FnMut(&[chain_fold::Event]) + Send>;

impl StateShards {
    fn open(config: &SimConfig, roll: &str) -> std::io::Result<StateShards> {
        let Some(location) = &config.state_shards else {
            return Ok(StateShards {
                store: None,
                writer: None,
                feed: None,
            });
        };
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let at = format!("{}/{roll}-{run}", location.trim_end_matches('/'));
        let store = ShardStore::open(&at, std::env::vars())?;
        let writer = ShardWriter::start(
            store.clone(),
            CellSettings::default(),
            WriterConfig::from_env(),
        )?;
        let feed: ShardFeed = Box::new(writer.feed());
        Ok(StateShards {
            store: Some(store),
            writer: Some(writer),
            feed: Some(std::sync::Mutex::new(feed)),
        })
    }

    /// Hands the writer the event `item` publishes.
    fn offer(&self, item: &crate::workload::Item) {
        let Some(feed) = &self.feed else { return };
        let Ok(event) = chain_fold::Event::from_json_slim(&item.payload) else {
            return;
        };
        if let Ok(mut feed) = feed.lock() {
            feed(std::slice::from_ref(&event));
        }
    }

    /// `reads`, after the execution's state shard when the roll has shards.
    fn reads(&self, reads: Arc<dyn DriveFallbacks>) -> Arc<dyn DriveFallbacks> {
        match &self.store {
            Some(store) => Arc::new(
                StateShardReader::new(store.clone(), CellSettings::default()).then_retained(reads),
            ),
            None => reads,
        }
    }

    /// What the writer did, and the drives shards served.
    fn finish(self, served_shard: usize) -> Option<ShardFigures> {
        let w = self.writer?.shut_down();
        Some(ShardFigures {
            served_shard,
            open_written: w.open_written,
            sealed_written: w.sealed_written,
            errors: w.errors,
            dropped: w.dropped,
        })
    }
}

/// Publishes the live items at the configured rate, dispatching each drive to the pool of
/// the moment, and rolls the pool at `roll.at`. Returns the new pool's drives' tasks.
#[allow(clippy::type_complexity)]
fn live_phase<I: StateIndex + Checkpointable + Send + Sync + 'static>(
    plan: &Plan,
    config: &SimConfig,
    roll: Roll,
    runtime: &tokio::runtime::Runtime,
    wal: &mut Feed,
    old: OldPool<I>,
    mut new_start: NewStart,
) -> std::io::Result<(Ready<I>, Vec<tokio::task::JoinHandle<()>>, Rolled<I>)> {
    let (ready, waiting) = tokio::sync::watch::channel(None::<Arc<DriveContext<I>>>);
    let live_started = Instant::now();
    let pace = Duration::from_secs_f64(1.0 / config.rate.max(0.01));
    let (mut old, mut rolled, mut tasks) = (Some(old), None, Vec::new());
    for (n, item) in plan.live.iter().enumerate() {
        let due = live_started + pace * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if let Some(pool) = old.take_if(|_| live_started.elapsed() >= roll.at) {
            let graceful = new_start.start == Start::Graceful;
            let (abandoned, stop_s, written) = stop_old_pool(runtime.handle(), pool, graceful)?;
            let started = Instant::now();
            new_start.channel = wal.replay_channel();
            let published = (plan.backlog.len() + n) as u64;
            let (config, ready, starting) = (config.clone(), ready.clone(), new_start.take());
            let handle = runtime.handle().clone();
            let new_pool =
                std::thread::spawn(move || starting.run::<I>(&config, &handle, started, &ready));
            rolled = Some(Rolled {
                new_pool: Some(new_pool),
                abandoned,
                stop_s,
                written,
                published,
            });
        }
        wal.append(item)?;
        new_start.retained.record(item);
        new_start.shards.offer(item);
        let Some(dispatch) = Dispatch::of(item, config.tails) else {
            continue;
        };
        match &mut old {
            Some(pool) => pool
                .tasks
                .push(runtime.spawn(Arc::clone(&pool.drives).serve(dispatch))),
            None => tasks.push(runtime.spawn(serve_when_ready(waiting.clone(), dispatch))),
        }
    }
    wal.flush()?;
    let rolled = rolled.ok_or_else(|| {
        std::io::Error::other("the live phase ended before --roll-at: lengthen --duration")
    })?;
    Ok((ready, tasks, rolled))
}

/// Stops the old pool: its drives in flight or queued are abandoned, and its drain stopped
/// after its current step, either without a goodbye (a checkpoint being written finishes;
/// none is taken) or, `graceful`, shut down as on SIGTERM (its last checkpoint taken within
/// its bound). Returns the drives abandoned, how long the stop took, and the checkpoints
/// written before the new pool starts.
fn stop_old_pool<I: StateIndex>(
    runtime: &tokio::runtime::Handle,
    old: OldPool<I>,
    graceful: bool,
) -> std::io::Result<(usize, f64, u64)> {
    let abandoned = old.tasks.iter().filter(|t| !t.is_finished()).count();
    old.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    let stopping = Instant::now();
    let report = if graceful {
        old.drain.shut_down(runtime)?
    } else {
        old.drain.stop(runtime)?
    };
    Ok((
        abandoned,
        stopping.elapsed().as_secs_f64(),
        report.checkpoints.written,
    ))
}

/// A drive dispatched after the roll: it waits for the new pool to start, then runs there.
async fn serve_when_ready<I: StateIndex + Send + Sync + 'static>(
    mut ready: tokio::sync::watch::Receiver<Option<Arc<DriveContext<I>>>>,
    dispatch: Dispatch,
) {
    let context = match ready.wait_for(Option::is_some).await {
        Ok(context) => context.clone(),
        Err(_) => return,
    };
    if let Some(context) = context {
        context.serve(dispatch).await;
    }
}

/// What the new process needs to start: where the WAL is, where the checkpoints are.
struct NewStart {
    pool_wal: PoolWal,
    /// The in-process log replayed into a fresh channel (`None` on a broker or a writer).
    channel: Option<ChannelSource>,
    reads: Arc<dyn DriveFallbacks>,
    retained: Arc<RetainedWal>,
    start: Start,
    dir: std::path::PathBuf,
    /// The roll's state shards, offered each live event as it is published.
    shards: Arc<StateShards>,
}

impl NewStart {
    /// This start, leaving one that has no channel.
    fn take(&mut self) -> NewStart {
        NewStart {
            pool_wal: self.pool_wal.clone(),
            channel: self.channel.take(),
            reads: Arc::clone(&self.reads),
            retained: Arc::clone(&self.retained),
            start: self.start,
            dir: self.dir.clone(),
            shards: Arc::clone(&self.shards),
        }
    }

    /// The new process: its index (restored or empty), its source, its drain, and then its
    /// drives, handed to the dispatches waiting for it. It starts as a pool does, with
    /// [`Drain::warm_start`]: the newest checkpoint its log still holds, else an older one,
    /// else a replay from the log's start.
    fn run<I: StateIndex + Checkpointable + Send + Sync + 'static>(
        mut self,
        config: &SimConfig,
        runtime: &tokio::runtime::Handle,
        started: Instant,
        ready: &Ready<I>,
    ) -> std::io::Result<NewPool<I>> {
        let observer = Arc::new(SimObserver::new(0, Vec::new()));
        let index = Arc::new(I::with_observer(config.index, observer.clone()));
        let checkpoints = match self.start {
            Start::Checkpoint | Start::Graceful => Some(
                Checkpointing::new(DirStore::open(&self.dir, 2)?)
                    .every(Duration::from_secs(3600))
                    .resume_within(Duration::from_secs(120)),
            ),
            Start::Replay => None,
        };
        let (pool_wal, mut channel) = (self.pool_wal.clone(), self.channel.take());
        let make_source = move || source_at_start(&pool_wal, &mut channel);
        let (drain, start) =
            Drain::warm_start(Arc::clone(&index), checkpoints, make_source, config.drain)?;
        let restore = Restore {
            seconds: start.checkpoint.as_ref().map(|_| start.took.as_secs_f64()),
            bytes: start.bytes,
            refused: (start.refused.iter())
                .map(|(name, why)| format!("{name}: {why}"))
                .collect(),
            covered: start.resumed_at.as_deref().map_or(0, |p| self.covered(p)),
        };
        let drain = DrainRun::start(runtime, drain, config);
        let reads = Arc::clone(&self.reads);
        let drives = Arc::new(DriveContext::new(
            index,
            config,
            self.retained,
            reads,
            started,
        ));
        let _ = ready.send(Some(Arc::clone(&drives)));
        Ok(NewPool {
            drain,
            drives,
            observer,
            restore,
        })
    }

    /// Records at or before `positions`: a channel numbers from 0, a stream from 1, the
    /// run's records on a writer from its cursor + 1 (one shard: with several, the least
    /// advanced shard's, a lower bound).
    fn covered(&self, positions: &[Position]) -> u64 {
        let least = positions
            .iter()
            .map(|p| p.last().sequence)
            .min()
            .unwrap_or(0);
        match &self.pool_wal {
            PoolWal::Channel => least + 1,
            PoolWal::JetStream { .. } => least,
            PoolWal::Ehdb { cursor, .. } => least.saturating_sub(*cursor),
        }
    }
}

/// The pool's source at the log's start, as a pool makes it: the in-process log replayed
/// into a fresh channel (once: a second is an error), a replay-on-boot consumer of the
/// stream, or the writer's feed from the run's first record.
fn source_at_start(
    pool_wal: &PoolWal,
    channel: &mut Option<ChannelSource>,
) -> std::io::Result<Box<dyn WalSource>> {
    Ok(match pool_wal {
        PoolWal::Channel => Box::new(channel.take().ok_or_else(|| {
            std::io::Error::other("the in-process log was taken by a refused resume")
        })?),
        PoolWal::JetStream { config, .. } => {
            Box::new(JetStreamSource::connect((**config).clone()).map_err(std::io::Error::other)?)
        }
        PoolWal::Ehdb {
            feed,
            shards,
            cursor,
        } => Box::new(EhdbSource::connect(
            EhdbConfig::new(feed.clone())
                .shards(0..*shards)
                .cursor(*cursor),
        )?),
    })
}

/// The figures of one roll.
fn figures<I>(
    engine: Engine,
    start: Start,
    rolled: &Rolled<I>,
    records: Vec<DriveRecord>,
    new: &NewPool<I>,
) -> RollFigures {
    let caught_up = new.observer.caught_up_after();
    let first_served = records
        .iter()
        .filter(|r| r.served)
        .map(|r| r.dispatched_at + r.latency)
        .min();
    let during: Vec<&DriveRecord> = records
        .iter()
        .filter(|r| caught_up.is_none_or(|c| r.dispatched_at < c))
        .collect();
    RollFigures {
        engine,
        start,
        checkpoints_written: rolled.written,
        restore_s: new.restore.seconds,
        restore_bytes: new.restore.bytes,
        refused: new.restore.refused.clone(),
        replayed: rolled.published.saturating_sub(new.restore.covered),
        first_served_s: first_served.map(|d| d.as_secs_f64()),
        caught_up_s: caught_up.map(|d| d.as_secs_f64()),
        during: Latency::of(during.iter().map(|r| r.latency).collect()),
        during_fell_back: during.iter().filter(|r| !r.served).count(),
        drives: records.len(),
        fell_back: records.iter().filter(|r| !r.served).count(),
        abandoned: rolled.abandoned,
        shards: None,
        old_pool_stop_s: rolled.stop_s,
    }
}

impl RollReport {
    /// The report as text: one row per roll.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "workload: {}", self.workload);
        let _ = writeln!(out, "machine: {}", self.machine);
        let _ = writeln!(
            out,
            "roll: the pool stopped {:.1} s into the live phase (gracefully: its last checkpoint; or dropped without a goodbye); the checkpointing pools checkpointed every {:.1} s\n",
            self.at_s, self.every_s
        );
        let _ = writeln!(
            out,
            "| new pool | restore | records replayed | first served drive | caught up | drives until caught up: tip → end p50 / p99 / max (n, fell back) | all its drives (fell back) | abandoned by the roll |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---|---:|---:|");
        for r in &self.rolls {
            let _ = writeln!(out, "{}", row(r));
        }
        for r in &self.rolls {
            if let Some(f) = &r.shards {
                let _ = writeln!(
                    out,
                    "\n{}: {} drives served from state shards; the writer wrote {} open and {} sealed shards ({} errors, {} events dropped)",
                    title(r),
                    f.served_shard,
                    f.open_written,
                    f.sealed_written,
                    f.errors,
                    f.dropped
                );
            }
        }
        for r in self.rolls.iter().filter(|r| !r.refused.is_empty()) {
            let _ = writeln!(out, "\n{} refused: {}", title(r), r.refused.join("; "));
        }
        out
    }
}

/// A roll's name in the report.
fn title(r: &RollFigures) -> String {
    let start = match r.start {
        Start::Graceful => "graceful: its last checkpoint",
        Start::Checkpoint => "crash: its newest checkpoint",
        Start::Replay => "replaying from 0",
    };
    let engine = match r.engine {
        Engine::Lockfree => "engine",
        Engine::Papaya => "the papaya design",
        Engine::Sharded => "per-execution locks",
        Engine::Mutex => "today's design",
    };
    format!("{engine}, {start}")
}

/// One roll's row.
fn row(r: &RollFigures) -> String {
    let seconds = |s: Option<f64>| s.map_or("never".to_owned(), |s| format!("{s:.2} s"));
    let restore = match r.restore_s {
        Some(s) => format!(
            "{s:.2} s, {:.1} MB ({} checkpoints written before the roll)",
            r.restore_bytes as f64 / 1e6,
            r.checkpoints_written
        ),
        None if r.start != Start::Replay => "none used".to_owned(),
        None => "—".to_owned(),
    };
    let during = if r.during.samples == 0 {
        "none".to_owned()
    } else {
        format!(
            "{:.0} / {:.0} / {:.0} ms ({}, {})",
            r.during.p50_ms, r.during.p99_ms, r.during.max_ms, r.during.samples, r.during_fell_back
        )
    };
    format!(
        "| {} | {restore} | {} | {} | {} | {during} | {} ({}) | {} |",
        title(r),
        r.replayed,
        seconds(r.first_served_s),
        seconds(r.caught_up_s),
        r.drives,
        r.fell_back,
        r.abandoned
    )
}
