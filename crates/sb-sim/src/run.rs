//! Runs one workload through one engine: a producer paced at the configured rate, the
//! drain on its own thread, drives as async tasks on a two-worker runtime.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use sb_metrics::StateBuilderMetrics;
use wal_index::ingest::DrainReport;
use wal_index::report::IndexStats;
use wal_index::{Drain, DrainConfig, DriveBudget, IndexConfig, IndexObserver, StateIndex};

use crate::observer::SimObserver;
use crate::wal::{Feed, WalTarget};
use crate::workload::{Generator, Item, Shape};

/// First ids of the live phase, far above any backlog's, so the two never collide.
const LIVE_FIRST_EXECUTION: i64 = 10_000_000;
const LIVE_FIRST_EVENT: i64 = 1_000_000_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Events per second the producer publishes (0: as fast as possible).
    pub rate: f64,
    /// Drives in flight at once (each waits up to its budget).
    pub drive_concurrency: usize,
    /// Each drive's budget.
    pub budget: DriveBudget,
    /// Index configuration, the same for every engine.
    pub index: IndexConfig,
    /// The drain's configuration.
    pub drain: DrainConfig,
    /// The WAL the events go through.
    pub wal: WalTarget,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            rate: 4_000.0,
            drive_concurrency: 32,
            budget: DriveBudget::default(),
            index: IndexConfig::default(),
            drain: DrainConfig::default(),
            wal: WalTarget::InProcess,
        }
    }
}

/// The WAL of one run: a backlog already in the log when the drain starts (the pod-roll
/// burst), and the live items published at the configured rate.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Records in the WAL before the drain starts.
    pub backlog: Vec<Item>,
    /// Records published while the run goes on.
    pub live: Vec<Item>,
}

impl Plan {
    /// A generated workload: `backlog` events, then `live` events.
    pub fn generate(shape: &Shape, backlog: usize, live: usize) -> Plan {
        Plan {
            backlog: Generator::new(shape.clone()).take(backlog),
            live: Generator::starting_at(shape.clone(), LIVE_FIRST_EXECUTION, LIVE_FIRST_EVENT)
                .take(live),
        }
    }

    /// Drives the plan dispatches.
    pub fn drives(&self) -> usize {
        self.live
            .iter()
            .filter(|i| i.triggers && i.ids.is_some())
            .count()
    }
}

/// One drive, from its tip entering the WAL to its end.
#[derive(Debug, Clone, Copy)]
pub struct DriveRecord {
    /// When the tip entered the WAL, since the run started.
    pub dispatched_at: Duration,
    /// From the tip entering the WAL to the drive returning.
    pub latency: Duration,
    /// Served (false: the budget ran out).
    pub served: bool,
    /// Waits ended by a wake-up.
    pub wakes: u32,
    /// Waits ended by the per-wait cap.
    pub timeouts: u32,
}

/// Everything one engine's run produced.
pub struct EngineRun {
    /// `lockfree` or `mutex`.
    pub engine: &'static str,
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
}

/// Runs `plan` through a fresh `I`. `global` receives the same hooks (for
/// `--metrics-addr`); `progress` advances by one per published live item.
pub fn run_engine<I: StateIndex>(
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
    let (mut wal, source) = Feed::open(&config.wal, I::NAME)?;
    for item in &plan.backlog {
        wal.append(item)?;
    }
    // A broker's backlog is stored before the drain starts: a replay-on-boot cold start.
    wal.flush()?;
    let started = observer.started();
    let drain = Drain::new(Arc::clone(&index), source, config.drain).spawn();

    let records = Arc::new(Mutex::new(Vec::with_capacity(plan.drives())));
    let permits = Arc::new(tokio::sync::Semaphore::new(config.drive_concurrency.max(1)));
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
        progress.inc(1);
        let (Some((execution_id, event_id)), true) = (item.ids, item.triggers) else {
            continue;
        };
        let dispatched = Instant::now();
        let (index, records, permits) = (
            Arc::clone(&index),
            Arc::clone(&records),
            Arc::clone(&permits),
        );
        let budget = config.budget;
        tasks.push(runtime.spawn(async move {
            let Ok(_permit) = permits.acquire_owned().await else {
                return;
            };
            let drive = index.drive(execution_id, Some(event_id), budget).await;
            let record = DriveRecord {
                dispatched_at: dispatched.saturating_duration_since(started),
                latency: dispatched.elapsed(),
                served: drive.outcome.spine().is_some(),
                wakes: drive.wakes,
                timeouts: drive.timeouts,
            };
            if let Ok(mut records) = records.lock() {
                records.push(record);
            }
        }));
    }
    runtime.block_on(async {
        for task in tasks {
            let _ = task.await;
        }
    });
    wal.flush()?;
    let mut publisher = None;
    let drain = if wal.closes_on_drop() {
        drop(wal);
        drain.join()?
    } else {
        // A broker stream never closes: stop once the drain consumed every message the
        // stream holds (records, and duplicates of re-sent ones), saying so while it waits.
        let stored = wal.publisher_figures().map_or(0, |p| p.stored);
        let total = stored.max((plan.backlog.len() + plan.live.len()) as u64);
        let waiting = Instant::now();
        let deadline = waiting + Duration::from_secs(120);
        let mut said = waiting;
        while observer.wal_events() < total && Instant::now() < deadline {
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
        let report = drain.stop()?;
        publisher = wal
            .publisher_figures()
            .map(|p| crate::wal::PublisherFigures { stored, ..p });
        wal.close()?;
        report
    };
    let wall = started.elapsed();
    let drives = std::mem::take(
        &mut *records
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?,
    );
    let health = observer.health();
    Ok(EngineRun {
        engine: I::NAME,
        observer,
        drives,
        drain,
        wall,
        scrape: handle.render(),
        backlog: plan.backlog.len(),
        stats: index.stats(),
        publisher,
        health,
    })
}
