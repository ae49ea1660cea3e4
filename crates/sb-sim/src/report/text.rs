//! The report as text tables: per engine, the production note's table, the drives and the
//! cold start; then the headline figures side by side.

use std::fmt::Write as _;

use super::{EngineReport, Latency, NOTE, Report};
use crate::Engine;
use wal_index::labels::DriveLabel;

use crate::observer::Outcome;

impl Report {
    /// The report as text tables.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "workload: {}", self.workload);
        let _ = writeln!(out, "machine:  {}", self.machine);
        for e in &self.engines {
            engine_header(&mut out, e);
            wal_health(&mut out, e);
            outcome_table(&mut out, e);
            if e.engine == Engine::Mutex {
                production_note(&mut out, e);
            }
            drives(&mut out, e);
            if let Some(c) = &e.cold_start {
                cold_start(&mut out, c);
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
        let names: Vec<&str> = self.engines.iter().map(|e| e.engine.name()).collect();
        let _ = writeln!(out, "\n== side by side, one run ({})", names.join(" / "));
        let mut line = |what: &str, cell: &dyn Fn(&EngineReport) -> String| {
            let cells: Vec<String> = self
                .engines
                .iter()
                .map(|e| format!("{:>22}", cell(e)))
                .collect();
            let _ = writeln!(out, "{what:<44}{}", cells.join(""));
        };
        line("", &|e| e.engine.to_string());
        for outcome in Outcome::ALL {
            line(&format!("{}: builds", outcome.label()), &|e| {
                e.row(outcome).map_or("-".into(), |r| r.builds.to_string())
            });
            line(
                &format!("{}: mean build (lock wait)", outcome.label()),
                &|e| {
                    e.row(outcome)
                        .filter(|r| r.builds > 0)
                        .map_or("-".into(), |r| {
                            format!("{:.1} ({:.1}) µs", r.mean_build_us, r.mean_lock_wait_us)
                        })
                },
            );
        }
        line("drives served / total", &|e| {
            format!("{} / {}", e.drives.served, e.drives.total)
        });
        line("drives served_rehydrated", &|e| {
            e.drives
                .by_label
                .iter()
                .find(|(l, _)| *l == DriveLabel::ServedRehydrated.label())
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
            let steady = &e.drives.steady_tip_to_served;
            if steady.samples == 0 {
                return "none".into();
            }
            format!("{:.2} / {:.1}", steady.p50_ms, steady.p99_ms)
        });
        line("  of it beyond the tail's decode p50 / p99 (ms)", &|e| {
            let beyond = &e.drives.steady_beyond_decode;
            if beyond.samples == 0 {
                return "none".into();
            }
            format!("{:.2} / {:.1}", beyond.p50_ms, beyond.p99_ms)
        });
        cold_start_columns(&mut line);
        out
    }
}

/// The side-by-side lines of the restart.
fn cold_start_columns(line: &mut impl FnMut(&str, &dyn Fn(&EngineReport) -> String)) {
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
    line("  their tip → end p50 / p99 / max (ms)", &|e| {
        e.cold_start.as_ref().map_or("-".into(), |c| {
            format!(
                "{:.0} / {:.0} / {:.0}",
                c.during_backfill.p50_ms, c.during_backfill.p99_ms, c.during_backfill.max_ms
            )
        })
    });
    line("  left their wait to read the execution", &|e| {
        e.cold_start
            .as_ref()
            .map_or("-".into(), |c| c.left_wait_during_backfill.to_string())
    });
}

/// The engine's heading: its wall time and the records it consumed.
fn engine_header(out: &mut String, e: &EngineReport) {
    let _ = writeln!(
        out,
        "\n== {} — {:.1} s wall, {} WAL records ({} bad)",
        e.engine.title(),
        e.wall_s,
        e.wal_events.saturating_sub(e.wal_health.duplicates_stored),
        e.bad_records
    );
}

/// The broker's side and the source's outages, when there is something to say.
fn wal_health(out: &mut String, e: &EngineReport) {
    let h = &e.wal_health;
    if let Some(p) = &h.publisher {
        let _ = writeln!(
            out,
            "WAL on the server: {} records published, {} re-sent ({} acks missing, {} sends refused, {} waits); {} messages stored ({} duplicates)",
            p.published,
            p.republished,
            p.ack_failures,
            p.send_failures,
            p.waits,
            p.stored,
            h.duplicates_stored
        );
        if p.stored_again > 0 {
            let _ = writeln!(
                out,
                "WAL on the server: {} re-sent records were stored again under their first copy's sequence (not counted above; the feed does not serve such a copy to a drain already past its sequence)",
                p.stored_again
            );
        }
    }
    if h.lost_by_server > 0 {
        let _ = writeln!(
            out,
            "WAL LOST BY THE SERVER: {} acknowledged records are no longer in the log",
            h.lost_by_server
        );
    }
    if h.unconsumed > 0 {
        let _ = writeln!(
            out,
            "WAL INCOMPLETE: {} stored messages were not consumed when the run stopped waiting for the drain",
            h.unconsumed
        );
    }
    if h.lost_on_purpose > 0 || h.stalled > 0 {
        let _ = writeln!(
            out,
            "Lost writes: the WAL lost {} events on purpose; {} stalled chains reported ({} at a lost event){}{}",
            h.lost_on_purpose,
            h.stalled,
            h.stalled_at_a_lost_event,
            if h.stalled_samples.is_empty() {
                ""
            } else {
                "; first: "
            },
            h.stalled_samples.join(" | ")
        );
    }
    let c = &h.checkpoints;
    if c.captured + c.skipped_busy + c.skipped_no_position > 0 {
        let _ = writeln!(
            out,
            "Checkpoints: {} written (the last {:.1} MB), {} failed, {} skipped while one was being written, {} skipped without a position{}",
            c.written,
            c.last_bytes as f64 / 1e6,
            c.failed,
            c.skipped_busy,
            c.skipped_no_position,
            c.last_error
                .as_ref()
                .map_or(String::new(), |e| format!("; last error: {e}"))
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
}

/// The production note's table for this run.
fn outcome_table(out: &mut String, e: &EngineReport) {
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
}

/// The production note's own rows under today's design, and how this run compares.
fn production_note(out: &mut String, e: &EngineReport) {
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

/// The labels counted at least once, as "N label".
fn nonzero(counts: &[(&str, usize)]) -> Vec<String> {
    counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| format!("{n} {l}"))
        .collect()
}

/// What the drives did, and their tip → served latency.
fn drives(out: &mut String, e: &EngineReport) {
    let d = &e.drives;
    let labels = nonzero(&d.by_label);
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
    if d.incomplete > 0 {
        let reads = nonzero(&d.fallback_reads);
        let _ = writeln!(
            out,
            "fell back: {}; their last read of the retained WAL: {}",
            d.incomplete,
            reads.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "tip entered WAL → drive served: {} (steady state: {})",
        latency(&d.tip_to_served, 3),
        steady_state(&d.steady_tip_to_served),
    );
}

/// The restart: the backfill, the first drives, the drives dispatched during it.
fn cold_start(out: &mut String, c: &super::ColdStart) {
    let backfill = c
        .backfill_ms
        .map_or("never finished".to_owned(), |ms| format!("{ms:.0} ms"));
    let firsts: Vec<String> = c
        .first_drives
        .iter()
        .map(|(ms, served)| format!("{ms:.1} ms {}", if *served { "served" } else { "fallback" }))
        .collect();
    let _ = writeln!(
        out,
        "cold start: {} backlog events drained in {backfill}; first drives: {}",
        c.backlog_events,
        firsts.join(", ")
    );
    let _ = writeln!(
        out,
        "            {} drives dispatched during the backfill ({} served, {} left their wait to read their execution): {}",
        c.drives_during_backfill,
        c.served_during_backfill,
        c.left_wait_during_backfill,
        latency(&c.during_backfill, 1)
    );
}

/// A latency as `p50 …, p99 …, max …` in `precision` decimals of a millisecond, or "none".
fn latency(l: &Latency, precision: usize) -> String {
    if l.samples == 0 {
        return "none".to_owned();
    }
    format!(
        "p50 {:.precision$} ms, p99 {:.precision$} ms, max {:.precision$} ms",
        l.p50_ms, l.p99_ms, l.max_ms
    )
}

/// The steady-state latency, or why there is none: no drive was dispatched after the
/// backfill ended (or none was served).
fn steady_state(l: &Latency) -> String {
    if l.samples == 0 {
        return "none: no drive was served after the backfill".to_owned();
    }
    latency(l, 3)
}
