//! Starts a drain and drives on a synthetic workload and serves the state-builder series on
//! `/metrics`.
//!
//! ```sh
//! cargo run --release -p sb-metrics --example serve_metrics -- 127.0.0.1:9898 30
//! curl -s 127.0.0.1:9898/metrics | grep builds_total
//! ```
//!
//! Arguments: listen address (default `127.0.0.1:9898`) and run time in seconds (default
//! 30; `0` runs until killed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chain_fold::Event;
use sb_metrics::{StateBuilderMetrics, exporter, series::DEFAULT_PREFIX};
use wal_index::ingest::channel_wal;
use wal_index::{Drain, DrainConfig, DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:9898".to_owned())
        .parse()?;
    let seconds: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(30);
    exporter::install(addr, DEFAULT_PREFIX)?;
    let metrics = StateBuilderMetrics::register();
    let index = Arc::new(WalIndex::with_observer(IndexConfig::from_env()?, metrics));
    let (wal, source) = channel_wal();
    let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
    let (drives, jobs) = crossbeam_channel::unbounded::<(i64, i64)>();
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (index, jobs) = (Arc::clone(&index), jobs.clone());
            std::thread::spawn(move || {
                for (exec, head) in jobs {
                    index.drive(exec, Some(head), &DriveFlow::new(DriveBudget::default()));
                }
            })
        })
        .collect();
    eprintln!("serving http://{addr}/metrics");
    let started = Instant::now();
    let mut id = 0i64;
    let mut exec = 0i64;
    while seconds == 0 || started.elapsed() < Duration::from_secs(seconds) {
        exec += 1;
        let mut prev = None;
        for k in 0..27 {
            id += 1;
            let ty = match k {
                0 => "playbook_started",
                26 => "playbook_completed",
                _ => "step",
            };
            let event = Event::minimal(id, exec, prev, ty);
            wal.append(event.payload_bytes());
            // Dispatch the drive as the server would: for the event it just published,
            // often before the drain has indexed it.
            if k < 26 {
                let _ = drives.send((exec, id));
            }
            prev = Some(id);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop((wal, drives));
    for worker in workers {
        let _ = worker.join();
    }
    let report = drain.join()?;
    eprintln!("done: {} events, {} bad", report.events, report.bad);
    Ok(())
}
