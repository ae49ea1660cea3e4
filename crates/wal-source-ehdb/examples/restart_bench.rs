//! A pool's restart on a real writer's feed, from a checkpoint and from the beginning, one
//! mode per process (`scripts/ehdb-restart-bench.sh` runs them in order against a writer
//! loaded with production's retained volume). Prints one JSON line.
//!
//! ```text
//! restart_bench --feed HOST:PORT --records N --dir DIR --mode checkpoint|resume|replay
//! ```
//!
//! - `checkpoint`: a pool drains the feed from the beginning into an engine storing slim
//!   events (production's setting), checkpointing every second into DIR, until it consumed
//!   the writer's N records; then it picks 20 resident executions and their tips (the
//!   probes, written to DIR/probes.txt) and ends without a last checkpoint, as a rolled pod
//!   does.
//! - `resume`: a new process starts as a pool with checkpoints does (`Drain::warm_start`):
//!   it loads the newest checkpoint in DIR, resumes the feed after its position
//!   (`WalSource::resume`, which waits for the feed to confirm the checkpoint's records),
//!   then seeds its index. The newest checkpoint must be the one taken (none refused), and
//!   the restarted drain takes no checkpoint of its own, so DIR stays as `checkpoint` left
//!   it.
//! - `replay`: a new process starts empty and replays the feed from the beginning, as a
//!   pool without checkpoints does (`Drain::warm_start` without checkpoints).
//!
//! `resume` and `replay` report, from the process's start: the restore, the first probe
//! served by a build at its tip and the last one, the first event the drain applied, and
//! when the drain caught up with the head.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wal_index::checkpoint::{Checkpointing, DirStore};
use wal_index::ingest::Backfill;
use wal_index::{Drain, DrainConfig, IndexConfig, IndexObserver, StateIndex, WalIndex};
use wal_source_ehdb::{EhdbConfig, EhdbSource};

struct Args {
    feed: String,
    records: u64,
    dir: std::path::PathBuf,
    mode: String,
}

fn args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut feed, mut records, mut dir, mut mode) = (None, None, None, None);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--feed" => feed = Some(value),
            "--records" => records = value.parse().ok(),
            "--dir" => dir = Some(std::path::PathBuf::from(value)),
            "--mode" => mode = Some(value),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let usage = "usage: restart_bench --feed HOST:PORT --records N --dir DIR --mode checkpoint|resume|replay";
    match (feed, records, dir, mode) {
        (Some(feed), Some(records), Some(dir), Some(mode))
            if ["checkpoint", "resume", "replay"].contains(&mode.as_str()) =>
        {
            Ok(Args {
                feed,
                records,
                dir,
                mode,
            })
        }
        _ => Err(usage.into()),
    }
}

/// Counts the records the drain consumed.
#[derive(Default)]
struct Consumed(AtomicU64);

impl IndexObserver for Consumed {
    fn wal_events(&self, count: u64) {
        // Relaxed: a progress counter the main thread polls; it pairs with nothing.
        self.0.fetch_add(count, Ordering::Relaxed);
    }
}

fn config() -> IndexConfig {
    IndexConfig {
        slim: true,
        ..IndexConfig::default()
    }
}

fn main() {
    let args = match args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("restart_bench: {error}");
            std::process::exit(2);
        }
    };
    match args.mode.as_str() {
        "checkpoint" => checkpoint(&args),
        mode => restart(&args, mode == "resume"),
    }
}

fn checkpoint(args: &Args) {
    let started = Instant::now();
    let consumed = Arc::new(Consumed::default());
    let index = Arc::new(WalIndex::with_observer(
        config(),
        Arc::clone(&consumed) as Arc<dyn IndexObserver>,
    ));
    let source = EhdbSource::connect(EhdbConfig::new(&args.feed)).expect("the source starts");
    let store = DirStore::open(&args.dir, 2).expect("the checkpoint directory");
    let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default())
        .checkpoint_to(Checkpointing::new(store).every(Duration::from_secs(1)))
        .expect("the writer thread")
        .spawn();
    while consumed.0.load(Ordering::Relaxed) < args.records {
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "the feed stalled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let caught_up = started.elapsed().as_secs_f64();
    // The probes: 20 resident executions, spread over the id range, and their tips.
    let ids = index.execution_ids();
    let probes: Vec<(i64, i64)> = ids
        .iter()
        .step_by((ids.len() / 20).max(1))
        .filter_map(|&e| Some((e, index.chain(e)?.max_id()?)))
        .collect();
    let text: String = probes
        .iter()
        .map(|(e, tip)| format!("{e} {tip}\n"))
        .collect();
    std::fs::write(args.dir.join("probes.txt"), text).expect("probes written");
    let report = drain.stop().expect("the drain stops");
    println!(
        "{{\"mode\":\"checkpoint\",\"caught_up_s\":{caught_up:.3},\"checkpoints_written\":{},\"last_bytes\":{},\"probes\":{}}}",
        report.checkpoints.written,
        report.checkpoints.last_bytes,
        probes.len()
    );
}

