//! The report: the production note's table per engine, drive figures, the cold start.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the report's types, as the JSON output serializes them |
//! | `figures.rs` | the figures of one engine's run |
//! | `text.rs` | the text tables |

mod figures;
mod text;

use std::time::Duration;

use serde::Serialize;

use crate::Engine;
use crate::observer::Outcome;

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
    /// How many samples (0: none, and every figure is 0).
    pub samples: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl Latency {
    pub(crate) fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[i].as_secs_f64() * 1e3
        };
        Latency {
            samples: samples.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
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
    /// The drives that fell back, by how their last reported read of the retained WAL ended
    /// (`rehydrate_total{outcome}`, or `none` when they reported none), every label listed.
    pub fallback_reads: Vec<(&'static str, usize)>,
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
    /// Every sample of `steady_tip_to_served`, ms, in the order the drives ended: for
    /// pooling the steady state of several runs (a run's p99 of ~125 drives is close to its
    /// largest drive; `scripts/steady-tail.py` pools them).
    pub steady_tip_to_served_ms: Vec<f64>,
    /// `steady_tip_to_served` less each drive's tail decodes (`DriveRecord::tail_decode`):
    /// what is left when the work every design does alike is taken out (the applies, the
    /// builds, the waits, and the scheduling around them).
    pub steady_beyond_decode: Latency,
    /// Every sample of `steady_beyond_decode`, ms, in the order of `steady_tip_to_served_ms`.
    pub steady_beyond_decode_ms: Vec<f64>,
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
    /// Of those, the drives that left their wait at once to read their execution (the
    /// engine, while its drain said it was behind).
    pub left_wait_during_backfill: usize,
    /// Their tip-to-end latency.
    pub during_backfill: Latency,
}

/// One engine's report.
#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    /// `lockfree` or `mutex`.
    pub engine: Engine,
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
    /// Builds per outcome per timeline step (`timeline_step_ms`), in `Outcome::ALL` order.
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
        let row = |o: Outcome| rows.get(o.slot());
        let incomplete = row(Outcome::Incomplete);
        let share = incomplete.map_or(0.0, |r| r.wait_share_pct);
        let ratio = incomplete.map_or(0.0, |r| r.mean_build_us / NOTE[0].mean_build_us);
        Calibration {
            incomplete_wait_share_pct: share,
            incomplete_mean_ratio: ratio,
            incremental_wait_us: row(Outcome::Incremental).map_or(0.0, |r| r.mean_lock_wait_us),
            cold_rebuild_wait_us: row(Outcome::ColdRebuild).map_or(0.0, |r| r.mean_lock_wait_us),
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
    /// The producer's figures (broker and writer runs): re-sends are counted here, apart
    /// from the records.
    pub publisher: Option<crate::wal::PublisherFigures>,
    /// Messages the stream held beyond the run's records: duplicates of re-sent records whose
    /// first copy had been stored.
    pub duplicates_stored: u64,
    /// Stored messages the drain had not consumed when the run stopped waiting for it
    /// (after 120 s, or when the drain ended by itself); 0 in a run that completed. A count:
    /// where the server lost records the drain had already consumed, those stand in for
    /// stored ones it had not.
    pub unconsumed: u64,
    /// Acknowledged records the log no longer holds at the end of the run: lost by the WAL
    /// server after it acknowledged them (an EHDB writer of this version loses its unsealed
    /// tail to a SIGKILL); 0 where the server kept its word.
    pub lost_by_server: u64,
    /// Events the simulated WAL lost on purpose (`--lose-events`).
    pub lost_on_purpose: usize,
    /// Stalled chains the drain's checks reported.
    pub stalled: u64,
    /// Of the first [`wal_index::ingest::DrainReport::STALLED_SAMPLES`], those whose missing
    /// hop is an event the WAL lost on purpose.
    pub stalled_at_a_lost_event: u64,
    /// The first reports, as the drain's report words them.
    pub stalled_samples: Vec<String>,
    /// What the drain's checkpoints did (`--checkpoint-secs`).
    pub checkpoints: CheckpointFigures,
}

/// What the drain's checkpoints did (`wal_index::checkpoint::CheckpointReport`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckpointFigures {
    /// Captured and handed to the writer.
    pub captured: u64,
    /// Written durably.
    pub written: u64,
    /// Whose write failed.
    pub failed: u64,
    /// Skipped while one was being written.
    pub skipped_busy: u64,
    /// Skipped without a source position.
    pub skipped_no_position: u64,
    /// The last one's size, bytes.
    pub last_bytes: u64,
    /// The last write error.
    pub last_error: Option<String>,
}

impl From<&wal_index::checkpoint::CheckpointReport> for CheckpointFigures {
    fn from(c: &wal_index::checkpoint::CheckpointReport) -> Self {
        CheckpointFigures {
            captured: c.captured,
            written: c.written,
            failed: c.failed,
            skipped_busy: c.skipped_busy,
            skipped_no_position: c.skipped_no_position,
            last_bytes: c.last_bytes,
            last_error: c.last_error.clone(),
        }
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
