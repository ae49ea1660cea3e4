//! The report: the production note's table per engine, drive figures, the cold start.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use wal_index::labels::DriveLabel;

use crate::observer::{LogHistogram, OUTCOMES};
use crate::run::EngineRun;

/// One row of the production note's table.
#[derive(Debug, Clone, Serialize)]
pub struct OutcomeRow {
    /// Build outcome.
    pub outcome: &'static str,
    /// Builds with this outcome.
    pub builds: u64,
    /// Share of all builds, percent.
    pub share_pct: f64,
    /// Mean build duration, µs (lock wait included).
    pub mean_build_us: f64,
    /// Mean time blocked before the index could be read, µs.
    pub mean_lock_wait_us: f64,
    /// Mean build minus mean lock wait, µs.
    pub mean_work_us: f64,
    /// Median build duration, µs, from the log-scale histogram (lower edge of its bucket,
    /// so within 19% below the true median). Means are what production reports; the
    /// median shows what a typical build costs when a few are preempted on a busy machine.
    pub p50_build_us: f64,
    /// Lock wait as a share of the build, percent.
    pub wait_share_pct: f64,
    /// Builds with this outcome according to the run's own Prometheus scrape.
    pub builds_in_metrics: f64,
    /// The production note's formulas applied to that scrape: mean lock wait share, percent.
    pub wait_share_in_metrics_pct: f64,
}

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[i].as_secs_f64() * 1e3
        };
        Latency {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
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

/// Drive figures.
#[derive(Debug, Clone, Serialize)]
pub struct DriveFigures {
    /// Drives dispatched and finished (repeated dispatches included).
    pub total: usize,
    /// Served, by any step of the flow.
    pub served: usize,
    /// Not served: fell back.
    pub incomplete: usize,
    /// Drives per `drive_builds_total{outcome}` label, every label listed.
    pub by_label: Vec<(&'static str, usize)>,
    /// Repeated dispatches (the second drive of a head).
    pub repeats: usize,
    /// Builds the drives ran.
    pub builds: u64,
    /// Tail events the drives applied.
    pub tail_applied: u64,
    /// Waits ended by a wake-up.
    pub wakes: u64,
    /// Waits ended by the per-wait cap.
    pub timeouts: u64,
    /// From the tip entering the WAL to the drive being served (served drives only).
    pub tip_to_served: Latency,
    /// The same for served drives dispatched after the cold-start backfill finished (all
    /// served drives when there was no backlog): the steady state.
    pub steady_tip_to_served: Latency,
    /// Drive counts per latency bucket (log scale, see `LogHistogram`), served drives.
    pub latency_buckets: Vec<u64>,
}

/// The cold-start phase.
#[derive(Debug, Clone, Serialize)]
pub struct ColdStart {
    /// Events in the WAL before the drain started.
    pub backlog_events: usize,
    /// How long the drain took to consume them, ms (`None`: it never did).
    pub backfill_ms: Option<f64>,
    /// The first live drives, in dispatch order: end-to-end time (ms) and whether served.
    pub first_drives: Vec<(f64, bool)>,
    /// Drives dispatched while the backfill was still running.
    pub drives_during_backfill: usize,
    /// Of those, served (the rest fell back).
    pub served_during_backfill: usize,
    /// Their tip-to-end latency.
    pub during_backfill: Latency,
}

/// One engine's report.
#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    /// `lockfree` or `mutex`.
    pub engine: &'static str,
    /// The production note's table.
    pub rows: Vec<OutcomeRow>,
    /// Drive figures.
    pub drives: DriveFigures,
    /// The cold start, if there was a backlog.
    pub cold_start: Option<ColdStart>,
    /// WAL records consumed by the drain.
    pub wal_events: u64,
    /// Bad records the drain skipped.
    pub bad_records: u64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Builds per outcome per timeline step (`timeline_step_ms`), in `OUTCOMES` order.
    pub timeline: Vec<[u64; 4]>,
    /// Width of one timeline step.
    pub timeline_step_ms: u64,
    /// Build duration distribution per outcome (log buckets).
    pub build_duration_buckets: Vec<Vec<u64>>,
    /// Residency at the end: executions, events, bytes.
    pub resident: [usize; 3],
    /// How the WAL held up: the drain's outages and the producer's re-sends.
    pub wal_health: WalHealth,
    /// This run against the production note's table (meaningful for today's design).
    pub calibration: Calibration,
}

/// One row of the production note's measured table (today's design, worker v6.2.1,
/// ~45 minutes after a roll).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct NoteRow {
    /// Build outcome.
    pub outcome: &'static str,
    /// Builds.
    pub builds: u64,
    /// Mean build, µs.
    pub mean_build_us: f64,
    /// Mean lock wait, µs.
    pub mean_lock_wait_us: f64,
    /// Mean work, µs.
    pub mean_work_us: f64,
    /// Wait share, percent.
    pub wait_share_pct: f64,
}

