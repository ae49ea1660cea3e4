//! A drive while the drain backfills (docs/domain.md, "The drive while the drain backfills"):
//! the engine sends a drive that can read its execution to that read at once; a drive
//! without one, and every drive on today's design, keeps the worker's flow; a hydrated
//! execution is served only when its walk reaches genesis, and the drain's later replay of
//! the same events changes no served byte.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Sources, ev, linear};
use wal_index::baseline::MutexIndex;
use wal_index::flow::{DriveFallbacks, FallbackRead, blocking_read};
use wal_index::ingest::{Backfill, DecodeMode, channel_wal};
use wal_index::labels::{DriveLabel, RehydrateLabel};
use wal_index::rehydrate::RehydrateGate;
use wal_index::{
    Drain, DrainConfig, Drive, DriveBudget, DriveFlow, Event, ExecutionId, StateIndex, WalIndex,
};

const BEHIND: Backfill = Backfill::Behind {
    remaining: Some(1_000),
};

/// A worker's runtime: two workers, timers on.
fn two_worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The drain, standing in: applies `events` as one batch after `after`.
fn apply_later(
    index: &Arc<WalIndex>,
    after: Duration,
    events: Vec<Event>,
) -> std::thread::JoinHandle<()> {
    let index = Arc::clone(index);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        index.apply_batch(events);
    })
}

/// Today's budget: five waits of 200 ms.
fn budget() -> DriveBudget {
    DriveBudget::default()
}

fn payloads(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| String::from_utf8(e.payload().to_vec()).unwrap())
        .collect()
}

#[test]
fn a_drive_behind_the_backfill_reads_its_execution_at_once() {
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let retained = Sources {
        shard: None,
        retained: Some(linear(7, 1, 4)),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(budget())
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(4), &flow);
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Served));
    assert!(drive.backfill_skip);
    // One build found the chain behind, one after the replay served it; no wait at all.
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (2, 0, 0));
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3, 4]);
}

/// Behind the backfill the drive reads its state shard first: one keyed read serves it,
/// and the retained WAL (on EHDB, a subscription that costs the writer a whole log shard)
/// is not read. A shard that does not serve is read once, not again after the deadline.
#[test]
fn a_drive_behind_the_backfill_reads_its_state_shard_before_the_wal() {
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let gate = RehydrateGate::default();
    let both = Sources {
        shard: Some(linear(7, 1, 4)),
        retained: Some(linear(7, 1, 4)),
    };
    let flow = DriveFlow::new(budget())
        .fallbacks(&both)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(4), &flow);
    assert_eq!(drive.label, DriveLabel::ServedShard, "{drive:?}");
    assert_eq!((drive.rehydrate, drive.backfill_skip), (None, true));
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (2, 0, 0));

    let short = Sources {
        shard: Some(vec![ev(8, 3, Some(2)), ev(8, 4, Some(3))]),
        retained: Some(linear(8, 1, 4)),
    };
    let flow = DriveFlow::new(budget())
        .fallbacks(&short)
        .rehydrate_gate(&gate);
    let drive = index.drive(8, Some(4), &flow);
    assert_eq!(
        drive.shard,
        Some(wal_index::labels::ShardReadLabel::Fallback)
    );
    assert_eq!(drive.label, DriveLabel::ServedRehydrated, "{drive:?}");
}

/// A drive on `index` with a retained WAL and a short budget: it waits out its deadline,
/// then replays, as today's worker does.
fn assert_keeps_the_workers_flow<I: StateIndex>(index: &I, what: &str) {
    let retained = Sources {
        shard: None,
        retained: Some(linear(7, 1, 2)),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(2, Duration::from_millis(10)))
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(2), &flow);
    assert_eq!(drive.label, DriveLabel::ServedRehydrated, "{what}");
    assert!(!drive.backfill_skip, "{what}");
    assert!(
        drive.timeouts > 0,
        "{what}: the deadline was waited out first"
    );
}

#[test]
fn caught_up_or_unknown_the_drive_keeps_the_workers_flow() {
    for state in [Backfill::CaughtUp, Backfill::Unknown] {
        let index = WalIndex::default();
        index.note_backfill(state);
        assert_keeps_the_workers_flow(&index, &format!("{state:?}"));
    }
}

