//! The worker's drive flow (docs/domain.md, "The drive"), step by step, on
//! every engine: tail events, the deadline loop, the state shard, rehydrate on a miss,
//! and every `drive_builds_total` label it can end with. And the drain as a task.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use chain_fold::Event;
use common::{Sources, ev, linear};
use wal_index::ingest::channel_wal;
use wal_index::labels::{DriveLabel, RehydrateLabel, ShardReadLabel, ShardVerifyLabel};
use wal_index::rehydrate::RehydrateGate;
use wal_index::{
    Drain, DrainConfig, DriveBudget, DriveFlow, IndexConfig, IndexObserver, StateIndex,
};

fn payload(event: &Event) -> Bytes {
    event.payload_bytes()
}

/// A budget that ends at once: one build, no wait.
fn no_wait() -> DriveBudget {
    DriveBudget::new(0, Duration::ZERO)
}

/// Counts what the flow reports, so a test can check each drive is reported once.
#[derive(Default)]
struct Reported {
    drives: [AtomicU64; 7],
    tail_applied: AtomicU64,
    tail_rejected: AtomicU64,
    rehydrates: [AtomicU64; 4],
    shard_reads: [AtomicU64; 3],
    verified: [AtomicU64; 3],
}

impl IndexObserver for Reported {
    fn drive(&self, outcome: DriveLabel) {
        self.drives[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }
    fn drive_tail(&self, applied: u32, rejected: u32) {
        self.tail_applied
            .fetch_add(u64::from(applied), Ordering::Relaxed);
        self.tail_rejected
            .fetch_add(u64::from(rejected), Ordering::Relaxed);
    }
    fn rehydrate(&self, outcome: RehydrateLabel) {
        self.rehydrates[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }
    fn state_shard_read(&self, outcome: ShardReadLabel, _: Duration) {
        self.shard_reads[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }
    fn state_shard_verify(&self, outcome: ShardVerifyLabel) {
        self.verified[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }
}

impl Reported {
    fn shard_reads(&self, label: ShardReadLabel) -> u64 {
        self.shard_reads[label.index()].load(Ordering::Relaxed)
    }
    fn verified(&self, label: ShardVerifyLabel) -> u64 {
        self.verified[label.index()].load(Ordering::Relaxed)
    }
    fn drives(&self, label: DriveLabel) -> u64 {
        self.drives[label.index()].load(Ordering::Relaxed)
    }
    fn all_drives(&self) -> u64 {
        self.drives.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }
}

fn observed<I: StateIndex>() -> (I, Arc<Reported>) {
    let reported = Arc::new(Reported::default());
    (
        I::with_observer(IndexConfig::default(), reported.clone()),
        reported,
    )
}

/// A warm index: the tail carries the newest events, so the first build serves without the
/// drain. An undecodable tail event and one of another execution are skipped and counted;
/// their neighbours are applied.
fn the_tail_serves_a_warm_index_on_the_first_build<I: StateIndex>() {
    let (index, reported) = observed::<I>();
    index.apply_batch(linear(1, 1, 3));
    let tail = vec![
        payload(&ev(1, 4, Some(3))),
        Bytes::from_static(b"{not json"),
        payload(&ev(2, 100, None)),
        payload(&ev(1, 5, Some(4))),
    ];
    let flow = DriveFlow::new(DriveBudget::default()).tail_events(tail);
    let drive = index.drive(1, Some(5), &flow);
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3, 4, 5]);
    assert_eq!(drive.label, DriveLabel::Served);
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (1, 0, 0));
    assert_eq!((drive.tail_applied, drive.tail_rejected), (2, 2));
    // Four decodes were timed (the bad payload's too), and they are part of the drive.
    assert!(drive.tail_decode > Duration::ZERO && drive.tail_decode <= drive.elapsed);
    assert!(
        index.chain(2).is_none(),
        "another execution's tail event is not applied"
    );
    assert_eq!(reported.drives(DriveLabel::Served), 1);
    assert_eq!(reported.all_drives(), 1, "one report per drive");
    assert_eq!(
        (
            reported.tail_applied.load(Ordering::Relaxed),
            reported.tail_rejected.load(Ordering::Relaxed)
        ),
        (2, 2)
    );
    let no_tail = index.drive(1, Some(5), &DriveFlow::new(DriveBudget::default()));
    assert_eq!(no_tail.tail_decode, Duration::ZERO, "nothing to decode");
}

/// A cold index: a tail that does not reach genesis leaves the build incomplete, and the
/// drive waits; the drain's backfill (here, the missing history) then serves it.
fn a_tail_without_genesis_waits_for_the_history<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    let history = linear(1, 1, 3);
    let flow = DriveFlow::new(DriveBudget::new(1, Duration::from_secs(30)))
        .tail_events(vec![payload(&ev(1, 4, Some(3)))]);
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(1, Some(4), &flow));
        std::thread::sleep(Duration::from_millis(30));
        index.apply_batch(history);
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3, 4]);
    assert_eq!(drive.label, DriveLabel::Served);
    assert!(drive.builds >= 2 && drive.wakes >= 1, "{drive:?}");
}

