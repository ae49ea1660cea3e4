//! Runs one workload through one engine as today's worker pool runs it: a producer paced at
//! the configured rate, the drain and the drives as tasks on a two-worker Tokio runtime (or
//! the drain on its own thread), each drive the worker's whole flow (tail events, the
//! deadline loop, rehydrate on a miss, fall back).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chain_fold::ExecutionId;

use indicatif::ProgressBar;
use sb_metrics::StateBuilderMetrics;
use wal_index::checkpoint::{Checkpointable, Checkpointing, DirStore};
use wal_index::config::EvictionPolicy;
use wal_index::ingest::DrainReport;
use wal_index::labels::{DriveLabel, RehydrateLabel};
use wal_index::rehydrate::RehydrateGate;
use wal_index::report::IndexStats;
use wal_index::{
    Drain, DrainConfig, DriveBudget, DriveFallbacks, DriveFlow, IndexConfig, IndexObserver,
    StateIndex,
};

use crate::observer::SimObserver;
use crate::wal::{Feed, RetainedWal, WalTarget};
use crate::workload::{Generator, Item, Shape};

/// Where the drain, or the drives, run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RunOn {
    /// Tasks on one two-worker Tokio runtime, as today's worker runs them (awaiting the
    /// index's locks).
    #[default]
    Task,
    /// Threads: the drain on its own thread (always, through a broker: its source blocks
    /// while it waits); each drive on a thread of the runtime's blocking pool, blocking on
    /// the index's locks.
    Thread,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Events per second the producer publishes (0: as fast as possible).
    pub rate: f64,
    /// Drives in flight at once (each waits up to its budget).
    pub drive_concurrency: usize,
    /// Each drive's budget.
    pub budget: DriveBudget,
    /// Dispatches carry their tail events (today's default).
    pub tails: bool,
    /// Concurrent replays of rehydrate on miss (today's default 2; 0: no rehydrate).
    pub rehydrate_concurrency: usize,
    /// Index configuration, the same for every engine.
    pub index: IndexConfig,
    /// The drain's configuration.
    pub drain: DrainConfig,
    /// Where the drain runs.
    pub drain_on: RunOn,
    /// Where the drives run.
    pub drives_on: RunOn,
    /// The WAL the events go through.
    pub wal: WalTarget,
    /// The drain checkpoints the index this often, into a directory of the run's own
    /// (deleted afterwards); `None`: no checkpoints. Only the engine checkpoints.
    pub checkpoint_every: Option<Duration>,
    /// On an EHDB writer, drives read a miss's execution from the writer's feed (each read
    /// costs the writer a whole log shard's preparation). Off by default.
    pub ehdb_feed_reads: bool,
    /// A roll's old pool writes state shards here (a directory, or an `s3://` URL
    /// configured from the environment) and its new pool reads them on a miss.
    pub state_shards: Option<String>,
}

impl SimConfig {
    /// Production's index settings: the slim projection, a 900 s idle TTL and a 256 MiB
    /// byte ceiling.
    pub fn production_index() -> IndexConfig {
        IndexConfig {
            slim: true,
            eviction: EvictionPolicy {
                max_bytes: Some(256 << 20),
                ttl: Some(Duration::from_secs(900)),
                max_executions: None,
            },
            ..IndexConfig::default()
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            rate: 50.0,
            drive_concurrency: 2,
            budget: DriveBudget::default(),
            tails: true,
            rehydrate_concurrency: 2,
            index: SimConfig::production_index(),
            drain: DrainConfig::default(),
            drain_on: RunOn::default(),
            drives_on: RunOn::default(),
            wal: WalTarget::InProcess,
            checkpoint_every: None,
            ehdb_feed_reads: false,
            state_shards: None,
        }
    }
}

