//! Short simulations of each engine: the report is internally consistent and agrees with
//! the run's own metrics; the shipped sample WAL replays with its bad lines counted.

use std::path::PathBuf;
use std::process::Command;

use sb_sim::report::EngineReport;
use sb_sim::workload::{Shape, read_jsonl};
use sb_sim::{Engines, Plan, SimConfig};

fn check_consistency(e: &EngineReport, plan: &Plan) {
    let builds = e.builds();
    assert!(builds > 0, "{}: no builds", e.engine);
    let shares: f64 = e.rows.iter().map(|r| r.share_pct).sum();
    assert!(
        (shares - 100.0).abs() < 1e-6,
        "{}: shares sum to {shares}",
        e.engine
    );
    for r in &e.rows {
        assert_eq!(
            r.builds as f64, r.builds_in_metrics,
            "{}: {} builds vs metrics",
            e.engine, r.outcome
        );
        assert!((r.mean_build_us - r.mean_lock_wait_us - r.mean_work_us).abs() < 1e-6);
        assert!(r.wait_share_pct >= 0.0 && r.wait_share_pct <= 100.0);
    }
    assert_eq!(
        e.drives.total,
        plan.drives(),
        "{}: every dispatched drive finished",
        e.engine
    );
    assert_eq!(e.drives.served + e.drives.incomplete, e.drives.total);
    assert_eq!(e.wal_events as usize, plan.backlog.len() + plan.live.len());
    assert_eq!(
        e.drives.latency_buckets.iter().sum::<u64>() as usize,
        e.drives.served
    );
    // The steady state's samples are its figures' samples: as many, and the same maximum.
    let steady = &e.drives.steady_tip_to_served;
    let samples = &e.drives.steady_tip_to_served_ms;
    assert_eq!(samples.len(), steady.samples, "{}", e.engine);
    let max = samples.iter().copied().fold(0.0, f64::max);
    assert_eq!(max, steady.max_ms, "{}: the largest sample", e.engine);
    // What is left of each steady drive beyond its tail's decode: one per drive, in the
    // same order, none longer than the drive.
    let beyond = &e.drives.steady_beyond_decode_ms;
    assert_eq!(beyond.len(), samples.len(), "{}", e.engine);
    assert_eq!(e.drives.steady_beyond_decode.samples, beyond.len());
    assert!(
        beyond.iter().zip(samples).all(|(b, s)| b <= s),
        "{}",
        e.engine
    );
    let timeline: u64 = e.timeline.iter().flatten().sum();
    assert_eq!(
        timeline, builds,
        "{}: the timeline holds every build",
        e.engine
    );
}

#[test]
fn short_simulation_of_each_engine_is_consistent() {
    let shape = Shape {
        payload_bytes: 300,
        ..Shape::default()
    };
    let plan = Plan::generate(&shape, 5_000, 3_000);
    let config = SimConfig {
        rate: 6_000.0,
        drive_concurrency: 32,
        ..SimConfig::default()
    };
    let report = sb_sim::run(&plan, &config, Engines::All, None, "test".into()).unwrap();
    assert_eq!(report.engines.len(), 4);
    for e in &report.engines {
        check_consistency(e, &plan);
        let cold = e.cold_start.as_ref().expect("a backlog was configured");
        assert_eq!(cold.backlog_events, 5_000);
        assert!(
            cold.backfill_ms.is_some(),
            "{}: the backlog was drained",
            e.engine
        );
    }
    let lockfree = &report.engines[0];
    assert_eq!(lockfree.engine, sb_sim::Engine::Lockfree);
    for lock_free in &report.engines[..2] {
        assert!(
            lock_free.rows.iter().all(|r| r.mean_lock_wait_us == 0.0),
            "{}: no build takes a lock",
            lock_free.engine
        );
    }
    let text = report.to_text();
    assert!(text.contains("== side by side"));
    let html = sb_sim::html::render(&report);
    assert!(html.starts_with("<!doctype html>") && html.matches("<svg").count() >= 7);
    let json: serde_json::Value =
        serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(json["engines"][1]["engine"], "papaya");
    assert_eq!(json["engines"][2]["engine"], "sharded");
    assert_eq!(json["engines"][3]["engine"], "mutex");
    for e in &report.engines {
        assert!(
            e.drives.tail_applied > 0,
            "{}: dispatches carry tails",
            e.engine
        );
        assert!(
            e.drives.repeats > 0,
            "{}: some heads are driven twice",
            e.engine
        );
        let labelled: usize = e.drives.by_label.iter().map(|(_, n)| n).sum();
        assert_eq!(
            labelled, e.drives.total,
            "{}: one label per drive",
            e.engine
        );
    }
    assert!(
        text.contains("the production note"),
        "today's figures beside the simulated ones"
    );
}