/// The production note's table, as measured.
pub const NOTE: [NoteRow; 3] = [
    NoteRow {
        outcome: "incomplete",
        builds: 4107,
        mean_build_us: 381.6,
        mean_lock_wait_us: 376.6,
        mean_work_us: 4.9,
        wait_share_pct: 98.7,
    },
    NoteRow {
        outcome: "incremental",
        builds: 72,
        mean_build_us: 1592.9,
        mean_lock_wait_us: 1.3,
        mean_work_us: 1591.6,
        wait_share_pct: 0.1,
    },
    NoteRow {
        outcome: "cold_rebuild",
        builds: 31,
        mean_build_us: 174.2,
        mean_lock_wait_us: 1.3,
        mean_work_us: 172.9,
        wait_share_pct: 0.7,
    },
];

/// How a run compares with the note: the targets of the calibration (incomplete builds at
/// least 90% lock wait with a mean within 3x of 381.6 µs; incremental and cold rebuilds
/// waiting about a microsecond; a slow first drive after the restart).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Calibration {
    /// Incomplete builds' wait share, percent (note: 98.7%).
    pub incomplete_wait_share_pct: f64,
    /// Incomplete builds' mean, over the note's 381.6 µs.
    pub incomplete_mean_ratio: f64,
    /// Incremental builds' mean lock wait, µs (note: 1.3).
    pub incremental_wait_us: f64,
    /// Cold rebuilds' mean lock wait, µs (note: 1.3).
    pub cold_rebuild_wait_us: f64,
    /// The first drive after the restart, ms (note: the first executions took 79 s and
    /// 36 s end to end).
    pub first_drive_ms: f64,
    /// Incomplete: ≥ 90% wait and a mean within 3x of the note's.
    pub incomplete_matches: bool,
}

impl Calibration {
    fn of(rows: &[OutcomeRow], cold_start: Option<&ColdStart>) -> Calibration {
        let row = |o: &str| rows.iter().find(|r| r.outcome == o);
        let incomplete = row("incomplete");
        let share = incomplete.map_or(0.0, |r| r.wait_share_pct);
        let ratio = incomplete.map_or(0.0, |r| r.mean_build_us / NOTE[0].mean_build_us);
        Calibration {
            incomplete_wait_share_pct: share,
            incomplete_mean_ratio: ratio,
            incremental_wait_us: row("incremental").map_or(0.0, |r| r.mean_lock_wait_us),
            cold_rebuild_wait_us: row("cold_rebuild").map_or(0.0, |r| r.mean_lock_wait_us),
            first_drive_ms: cold_start
                .and_then(|c| c.first_drives.first())
                .map_or(0.0, |(ms, _)| *ms),
            incomplete_matches: share >= 90.0 && (1.0 / 3.0..=3.0).contains(&ratio),
        }
    }
}

