//! The drain rows of `--bench lean` as paired, alternated passes: the engine against the
//! lean design (`sb_benches::lean::LeanIndex`), one pass of each per round, the order
//! swapped every round, so both designs see the same state of a shared machine and the
//! ratio is taken within each round, not between two criterion groups measured a minute
//! apart.
//!
//! A pass is 20,000 events of 740 executions (27 each, the last terminal, 50 live at a
//! time, 64-byte payloads) in 200-event batches: the same executions every pass (each
//! re-created after it finished) or fresh ones every pass (made before the pass, untimed),
//! alone or while two threads build an indexed execution (each design's readers run only
//! during its own passes). Each design keeps its own index across the rounds.
//!
//! For each row it prints each design's median pass, the median of the rounds' ratios
//! (engine / lean) with the quartiles of those ratios, and the share of rounds in which the
//! engine was within 10% of the lean design; then the same three for the CPU time of the
//! thread that drained (`CLOCK_THREAD_CPUTIME_ID`): with readers, three threads share two
//! cores, and a pass whose drain was descheduled for a slice has a longer wall time but
//! not a longer CPU time.
//!
//! `cargo bench -p sb-benches --bench lean_paired [-- ROUNDS]` (ROUNDS per row, default
//! 201; about 20 s). With `PASSES=N`, each design's turn is N passes in a row of which the
//! last is timed (its caches warm from its own work). `PAIR=lean` or `PAIR=engine` runs a
//! design against itself, the harness's own check: its ratios should sit at 1.00.
//! `ROW=NAME` runs that row alone.

use std::time::{Duration, Instant};

use chain_fold::Event;
use sb_benches::lean::LeanIndex;
use sb_benches::payload;
use sb_benches::rows::{
    Indexed, Readers, Rows, drain_index, drain_pass, drain_wal, median, rounds_from_args,
};
use wal_index::WalIndex;

/// One design's side of a row: its index and the passes it has made.
struct Side<R: Rows> {
    index: std::sync::Arc<R>,
    readers: usize,
    fresh: bool,
    pass: i64,
}

impl<R: Rows> Side<R> {
    fn new(readers: usize, fresh: bool) -> Side<R> {
        Side {
            index: drain_index(),
            readers,
            fresh,
            pass: 0,
        }
    }

    /// `PASSES` passes in a row, the last one timed; the WALs (when fresh) and the
    /// readers are made before the clock starts and stopped after it ends.
    fn pass(&mut self, same: &[Event]) -> Pass {
        let wals: Vec<Vec<Event>> = (0..passes())
            .map(|_| {
                if self.fresh {
                    self.pass += 1;
                    drain_wal(self.pass, &payload(64))
                } else {
                    same.to_vec()
                }
            })
            .collect();
        let readers = Readers::start(&self.index, self.readers);
        let (last, warm) = wals.split_last().expect("at least one pass");
        for wal in warm {
            drain_pass(&*self.index, wal);
        }
        let cpu_before = thread_cpu_time();
        let started = Instant::now();
        drain_pass(&*self.index, last);
        let took = started.elapsed();
        let cpu = thread_cpu_time().saturating_sub(cpu_before);
        drop(readers);
        Pass { wall: took, cpu }
    }
}

/// One timed pass: its wall time, and the CPU time of the thread that drained it.
#[derive(Clone, Copy)]
struct Pass {
    wall: Duration,
    cpu: Duration,
}

/// The calling thread's CPU time so far: the time the drain itself ran, which a reader
/// sharing its core does not add to (its wall time does: three threads on two cores take
/// turns in slices of milliseconds, as long as a pass).
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec` that outlives the call, the only
    // memory the call writes. (An unknown clock is an error return, which the assert
    // below reports.)
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn passes() -> usize {
    std::env::var("PASSES")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn quartiles(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    (values[values.len() / 4], values[values.len() * 3 / 4])
}

/// Runs one row for `rounds` rounds (after two untimed rounds) and prints it.
fn row<A: Rows, B: Rows>(name: &str, readers: usize, fresh: bool, rounds: usize) {
    let same = drain_wal(0, &payload(64));
    let mut engine = Side::<A>::new(readers, fresh);
    let mut lean = Side::<B>::new(readers, fresh);
    for _ in 0..2 {
        engine.pass(&same);
        lean.pass(&same);
    }
    let (mut engine_ms, mut lean_ms) = (Vec::new(), Vec::new());
    let (mut ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (e, l) = if round % 2 == 0 {
            let e = engine.pass(&same);
            (e, lean.pass(&same))
        } else {
            let l = lean.pass(&same);
            (engine.pass(&same), l)
        };
        engine_ms.push(e.wall.as_secs_f64() * 1e3);
        lean_ms.push(l.wall.as_secs_f64() * 1e3);
        ratios.push(e.wall.as_secs_f64() / l.wall.as_secs_f64());
        cpu_ratios.push(e.cpu.as_secs_f64() / l.cpu.as_secs_f64());
    }
    println!(
        "{name:<22} {:>8.3} {:>8.3} {}   {}",
        median(&mut engine_ms),
        median(&mut lean_ms),
        ratio_columns(&mut ratios),
        ratio_columns(&mut cpu_ratios),
    );
}

/// A row's columns for one kind of ratio: the median, the quartiles, and the share of
/// rounds within 10%.
fn ratio_columns(ratios: &mut [f64]) -> String {
    let within = ratios.iter().filter(|&&r| r <= 1.10).count() as f64 / ratios.len() as f64;
    let (q1, q3) = quartiles(ratios);
    format!(
        "{:>7.3}x  [{q1:.3}, {q3:.3}]  {:>5.1}%",
        median(ratios),
        within * 100.0
    )
}

fn main() {
    let rounds = rounds_from_args(201, 4);
    let pair = match std::env::var("PAIR").as_deref() {
        Ok("lean") => "LeanIndex against itself",
        Ok("engine") => "WalIndex against itself",
        _ => "engine = lockfree (WalIndex), lean = LeanIndex",
    };
    println!(
        "{rounds} rounds per row, {} pass(es) per turn, alternated; {pair}",
        passes()
    );
    println!(
        "{:<22} {:>8} {:>8} {:>8}  {:<14}  {:>6}   {:>8}  {:<14}  ≤1.10x",
        "row", "engine", "lean", "ratio", "ratio q1, q3", "≤1.10x", "cpu", "cpu q1, q3"
    );
    for (name, readers, fresh) in [
        ("same_ids_alone", 0, false),
        ("fresh_ids_alone", 0, true),
        ("same_ids_2_readers", 2, false),
        ("fresh_ids_2_readers", 2, true),
    ] {
        if std::env::var("ROW").is_ok_and(|only| only != name) {
            continue;
        }
        match std::env::var("PAIR").as_deref() {
            Ok("lean") => row::<LeanIndex, LeanIndex>(name, readers, fresh, rounds),
            Ok("engine") => {
                row::<Indexed<WalIndex>, Indexed<WalIndex>>(name, readers, fresh, rounds)
            }
            _ => row::<Indexed<WalIndex>, LeanIndex>(name, readers, fresh, rounds),
        }
    }
}
