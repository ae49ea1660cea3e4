//! The drain against a real `nats-server -js` on loopback: complete spines and agreeing
//! metrics, a broker SIGKILL mid-stream, a worker restart, durable resumption, and two
//! pools sharding executions by subject. Each test skips (with a message) where no
//! `nats-server` binary exists, unless `SB_REQUIRE_NATS` is set.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{chain, sample, tip, wait_for};
use sb_metrics::StateBuilderMetrics;
use sb_metrics::series::name;
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::ingest::{Backfill, DrainHandle};
use wal_index::{
    Drain, DrainConfig, DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex, WalSource,
};
use wal_source_nats::test_broker::Broker;
use wal_source_nats::{JetStreamConfig, JetStreamPublisher, JetStreamSource, Subjects};

const PREFIX: &str = sb_metrics::series::DEFAULT_PREFIX;
const LIMIT: Duration = Duration::from_secs(60);

/// A generous budget: a drive through the broker must be served, never time out.
fn budget() -> DriveBudget {
    DriveBudget {
        attempts: 50,
        retry: Duration::from_millis(200),
    }
}

fn stream_name(test: &str) -> String {
    format!("t_{test}")
}

fn publisher(broker: &Broker, stream: &str, shards: u32) -> JetStreamPublisher {
    let config = JetStreamConfig::new(broker.url()).stream(stream);
    let publisher = JetStreamPublisher::connect(&config, Subjects::default(), shards).unwrap();
    publisher.ensure_stream(stream, LIMIT).unwrap();
    publisher
}

fn publish_chains(publisher: &mut JetStreamPublisher, executions: std::ops::Range<i64>, len: i64) {
    for execution in executions {
        for (execution, payload) in chain(execution, len) {
            publisher.publish(execution, payload).unwrap();
        }
    }
    publisher.flush().unwrap();
}

/// An index wired to a local Prometheus recorder, and its drain over `config`.
struct Pool<I> {
    index: Arc<I>,
    drain: Option<DrainHandle>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
}

impl<I: StateIndex> Pool<I> {
    fn start(config: JetStreamConfig) -> Self {
        Self::start_with(config, IndexConfig::default())
    }

    fn start_with(config: JetStreamConfig, index_config: IndexConfig) -> Self {
        let (recorder, metrics) = sb_metrics::exporter::local(PREFIX).unwrap();
        let observer = metrics::with_local_recorder(&recorder, StateBuilderMetrics::register);
        // The handle shares the recorder's registry; the recorder itself may go.
        drop(recorder);
        let index = Arc::new(I::with_observer(index_config, observer));
        let source = JetStreamSource::connect(config).unwrap();
        let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
        Pool {
            index,
            drain: Some(drain),
            metrics,
        }
    }

    fn metric(&self, series: &str) -> f64 {
        sample(&self.metrics.render(), &format!("{PREFIX}{series}"))
    }

    fn events(&self) -> usize {
        self.index.stats().events
    }

    fn stop(&mut self) -> wal_index::ingest::DrainReport {
        self.drain.take().unwrap().stop().unwrap()
    }

    /// Every execution in `executions` is served at its tip with the whole chain.
    fn assert_served(&self, executions: impl IntoIterator<Item = i64>, len: i64) {
        for execution in executions {
            let drive = self.index.drive(
                execution,
                Some(tip(execution, len)),
                &DriveFlow::new(budget()),
            );
            let spine = drive
                .outcome
                .spine()
                .unwrap_or_else(|| panic!("execution {execution} not served: {drive:?}"));
            let expected: Vec<i64> = (1..=len).map(|k| execution * 1000 + k).collect();
            assert_eq!(spine.ids(), expected, "execution {execution}");
        }
    }
}

impl<I> Drop for Pool<I> {
    fn drop(&mut self) {
        if let Some(drain) = self.drain.take() {
            let _ = drain.stop();
        }
    }
}

