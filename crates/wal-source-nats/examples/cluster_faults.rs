//! The fault table of docs/deployment.md: a pool's drain on a 3-node JetStream cluster (a
//! stream of 3 replicas, nodes on loopback) while a producer publishes live, and one fault
//! after another: the stream leader SIGKILLed and restarted, a follower SIGKILLed and
//! restarted, the leader SIGSTOPped and SIGCONTed, and, where network namespaces can be
//! made (root, iproute2), the leader partitioned away from its peers and the clients and
//! healed.
//!
//! ```text
//! cargo run --release -p wal-source-nats --example cluster_faults -- [RATE] [SETTLE_S] [DOWN_S] [PAUSE_S] [ROUNDS]
//! ```
//!
//! `CLUSTER_SYNC_ALWAYS=1` sets `sync_interval: always` on every node (nats-server 2.10 or
//! later, named by `NATS_SERVER`). Defaults: 500 events/s, 10 s of publication around each fault, nodes down 10 s, the
//! leader paused 15 s, one round of the three faults. Prints one row per fault and the
//! totals; exits non-zero if an acknowledged event is missing or counted twice, an
//! execution is not served whole, or a chain stalled.

use std::process::ExitCode;
use std::time::Duration;

use wal_source_nats::test_broker::drill::{self, DrillConfig, Fault};
use wal_source_nats::test_broker::{Cluster, ClusterOptions};

fn arg(n: usize, default: f64) -> f64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let config = DrillConfig {
        rate: arg(1, 500.0),
        events_per_execution: 27,
        concurrent: 64,
        settle: Duration::from_secs_f64(arg(2, 10.0)),
        down: Duration::from_secs_f64(arg(3, 10.0)),
        pause: Duration::from_secs_f64(arg(4, 15.0)),
    };
    let rounds = arg(5, 1.0).max(1.0) as usize;
    // Each node in a namespace of its own where the machine allows it (root, iproute2), so
    // the leader can also be partitioned away; on loopback otherwise.
    let sync_always = std::env::var_os("CLUSTER_SYNC_ALWAYS").is_some_and(|v| v == "1");
    let options = |partitionable| ClusterOptions {
        partitionable,
        sync_always,
    };
    let Some(mut cluster) = Cluster::start_with("cluster_faults", 3, options(true))
        .or_else(|| Cluster::start_with("cluster_faults", 3, options(false)))
    else {
        return ExitCode::FAILURE;
    };
    let partition = cluster.can_partition();
    let faults: Vec<Fault> = (0..rounds)
        .flat_map(|_| {
            [
                Fault::KillLeader,
                Fault::KillFollower,
                Fault::PauseLeader,
                Fault::PartitionLeader,
            ]
        })
        .filter(|&fault| partition || fault != Fault::PartitionLeader)
        .collect();
    let report = match drill::run(&mut cluster, &config, &faults) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("cluster_faults: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "3 nodes ({}{}), stream of 3 replicas, {} ev/s in groups of 10 (each flushed), {:?} of publication around each fault\n",
        if partition {
            "each in its own network namespace, on one bridge"
        } else {
            "on loopback"
        },
        if sync_always {
            ", sync_interval: always"
        } else {
            ", JetStream's default sync"
        },
        config.rate,
        config.settle
    );
    println!(
        "| fault | node | leader before → after | producer's wait for a group's acknowledgements, median / longest | drain unhealthy | acknowledgement → index, median / max | events in the phase |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    for f in &report.faults {
        println!(
            "| {} | {} | {} → {} | {:.1} ms / {:.2} s | {:.2} s | {:.1} ms / {:.1} ms | {} |",
            f.fault.describe(&config),
            f.node,
            f.leader_before,
            f.leader_after,
            f.median_ack.as_secs_f64() * 1e3,
            f.publish_stall.as_secs_f64(),
            f.drain_unhealthy.as_secs_f64(),
            f.median_lag.as_secs_f64() * 1e3,
            f.max_lag.as_secs_f64() * 1e3,
            f.events
        );
    }
    println!(
        "\nacknowledged {} distinct events; the index holds {}; the stream stores {} ({} re-sends after a missing ack); the drain consumed {} records and applied {} in {} batches, retried {} source errors (last: {}){}; {} of {} executions served whole; {} stalled chains",
        report.acknowledged,
        report.indexed,
        report.stored,
        report.republished,
        report.consumed,
        report.drain.events,
        report.drain.batches,
        report.drain.source_errors,
        report.drain.last_source_error.as_deref().unwrap_or("-"),
        if report.drain_ran_throughout {
            ", never restarted"
        } else {
            ", AND HAD STOPPED"
        },
        report.served,
        report.executions,
        report.stalled.len()
    );
    let whole = report.indexed == report.acknowledged
        && report.acknowledged <= report.stored
        && report.stored <= report.acknowledged + report.republished
        // More than stored after the source resumed at a record a deposed leader had served.
        && report.consumed >= report.stored
        && report.drain_ran_throughout
        && report.served == report.executions
        && report.stalled.is_empty();
    if whole {
        ExitCode::SUCCESS
    } else {
        eprintln!("cluster_faults: the pool lost, doubled or stalled something (see above)");
        ExitCode::FAILURE
    }
}