/// The budget is a deadline: a drive woken by events that do not serve it rebuilds after
/// every wake (wake-ups cost nothing) and is served once the tip lands, however many wakes
/// came first. Every wake here is its own execution's, so every engine is woken by each.
fn a_drive_rebuilds_after_every_wake_until_its_deadline<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(linear(1, 1, 2));
    // Ten events of a side branch of execution 1 (rooted at 100, no genesis), then the tip.
    let budget = DriveBudget::new(1, Duration::from_secs(30));
    let drive = std::thread::scope(|s| {
        let waiter = s.spawn(|| index.drive(1, Some(3), &DriveFlow::new(budget)));
        for id in 100..110 {
            std::thread::sleep(Duration::from_millis(5));
            index.apply(ev(1, id, (id > 100).then(|| id - 1)));
        }
        std::thread::sleep(Duration::from_millis(5));
        index.apply(ev(1, 3, Some(2)));
        waiter.join().unwrap()
    });
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
    assert!(drive.wakes >= 2, "woken by the side branch too: {drive:?}");
    assert_eq!(drive.builds, drive.wakes + drive.timeouts + 1);
    assert_eq!(drive.timeouts, 0);
}

/// After the deadline the state shard serves, as production reads it: its events are
/// applied to the index and the build walks from the expected head (noetl/worker's
/// `state_reader.rs`: applied, then a rebuild that must reach genesis). Neither is a rehydrate.
fn the_state_shard_serves_after_the_deadline<I: StateIndex>() {
    let (index, reported) = observed::<I>();
    let sources = Sources {
        shard: Some(linear(3, 1, 3)),
        retained: Some(linear(3, 1, 3)),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(no_wait())
        .fallbacks(&sources)
        .rehydrate_gate(&gate);
    let drive = index.drive(3, Some(3), &flow);
    assert_eq!(drive.label, DriveLabel::ServedShard);
    assert_eq!(drive.shard, Some(ShardReadLabel::Hit));
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
    assert_eq!(drive.rehydrate, None, "the shard came first");
    assert_eq!(reported.shard_reads(ShardReadLabel::Hit), 1);
    // Applied: the next drive is served by the index itself.
    let drive = index.drive(3, Some(3), &DriveFlow::new(no_wait()));
    assert_eq!(drive.label, DriveLabel::Served);
}

/// A shard is never trusted to be complete: one that stops short of genesis is a
/// `fallback` read, and the drive goes on to the retained WAL. A shard whose events join
/// the index's own (the drain holds the tail, the shard the history) serves, as it does in
/// production, where both land in one index.
fn a_partial_shard_falls_back_and_a_joining_one_serves<I: StateIndex>() {
    let (index, reported) = observed::<I>();
    let gate = RehydrateGate::default();
    let partial = Sources {
        shard: Some(vec![ev(5, 2, Some(1)), ev(5, 3, Some(2))]),
        retained: Some(linear(5, 1, 3)),
    };
    let flow = DriveFlow::new(no_wait())
        .fallbacks(&partial)
        .rehydrate_gate(&gate);
    let drive = index.drive(5, Some(3), &flow);
    assert_eq!(drive.shard, Some(ShardReadLabel::Fallback));
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert_eq!(reported.shard_reads(ShardReadLabel::Fallback), 1);

    index.apply(ev(6, 3, Some(2)));
    let history = Sources {
        shard: Some(vec![ev(6, 1, None), ev(6, 2, Some(1))]),
        retained: None,
    };
    let flow = DriveFlow::new(no_wait()).fallbacks(&history);
    let drive = index.drive(6, Some(3), &flow);
    assert_eq!(drive.label, DriveLabel::ServedShard);
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);

    // A shard of nothing of the execution's is a miss.
    let other = Sources {
        shard: Some(linear(8, 1, 2)),
        retained: None,
    };
    let drive = index.drive(7, Some(2), &DriveFlow::new(no_wait()).fallbacks(&other));
    assert_eq!(drive.shard, Some(ShardReadLabel::Miss));
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
}