fn served_complete_with_agreeing_metrics<I: StateIndex>() {
    let Some(broker) = Broker::start("served_complete") else {
        return;
    };
    let stream = stream_name(&format!("served_{}", I::NAME));
    let mut publisher = publisher(&broker, &stream, 1);
    let mut pool = Pool::<I>::start(JetStreamConfig::new(broker.url()).stream(&stream));
    // Published while the drain runs, with an undecodable message in the middle.
    publish_chains(&mut publisher, 0..100, 27);
    publisher
        .publish_on(
            Subjects::default().subject(0, 1),
            bytes::Bytes::from_static(b"{not json"),
        )
        .unwrap();
    publish_chains(&mut publisher, 100..200, 27);

    assert!(
        wait_for(LIMIT, || pool.events() == 200 * 27),
        "indexed {} of {} events",
        pool.events(),
        200 * 27
    );
    pool.assert_served(0..200, 27);

    assert_eq!(pool.metric(name::WAL_EVENTS_TOTAL), (200 * 27 + 1) as f64);
    assert_eq!(pool.metric(name::INDEX_EVENTS), (200 * 27) as f64);
    assert_eq!(pool.metric(name::INDEXED_EXECUTIONS), 200.0);
    assert_eq!(pool.metric(name::HEALTHY), 1.0);
    let served = sample(
        &pool.metrics.render(),
        &format!("{PREFIX}{}{{outcome=\"served\"}}", name::DRIVE_BUILDS_TOTAL),
    );
    assert_eq!(served, 200.0);
    let report = pool.stop();
    assert_eq!((report.events, report.bad), (200 * 27, 1));
    assert_eq!(report.source_errors, 0);
}

#[test]
fn served_complete_lockfree() {
    served_complete_with_agreeing_metrics::<WalIndex>();
}

#[test]
fn served_complete_mutex() {
    served_complete_with_agreeing_metrics::<MutexIndex>();
}

#[test]
fn served_complete_sharded() {
    served_complete_with_agreeing_metrics::<ShardedMutexIndex>();
}

fn broker_sigkill_mid_stream<I: StateIndex>(config: impl Fn(&Broker, &str) -> JetStreamConfig) {
    let Some(mut broker) = Broker::start("broker_sigkill") else {
        return;
    };
    let stream = stream_name(&format!("sigkill_{}", I::NAME));
    let mut before = publisher(&broker, &stream, 1);
    publish_chains(&mut before, 0..100, 27);
    drop(before);
    let pool = Pool::<I>::start(config(&broker, &stream));
    assert!(wait_for(LIMIT, || pool.metric(name::HEALTHY) == 1.0));
    // Kill while the drain is still working through the first half.
    assert!(wait_for(LIMIT, || pool.events() > 0));
    broker.kill();
    assert!(
        wait_for(LIMIT, || pool.metric(name::HEALTHY) == 0.0),
        "healthy did not go to 0 while the broker was down"
    );
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    let mut after = publisher(&broker, &stream, 1);
    publish_chains(&mut after, 100..200, 27);
    // Duplicates: a replay of the first ten executions changes nothing.
    publish_chains(&mut after, 0..10, 27);
    assert!(
        wait_for(LIMIT, || pool.events() == 200 * 27),
        "indexed {} of {} events after the restart",
        pool.events(),
        200 * 27
    );
    assert!(
        wait_for(LIMIT, || pool.metric(name::HEALTHY) == 1.0),
        "healthy did not come back"
    );
    pool.assert_served(0..200, 27);
    // The duplicates may still be on their way when the last new event lands.
    assert!(
        wait_for(LIMIT, || pool.metric(name::WAL_EVENTS_TOTAL)
            >= (200 * 27 + 10 * 27) as f64),
        "the duplicates were not consumed"
    );
    assert_eq!(pool.index.stats().executions, 200);
    assert_eq!(pool.events(), 200 * 27, "duplicates changed the index");
}

#[test]
fn broker_sigkill_replay_on_boot_lockfree() {
    broker_sigkill_mid_stream::<WalIndex>(|b, s| JetStreamConfig::new(b.url()).stream(s));
}

#[test]
fn broker_sigkill_replay_on_boot_mutex() {
    broker_sigkill_mid_stream::<MutexIndex>(|b, s| JetStreamConfig::new(b.url()).stream(s));
}

#[test]
fn broker_sigkill_durable_lockfree() {
    broker_sigkill_mid_stream::<WalIndex>(|b, s| {
        JetStreamConfig::new(b.url()).stream(s).durable("pool")
    });
}

fn worker_restart_rebuilds<I: StateIndex>(executions: i64, len: i64) -> Duration {
    let Some(broker) = Broker::start("worker_restart") else {
        return Duration::ZERO;
    };
    let stream = stream_name(&format!("restart_{}", I::NAME));
    let mut publisher = publisher(&broker, &stream, 1);
    publish_chains(&mut publisher, 0..executions, len);
    let total = (executions * len) as usize;

    let config = JetStreamConfig::new(broker.url()).stream(&stream);
    let mut first = Pool::<I>::start(config.clone());
    assert!(wait_for(LIMIT, || first.events() == total));
    first.stop();
    drop(first);

    // A new process: empty index, replay-on-boot.
    let started = Instant::now();
    let second = Pool::<I>::start(config);
    assert!(wait_for(LIMIT, || second.events() == total));
    let rebuild = started.elapsed();
    second.assert_served(0..executions, len);
    eprintln!(
        "{}: rebuilt {total} retained events from the broker in {:.1} ms",
        I::NAME,
        rebuild.as_secs_f64() * 1e3
    );
    rebuild
}

