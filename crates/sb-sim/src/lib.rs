//! The state-builder simulator: a calibrated worker-pool workload (or a replayed WAL)
//! through the lock-free engine and today's mutex design, side by side, reporting the
//! production note's table.
//!
//! The binary (`sb-sim`) is a thin CLI over [`run`]; see `docs/simulator.md` for the
//! workload model and how it maps to the production note.

pub mod html;
pub mod observer;
pub mod report;
pub mod run;
pub mod wal;
pub mod workload;

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sb_metrics::StateBuilderMetrics;
use wal_index::WalIndex;
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};

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
    /// `WalIndex` and `MutexIndex`.
    Both,
    /// All three, engine first, on the same plan.
    All,
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
    let chosen: Vec<&str> = match engines {
        Engines::Lockfree => vec!["lockfree"],
        Engines::Mutex => vec!["mutex"],
        Engines::Sharded => vec!["sharded"],
        Engines::Both => vec!["lockfree", "mutex"],
        Engines::All => vec!["lockfree", "sharded", "mutex"],
    };
    let expected_secs = if config.rate > 0.0 {
        plan.live.len() as f64 / config.rate
    } else {
        0.0
    };
    let progress = if expected_secs * chosen.len() as f64 > 3.0 {
        let bar = ProgressBar::with_draw_target(
            Some((plan.live.len() * chosen.len()) as u64),
            ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            ProgressStyle::with_template("{msg:>9} [{bar:40}] {pos}/{len} events, {elapsed}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut reports = Vec::new();
    for engine in chosen {
        progress.set_message(engine);
        let run = match engine {
            "lockfree" => run::run_engine::<WalIndex>(
                plan,
                config,
                global.map(|g| Arc::clone(&g.lockfree)),
                &progress,
            )?,
            "sharded" => run::run_engine::<ShardedMutexIndex>(
                plan,
                config,
                global.map(|g| Arc::clone(&g.sharded)),
                &progress,
            )?,
            _ => run::run_engine::<MutexIndex>(
                plan,
                config,
                global.map(|g| Arc::clone(&g.mutex)),
                &progress,
            )?,
        };
        reports.push(report::EngineReport::from_run(&run));
    }
    progress.finish_and_clear();
    Ok(Report {
        workload,
        machine: report::machine(),
        engines: reports,
    })
}
