//! The figures of one engine's run: the production note's table, the drives, the cold
//! start and the WAL's health.

use std::time::{Duration, Instant};

use wal_index::labels::{DriveLabel, RehydrateLabel};

use super::{Calibration, ColdStart, DriveFigures, EngineReport, Latency, OutcomeRow, WalHealth};
use crate::Engine;
use crate::observer::{LogHistogram, Outcome};
use crate::run::{DriveRecord, EngineRun};

impl EngineReport {
    /// Summarizes `engine`'s run.
    pub fn from_run(engine: Engine, run: &EngineRun) -> EngineReport {
        let rows = outcome_rows(run);
        let cold_start = cold_start(run);
        EngineReport {
            engine,
            calibration: Calibration::of(&rows, cold_start.as_ref()),
            rows,
            drives: drive_figures(run),
            cold_start,
            wal_events: run.observer.wal_events(),
            bad_records: run.drain.bad,
            wal_health: wal_health(run),
            wall_s: run.wall.as_secs_f64(),
            timeline: run.observer.timeline(),
            timeline_step_ms: run.observer.timeline_step.as_millis() as u64,
            build_duration_buckets: (0..Outcome::ALL.len())
                .map(|i| run.observer.durations(i))
                .collect(),
            resident: [run.stats.executions, run.stats.events, run.stats.bytes],
        }
    }

    /// Total builds.
    pub fn builds(&self) -> u64 {
        self.rows.iter().map(|r| r.builds).sum()
    }

    /// The row of `outcome` (rows are in report order).
    pub(super) fn row(&self, outcome: Outcome) -> Option<&OutcomeRow> {
        self.rows.get(outcome.slot())
    }
}

/// The production note's table: one row per build outcome, from the simulator's own tally,
/// with the scrape's figures beside it.
fn outcome_rows(run: &EngineRun) -> Vec<OutcomeRow> {
    let scraped =
        sb_metrics::formulas::wait_shares(&run.scrape, sb_metrics::series::DEFAULT_PREFIX);
    let tallies: Vec<_> = (0..Outcome::ALL.len())
        .map(|i| run.observer.tally(i))
        .collect();
    let total: u64 = tallies.iter().map(|t| t.builds).sum();
    let share = |part: f64, whole: f64| {
        if whole > 0.0 {
            100.0 * part / whole
        } else {
            0.0
        }
    };
    Outcome::ALL
        .iter()
        .zip(&tallies)
        .enumerate()
        .map(|(slot, (&outcome, t))| {
            let outcome = outcome.label();
            let n = t.builds.max(1) as f64;
            let (mean_build, mean_wait) = if t.builds > 0 {
                (
                    t.elapsed.as_secs_f64() * 1e6 / n,
                    t.waited.as_secs_f64() * 1e6 / n,
                )
            } else {
                (0.0, 0.0)
            };
            OutcomeRow {
                outcome,
                builds: t.builds,
                share_pct: share(t.builds as f64, total as f64),
                mean_build_us: mean_build,
                mean_lock_wait_us: mean_wait,
                mean_work_us: mean_build - mean_wait,
                wait_share_pct: share(mean_wait, mean_build),
                p50_build_us: median_bucket(&run.observer.durations(slot)),
                builds_in_metrics: scraped.get(outcome).map_or(0.0, |r| r.builds),
                wait_share_in_metrics_pct: scraped
                    .get(outcome)
                    .map_or(0.0, |r| 100.0 * r.wait_share),
            }
        })
        .collect()
}

/// The drives that were not served, by their last reported read.
fn fallback_reads(drives: &[DriveRecord]) -> Vec<(&'static str, usize)> {
    let unserved = || drives.iter().filter(|d| !d.served);
    RehydrateLabel::ALL
        .iter()
        .map(|&l| {
            (
                l.label(),
                unserved().filter(|d| d.rehydrate == Some(l)).count(),
            )
        })
        .chain([("none", unserved().filter(|d| d.rehydrate.is_none()).count())])
        .collect()
}