/// How the WAL held up during a run: an outage is visible here, not only in a stall.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WalHealth {
    /// Source errors the drain retried (failed pulls and commits).
    pub source_errors: u64,
    /// The last of them.
    pub last_source_error: Option<String>,
    /// Times the drain's feed went unhealthy.
    pub outages: u64,
    /// Times it came back (a reconnected feed).
    pub recoveries: u64,
    /// Seconds the drain was unhealthy.
    pub unhealthy_s: f64,
    /// The producer's figures (broker runs only): re-sends are counted here, apart from the
    /// records.
    pub publisher: Option<crate::wal::PublisherFigures>,
    /// Messages the stream held beyond the run's records: duplicates of re-sent records whose
    /// first copy had been stored.
    pub duplicates_stored: u64,
    /// Stored messages the drain had not consumed when the run stopped waiting for it
    /// (after 120 s); 0 in a run that completed.
    pub unconsumed: u64,
}

impl EngineReport {
    /// Summarizes a run.
    pub fn from_run(run: &EngineRun) -> EngineReport {
        let scraped =
            sb_metrics::formulas::wait_shares(&run.scrape, sb_metrics::series::DEFAULT_PREFIX);
        let tallies: Vec<_> = (0..OUTCOMES.len()).map(|i| run.observer.tally(i)).collect();
        let total: u64 = tallies.iter().map(|t| t.builds).sum();
        let rows: Vec<OutcomeRow> = OUTCOMES
            .iter()
            .zip(&tallies)
            .map(|(&outcome, t)| {
                let n = t.builds.max(1) as f64;
                let mean_build = t.elapsed.as_secs_f64() * 1e6 / n;
                let mean_wait = t.waited.as_secs_f64() * 1e6 / n;
                OutcomeRow {
                    outcome,
                    builds: t.builds,
                    share_pct: if total > 0 {
                        100.0 * t.builds as f64 / total as f64
                    } else {
                        0.0
                    },
                    mean_build_us: if t.builds > 0 { mean_build } else { 0.0 },
                    mean_lock_wait_us: if t.builds > 0 { mean_wait } else { 0.0 },
                    mean_work_us: if t.builds > 0 {
                        mean_build - mean_wait
                    } else {
                        0.0
                    },
                    wait_share_pct: if mean_build > 0.0 {
                        100.0 * mean_wait / mean_build
                    } else {
                        0.0
                    },
                    p50_build_us: median_bucket(
                        &run.observer
                            .durations(OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(0)),
                    ),
                    builds_in_metrics: scraped.get(outcome).map_or(0.0, |r| r.builds),
                    wait_share_in_metrics_pct: scraped
                        .get(outcome)
                        .map_or(0.0, |r| 100.0 * r.wait_share),
                }
            })
            .collect();
        let served: Vec<_> = run.drives.iter().filter(|d| d.served).collect();
        let histogram = LogHistogram::default();
        for d in &served {
            histogram.record(d.latency);
        }
        let drives = DriveFigures {
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
            repeats: run.drives.iter().filter(|d| d.repeat).count(),
            builds: run.drives.iter().map(|d| u64::from(d.builds)).sum(),
            tail_applied: run.drives.iter().map(|d| u64::from(d.tail_applied)).sum(),
            wakes: run.drives.iter().map(|d| u64::from(d.wakes)).sum(),
            timeouts: run.drives.iter().map(|d| u64::from(d.timeouts)).sum(),
            tip_to_served: Latency::of(served.iter().map(|d| d.latency).collect()),
            steady_tip_to_served: Latency::of(
                served
                    .iter()
                    .filter(|d| {
                        run.backlog == 0
                            || run
                                .observer
                                .backlog_drained_after()
                                .is_some_and(|b| d.dispatched_at >= b)
                    })
                    .map(|d| d.latency)
                    .collect(),
            ),
            latency_buckets: histogram.counts(),
        };
        let cold_start = (run.backlog > 0).then(|| {
            let backfill = run.observer.backlog_drained_after();
            let mut by_dispatch: Vec<_> =
                run.drives.iter().filter(|d| !d.repeat).copied().collect();
            by_dispatch.sort_by_key(|d| d.dispatched_at);
            let during_records: Vec<_> = by_dispatch
                .iter()
                .filter(|d| backfill.is_none_or(|b| d.dispatched_at < b))
                .collect();
            let during: Vec<Duration> = during_records.iter().map(|d| d.latency).collect();
            ColdStart {
                backlog_events: run.backlog,
                backfill_ms: backfill.map(|b| b.as_secs_f64() * 1e3),
                first_drives: by_dispatch
                    .iter()
                    .take(5)
                    .map(|d| (d.latency.as_secs_f64() * 1e3, d.served))
                    .collect(),
                drives_during_backfill: during.len(),
                served_during_backfill: during_records.iter().filter(|d| d.served).count(),
                during_backfill: Latency::of(during),
            }
        });
        let calibration = Calibration::of(&rows, cold_start.as_ref());
        EngineReport {
            engine: run.engine,
            calibration,
            rows,
            drives,
            cold_start,
            wal_events: run.observer.wal_events(),
            bad_records: run.drain.bad,
            wal_health: WalHealth {
                source_errors: run.drain.source_errors,
                last_source_error: run.drain.last_source_error.clone(),
                outages: run.health.outages,
                recoveries: run.health.recoveries,
                unhealthy_s: run
                    .health
                    .unhealthy_until(std::time::Instant::now())
                    .as_secs_f64(),
                publisher: run.publisher,
                duplicates_stored: run
                    .publisher
                    .map_or(0, |p| p.stored.saturating_sub(p.published)),
                unconsumed: run
                    .publisher
                    .map_or(0, |p| p.stored.saturating_sub(run.observer.wal_events())),
            },
            wall_s: run.wall.as_secs_f64(),
            timeline: run.observer.timeline(),
            timeline_step_ms: run.observer.timeline_step.as_millis() as u64,
            build_duration_buckets: (0..OUTCOMES.len())
                .map(|i| run.observer.durations(i))
                .collect(),
            resident: [run.stats.executions, run.stats.events, run.stats.bytes],
        }
    }

