//! `simulate --wal ehdb://` and `replay ehdb://` against the real EHDB writer
//! (`wal_source_ehdb::test_writer`; skipped, with a message, where `EHDB_WRITER` is not
//! set): the report is whole and consistent, a replay reads back what was published byte
//! for byte, and a SIGKILL of the writer mid-publication is an outage the run survives and
//! reports.

use std::time::Duration;

use sb_sim::wal::EhdbTarget;
use sb_sim::workload::Shape;
use sb_sim::{Engines, Plan, SimConfig, WalTarget};
use wal_index::Event;
use wal_source_ehdb::test_writer::Writer;

fn target(writer: &Writer) -> EhdbTarget {
    let port = writer.ingest.rsplit_once(':').unwrap().1;
    EhdbTarget::parse(&format!("ehdb://{}?ingest={port}", writer.feed), true).unwrap()
}

fn small_plan(backlog: usize, live: usize) -> Plan {
    let shape = Shape {
        payload_bytes: 300,
        ..Shape::default()
    };
    Plan::generate(&shape, backlog, live)
}

#[test]
fn a_simulation_through_the_writer_is_whole_and_a_replay_reads_it_back() {
    let Some(writer) = Writer::start("sb-sim-through-ehdb") else {
        return;
    };
    let plan = small_plan(1_000, 1_000);
    let config = SimConfig {
        rate: 2_000.0,
        drive_concurrency: 32,
        wal: WalTarget::Ehdb(target(&writer)),
        ..SimConfig::default()
    };
    let report = sb_sim::run(&plan, &config, Engines::Both, None, "ehdb".into()).unwrap();
    let records = (plan.backlog.len() + plan.live.len()) as u64;
    for e in &report.engines {
        let publisher = e
            .wal_health
            .publisher
            .expect("a writer run reports its producer");
        assert_eq!(publisher.published, records, "{}", e.engine);
        assert_eq!(
            publisher.stored, records,
            "{}: the writer holds the run",
            e.engine
        );
        assert_eq!(
            e.wal_events, records,
            "{}: each record consumed once",
            e.engine
        );
        assert_eq!((e.bad_records, e.wal_health.unconsumed), (0, 0));
        assert_eq!(e.wal_health.lost_by_server, 0);
        assert_eq!(
            e.drives.total,
            plan.drives(),
            "every dispatched drive finished"
        );
        assert!(e.drives.served > 0);
    }
    // Each engine's run went into the same log; the replay reads all of it, in order.
    let replayed = sb_sim::wal::read_writer(
        &EhdbTarget {
            ingest: None,
            ..target(&writer)
        },
        None,
        0.0,
        1,
    )
    .unwrap();
    let published: Vec<_> = plan.backlog.iter().chain(&plan.live).collect();
    assert_eq!(replayed.len(), published.len() * report.engines.len());
    for (run, chunk) in replayed.chunks(published.len()).enumerate() {
        for (got, sent) in chunk.iter().zip(&published) {
            let sent = Event::from_json_bytes(sent.payload.clone()).unwrap();
            assert_eq!(got.payload, sent.payload(), "run {run}: the same bytes");
        }
    }
    let error = sb_sim::wal::read_writer(&target(&writer), Some(1), 0.0, 1).unwrap_err();
    assert!(error.to_string().contains("--shard 1"), "{error}");
}

#[test]
fn a_simulation_survives_a_writer_sigkill_mid_publication_and_reports_it() {
    let Some(mut writer) = Writer::start("sb-sim-ehdb-sigkill") else {
        return;
    };
    let target = target(&writer);
    // 1,000 backlog records, then 4 s of live publication at 2,000 ev/s.
    let plan = small_plan(1_000, 8_000);
    let config = SimConfig {
        rate: 2_000.0,
        drive_concurrency: 32,
        wal: WalTarget::Ehdb(target),
        ..SimConfig::default()
    };
    let outage = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2_000));
        writer.kill();
        std::thread::sleep(Duration::from_secs(1));
        writer.restart();
        writer
    });
    let report = sb_sim::run(&plan, &config, Engines::Lockfree, None, "kill".into())
        .expect("the run survives the outage");
    let _writer = outage.join().unwrap();
    eprintln!("{}", report.to_text());
    let e = &report.engines[0];
    let health = &e.wal_health;
    let publisher = health.publisher.expect("a writer run reports its producer");
    let records = (plan.backlog.len() + plan.live.len()) as u64;
    assert_eq!(
        publisher.published, records,
        "every record was acknowledged"
    );
    assert!(
        publisher.ack_failures > 0,
        "the producer saw the outage: {publisher:?}"
    );
    assert!(
        health.outages > 0 && health.source_errors > 0,
        "the drain saw the outage: {health:?}"
    );
    assert_eq!(e.bad_records, 0);
    // What the writer still holds reached the drain; what it lost is reported, not waited
    // for (this writer version loses its unsealed tail to a SIGKILL).
    assert_eq!(health.unconsumed, 0, "{health:?}");
    assert_eq!(health.lost_by_server, records - publisher.stored);
    assert!(
        e.wal_events <= records + publisher.republished,
        "nothing consumed twice beyond the re-sent records: {} consumed, {publisher:?}",
        e.wal_events
    );
    assert_eq!(
        e.drives.total,
        plan.drives(),
        "every dispatched drive finished"
    );
}