/// What the drives did, and how long from their tip entering the WAL to their end.
fn drive_figures(run: &EngineRun) -> DriveFigures {
    let served: Vec<&DriveRecord> = run.drives.iter().filter(|d| d.served).collect();
    let histogram = LogHistogram::default();
    for d in &served {
        histogram.record(d.latency);
    }
    let after_backfill = |d: &&&DriveRecord| {
        run.backlog == 0
            || run
                .observer
                .backlog_drained_after()
                .is_some_and(|b| d.dispatched_at >= b)
    };
    let steady_drives: Vec<&&DriveRecord> = served.iter().filter(after_backfill).collect();
    let steady: Vec<Duration> = steady_drives.iter().map(|d| d.latency).collect();
    let beyond_decode: Vec<Duration> = steady_drives
        .iter()
        .map(|d| d.latency.saturating_sub(d.tail_decode))
        .collect();
    let ms = |samples: &[Duration]| samples.iter().map(|l| l.as_secs_f64() * 1e3).collect();
    let sum = |f: fn(&DriveRecord) -> u32| run.drives.iter().map(|d| u64::from(f(d))).sum();
    DriveFigures {
        total: run.drives.len(),
        served: served.len(),
        incomplete: run.drives.len() - served.len(),
        by_label: DriveLabel::ALL
            .iter()
            .map(|&l| {
                (
                    l.label(),
                    run.drives.iter().filter(|d| d.label == l).count(),
                )
            })
            .collect(),
        fallback_reads: fallback_reads(&run.drives),
        repeats: run.drives.iter().filter(|d| d.repeat).count(),
        builds: sum(|d| d.builds),
        tail_applied: sum(|d| d.tail_applied),
        wakes: sum(|d| d.wakes),
        timeouts: sum(|d| d.timeouts),
        tip_to_served: Latency::of(served.iter().map(|d| d.latency).collect()),
        steady_tip_to_served: Latency::of(steady.clone()),
        steady_tip_to_served_ms: ms(&steady),
        steady_beyond_decode: Latency::of(beyond_decode.clone()),
        steady_beyond_decode_ms: ms(&beyond_decode),
        latency_buckets: histogram.counts(),
    }
}

/// The restart: how long the backlog took to drain, the first drives after it, and the
/// drives dispatched while it drained. `None` without a backlog.
fn cold_start(run: &EngineRun) -> Option<ColdStart> {
    if run.backlog == 0 {
        return None;
    }
    let backfill = run.observer.backlog_drained_after();
    let mut by_dispatch: Vec<_> = run.drives.iter().filter(|d| !d.repeat).copied().collect();
    by_dispatch.sort_by_key(|d| d.dispatched_at);
    let during_records: Vec<_> = by_dispatch
        .iter()
        .filter(|d| backfill.is_none_or(|b| d.dispatched_at < b))
        .collect();
    let during: Vec<Duration> = during_records.iter().map(|d| d.latency).collect();
    Some(ColdStart {
        backlog_events: run.backlog,
        backfill_ms: backfill.map(|b| b.as_secs_f64() * 1e3),
        first_drives: by_dispatch
            .iter()
            .take(5)
            .map(|d| (d.latency.as_secs_f64() * 1e3, d.served))
            .collect(),
        drives_during_backfill: during.len(),
        served_during_backfill: during_records.iter().filter(|d| d.served).count(),
        left_wait_during_backfill: during_records.iter().filter(|d| d.backfill_skip).count(),
        during_backfill: Latency::of(during),
    })
}

/// The drain's source over the run, and the broker's side of it.
fn wal_health(run: &EngineRun) -> WalHealth {
    WalHealth {
        source_errors: run.drain.source_errors,
        last_source_error: run.drain.last_source_error.clone(),
        outages: run.health.outages,
        recoveries: run.health.recoveries,
        unhealthy_s: run.health.unhealthy_until(Instant::now()).as_secs_f64(),
        publisher: run.publisher,
        duplicates_stored: run
            .publisher
            .map_or(0, |p| p.stored.saturating_sub(p.published)),
        unconsumed: run
            .publisher
            .map_or(0, |p| p.stored.saturating_sub(run.observer.wal_events())),
        lost_by_server: run
            .publisher
            .map_or(0, |p| p.published.saturating_sub(p.stored)),
        lost_on_purpose: run.lost.len(),
        stalled: run.drain.stalled,
        stalled_at_a_lost_event: run
            .drain
            .stalled_samples
            .iter()
            .filter(|s| run.lost.contains(&(s.execution_id, s.missing_event_id)))
            .count() as u64,
        stalled_samples: run
            .drain
            .stalled_samples
            .iter()
            .take(3)
            .map(ToString::to_string)
            .collect(),
        checkpoints: (&run.drain.checkpoints).into(),
    }
}

/// The lower edge of the bucket holding the median sample, µs.
fn median_bucket(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let mut seen = 0;
    for (i, &n) in counts.iter().enumerate() {
        seen += n;
        if total > 0 && seen * 2 >= total {
            return LogHistogram::lower_bound(i).as_secs_f64() * 1e6;
        }
    }
    0.0
}