#[test]
fn worker_restart_rebuilds_lockfree() {
    worker_restart_rebuilds::<WalIndex>(1000, 20);
}

#[test]
fn worker_restart_rebuilds_mutex() {
    worker_restart_rebuilds::<MutexIndex>(1000, 20);
}

#[test]
fn durable_consumer_resumes_after_acknowledged_batches() {
    let Some(broker) = Broker::start("durable_resume") else {
        return;
    };
    let stream = stream_name("durable");
    let mut publisher = publisher(&broker, &stream, 1);
    publish_chains(&mut publisher, 0..50, 20);
    let config = JetStreamConfig::new(broker.url())
        .stream(&stream)
        .durable("pool-a");
    let mut first = Pool::<WalIndex>::start(config.clone());
    assert!(wait_for(LIMIT, || first.events() == 50 * 20));
    first.stop();
    drop(first);

    publish_chains(&mut publisher, 50..60, 20);
    // The restarted pool receives only what was not acknowledged: the new executions.
    let second = Pool::<WalIndex>::start(config);
    assert!(wait_for(LIMIT, || second.events() == 10 * 20));
    second.assert_served(50..60, 20);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        second.events(),
        10 * 20,
        "acknowledged events were delivered again"
    );
    assert_eq!(second.metric(name::WAL_EVENTS_TOTAL), (10 * 20) as f64);
}

#[test]
fn two_pools_with_different_filters_partition_the_executions() {
    let Some(broker) = Broker::start("two_pools") else {
        return;
    };
    let stream = stream_name("pools");
    let mut publisher = publisher(&broker, &stream, 2);
    publish_chains(&mut publisher, 0..200, 27);
    let subjects = Subjects::default();
    let pools: Vec<Pool<WalIndex>> = (0..2)
        .map(|shard| {
            Pool::start(
                JetStreamConfig::new(broker.url())
                    .stream(&stream)
                    .filter(subjects.shard_filter(shard, 2)),
            )
        })
        .collect();
    assert!(wait_for(LIMIT, || pools
        .iter()
        .map(Pool::events)
        .sum::<usize>()
        == 200 * 27));
    let ids: Vec<BTreeSet<i64>> = pools
        .iter()
        .map(|p| p.index.execution_ids().into_iter().collect())
        .collect();
    assert!(ids[0].is_disjoint(&ids[1]));
    assert_eq!(ids[0].len() + ids[1].len(), 200);
    for (shard, pool) in pools.iter().enumerate() {
        assert!(ids[shard].iter().all(|e| e % 2 == shard as i64));
        pool.assert_served(ids[shard].iter().copied(), 27);
        assert_eq!(pool.metric(name::WAL_EVENTS_TOTAL), (100 * 27) as f64);
    }
}

#[test]
fn a_pool_started_before_its_broker_catches_up() {
    let Some(mut broker) = Broker::start("pool_before_broker") else {
        return;
    };
    broker.kill();
    let stream = stream_name("late");
    let pool = Pool::<WalIndex>::start(JetStreamConfig::new(broker.url()).stream(&stream));
    assert!(wait_for(LIMIT, || pool.metric(name::HEALTHY) == 0.0));
    broker.restart();
    let mut publisher = publisher(&broker, &stream, 1);
    publish_chains(&mut publisher, 0..20, 10);
    assert!(wait_for(LIMIT, || pool.events() == 200));
    assert_eq!(pool.metric(name::HEALTHY), 1.0);
    pool.assert_served(0..20, 10);
}

#[test]
fn a_deleted_durable_consumer_is_recreated() {
    let Some(broker) = Broker::start("deleted_consumer") else {
        return;
    };
    let stream = stream_name("deleted");
    let mut publisher = publisher(&broker, &stream, 1);
    publish_chains(&mut publisher, 0..20, 10);
    let pool = Pool::<WalIndex>::start(
        JetStreamConfig::new(broker.url())
            .stream(&stream)
            .durable("pool-d"),
    );
    assert!(wait_for(LIMIT, || pool.events() == 200));

    // An operator (or a broker-side limit) removes the consumer under the running drain.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(broker.url()).await.unwrap();
        let context = async_nats::jetstream::new(client);
        let deleted = context.delete_consumer_from_stream("pool-d", &stream).await;
        assert!(deleted.is_ok(), "{:?}", deleted.err());
    });
    publish_chains(&mut publisher, 20..40, 10);
    assert!(
        wait_for(LIMIT, || pool.events() == 400),
        "indexed {} of 400 after the consumer was deleted",
        pool.events()
    );
    pool.assert_served(0..40, 10);
    assert_eq!(pool.metric(name::HEALTHY), 1.0);
}