/// The WAL of one run: a backlog already in the log when the drain starts (a worker
/// restart), and the live items published at the configured rate. The live phase continues
/// the backlog's executions: a restart mid-flight, whose first drives are for executions
/// whose history is still behind the drain.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Records in the WAL before the drain starts.
    pub backlog: Vec<Item>,
    /// Records published while the run goes on.
    pub live: Vec<Item>,
    /// Live events the WAL lost ([`Plan::lose`]): `(execution, event)`.
    pub lost: Vec<(ExecutionId, i64)>,
}

impl Plan {
    /// A generated workload: `backlog` events, then the next `live` events of the same
    /// executions (and new ones).
    pub fn generate(shape: &Shape, backlog: usize, live: usize) -> Plan {
        let mut generator = Generator::new(shape.clone());
        Plan {
            backlog: generator.take(backlog),
            live: generator.take(live),
            lost: Vec::new(),
        }
    }

    /// Makes the WAL lose `count` live events from the middle of their chains, spread over
    /// the live phase: each is an acknowledged write that never reaches the drain, the
    /// retained history, or any dispatch's tail (the worst case, where nothing but the WAL
    /// carried it). A lost event is one that neither starts nor ends its execution nor
    /// triggers a drive, and that a later live event links to, so its chain breaks. Returns
    /// how many could be chosen.
    pub fn lose(&mut self, count: usize) -> usize {
        let events: Vec<Option<chain_fold::Event>> = self
            .live
            .iter()
            .map(|item| chain_fold::Event::from_json_bytes(item.payload.clone()).ok())
            .collect();
        let linked: std::collections::HashSet<(ExecutionId, i64)> = events
            .iter()
            .flatten()
            .filter_map(|event| Some((event.execution_id(), event.prev()?)))
            .collect();
        let candidates: Vec<usize> = (0..self.live.len())
            .filter(|&i| {
                events[i].as_ref().is_some_and(|event| {
                    !self.live[i].triggers
                        && event.prev().is_some()
                        && !event.is_terminal()
                        && linked.contains(&(event.execution_id(), event.id()))
                })
            })
            .collect();
        let count = count.min(candidates.len());
        let chosen: Vec<usize> = (0..count)
            .map(|k| candidates[(2 * k + 1) * candidates.len() / (2 * count)])
            .collect();
        for &i in chosen.iter().rev() {
            let item = self.live.remove(i);
            self.lost.extend(item.ids);
            for other in &mut self.live {
                other.tail.retain(|payload| *payload != item.payload);
            }
        }
        self.lost.sort_unstable();
        count
    }

    /// Drives the plan dispatches (a repeated dispatch counts twice).
    pub fn drives(&self) -> usize {
        self.live
            .iter()
            .filter(|i| i.triggers && i.ids.is_some())
            .map(|i| 1 + usize::from(i.repeat))
            .sum()
    }
}

/// One drive, from its tip entering the WAL to its end.
#[derive(Debug, Clone, Copy)]
pub struct DriveRecord {
    /// When the tip entered the WAL, since the run started.
    pub dispatched_at: Duration,
    /// From the tip entering the WAL to the drive returning.
    pub latency: Duration,
    /// Served (by any step: the loop, the shard, a replay).
    pub served: bool,
    /// How it ended (`drive_builds_total{outcome}`).
    pub label: DriveLabel,
    /// The second dispatch of the same head.
    pub repeat: bool,
    /// Builds it ran.
    pub builds: u32,
    /// Tail events it applied.
    pub tail_applied: u32,
    /// The tail decodes inside `latency`: this drive's, and for a repeat the first
    /// drive's too (a repeat runs after it). The same work in every index design.
    pub tail_decode: Duration,
    /// Waits ended by a wake-up.
    pub wakes: u32,
    /// Waits ended by the per-wait cap.
    pub timeouts: u32,
    /// It left its wait at once because the engine's drain was backfilling, and read its
    /// execution instead.
    pub backfill_skip: bool,
    /// How its last reported read of the retained WAL ended (`None`: it reported none,
    /// because it made none or the source did not answer in time).
    pub rehydrate: Option<RehydrateLabel>,
}