/// Verify mode compares the served spine with the retained WAL's, read apart: equal bytes
/// are `match`; other bytes serve the WAL's spine as `served_shard_mismatch`; with no
/// replay permit there is nothing to compare with, and the shard serves `unverified`.
fn verify_compares_the_shard_with_the_retained_wal<I: StateIndex>() {
    let (index, reported) = observed::<I>();
    let gate = RehydrateGate::new(1);
    let same = Sources {
        shard: Some(linear(3, 1, 3)),
        retained: Some(linear(3, 1, 3)),
    };
    let flow = |sources| {
        DriveFlow::new(no_wait())
            .fallbacks(sources)
            .rehydrate_gate(&gate)
            .verify_shard(true)
    };
    let drive = index.drive(3, Some(3), &flow(&same));
    assert_eq!(drive.label, DriveLabel::ServedShard);
    assert_eq!(reported.verified(ShardVerifyLabel::Matched), 1);

    let other = Event::from_json(
        br#"{"event_id":1,"execution_id":4,"event_type":"playbook_started","result":{"x":1}}"#,
    )
    .unwrap();
    let differing = Sources {
        shard: Some(vec![other, ev(4, 2, Some(1))]),
        retained: Some(linear(4, 1, 2)),
    };
    let drive = index.drive(4, Some(2), &flow(&differing));
    assert_eq!(drive.label, DriveLabel::ServedShardMismatch);
    assert_eq!(reported.verified(ShardVerifyLabel::Mismatched), 1);
    // Production's outcome for a contradicted shard: `fallback`, not `hit`.
    assert_eq!(drive.shard, Some(ShardReadLabel::Fallback));
    let served = drive.outcome.spine().unwrap();
    let first = served.events().next().unwrap();
    assert_eq!(
        first.payload(),
        ev(4, 1, None).payload(),
        "the WAL's bytes served"
    );

    let permit = gate.try_enter().unwrap();
    let drive = index.drive(
        9,
        Some(2),
        &flow(&Sources {
            shard: Some(linear(9, 1, 2)),
            retained: Some(linear(9, 1, 2)),
        }),
    );
    drop(permit);
    assert_eq!(drive.label, DriveLabel::ServedShard);
    assert_eq!(reported.verified(ShardVerifyLabel::Unverified), 1);
    assert_eq!(reported.drives(DriveLabel::ServedShardMismatch), 1);
}

/// Rehydrate on a miss: served from the retained WAL; empty; throttled at the cap; and the
/// stateless edge and a worker that does not build.
fn rehydrate_and_the_fallback_labels<I: StateIndex>() {
    let (index, reported) = observed::<I>();
    let gate = RehydrateGate::new(1);
    let served = Sources {
        shard: None,
        retained: Some(linear(4, 1, 3)),
    };
    let flow = DriveFlow::new(no_wait())
        .fallbacks(&served)
        .rehydrate_gate(&gate);
    let drive = index.drive(4, Some(3), &flow);
    assert_eq!(
        (drive.label, drive.rehydrate),
        (DriveLabel::ServedRehydrated, Some(RehydrateLabel::Served))
    );
    assert_eq!(
        drive.builds, 2,
        "the loop's build and the one after the replay"
    );

    let empty = Sources {
        shard: None,
        retained: Some(Vec::new()),
    };
    let flow = DriveFlow::new(no_wait())
        .fallbacks(&empty)
        .rehydrate_gate(&gate);
    let drive = index.drive(5, Some(3), &flow);
    assert_eq!(
        (drive.label, drive.rehydrate),
        (DriveLabel::FallbackIncomplete, Some(RehydrateLabel::Empty))
    );

    let held = gate.try_enter().expect("the cap is 1 and nothing replays");
    let flow = DriveFlow::new(no_wait())
        .fallbacks(&served)
        .rehydrate_gate(&gate)
        .stateless(true);
    let drive = index.drive(6, Some(3), &flow);
    assert_eq!(
        (drive.label, drive.rehydrate),
        (DriveLabel::StatelessRetry, Some(RehydrateLabel::Throttled))
    );
    assert!(
        index.chain(6).is_none(),
        "a throttled drive replays nothing"
    );
    drop(held);

    let flow = DriveFlow::new(DriveBudget::default()).authoritative(false);
    let drive = index.drive(4, Some(3), &flow);
    assert_eq!(
        (drive.label, drive.builds),
        (DriveLabel::FallbackDisabled, 0)
    );

    assert_eq!(reported.all_drives(), 4, "one report per drive");
    assert_eq!(
        reported.rehydrates[RehydrateLabel::Served.index()].load(Ordering::Relaxed),
        1
    );
    assert_eq!(
        reported.rehydrates[RehydrateLabel::Empty.index()].load(Ordering::Relaxed),
        1
    );
    assert_eq!(
        reported.rehydrates[RehydrateLabel::Throttled.index()].load(Ordering::Relaxed),
        1
    );
}

