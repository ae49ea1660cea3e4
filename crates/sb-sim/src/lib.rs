//! The state-builder simulator: a calibrated worker-pool workload (or a replayed WAL)
//! through the lock-free engine and today's mutex design, side by side, reporting the
//! production note's table.
//!
//! The binary (`sb-sim`) is a thin CLI over [`run()`]; see `docs/simulator.md` for the
//! workload model and how it maps to the production note.

pub mod html;
pub mod observer;
pub mod report;
pub mod roll;
pub mod run;
pub mod wal;
pub mod workload;

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sb_metrics::StateBuilderMetrics;
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
use wal_index::{StateIndex, WalIndex};

pub use report::Report;
pub use run::{Plan, SimConfig};
pub use wal::WalTarget;

/// Which engines to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engines {
    /// `WalIndex` only.
    Lockfree,
    /// `MutexIndex` only.
    Mutex,
    /// `ShardedMutexIndex` only.
    Sharded,
    /// `PapayaIndex` only.
    Papaya,
    /// `WalIndex` and `MutexIndex`.
    Both,
    /// All four, engine first, on the same plan.
    All,
}

impl Engines {
    /// The engines this choice runs, in run order.
    pub fn chosen(self) -> Vec<Engine> {
        match self {
            Engines::Lockfree => vec![Engine::Lockfree],
            Engines::Mutex => vec![Engine::Mutex],
            Engines::Sharded => vec![Engine::Sharded],
            Engines::Papaya => vec![Engine::Papaya],
            Engines::Both => vec![Engine::Lockfree, Engine::Mutex],
            Engines::All => vec![
                Engine::Lockfree,
                Engine::Papaya,
                Engine::Sharded,
                Engine::Mutex,
            ],
        }
    }
}

/// One engine the simulator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(into = "&'static str")]
pub enum Engine {
    /// `WalIndex`, this project's engine.
    Lockfree,
    /// `PapayaIndex`, the design a user would build instead.
    Papaya,
    /// `ShardedMutexIndex`, one lock per execution.
    Sharded,
    /// `MutexIndex`, today's design.
    Mutex,
}

impl Engine {
    /// The index's own short name ([`StateIndex::NAME`]).
    pub const fn name(self) -> &'static str {
        match self {
            Engine::Lockfree => WalIndex::NAME,
            Engine::Papaya => PapayaIndex::NAME,
            Engine::Sharded => ShardedMutexIndex::NAME,
            Engine::Mutex => MutexIndex::NAME,
        }
    }

    /// The report's heading for it.
    pub const fn title(self) -> &'static str {
        match self {
            Engine::Lockfree => "lockfree (WalIndex, this project)",
            Engine::Papaya => "papaya (PapayaIndex, the design a user would build instead)",
            Engine::Sharded => "sharded (ShardedMutexIndex, one lock per execution)",
            Engine::Mutex => "mutex (MutexIndex, today's design)",
        }
    }
}

impl From<Engine> for &'static str {
    fn from(engine: Engine) -> &'static str {
        engine.name()
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Metrics forwarded to an installed global recorder (`--metrics-addr`), one set per engine
/// under an `engine` label.
pub struct GlobalMetrics {
    /// For the lock-free engine.
    pub lockfree: Arc<StateBuilderMetrics>,
    /// For today's design.
    pub mutex: Arc<StateBuilderMetrics>,
    /// For the per-execution-lock comparator.
    pub sharded: Arc<StateBuilderMetrics>,
    /// For the papaya comparator.
    pub papaya: Arc<StateBuilderMetrics>,
}

impl GlobalMetrics {
    /// One set per engine, registered on the installed recorder under `prefix`.
    pub fn register(prefix: &str) -> GlobalMetrics {
        let register = |engine: Engine| {
            StateBuilderMetrics::register_with_labels(prefix, &[("engine", engine.name())])
        };
        GlobalMetrics {
            lockfree: register(Engine::Lockfree),
            mutex: register(Engine::Mutex),
            sharded: register(Engine::Sharded),
            papaya: register(Engine::Papaya),
        }
    }

    /// The set of `engine`.
    pub fn of(&self, engine: Engine) -> Arc<StateBuilderMetrics> {
        Arc::clone(match engine {
            Engine::Lockfree => &self.lockfree,
            Engine::Sharded => &self.sharded,
            Engine::Papaya => &self.papaya,
            Engine::Mutex => &self.mutex,
        })
    }
}

/// Runs `plan` through the chosen engines and returns the report. A progress bar is drawn
/// on standard error when it is a terminal and the run is long enough to want one.
pub fn run(
    plan: &Plan,
    config: &SimConfig,
    engines: Engines,
    global: Option<&GlobalMetrics>,
    workload: String,
) -> std::io::Result<Report> {
    let chosen = engines.chosen();
    let progress = progress_bar(plan, config, chosen.len());
    let mut reports = Vec::new();
    for engine in chosen {
        progress.set_message(engine.name());
        let global = global.map(|g| g.of(engine));
        let run = match engine {
            Engine::Lockfree => run::run_engine::<WalIndex>(plan, config, global, &progress)?,
            Engine::Papaya => run::run_engine::<PapayaIndex>(plan, config, global, &progress)?,
            Engine::Sharded => {
                run::run_engine::<ShardedMutexIndex>(plan, config, global, &progress)?
            }
            Engine::Mutex => run::run_engine::<MutexIndex>(plan, config, global, &progress)?,
        };
        reports.push(report::EngineReport::from_run(engine, &run));
    }
    progress.finish_and_clear();
    Ok(Report {
        workload,
        machine: report::machine(),
        engines: reports,
    })
}

/// A bar on standard error when it is a terminal and the live phases take over 3 s in all.
fn progress_bar(plan: &Plan, config: &SimConfig, engines: usize) -> ProgressBar {
    let expected_secs = if config.rate > 0.0 {
        plan.live.len() as f64 / config.rate
    } else {
        0.0
    };
    if expected_secs * engines as f64 <= 3.0 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(
        Some((plan.live.len() * engines) as u64),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>9} [{bar:40}] {pos}/{len} events, {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

impl std::fmt::Debug for GlobalMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalMetrics").finish_non_exhaustive()
    }
}