/// Everything one engine's run produced.
pub struct EngineRun {
    /// The simulator's own tally.
    pub observer: Arc<SimObserver>,
    /// Every drive, in completion order.
    pub drives: Vec<DriveRecord>,
    /// The drain's report.
    pub drain: DrainReport,
    /// Wall time of the run.
    pub wall: Duration,
    /// A Prometheus scrape of the run's own metrics, for cross-checking the report.
    pub scrape: String,
    /// Cold-start backlog size.
    pub backlog: usize,
    /// Residency at the end.
    pub stats: IndexStats,
    /// The producer's figures (broker runs only).
    pub publisher: Option<crate::wal::PublisherFigures>,
    /// The drain's health over the run.
    pub health: crate::observer::Health,
    /// The events the plan's WAL lost (`Plan::lose`).
    pub lost: Vec<(ExecutionId, i64)>,
}

/// Runs `plan` through a fresh `I`. `global` receives the same hooks (for
/// `--metrics-addr`); `progress` advances by one per published live item.
pub fn run_engine<I: StateIndex + Checkpointable>(
    plan: &Plan,
    config: &SimConfig,
    global: Option<Arc<StateBuilderMetrics>>,
    progress: &ProgressBar,
) -> std::io::Result<EngineRun> {
    let (recorder, handle) = sb_metrics::exporter::local(sb_metrics::series::DEFAULT_PREFIX)
        .map_err(std::io::Error::other)?;
    let local = metrics::with_local_recorder(&recorder, StateBuilderMetrics::register);
    let mut forward: Vec<Arc<dyn IndexObserver>> = vec![local];
    forward.extend(global.map(|g| g as Arc<dyn IndexObserver>));
    let observer = Arc::new(SimObserver::new(plan.backlog.len() as u64, forward));
    let index = Arc::new(I::with_observer(config.index, observer.clone()));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut wal = Feed::open(&config.wal, I::NAME)?;
    let retained = Arc::new(RetainedWal::default());
    for item in &plan.backlog {
        wal.append(item)?;
        retained.record(item);
    }
    // A broker's or a writer's backlog is stored before the drain starts: a replay-on-boot
    // cold start.
    wal.flush()?;
    let reads = wal.per_execution_reads(Arc::clone(&retained), config.ehdb_feed_reads)?;
    let source = wal.source()?;
    let started = observer.started();
    let checkpoints = CheckpointDir::new(config.checkpoint_every, I::NAME);
    let mut drain = Drain::new(Arc::clone(&index), source, config.drain);
    if let Some(checkpointing) = checkpoints.checkpointing()? {
        drain = drain.checkpoint_to(checkpointing)?;
    }
    let drain = DrainRun::start(runtime.handle(), drain, config);
    let drives = Arc::new(DriveContext::new(
        Arc::clone(&index),
        config,
        retained,
        reads,
        started,
    ));
    let tasks = publish_live(plan, config, &mut wal, &drives, &runtime, progress)?;
    runtime.block_on(async {
        for task in tasks {
            let _ = task.await;
        }
    });
    wal.flush()?;
    let (drain, publisher) = finish_drain::<I>(plan, wal, drain, &observer, &runtime)?;
    let wall = started.elapsed();
    let drives = drives.take_records();
    let health = observer.health();
    Ok(EngineRun {
        observer,
        drives,
        drain,
        wall,
        scrape: handle.render(),
        backlog: plan.backlog.len(),
        stats: index.stats(),
        publisher,
        health,
        lost: plan.lost.clone(),
    })
}