#[test]
fn a_drive_without_a_read_waits_for_the_drain_even_while_it_backfills() {
    let index = Arc::new(WalIndex::default());
    index.note_backfill(BEHIND);
    let drain = apply_later(&index, Duration::from_millis(50), linear(7, 1, 3));
    let drive = index.drive(
        7,
        Some(3),
        &DriveFlow::new(DriveBudget::new(50, Duration::from_secs(1))),
    );
    drain.join().unwrap();
    assert_eq!(drive.label, DriveLabel::Served);
    assert!(!drive.backfill_skip);
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
}

#[test]
fn an_early_read_that_does_not_serve_goes_back_to_waiting() {
    // The retained WAL has only the execution's tail (its history is older than the
    // retention): the replay leaves the chain short, and the drive waits for the drain.
    let index = Arc::new(WalIndex::default());
    index.note_backfill(BEHIND);
    let retained = Sources {
        shard: None,
        retained: Some(vec![ev(7, 3, Some(2))]),
    };
    let gate = RehydrateGate::default();
    let drain = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            index.apply_batch(linear(7, 1, 3));
            index.note_backfill(Backfill::CaughtUp);
        })
    };
    let flow = DriveFlow::new(DriveBudget::new(50, Duration::from_secs(1)))
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(3), &flow);
    drain.join().unwrap();
    assert!(drive.backfill_skip);
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Incomplete));
    assert_eq!(
        drive.label,
        DriveLabel::Served,
        "served by the wait after the read"
    );
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
}

#[test]
fn a_hydrated_execution_that_does_not_reach_genesis_is_never_served() {
    // The retained read has a root that is not `playbook_started`: no spine, whatever the
    // backfill says.
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let odd = vec![
        Event::minimal(1, 7, None, "step"),
        Event::minimal(2, 7, Some(1), "step"),
    ];
    let retained = Sources {
        shard: None,
        retained: Some(odd),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(1, Duration::from_millis(5)))
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(2), &flow);
    assert!(drive.outcome.spine().is_none());
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Incomplete));
}