fn restart(args: &Args, resume: bool) {
    let started = Instant::now();
    let probes: Vec<(i64, i64)> = std::fs::read_to_string(args.dir.join("probes.txt"))
        .expect("the checkpoint mode ran first")
        .lines()
        .filter_map(|l| {
            let (e, tip) = l.split_once(' ')?;
            Some((e.parse().ok()?, tip.parse().ok()?))
        })
        .collect();
    let consumed = Arc::new(Consumed::default());
    let observer = Arc::clone(&consumed) as Arc<dyn IndexObserver>;
    let source_config = EhdbConfig::new(&args.feed);
    let index = Arc::new(WalIndex::with_observer(config(), observer));
    // A resumed pool: the newest checkpoint, loaded; the source resumed after it and its
    // word that the log still holds the checkpoint's records; only then the index seeded,
    // so nothing of a checkpoint the log refuses is ever served. `Drain::warm_start` does
    // all of that; without checkpoints it starts empty at the feed's beginning.
    let checkpoints = resume.then(|| {
        let store = DirStore::open(&args.dir, 2).expect("the checkpoint directory");
        // The restart is measured, not checkpointed: no checkpoint falls due during it.
        Checkpointing::new(store)
            .resume_within(Duration::from_secs(120))
            .every(Duration::MAX)
            .every_bytes(u64::MAX)
    });
    let (drain, start) = Drain::warm_start(
        Arc::clone(&index),
        checkpoints,
        || EhdbSource::connect(source_config.clone()),
        DrainConfig::default(),
    )
    .expect("the source starts");
    let (mut restore_s, mut bytes, mut restored_events) = (None, 0, 0);
    if resume {
        assert!(
            start.refused.is_empty() && start.checkpoint.is_some(),
            "the newest checkpoint verifies and the feed still holds its records: {:?}",
            start.refused
        );
        (restore_s, bytes) = (Some(started.elapsed().as_secs_f64()), start.bytes);
        restored_events = index.stats().events;
    }
    let drain = drain.spawn();
    let (mut first_probe, mut all_probes, mut first_event, mut caught_up) =
        (None, None, None, None);
    let mut served = vec![false; probes.len()];
    while caught_up.is_none() || all_probes.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "the restart stalled"
        );
        let now = || Some(started.elapsed().as_secs_f64());
        for (k, &(execution, tip)) in probes.iter().enumerate() {
            if !served[k] && index.build(execution, Some(tip)).spine.is_some() {
                served[k] = true;
                first_probe = first_probe.or_else(now);
            }
        }
        if all_probes.is_none() && served.iter().all(|&s| s) {
            all_probes = now();
        }
        if first_event.is_none() && consumed.0.load(Ordering::Relaxed) > 0 {
            first_event = now();
        }
        if caught_up.is_none() && index.backfill() == Backfill::CaughtUp {
            caught_up = now();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let report = drain.stop().expect("the drain stops");
    let opt = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.3}"));
    println!(
        "{{\"mode\":\"{}\",\"restore_s\":{},\"checkpoint_bytes\":{bytes},\"restored_events\":{restored_events},\"first_probe_s\":{},\"all_probes_s\":{},\"first_event_s\":{},\"caught_up_s\":{},\"records_replayed\":{}}}",
        if resume { "resume" } else { "replay" },
        opt(restore_s),
        opt(first_probe),
        opt(all_probes),
        opt(first_event),
        opt(caught_up),
        report.events + report.bad
    );
}