/// Publishes the live items at the configured rate, dispatching a drive (a task) for each
/// item that triggers one. Returns the drives' tasks.
fn publish_live<I: StateIndex>(
    plan: &Plan,
    config: &SimConfig,
    wal: &mut Feed,
    drives: &Arc<DriveContext<I>>,
    runtime: &tokio::runtime::Runtime,
    progress: &ProgressBar,
) -> std::io::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::with_capacity(plan.drives());
    let pace = (config.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / config.rate));
    let live_started = Instant::now();
    for (n, item) in plan.live.iter().enumerate() {
        if let Some(pace) = pace {
            let due = live_started + pace * n as u32;
            let now = Instant::now();
            if due > now + Duration::from_millis(1) {
                std::thread::sleep(due - now);
            }
        }
        wal.append(item)?;
        drives.retained.record(item);
        progress.inc(1);
        let Some(dispatch) = Dispatch::of(item, config.tails) else {
            continue;
        };
        tasks.push(runtime.spawn(Arc::clone(drives).serve(dispatch)));
    }
    Ok(tasks)
}

/// What every drive of a run shares: the index, the fallbacks, the limits, the records.
pub(crate) struct DriveContext<I> {
    index: Arc<I>,
    records: Mutex<Vec<DriveRecord>>,
    /// Drives in flight at once.
    permits: tokio::sync::Semaphore,
    pub(crate) retained: Arc<RetainedWal>,
    /// The per-execution read on a miss (the broker by subject, or `retained`).
    reads: Arc<dyn DriveFallbacks>,
    gate: RehydrateGate,
    budget: DriveBudget,
    drives_on: RunOn,
    /// When the run started (drive records are timed from it).
    started: Instant,
}

/// One dispatch: the tip, its tail, and when it entered the WAL.
pub(crate) struct Dispatch {
    pub(crate) execution_id: ExecutionId,
    pub(crate) event_id: i64,
    pub(crate) tail: Vec<Bytes>,
    pub(crate) repeat: bool,
    pub(crate) at: Instant,
}

impl Dispatch {
    /// The dispatch `item` triggers, if it triggers one.
    pub(crate) fn of(item: &Item, tails: bool) -> Option<Dispatch> {
        let (Some((execution_id, event_id)), true) = (item.ids, item.triggers) else {
            return None;
        };
        Some(Dispatch {
            execution_id,
            event_id,
            tail: if tails { item.tail.clone() } else { Vec::new() },
            repeat: item.repeat,
            at: Instant::now(),
        })
    }
}

impl<I: StateIndex> DriveContext<I> {
    /// The drives of one pool on `index`, timed from `started`.
    pub(crate) fn new(
        index: Arc<I>,
        config: &SimConfig,
        retained: Arc<RetainedWal>,
        reads: Arc<dyn DriveFallbacks>,
        started: Instant,
    ) -> DriveContext<I> {
        DriveContext {
            index,
            records: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(config.drive_concurrency.max(1)),
            retained,
            reads,
            gate: RehydrateGate::new(config.rehydrate_concurrency),
            budget: config.budget,
            drives_on: config.drives_on,
            started,
        }
    }

    /// The drives recorded so far, taken.
    pub(crate) fn take_records(&self) -> Vec<DriveRecord> {
        self.records
            .lock()
            .map(|mut records| std::mem::take(&mut *records))
            .unwrap_or_default()
    }

    /// Runs the dispatch's drive (twice for a repeated dispatch) within the concurrency
    /// limit, and records each.
    pub(crate) async fn serve(self: Arc<Self>, dispatch: Dispatch) {
        let Ok(_permit) = self.permits.acquire().await else {
            return;
        };
        let mut tail_decode = Duration::ZERO;
        for again in [false, true]
            .into_iter()
            .take(1 + usize::from(dispatch.repeat))
        {
            let Some(drive) = self.drive(&dispatch).await else {
                return;
            };
            tail_decode += drive.tail_decode;
            let record = DriveRecord {
                dispatched_at: dispatch.at.saturating_duration_since(self.started),
                latency: dispatch.at.elapsed(),
                served: drive.outcome.spine().is_some(),
                label: drive.label,
                repeat: again,
                builds: drive.builds,
                tail_applied: drive.tail_applied,
                tail_decode,
                wakes: drive.wakes,
                timeouts: drive.timeouts,
                backfill_skip: drive.backfill_skip,
                rehydrate: drive.rehydrate,
            };
            if let Ok(mut records) = self.records.lock() {
                records.push(record);
            }
        }
    }