/// The drain on its own thread and the drives on threads (blocking drives) instead of tasks
/// on the runtime: the same report, consistent, on every engine.
#[test]
fn drain_and_drives_on_threads_are_consistent() {
    let shape = Shape {
        payload_bytes: 300,
        ..Shape::default()
    };
    let plan = Plan::generate(&shape, 1_000, 1_500);
    let config = SimConfig {
        rate: 6_000.0,
        drive_concurrency: 16,
        drain_on: sb_sim::run::RunOn::Thread,
        drives_on: sb_sim::run::RunOn::Thread,
        ..SimConfig::default()
    };
    let report = sb_sim::run(&plan, &config, Engines::All, None, "threads".into()).unwrap();
    for e in &report.engines {
        check_consistency(e, &plan);
        assert!(e.drives.served > 0, "{}: nothing served", e.engine);
    }
}

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample-wal.jsonl")
}

#[test]
fn the_sample_wal_replays_with_its_bad_lines_counted() {
    let file = std::fs::File::open(sample()).unwrap();
    let items = read_jsonl(std::io::BufReader::new(file), 0.185, 1).unwrap();
    let bad = items.iter().filter(|i| i.ids.is_none()).count();
    assert_eq!(bad, 3, "the sample ships three undecodable lines");
    let plan = Plan {
        live: items,
        ..Plan::default()
    };
    let config = SimConfig {
        rate: 20_000.0,
        drive_concurrency: 32,
        ..SimConfig::default()
    };
    let report = sb_sim::run(&plan, &config, Engines::Lockfree, None, "sample".into()).unwrap();
    let e = &report.engines[0];
    check_consistency(e, &plan);
    assert_eq!(e.bad_records, 3);
}