    /// Total builds.
    pub fn builds(&self) -> u64 {
        self.rows.iter().map(|r| r.builds).sum()
    }

    fn row(&self, outcome: &str) -> Option<&OutcomeRow> {
        self.rows.iter().find(|r| r.outcome == outcome)
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What ran, in words.
    pub workload: String,
    /// The machine, as far as the process can tell.
    pub machine: String,
    /// One report per engine, in run order.
    pub engines: Vec<EngineReport>,
}

fn engine_title(engine: &str) -> &'static str {
    match engine {
        "lockfree" => "lockfree (WalIndex, this project)",
        "mutex" => "mutex (MutexIndex, today's design)",
        "sharded" => "sharded (ShardedMutexIndex, one lock per execution)",
        _ => "engine",
    }
}

/// The machine: logical CPUs and the CPU model where `/proc/cpuinfo` says.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    format!("{cpus} CPUs, {model}")
}

impl Report {
    /// The report as text tables.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "workload: {}", self.workload);
        let _ = writeln!(out, "machine:  {}", self.machine);
        for e in &self.engines {
            let _ = writeln!(
                out,
                "\n== {} — {:.1} s wall, {} WAL records ({} bad)",
                engine_title(e.engine),
                e.wall_s,
                e.wal_events.saturating_sub(e.wal_health.duplicates_stored),
                e.bad_records
            );
            let h = &e.wal_health;
            if let Some(p) = &h.publisher {
                let _ = writeln!(
                    out,
                    "WAL on the broker: {} records published, {} re-sent ({} acks missing, {} sends refused, {} waits); {} messages stored ({} duplicates)",
                    p.published,
                    p.republished,
                    p.ack_failures,
                    p.send_failures,
                    p.waits,
                    p.stored,
                    h.duplicates_stored
                );
            }
            if h.unconsumed > 0 {
                let _ = writeln!(
                    out,
                    "WAL INCOMPLETE: {} stored messages were not consumed when the run stopped waiting for the drain",
                    h.unconsumed
                );
            }
            if h.outages > 0 || h.source_errors > 0 {
                let _ = writeln!(
                    out,
                    "WAL outage: the drain was unhealthy {:.1} s over {} outage(s), {} recovered; {} source errors retried (last: {})",
                    h.unhealthy_s,
                    h.outages,
                    h.recoveries,
                    h.source_errors,
                    h.last_source_error.as_deref().unwrap_or("-")
                );
            }
            let _ = writeln!(
                out,
                "{:<13} {:>8} {:>7} {:>12} {:>15} {:>11} {:>11} {:>11}",
                "outcome",
                "builds",
                "share",
                "mean build",
                "mean lock wait",
                "mean work",
                "wait share",
                "~p50 build"
            );
            for r in &e.rows {
                let _ = writeln!(
                    out,
                    "{:<13} {:>8} {:>6.1}% {:>9.1} µs {:>12.1} µs {:>8.1} µs {:>10.1}% {:>8.1} µs",
                    r.outcome,
                    r.builds,
                    r.share_pct,
                    r.mean_build_us,
                    r.mean_lock_wait_us,
                    r.mean_work_us,
                    r.wait_share_pct,
                    r.p50_build_us
                );
            }
            if e.engine == "mutex" {
                let _ = writeln!(
                    out,
                    "the production note (today's design, a fresh pod, worker v6.2.1):"
                );
                for n in &NOTE {
                    let _ = writeln!(
                        out,
                        "{:<13} {:>8} {:>7} {:>9.1} µs {:>12.1} µs {:>8.1} µs {:>10.1}%",
                        n.outcome,
                        n.builds,
                        "",
                        n.mean_build_us,
                        n.mean_lock_wait_us,
                        n.mean_work_us,
                        n.wait_share_pct
                    );
                }
                let c = &e.calibration;
                let _ = writeln!(
                    out,
                    "calibration: incomplete {:.1}% lock wait (note 98.7%, target ≥ 90%), mean {:.2}x the note's 381.6 µs (target within 3x): {}; incremental / cold rebuild wait {:.1} / {:.1} µs (note 1.3 / 1.3); first drive after the restart {:.0} ms",
                    c.incomplete_wait_share_pct,
                    c.incomplete_mean_ratio,
                    if c.incomplete_matches {
                        "matches"
                    } else {
                        "DOES NOT MATCH (docs/simulator.md)"
                    },
                    c.incremental_wait_us,
                    c.cold_rebuild_wait_us,
                    c.first_drive_ms
                );
            }
            let d = &e.drives;
            let labels: Vec<String> = d
                .by_label
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(l, n)| format!("{n} {l}"))
                .collect();
            let _ = writeln!(
                out,
                "drives: {} ({}; {} repeated at the same head), {} builds, {} tail events applied; waits: {} woken, {} timeout",
                d.total,
                labels.join(", "),
                d.repeats,
                d.builds,
                d.tail_applied,
                d.wakes,
                d.timeouts
            );
            let _ = writeln!(
                out,
                "tip entered WAL → drive served: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (steady state: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms)",
                d.tip_to_served.p50_ms,
                d.tip_to_served.p99_ms,
                d.tip_to_served.max_ms,
                d.steady_tip_to_served.p50_ms,
                d.steady_tip_to_served.p99_ms,
                d.steady_tip_to_served.max_ms
            );
            if let Some(c) = &e.cold_start {
                let backfill = c
                    .backfill_ms
                    .map_or("never finished".to_owned(), |ms| format!("{ms:.0} ms"));
                let firsts: Vec<String> = c
                    .first_drives
                    .iter()
                    .map(|(ms, served)| {
                        format!("{ms:.1} ms {}", if *served { "served" } else { "fallback" })
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "cold start: {} backlog events drained in {backfill}; first drives: {}",
                    c.backlog_events,
                    firsts.join(", ")
                );
                let _ = writeln!(
                    out,
                    "            {} drives dispatched during the backfill ({} served): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                    c.drives_during_backfill,
                    c.served_during_backfill,
                    c.during_backfill.p50_ms,
                    c.during_backfill.p99_ms,
                    c.during_backfill.max_ms
                );
            }
        }
        if self.engines.len() >= 2 {
            out.push_str(&self.side_by_side());
        }
        out
    }

    /// The headline figures, one column per engine, from this one run.
    pub fn side_by_side(&self) -> String {
        let mut out = String::new();
        let names: Vec<&str> = self.engines.iter().map(|e| e.engine).collect();
        let _ = writeln!(out, "\n== side by side, one run ({})", names.join(" / "));
        let mut line = |what: &str, cell: &dyn Fn(&EngineReport) -> String| {
            let cells: Vec<String> = self
                .engines
                .iter()
                .map(|e| format!("{:>22}", cell(e)))
                .collect();
            let _ = writeln!(out, "{what:<44}{}", cells.join(""));
        };
        line("", &|e| e.engine.to_owned());
        for outcome in ["incomplete", "incremental", "cold_rebuild", "cache_hit"] {
            line(&format!("{outcome}: builds"), &|e| {
                e.row(outcome).map_or("-".into(), |r| r.builds.to_string())
            });
            line(&format!("{outcome}: mean build (lock wait)"), &|e| {
                e.row(outcome)
                    .filter(|r| r.builds > 0)
                    .map_or("-".into(), |r| {
                        format!("{:.1} ({:.1}) µs", r.mean_build_us, r.mean_lock_wait_us)
                    })
            });
        }
        line("drives served / total", &|e| {
            format!("{} / {}", e.drives.served, e.drives.total)
        });
        line("drives served_rehydrated", &|e| {
            e.drives
                .by_label
                .iter()
                .find(|(l, _)| *l == "served_rehydrated")
                .map_or("0".into(), |(_, n)| n.to_string())
        });
        line("builds per drive", &|e| {
            format!(
                "{:.2}",
                e.drives.builds as f64 / e.drives.total.max(1) as f64
            )
        });
        line("waits woken / timeout", &|e| {
            format!("{} / {}", e.drives.wakes, e.drives.timeouts)
        });
        line("tip → served p50 / p99 (ms)", &|e| {
            format!(
                "{:.2} / {:.1}",
                e.drives.tip_to_served.p50_ms, e.drives.tip_to_served.p99_ms
            )
        });
        line("steady state tip → served p50 / p99 (ms)", &|e| {
            format!(
                "{:.2} / {:.1}",
                e.drives.steady_tip_to_served.p50_ms, e.drives.steady_tip_to_served.p99_ms
            )
        });
        line("backfill of the restart backlog (ms)", &|e| {
            e.cold_start
                .as_ref()
                .and_then(|c| c.backfill_ms)
                .map_or("-".into(), |ms| format!("{ms:.0}"))
        });
        line("first drive after the restart (ms)", &|e| {
            e.cold_start
                .as_ref()
                .and_then(|c| c.first_drives.first())
                .map_or("-".into(), |(ms, _)| format!("{ms:.0}"))
        });
        line("drives during the backfill: served / all", &|e| {
            e.cold_start.as_ref().map_or("-".into(), |c| {
                format!(
                    "{} / {}",
                    c.served_during_backfill, c.drives_during_backfill
                )
            })
        });
        line("  their tip → end p50 / max (ms)", &|e| {
            e.cold_start.as_ref().map_or("-".into(), |c| {
                format!(
                    "{:.0} / {:.0}",
                    c.during_backfill.p50_ms, c.during_backfill.max_ms
                )
            })
        });
        out
    }
}
