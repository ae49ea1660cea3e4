//! A pool's start and end: `Drain::warm_start` takes the newest checkpoint the log still
//! holds, else an older one, else a replay; `shut_down` takes a last checkpoint within its
//! bound, so the successor replays nothing that was applied; the probes' view of the drain.
//! (docs/deployment.md states the sequence a pool follows; the refusal rule is
//! `wal_index::checkpoint`'s: nothing of a checkpoint the log no longer holds is served.)

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wal_index::checkpoint::{CheckpointStore, Checkpointing, DirStore, LastCheckpoint};
use wal_index::ingest::{JsonLinesSource, channel_wal};
use wal_index::{Drain, DrainConfig, StateIndex, WalIndex, WalSource};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sbix-warm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Line `n` of the test WAL: execution `n % 5`, its events chained by id.
fn line(n: u64) -> String {
    let (execution, id) = (n % 5, n / 5 + 1);
    let prev = if id == 1 {
        String::new()
    } else {
        format!(r#","prev_event_id":{}"#, id - 1)
    };
    format!(r#"{{"event_id":{id},"execution_id":{execution}{prev},"event_type":"step"}}"#)
}

fn write_wal(path: &Path, lines: impl Iterator<Item = String>) {
    let text: String = lines.map(|l| l + "\n").collect();
    std::fs::write(path, text).unwrap();
}

fn batches_of(n: usize) -> DrainConfig {
    DrainConfig {
        batch_max: n,
        ..DrainConfig::default()
    }
}

/// Checkpoints to `dir` only when asked (a cadence no test reaches).
fn on_demand(dir: &Path) -> Checkpointing {
    Checkpointing::new(DirStore::open(dir, 3).unwrap()).every(Duration::from_secs(3600))
}

#[test]
fn a_graceful_shutdown_checkpoints_the_last_record_and_the_successor_replays_nothing_of_it() {
    let dir = temp_dir("graceful");
    let wal = dir.join("wal.jsonl");
    write_wal(&wal, (0..100).map(line));
    let first = Arc::new(WalIndex::default());
    let (mut drain, start) = Drain::warm_start(
        Arc::clone(&first),
        Some(on_demand(&dir.join("ckpt"))),
        || JsonLinesSource::open(&wal),
        batches_of(30),
    )
    .unwrap();
    assert!(start.checkpoint.is_none());
    for _ in 0..3 {
        drain.step().unwrap();
    }
    // 90 lines applied, no checkpoint due: the shutdown takes one at line 90.
    assert_eq!(drain.report().checkpoints.written, 0);
    let last = drain.shut_down().expect("this drain checkpoints");
    assert!(matches!(last, LastCheckpoint::Written { .. }), "{last:?}");
    assert_eq!(drain.report().checkpoints.at_shutdown, Some(last.clone()));
    // Taken once: asking again changes nothing.
    assert_eq!(drain.shut_down(), Some(last));
    drop(drain);

    // The log grows while the pool rolls; the successor replays only what is new.
    write_wal(&wal, (0..130).map(line));
    let second = Arc::new(WalIndex::default());
    let (mut drain, start) = Drain::warm_start(
        Arc::clone(&second),
        Some(on_demand(&dir.join("ckpt"))),
        || JsonLinesSource::open(&wal),
        batches_of(30),
    )
    .unwrap();
    assert!(start.checkpoint.is_some() && start.refused.is_empty());
    assert_eq!(start.resumed_at.unwrap()[0].last().sequence, 90);
    assert_eq!(drain.run_until_closed().unwrap().events, 40);
    drop(drain); // its write at the log's end finishes
    // It holds what a replay of the whole file holds.
    let replay = Arc::new(WalIndex::default());
    Drain::new(
        Arc::clone(&replay),
        JsonLinesSource::open(&wal).unwrap(),
        batches_of(500),
    )
    .run_until_closed()
    .unwrap();
    let ids = |index: &WalIndex, execution| {
        let chain = index.chain(execution)?;
        Some(chain.iter().map(wal_index::Event::id).collect::<Vec<_>>())
    };
    for execution in 0..5 {
        assert_eq!(ids(&second, execution), ids(&replay, execution));
        assert_eq!(ids(&second, execution).map(|i| i.len()), Some(26));
    }
    // Nothing new since its last checkpoint: the newest is current.
    let mut idle = Drain::new(second, JsonLinesSource::open(&wal).unwrap(), batches_of(30))
        .checkpoint_to(on_demand(&dir.join("ckpt")))
        .unwrap();
    assert_eq!(idle.shut_down(), Some(LastCheckpoint::UpToDate));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_the_log_no_longer_holds_is_refused_and_an_older_one_is_used() {
    let dir = temp_dir("older");
    let wal = dir.join("wal.jsonl");
    write_wal(&wal, (0..80).map(line));
    let store_dir = dir.join("ckpt");
    let checkpoints =
        || Checkpointing::new(DirStore::open(&store_dir, 3).unwrap()).every(Duration::ZERO);
    let (mut drain, _) = Drain::warm_start(
        Arc::new(WalIndex::default()),
        Some(checkpoints()),
        || JsonLinesSource::open(&wal),
        batches_of(40),
    )
    .unwrap();
    // Checkpoints after lines 40 and 80: the first with its batch (the writer is free),
    // the second with its batch if the writer is free by then, else at the log's end,
    // which waits for the write in flight and takes the one still due. Dropping the drain
    // waits for the last write; only then is the directory opened (opening it deletes
    // temporary files, a write in flight's among them).
    assert_eq!(drain.run_until_closed().unwrap().events, 80);
    drop(drain);
    assert_eq!(
        DirStore::open(&store_dir, 3)
            .unwrap()
            .newest_first()
            .unwrap()
            .len(),
        2
    );
    // The file loses its tail from line 61 on and is written again with other records: the
    // newest checkpoint (line 80) names records the log no longer holds; the older (40)
    // still matches.
    write_wal(
        &wal,
        (0..60).map(line).chain((0..20).map(|n| line(n + 1000))),
    );
    let made = std::sync::atomic::AtomicUsize::new(0);
    let index = Arc::new(WalIndex::default());
    let (mut drain, start) = Drain::warm_start(
        Arc::clone(&index),
        Some(checkpoints()),
        || {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            JsonLinesSource::open(&wal)
        },
        batches_of(40),
    )
    .unwrap();
    assert_eq!(start.refused.len(), 1, "{:?}", start.refused);
    assert_eq!(start.refused[0].1.label(), "fingerprint");
    assert_eq!(start.resumed_at.unwrap()[0].last().sequence, 40);
    // The source that refused was replaced before the older checkpoint was tried.
    assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert_eq!(drain.run_until_closed().unwrap().events, 40);
    drop(drain);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_every_checkpoint_refused_the_pool_replays_from_a_fresh_source() {
    let dir = temp_dir("none");
    let wal = dir.join("wal.jsonl");
    write_wal(&wal, (0..50).map(line));
    let store_dir = dir.join("ckpt");
    let (mut drain, _) = Drain::warm_start(
        Arc::new(WalIndex::default()),
        Some(on_demand(&store_dir)),
        || JsonLinesSource::open(&wal),
        batches_of(50),
    )
    .unwrap();
    drain.step().unwrap();
    drain.shut_down();
    drop(drain);
    // Another file entirely under the same name.
    write_wal(&wal, (500..520).map(line));
    let index = Arc::new(WalIndex::default());
    let (mut drain, start) = Drain::warm_start(
        Arc::clone(&index),
        Some(on_demand(&store_dir)),
        || JsonLinesSource::open(&wal),
        batches_of(50),
    )
    .unwrap();
    assert_eq!((start.checkpoint, start.refused.len()), (None, 1));
    assert!(index.execution_ids().is_empty(), "nothing of it was seeded");
    // The fresh source starts at the file's first line, not where the refused one stopped.
    assert_eq!(drain.run_until_closed().unwrap().events, 20);
    drop(drain);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store whose writes take `delay` (a slow disk, a far bucket).
#[derive(Debug)]
struct Slow {
    inner: DirStore,
    delay: Duration,
}

impl CheckpointStore for Slow {
    fn write(&self, bytes: &[u8]) -> io::Result<String> {
        std::thread::sleep(self.delay);
        self.inner.write(bytes)
    }
    fn newest_first(&self) -> io::Result<Vec<String>> {
        self.inner.newest_first()
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.inner.read(name)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}

#[test]
fn a_last_checkpoint_that_cannot_finish_in_its_bound_leaves_the_previous_one_newest() {
    let dir = temp_dir("bound");
    let wal = dir.join("wal.jsonl");
    write_wal(&wal, (0..60).map(line));
    let store_dir = dir.join("ckpt");
    // A first checkpoint, at line 30, written at the normal pace.
    let (mut drain, _) = Drain::warm_start(
        Arc::new(WalIndex::default()),
        Some(on_demand(&store_dir)),
        || JsonLinesSource::open(&wal),
        batches_of(30),
    )
    .unwrap();
    drain.step().unwrap();
    assert!(matches!(
        drain.shut_down(),
        Some(LastCheckpoint::Written { .. })
    ));
    drop(drain);
    let before = DirStore::open(&store_dir, 3)
        .unwrap()
        .newest_first()
        .unwrap();

    // The next pool's store takes 2 s a write; its shutdown is given 100 ms.
    let slow = Slow {
        inner: DirStore::open(&store_dir, 3).unwrap(),
        delay: Duration::from_secs(2),
    };
    let checkpoints = Checkpointing::new(slow)
        .every(Duration::from_secs(3600))
        .last_within(Duration::from_millis(100));
    let (mut drain, start) = Drain::warm_start(
        Arc::new(WalIndex::default()),
        Some(checkpoints),
        || JsonLinesSource::open(&wal),
        batches_of(30),
    )
    .unwrap();
    assert!(start.checkpoint.is_some());
    drain.step().unwrap();
    let shutting = Instant::now();
    let last = drain.shut_down();
    drop(drain);
    let took = shutting.elapsed();
    assert_eq!(
        last,
        Some(LastCheckpoint::TimedOut {
            bound: Duration::from_millis(100)
        })
    );
    // The shutdown (the drop included) kept to its bound: the write was left behind.
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(
        DirStore::open(&store_dir, 3)
            .unwrap()
            .newest_first()
            .unwrap(),
        before,
        "the previous checkpoint is still the newest while the write goes on"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_boxed_source_resumes_as_the_source_it_boxes() {
    // The `Box` forwarding is held to every method by a lint; this shows the two a restore
    // uses reach the boxed channel.
    let (writer, mut first) = channel_wal();
    for n in 0..4 {
        writer.append(line(n));
    }
    first.pull(2, Duration::ZERO).unwrap();
    let positions = first.position().unwrap().positions;
    let (writer, source) = channel_wal();
    for n in 0..4 {
        writer.append(line(n));
    }
    let mut boxed: Box<dyn WalSource> = Box::new(source);
    assert_eq!(
        boxed.log().unwrap().map(|l| l.transport),
        Some("channel".to_owned())
    );
    boxed.resume(&positions, Duration::ZERO).unwrap();
    let wal_index::ingest::Pull::Records(rest) = boxed.pull(10, Duration::ZERO).unwrap() else {
        panic!("the two records after the position")
    };
    assert_eq!(rest.len(), 2);
}

#[test]
fn the_probes_see_a_drain_ready_once_it_reached_the_head_and_live_while_it_steps() {
    let (writer, source) = channel_wal();
    for n in 0..10 {
        writer.append(line(n));
    }
    let config = DrainConfig {
        idle_wait: Duration::from_millis(1),
        ..batches_of(4)
    };
    let mut drain = Drain::new(Arc::new(WalIndex::default()), source, config);
    let health = drain.health();
    assert!(!health.is_ready());
    drain.step().unwrap();
    assert!(
        !health.is_ready(),
        "6 records of the backlog are still to come"
    );
    drain.step().unwrap();
    drain.step().unwrap();
    assert!(health.is_ready(), "the backlog is applied");
    assert!(health.is_live(Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(60));
    assert!(
        !health.is_live(Duration::from_millis(50)),
        "no step for 60 ms"
    );
    drain.step().unwrap();
    assert!(health.is_live(Duration::from_millis(50)));
}

#[test]
fn a_followed_file_waits_for_lines_and_never_returns_one_half_written() {
    use std::io::Write;
    use wal_index::ingest::Pull;

    let dir = temp_dir("follow");
    let wal = dir.join("wal.jsonl");
    write_wal(&wal, (0..3).map(line));
    let mut source = JsonLinesSource::open(&wal).unwrap().following();
    let Pull::Records(first) = source.pull(10, Duration::ZERO).unwrap() else {
        panic!("the three lines")
    };
    assert_eq!(first.len(), 3);
    // At the end: idle after the wait, not closed.
    assert_eq!(
        source.pull(10, Duration::from_millis(20)).unwrap(),
        Pull::Idle
    );
    // A producer writes half a line: still nothing.
    let mut file = std::fs::OpenOptions::new().append(true).open(&wal).unwrap();
    let next = line(3);
    let (head, rest) = next.split_at(10);
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();
    assert_eq!(
        source.pull(10, Duration::from_millis(20)).unwrap(),
        Pull::Idle
    );
    // It finishes the line: the whole line, once.
    file.write_all(format!("{rest}\n").as_bytes()).unwrap();
    file.flush().unwrap();
    let Pull::Records(more) = source.pull(10, Duration::from_millis(500)).unwrap() else {
        panic!("the line finished")
    };
    assert_eq!(more.len(), 1);
    assert_eq!(&more[0].payload[..], next.as_bytes());
    assert_eq!(more[0].position, 4);
    std::fs::remove_dir_all(&dir).unwrap();
}