#[test]
fn the_source_counts_its_backfill_against_the_stream_head() {
    let Some(broker) = Broker::start("the_source_counts_its_backfill_against_the_stream_head")
    else {
        return;
    };
    let stream = stream_name("backfill_head");
    let mut publisher = publisher(&broker, &stream, 1);
    publish_chains(&mut publisher, 1..6, 10);
    let config = JetStreamConfig::new(broker.url()).stream(&stream);
    let source = JetStreamSource::connect(config).unwrap();
    assert_eq!(source.backfill(), Backfill::Unknown, "no consumer yet");
    let index = Arc::new(WalIndex::default());
    let drain_config = DrainConfig {
        batch_max: 20,
        ..DrainConfig::default()
    };
    let mut drain = Drain::new(Arc::clone(&index), source, drain_config);
    assert!(wait_for(LIMIT, || {
        drain.step().unwrap();
        index.backfill() != Backfill::Unknown
    }));
    assert!(
        matches!(index.backfill(), Backfill::Behind { remaining: Some(n) } if n < 50),
        "{:?}",
        index.backfill()
    );
    assert!(wait_for(LIMIT, || {
        drain.step().unwrap();
        index.backfill() == Backfill::CaughtUp
    }));
    assert_eq!(drain.report().events, 50, "caught up exactly at the head");
    // Live messages after the head leave it caught up.
    publish_chains(&mut publisher, 6..7, 3);
    assert!(wait_for(LIMIT, || {
        drain.step().unwrap();
        drain.report().events == 53
    }));
    assert_eq!(index.backfill(), Backfill::CaughtUp);
}

/// A write the stream lost: one message deleted from the middle of an execution's chain
/// (as a truncated store on a broker node would lose it). The drain reports that execution
/// as stalled, naming the deleted event, counts it in `stalled_chains_total`, and its
/// drives fall back; the other executions are served whole.
#[test]
fn a_message_deleted_mid_chain_is_reported_as_a_stalled_chain() {
    let Some(broker) = Broker::start("deleted_mid_chain") else {
        return;
    };
    let stream = stream_name("deleted_mid_chain");
    let mut publisher = publisher(&broker, &stream, 1);
    publish_chains(&mut publisher, 1..4, 6);
    // Published in order on an empty stream: execution 2's third event is sequence 9.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(broker.url()).await.unwrap();
        let context = async_nats::jetstream::new(client);
        let mut handle = context.get_stream(&stream).await.unwrap();
        let message = handle.get_raw_message(9).await.unwrap();
        assert!(
            std::str::from_utf8(&message.payload)
                .unwrap()
                .contains(r#""event_id":2003"#)
        );
        assert!(handle.delete_message(9).await.unwrap());
        assert_eq!(handle.info().await.unwrap().state.messages, 17);
    });
    let index_config = IndexConfig {
        stall_after: Some(Duration::from_millis(300)),
        ..IndexConfig::default()
    };
    let mut pool = Pool::<WalIndex>::start_with(
        JetStreamConfig::new(broker.url()).stream(&stream),
        index_config,
    );
    assert!(
        wait_for(LIMIT, || pool.events() == 17),
        "indexed {}",
        pool.events()
    );
    pool.assert_served([1, 3], 6);
    let drive = pool
        .index
        .drive(2, Some(tip(2, 6)), &DriveFlow::new(DriveBudget::default()));
    assert!(drive.outcome.spine().is_none(), "served short: {drive:?}");
    assert!(
        wait_for(LIMIT, || pool.metric(name::STALLED_CHAINS_TOTAL) == 1.0),
        "stalled_chains_total = {}",
        pool.metric(name::STALLED_CHAINS_TOTAL)
    );
    let report = pool.stop();
    assert_eq!(report.stalled, 1);
    let stalled = &report.stalled_samples[0];
    assert_eq!(
        (
            stalled.execution_id,
            stalled.reason,
            stalled.missing_event_id,
            stalled.newest_event_id
        ),
        (2, wal_index::labels::StallReason::MissingHop, 2003, 2006)
    );
}