/// The async flow on a two-worker Tokio runtime, with the drain as a task on the same
/// runtime (today's shape): every drive is served and the drain consumes everything.
fn the_drain_as_a_task_serves_async_drives<I: StateIndex>() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let index = Arc::new(I::with_config(IndexConfig::default()));
    let (wal, source) = channel_wal();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drain = {
        let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
        let mut drain = Drain::new(index, source, DrainConfig::default());
        runtime.spawn(async move { drain.run_until_async(&stop).await.cloned() })
    };
    let drives: Vec<_> = (0..20i64)
        .map(|execution| {
            let index = Arc::clone(&index);
            runtime.spawn(async move {
                let flow = DriveFlow::new(DriveBudget::new(10, Duration::from_secs(1)));
                index.drive_async(execution, Some(5), &flow).await
            })
        })
        .collect();
    for id in 1..=5 {
        for execution in 0..20i64 {
            let event = ev(execution, id, (id > 1).then(|| id - 1));
            wal.append(event.payload().to_vec());
        }
    }
    for drive in drives {
        let drive = runtime.block_on(drive).unwrap();
        assert_eq!(drive.label, DriveLabel::Served, "{drive:?}");
        assert_eq!(drive.outcome.spine().unwrap().len(), 5);
    }
    drop(wal);
    let report = runtime.block_on(drain).unwrap().unwrap();
    assert_eq!(report.events, 100);
    assert_eq!(index.stats().events, 100);
}

/// A dispatch repeated with the same tail applies its payloads again, each an overwrite by
/// id, even when the drain rewrote one of them in between: the last delivery wins.
fn a_repeated_tail_is_applied_again_after_a_rewrite<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(linear(1, 1, 3));
    let version = |v: u32| {
        format!(
            r#"{{"note":{v}, "event_id":4,"execution_id":1,"prev_event_id":3,"event_type":"step"}}"#
        )
    };
    let flow = || DriveFlow::new(DriveBudget::default()).tail_events(vec![Bytes::from(version(1))]);
    let expected = Event::from_json(version(1).as_bytes()).unwrap();
    let last = |drive: &wal_index::Drive| drive.outcome.spine().unwrap().get(3).unwrap().clone();
    assert_eq!(last(&index.drive(1, Some(4), &flow())), expected);
    // The drain delivers another payload under the same id: the last delivery wins.
    index.apply(Event::from_json(version(2).as_bytes()).unwrap());
    assert_ne!(index.chain(1).unwrap().get(4), Some(&expected));
    // The repeat, with its own copy of the same bytes: applied again, and served.
    let repeat = index.drive(1, Some(4), &flow());
    assert_eq!((repeat.label, repeat.tail_applied), (DriveLabel::Served, 1));
    assert_eq!(last(&repeat), expected);
    assert_eq!(
        last(&repeat).payload(),
        br#"{"event_id":4,"event_type":"step","execution_id":1,"note":1,"prev_event_id":3}"#
    );
}

for_each_engine!(
    the_tail_serves_a_warm_index_on_the_first_build,
    a_repeated_tail_is_applied_again_after_a_rewrite,
    a_tail_without_genesis_waits_for_the_history,
    a_drive_rebuilds_after_every_wake_until_its_deadline,
    the_state_shard_serves_after_the_deadline,
    a_partial_shard_falls_back_and_a_joining_one_serves,
    verify_compares_the_shard_with_the_retained_wal,
    rehydrate_and_the_fallback_labels,
    the_drain_as_a_task_serves_async_drives,
);

/// The engine skips the tail of an execution it knows finished and was evicted: applying
/// it would re-create a partial chain that no terminal event evicts again.
#[test]
fn the_engine_skips_the_tail_of_a_finished_execution() {
    let index = wal_index::WalIndex::default();
    let mut batch = linear(9, 1, 2);
    batch.push(Event::minimal(3, 9, Some(2), "playbook_completed"));
    index.apply_batch(batch);
    assert!(index.chain(9).is_none(), "terminal eviction");
    let flow =
        DriveFlow::new(DriveBudget::default()).tail_events(vec![payload(&ev(9, 2, Some(1)))]);
    let drive = index.drive(9, Some(2), &flow);
    assert_eq!((drive.tail_applied, drive.tail_rejected), (0, 1));
    assert_eq!(drive.builds, 1, "the drive ends at once");
    assert!(index.chain(9).is_none(), "nothing re-created");
}