#[test]
fn the_cli_generates_and_replays_and_writes_json() {
    let bin = env!("CARGO_BIN_EXE_sb-sim");
    let dir = std::env::temp_dir().join(format!("sb-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wal = dir.join("wal.jsonl");
    let out = Command::new(bin)
        .args(["generate", "--events", "300", "--bad-lines", "2", "--out"])
        .arg(&wal)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(bin)
        .args([
            "replay", "--engine", "mutex", "--rate", "10000", "--json", "-",
        ])
        .arg(&wal)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let json_start = stdout.find("\n{").expect("JSON follows the text report") + 1;
    let json: serde_json::Value = serde_json::from_str(&stdout[json_start..]).unwrap();
    assert_eq!(json["engines"][0]["bad_records"], 2);
    let missing = Command::new(bin)
        .args(["replay", "/nonexistent/wal.jsonl"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot open"));
    let _ = std::fs::remove_dir_all(dir);
}

/// `simulate --wal nats://` and `replay nats://`: the same consistency through a real broker
/// (skipped, with a message, where no nats-server binary exists).
#[test]
fn a_simulation_through_a_jetstream_broker_is_consistent_and_a_stream_replays() {
    use wal_source_nats::test_broker::Broker;
    use wal_source_nats::{JetStreamConfig, JetStreamPublisher, Subjects};

    let Some(broker) = Broker::start("sb-sim through a broker") else {
        return;
    };
    let shape = Shape {
        payload_bytes: 300,
        ..Shape::default()
    };
    let plan = Plan::generate(&shape, 2_000, 2_000);
    let config = SimConfig {
        rate: 4_000.0,
        drive_concurrency: 32,
        wal: sb_sim::WalTarget::Nats(broker.url()),
        ..SimConfig::default()
    };
    let report = sb_sim::run(&plan, &config, Engines::Both, None, "broker".into()).unwrap();
    for e in &report.engines {
        check_consistency(e, &plan);
        assert!(e.drives.served > 0, "{}: nothing served", e.engine);
    }

    // Load the sample WAL into a stream, then replay the stream.
    let file = std::fs::File::open(sample()).unwrap();
    let items = read_jsonl(std::io::BufReader::new(file), 0.185, 1).unwrap();
    let stream = "sample_wal";
    let nats = JetStreamConfig::new(broker.url()).stream(stream);
    let subjects = Subjects::with_prefix("sample").unwrap();
    let mut publisher = JetStreamPublisher::connect(&nats, subjects.clone(), 1).unwrap();
    publisher
        .ensure_stream(stream, std::time::Duration::from_secs(10))
        .unwrap();
    for item in &items {
        let execution = item.ids.map_or(0, |(execution, _)| execution);
        publisher.publish(execution, item.payload.clone()).unwrap();
    }
    publisher.flush().unwrap();
    let replayed = sb_sim::wal::read_stream(&broker.url(), stream, None, 0.185, 1).unwrap();
    assert_eq!(replayed.len(), items.len());
    assert!(
        replayed
            .iter()
            .zip(&items)
            .all(|(a, b)| a.payload == b.payload)
    );
    let one_shard =
        sb_sim::wal::read_stream(&broker.url(), stream, Some("sample.0.>"), 0.0, 1).unwrap();
    assert_eq!(one_shard.len(), items.len(), "one shard holds everything");
    let none = sb_sim::wal::read_stream(&broker.url(), stream, Some("sample.9.>"), 0.0, 1).unwrap();
    assert!(none.is_empty());
}

/// `simulate --wal nats://` at the default rate, the broker SIGKILLed in the middle of the
/// live publication and restarted 3 s later: the run finishes with a complete report that
/// shows the outage (the producer's re-sends, the drain's unhealthy time), every record
/// reaches the drain, and the run's stream is deleted. (Before the publisher re-sent a
/// window concurrently, such a run died ~30 s after the restart with "no acknowledgement".)
#[test]
fn a_simulation_survives_a_broker_sigkill_mid_publication_and_reports_it() {
    use std::time::Duration;
    use wal_source_nats::test_broker::Broker;

    let Some(mut broker) = Broker::start("broker SIGKILL mid-publication") else {
        return;
    };
    let url = broker.url();
    let shape = Shape {
        payload_bytes: 300,
        ..Shape::default()
    };
    // 2,000 backlog records, then 6 s of live publication at 4,000 ev/s.
    let plan = Plan::generate(&shape, 2_000, 24_000);
    let config = SimConfig {
        rate: 4_000.0,
        drive_concurrency: 32,
        wal: sb_sim::WalTarget::Nats(url.clone()),
        ..SimConfig::default()
    };
    let outage = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2_500));
        broker.kill();
        std::thread::sleep(Duration::from_secs(3));
        broker.restart();
        broker
    });
    let report = sb_sim::run(&plan, &config, Engines::Lockfree, None, "kill".into())
        .expect("the run survives the outage");
    let broker = outage.join().unwrap();
    let e = &report.engines[0];
    let health = &e.wal_health;
    let publisher = health.publisher.expect("a broker run reports its producer");
    eprintln!("{}", report.to_text());
    let records = (plan.backlog.len() + plan.live.len()) as u64;
    assert_eq!(publisher.published, records);
    assert!(
        publisher.republished > 0 || health.outages > 0,
        "the outage shows in the report: {health:?}"
    );
    assert!(
        publisher.stored >= records,
        "every record was stored: {publisher:?}"
    );
    assert!(
        e.wal_events >= publisher.stored,
        "the drain consumed every stored message: {} of {}",
        e.wal_events,
        publisher.stored
    );
    assert_eq!(health.unconsumed, 0);
    assert_eq!(e.bad_records, 0);
    assert_eq!(
        e.drives.total,
        plan.drives(),
        "every dispatched drive finished"
    );
    // The run deleted its stream.
    let nats = wal_source_nats::JetStreamConfig::new(broker.url());
    let probe = wal_source_nats::JetStreamPublisher::connect(
        &nats,
        wal_source_nats::Subjects::default(),
        1,
    )
    .unwrap();
    let stream = format!("sb_sim_{}_lockfree", std::process::id());
    assert!(
        probe.stream_messages(&stream).is_err(),
        "{stream} was deleted"
    );
}