    /// One drive of the worker's flow: awaited on the runtime, or blocking a thread of its
    /// blocking pool. `None` if that thread panicked.
    async fn drive(self: &Arc<Self>, dispatch: &Dispatch) -> Option<wal_index::Drive> {
        let (execution_id, tip) = (dispatch.execution_id, Some(dispatch.event_id));
        match self.drives_on {
            RunOn::Task => {
                let flow = self.flow(&dispatch.tail);
                Some(self.index.drive_async(execution_id, tip, &flow).await)
            }
            RunOn::Thread => {
                let (context, tail) = (Arc::clone(self), dispatch.tail.clone());
                tokio::task::spawn_blocking(move || {
                    let flow = context.flow(&tail);
                    context.index.drive(execution_id, tip, &flow)
                })
                .await
                .ok()
            }
        }
    }

    /// One dispatch's drive flow: its tail, the retained WAL, and the replay cap (none at 0).
    fn flow(&self, tail: &[Bytes]) -> DriveFlow<'_> {
        let flow = DriveFlow::new(self.budget)
            .tail_events(tail.to_vec())
            .fallbacks(&*self.reads);
        if self.gate.max_concurrent() > 0 {
            flow.rehydrate_gate(&self.gate)
        } else {
            flow
        }
    }
}

/// Ends the run's WAL and its drain. An in-process WAL closes and the drain runs to its
/// end; a broker stream never closes, so the drain is stopped once it consumed every
/// message the stream holds (records, and duplicates of re-sent ones), saying so while it
/// waits, for at most two minutes.
fn finish_drain<I: StateIndex>(
    plan: &Plan,
    wal: Feed,
    drain: DrainRun,
    observer: &SimObserver,
    runtime: &tokio::runtime::Runtime,
) -> std::io::Result<(DrainReport, Option<crate::wal::PublisherFigures>)> {
    if wal.closes_on_drop() {
        drop(wal);
        return Ok((drain.join(runtime.handle())?, None));
    }
    let stored = wal.publisher_figures().map_or(0, |p| p.stored);
    let total = match wal {
        // The writer's count is read from its log: a record it lost is not waited for.
        Feed::Ehdb(_) => stored,
        _ => stored.max((plan.backlog.len() + plan.live.len()) as u64),
    };
    let waiting = Instant::now();
    let deadline = waiting + Duration::from_secs(120);
    let mut said = waiting;
    while observer.wal_events() < total && Instant::now() < deadline && !drain.is_finished() {
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            eprintln!(
                "sb-sim: {}: the drain consumed {} of {total} messages; waiting ({:.0} s)",
                I::NAME,
                observer.wal_events(),
                waiting.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = drain.stop(runtime.handle())?;
    let publisher = wal
        .publisher_figures()
        .map(|p| crate::wal::PublisherFigures { stored, ..p });
    wal.close()?;
    Ok((report, publisher))
}

/// The drain of a run: a task on the runtime, or a thread.
pub(crate) enum DrainRun {
    Task {
        task: tokio::task::JoinHandle<std::io::Result<DrainReport>>,
        stop: Arc<AtomicBool>,
        /// Set before `stop` for a shutdown that takes the last checkpoint.
        graceful: Arc<AtomicBool>,
    },
    Thread(wal_index::ingest::DrainHandle),
}

impl DrainRun {
    /// Starts `drain` where the configuration says: a task over an in-process WAL, its own
    /// thread otherwise (a broker source blocks while it waits).
    pub(crate) fn start<I: StateIndex>(
        runtime: &tokio::runtime::Handle,
        mut drain: Drain<I, Box<dyn wal_index::WalSource>>,
        config: &SimConfig,
    ) -> DrainRun {
        match config.drain_on {
            RunOn::Task if !config.wal.blocks() => {
                let (stop, graceful) = (
                    Arc::new(AtomicBool::new(false)),
                    Arc::new(AtomicBool::new(false)),
                );
                let (flag, last) = (Arc::clone(&stop), Arc::clone(&graceful));
                let task = runtime.spawn(async move {
                    drain.run_until_async(&flag).await?;
                    // Acquire pairs with the Release store of `stop` in `stop_with`.
                    if flag.load(Ordering::Acquire) && last.load(Ordering::Relaxed) {
                        // The last checkpoint's bounded wait, off the runtime's workers.
                        tokio::task::block_in_place(|| drain.shut_down());
                    }
                    Ok(drain.report().clone())
                });
                DrainRun::Task {
                    task,
                    stop,
                    graceful,
                }
            }
            _ => DrainRun::Thread(drain.spawn()),
        }
    }

    /// Waits for the source to close.
    pub(crate) fn join(self, runtime: &tokio::runtime::Handle) -> std::io::Result<DrainReport> {
        match self {
            DrainRun::Task { task, .. } => runtime
                .block_on(task)
                .map_err(|_| std::io::Error::other("the drain task panicked"))?,
            DrainRun::Thread(handle) => handle.join(),
        }
    }

    /// Whether the drain ended by itself (a source that closed or failed for good).
    fn is_finished(&self) -> bool {
        match self {
            DrainRun::Task { task, .. } => task.is_finished(),
            DrainRun::Thread(handle) => handle.is_finished(),
        }
    }

    /// Stops after the current step, taking no last checkpoint.
    pub(crate) fn stop(self, runtime: &tokio::runtime::Handle) -> std::io::Result<DrainReport> {
        self.stop_with(runtime, false)
    }

    /// Shuts down after the current step: the drain takes its last checkpoint
    /// ([`wal_index::Drain::shut_down`]).
    pub(crate) fn shut_down(
        self,
        runtime: &tokio::runtime::Handle,
    ) -> std::io::Result<DrainReport> {
        self.stop_with(runtime, true)
    }

    fn stop_with(
        self,
        runtime: &tokio::runtime::Handle,
        last_checkpoint: bool,
    ) -> std::io::Result<DrainReport> {
        match self {
            DrainRun::Task {
                task,
                stop,
                graceful,
            } => {
                // Relaxed: published by the Release store below.
                graceful.store(last_checkpoint, Ordering::Relaxed);
                // Release pairs with the task's Acquire load after its loop.
                stop.store(true, Ordering::Release);
                let run = DrainRun::Task {
                    task,
                    stop,
                    graceful,
                };
                run.join(runtime)
            }
            DrainRun::Thread(handle) if last_checkpoint => handle.shut_down(),
            DrainRun::Thread(handle) => handle.stop(),
        }
    }
}

impl std::fmt::Debug for EngineRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineRun")
            .field("drives", &self.drives.len())
            .field("drain", &self.drain)
            .field("wall", &self.wall)
            .finish_non_exhaustive()
    }
}

/// The directory a run's checkpoints go to, deleted when the run ends.
pub(crate) struct CheckpointDir {
    every: Option<Duration>,
    dir: std::path::PathBuf,
}

impl CheckpointDir {
    pub(crate) fn new(every: Option<Duration>, engine: &str) -> CheckpointDir {
        let dir = std::env::temp_dir().join(format!(
            "sb-sim-checkpoints-{}-{engine}",
            std::process::id()
        ));
        CheckpointDir { every, dir }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.dir
    }

    pub(crate) fn checkpointing(&self) -> std::io::Result<Option<Checkpointing>> {
        let Some(every) = self.every else {
            return Ok(None);
        };
        let store = DirStore::open(&self.dir, 2)?;
        Ok(Some(Checkpointing::new(store).every(every)))
    }
}

impl Drop for CheckpointDir {
    fn drop(&mut self) {
        if self.every.is_some() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