#[test]
fn the_drains_later_replay_changes_no_served_byte() {
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let history = linear(7, 1, 5);
    let retained = Sources {
        shard: None,
        retained: Some(history.clone()),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(budget())
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let hydrated = index.drive(7, Some(5), &flow);
    let before = hydrated.outcome.spine().unwrap().json_array().to_bytes();
    // The drain reaches the same events: an overwrite by id with the same bytes.
    let report = index.apply_batch(history.clone());
    assert_eq!(report.new, 0, "nothing new: every event was already there");
    index.note_backfill(Backfill::CaughtUp);
    let after = index.build(7, Some(5));
    assert_eq!(after.spine.unwrap().json_array().to_bytes(), before);
    assert_eq!(
        payloads(&index.chain(7).unwrap().iter().cloned().collect::<Vec<_>>()),
        payloads(&history)
    );
}

#[test]
fn todays_design_keeps_the_workers_flow_while_the_drain_backfills() {
    let index = Arc::new(MutexIndex::default());
    let (wal, source) = channel_wal();
    wal.append(r#"{"event_id":1,"execution_id":4}"#);
    wal.append(r#"{"event_id":2,"execution_id":4,"prev_event_id":1}"#);
    let one_at_a_time = DrainConfig {
        batch_max: 1,
        ..DrainConfig::default()
    };
    let mut drain = Drain::new(Arc::clone(&index), source, one_at_a_time);
    drain.step().unwrap();
    assert!(
        drain.backfill().is_behind(),
        "the drain is behind: one of two records applied"
    );
    assert_keeps_the_workers_flow(&*index, "today's design");
    drop((drain, wal));
}

#[test]
fn the_drain_says_when_it_is_behind_and_takes_it_back_when_it_goes() {
    let index = Arc::new(WalIndex::default());
    let (wal, source) = channel_wal();
    for id in 1..=5 {
        let prev = if id == 1 {
            String::new()
        } else {
            format!(r#","prev_event_id":{}"#, id - 1)
        };
        wal.append(format!(r#"{{"event_id":{id},"execution_id":3{prev}}}"#));
    }
    let config = DrainConfig {
        batch_max: 2,
        ..DrainConfig::default()
    };
    let mut drain = Drain::new(Arc::clone(&index), source, config);
    assert_eq!(index.backfill(), Backfill::Unknown, "nothing pulled yet");
    drain.step().unwrap();
    assert_eq!(index.backfill(), Backfill::Behind { remaining: Some(3) });
    drain.step().unwrap();
    drain.step().unwrap();
    assert_eq!(index.backfill(), Backfill::CaughtUp);

    // A drain dropped while it was behind leaves no drive skipping its wait forever.
    let (wal2, source2) = channel_wal();
    wal2.append(r#"{"event_id":1,"execution_id":4}"#);
    wal2.append(r#"{"event_id":2,"execution_id":4}"#);
    let one_at_a_time = DrainConfig {
        batch_max: 1,
        ..config
    };
    let mut behind = Drain::new(Arc::clone(&index), source2, one_at_a_time);
    behind.step().unwrap();
    assert!(index.backfill().is_behind());
    drop(behind);
    assert_eq!(index.backfill(), Backfill::Unknown);
    drop((wal, wal2));
}

/// A blocking client: each read sleeps `pause`, then answers, counting its reads.
struct SlowFeed {
    pause: Duration,
    reads: Arc<AtomicU64>,
}

impl DriveFallbacks for SlowFeed {
    fn retained(&self, execution: ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
        let (pause, reads) = (self.pause, Arc::clone(&self.reads));
        blocking_read(move || {
            std::thread::sleep(pause);
            reads.fetch_add(1, Ordering::Relaxed);
            Some(linear(execution, 1, 2))
        })
    }
}

#[test]
fn a_blocking_read_never_parks_the_executors_worker() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let feed = SlowFeed {
        pause: Duration::from_millis(200),
        reads: Arc::default(),
    };
    let gate = RehydrateGate::default();
    let ticks = Arc::new(AtomicU64::new(0));
    let drive = runtime.block_on(async {
        // A task on the same (single) worker: it runs only while the drive awaits.
        let counter = Arc::clone(&ticks);
        let ticker = tokio::spawn(async move {
            loop {
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let flow = DriveFlow::new(budget())
            .fallbacks(&feed)
            .rehydrate_gate(&gate);
        let drive = index.drive_async(9, Some(2), &flow).await;
        ticker.abort();
        drive
    });
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert!(
        ticks.load(Ordering::Relaxed) >= 5,
        "the worker ran other tasks during the 200 ms read: {} ticks",
        ticks.load(Ordering::Relaxed)
    );
}

#[test]
fn a_read_past_the_fallback_timeout_is_dropped() {
    let index = WalIndex::default();
    let feed = SlowFeed {
        pause: Duration::from_millis(500),
        reads: Arc::default(),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(1, Duration::from_millis(1)))
        .fallbacks(&feed)
        .rehydrate_gate(&gate)
        .fallback_timeout(Duration::from_millis(20));
    let drive = index.drive(9, Some(2), &flow);
    assert_eq!(drive.rehydrate, None, "no answer in time: no replay");
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert_eq!(
        feed.reads.load(Ordering::Relaxed),
        0,
        "the drive did not wait for it"
    );
    assert!(
        gate.try_enter().is_some() && gate.try_enter().is_some(),
        "its permit was freed"
    );
}

#[test]
fn a_throttled_early_read_is_not_counted_and_the_drive_waits() {
    let index = Arc::new(WalIndex::default());
    index.note_backfill(BEHIND);
    let retained = Sources {
        shard: None,
        retained: Some(linear(7, 1, 3)),
    };
    // A gate with no room: every read is throttled.
    let gate = RehydrateGate::new(0);
    let drain = apply_later(&index, Duration::from_millis(50), linear(7, 1, 3));
    let flow = DriveFlow::new(DriveBudget::new(50, Duration::from_secs(1)))
        .fallbacks(&retained)
        .rehydrate_gate(&gate);
    let drive = index.drive(7, Some(3), &flow);
    drain.join().unwrap();
    assert!(drive.backfill_skip);
    assert_eq!(
        drive.rehydrate, None,
        "a throttled early read is not an attempt"
    );
    assert_eq!(drive.label, DriveLabel::Served);
}

/// A blocking drive for event 2 of `execution` on an engine whose drain is behind, reading
/// `feed` under the default replay cap, with a deadline of two 5 ms waits.
fn drive_behind_the_drain(feed: &dyn DriveFallbacks, execution: ExecutionId) -> Drive {
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(2, Duration::from_millis(5)))
        .fallbacks(feed)
        .rehydrate_gate(&gate);
    index.drive(execution, Some(2), &flow)
}

#[test]
fn an_early_read_that_does_not_serve_leaves_the_read_after_the_deadline() {
    // The retained read has no genesis: the early replay leaves the chain incomplete, and
    // the step after the deadline reads again, as today's flow reads (here the source gives
    // the same short history again, so the drive falls back after two reads).
    let feed = CountingFeed {
        events: vec![
            Event::minimal(1, 7, None, "step"),
            Event::minimal(2, 7, Some(1), "step"),
        ],
        reads: Arc::default(),
    };
    let drive = drive_behind_the_drain(&feed, 7);
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Incomplete));
    assert_eq!(
        feed.reads.load(Ordering::Relaxed),
        2,
        "early, and after the deadline"
    );
}

#[test]
fn a_short_early_read_then_a_whole_one_serves_the_drive() {
    // A broker cold from the restart answers the first read short (no genesis) and the
    // read after the deadline whole: the drive is served by the second, as today's flow,
    // which only makes the second, would be.
    let feed = ShortThenWholeFeed {
        whole: vec![
            Event::minimal(1, 7, None, "playbook_started"),
            Event::minimal(2, 7, Some(1), "step"),
        ],
        reads: Arc::default(),
    };
    let drive = drive_behind_the_drain(&feed, 7);
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Served));
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
    assert_eq!(feed.reads.load(Ordering::Relaxed), 2);
}

/// A retained WAL that answers its first read with the history's last event alone, and
/// every later read with the whole history.
struct ShortThenWholeFeed {
    whole: Vec<Event>,
    reads: Arc<AtomicU64>,
}

impl DriveFallbacks for ShortThenWholeFeed {
    fn retained(&self, _: ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
        let first = self.reads.fetch_add(1, Ordering::Relaxed) == 0;
        let events = if first {
            self.whole[self.whole.len() - 1..].to_vec()
        } else {
            self.whole.clone()
        };
        Box::pin(std::future::ready(Some(events)))
    }
}

#[test]
fn an_async_drive_served_by_the_drain_stops_waiting_for_its_read() {
    // A read slower than the drain: the async drive keeps waiting while it reads, and the
    // drain's apply serves it first; the read is dropped.
    let runtime = two_worker_runtime();
    let index = Arc::new(WalIndex::default());
    index.note_backfill(BEHIND);
    let feed = SlowFeed {
        pause: Duration::from_secs(2),
        reads: Arc::default(),
    };
    let gate = RehydrateGate::default();
    let drain = apply_later(&index, Duration::from_millis(50), linear(9, 1, 2));
    let flow = DriveFlow::new(budget())
        .fallbacks(&feed)
        .rehydrate_gate(&gate);
    let drive = runtime.block_on(index.drive_async(9, Some(2), &flow));
    drain.join().unwrap();
    assert!(drive.backfill_skip);
    assert_eq!(drive.label, DriveLabel::Served, "the drain served it first");
    assert_eq!(drive.rehydrate, None, "no replay");
    assert!(
        gate.try_enter().is_some() && gate.try_enter().is_some(),
        "the dropped read's permit was freed"
    );
}

#[test]
fn an_async_drive_whose_read_does_not_serve_it_waits_for_the_drain() {
    // The read answers first, with the history but no tip: replayed, still short; the
    // drive then waits for the drain, and reads nothing after its deadline.
    let runtime = two_worker_runtime();
    let index = Arc::new(WalIndex::default());
    index.note_backfill(BEHIND);
    let feed = CountingFeed {
        events: linear(9, 1, 2),
        reads: Arc::default(),
    };
    let gate = RehydrateGate::default();
    let drain = apply_later(&index, Duration::from_millis(100), linear(9, 1, 3));
    let flow = DriveFlow::new(budget())
        .fallbacks(&feed)
        .rehydrate_gate(&gate);
    let drive = runtime.block_on(index.drive_async(9, Some(3), &flow));
    drain.join().unwrap();
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Incomplete));
    assert_eq!(drive.label, DriveLabel::Served);
    assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
    assert_eq!(feed.reads.load(Ordering::Relaxed), 1);
}

#[test]
fn an_early_read_that_runs_out_its_timeout_leaves_the_read_after_the_deadline() {
    // No drain, and a read that never answers: the early read runs out its timeout and is
    // not reported (as an unanswered read after the deadline is not); the drive reads once
    // more after its deadline, as today's flow does, which runs out its timeout too.
    let runtime = two_worker_runtime();
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let feed = AnswerFeed {
        answer: Answer::Never,
        reads: Arc::default(),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(2, Duration::from_millis(20)))
        .fallbacks(&feed)
        .rehydrate_gate(&gate)
        .fallback_timeout(Duration::from_millis(100));
    let drive = runtime.block_on(index.drive_async(9, Some(2), &flow));
    assert!(drive.backfill_skip);
    assert_eq!(drive.rehydrate, None, "no read answered: nothing to report");
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert_eq!(
        feed.reads.load(Ordering::Relaxed),
        2,
        "early, and after the deadline"
    );
    assert!(
        drive.timeouts >= 1,
        "it waited out its deadline during the read"
    );
    assert!(
        drive.timeouts <= 2,
        "no wait past its budget of two: {}",
        drive.timeouts
    );
}

#[test]
fn a_source_that_has_nothing_leaves_the_read_after_the_deadline() {
    // The source answers at once that it has nothing for the execution (no read took
    // place): the drive may read again after its deadline, as today's flow does.
    let feed = AnswerFeed {
        answer: Answer::Nothing,
        reads: Arc::default(),
    };
    let drive = drive_behind_the_drain(&feed, 9);
    assert!(drive.backfill_skip);
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert_eq!(
        feed.reads.load(Ordering::Relaxed),
        2,
        "early, and after the deadline"
    );
}

/// How [`AnswerFeed`] answers.
enum Answer {
    /// Never: the read is still running when the drive stops waiting.
    Never,
    /// At once, that it has nothing for the execution.
    Nothing,
}

/// A retained WAL that answers as told, counting its reads.
struct AnswerFeed {
    answer: Answer,
    reads: Arc<AtomicU64>,
}

impl DriveFallbacks for AnswerFeed {
    fn retained(&self, _: ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        match self.answer {
            Answer::Never => Box::pin(std::future::pending()),
            Answer::Nothing => Box::pin(std::future::ready(None)),
        }
    }
}

#[test]
fn an_early_read_that_outlasts_the_deadline_is_still_the_drives_one_read() {
    // A read longer than the 50 ms deadline but within the fallback timeout: the blocking
    // drive reads first, is served by the replay, and reads nothing after the deadline.
    let index = WalIndex::default();
    index.note_backfill(BEHIND);
    let feed = SlowFeed {
        pause: Duration::from_millis(300),
        reads: Arc::default(),
    };
    let gate = RehydrateGate::default();
    let flow = DriveFlow::new(DriveBudget::new(1, Duration::from_millis(50)))
        .fallbacks(&feed)
        .rehydrate_gate(&gate);
    let drive = index.drive(9, Some(2), &flow);
    assert!(drive.backfill_skip);
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);
    assert_eq!(
        drive.builds, 2,
        "the first build, and the one after the replay"
    );
    assert_eq!(feed.reads.load(Ordering::Relaxed), 1);
}

/// A retained WAL with a fixed answer, counting its reads.
struct CountingFeed {
    events: Vec<Event>,
    reads: Arc<AtomicU64>,
}

impl DriveFallbacks for CountingFeed {
    fn retained(&self, _: ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(Some(self.events.clone())))
    }
}

#[test]
fn an_empty_early_read_leaves_the_read_after_the_deadline() {
    // The source answers the early read with no events (a broker still cold from the
    // restart may): the drive still makes today's read after its deadline.
    let feed = CountingFeed {
        events: Vec::new(),
        reads: Arc::default(),
    };
    let drive = drive_behind_the_drain(&feed, 7);
    assert!(drive.backfill_skip);
    assert_eq!(drive.label, DriveLabel::FallbackIncomplete);
    assert_eq!(drive.rehydrate, Some(RehydrateLabel::Empty));
    assert_eq!(
        feed.reads.load(Ordering::Relaxed),
        2,
        "early, and after the deadline"
    );
}
