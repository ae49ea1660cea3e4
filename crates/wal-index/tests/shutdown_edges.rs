//! The edges of a pool's start and end: a drain whose source is down stays live; a start
//! that fails seeds nothing; a checkpoint write that panics, a bound past the clock's
//! range, and a batch whose commit failed are each reported for what they are at shutdown.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use wal_index::checkpoint::{
    Checkpoint, CheckpointStore, Checkpointing, DirStore, Fingerprint, LastCheckpoint, LogIdentity,
    Position, Refusal, SourcePosition,
};
use wal_index::ingest::{Backoff, Pull, channel_wal};
use wal_index::{Drain, DrainConfig, Event, StateIndex, WalIndex, WalSource};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sbix-edges-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn line(n: u64) -> String {
    format!(
        r#"{{"event_id":{},"execution_id":1,"event_type":"step"}}"#,
        n + 1
    )
}

/// A source whose every pull fails (a broker outage).
struct Down;
impl WalSource for Down {
    fn pull(&mut self, _max: usize, _wait: Duration) -> io::Result<Pull> {
        Err(io::Error::new(io::ErrorKind::ConnectionRefused, "down"))
    }
}

/// `DrainHealth`: "A drain whose source fails is live".
#[test]
fn a_drain_retrying_a_source_that_is_down_stays_live() {
    let config = DrainConfig {
        idle_wait: Duration::from_millis(5),
        retry: Some(Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(5),
        }),
        ..DrainConfig::default()
    };
    let mut drain = Drain::new(Arc::new(WalIndex::default()), Down, config);
    let health = drain.health();
    let until = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < until {
        assert!(drain.step().unwrap(), "retried, not ended");
    }
    assert!(drain.report().source_errors > 10);
    assert!(
        health.is_live(Duration::from_millis(100)),
        "stepping every few ms but since_last_step = {:?}",
        health.since_last_step()
    );
}

fn log() -> LogIdentity {
    LogIdentity::new("test", "review", "")
}

/// A source that refuses the first checkpoint it is asked about, accepts the rest.
struct Picky {
    refuse: bool,
}
impl WalSource for Picky {
    fn pull(&mut self, _max: usize, _wait: Duration) -> io::Result<Pull> {
        Ok(Pull::Closed)
    }
    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        Ok(Some(log()))
    }
    fn resume(&mut self, _p: &[Position], _w: Duration) -> Result<(), Refusal> {
        if self.refuse {
            Err(Refusal::Fingerprint {
                why: "lost tail".into(),
            })
        } else {
            Ok(())
        }
    }
}

/// The source refuses the newest checkpoint, and making the next source fails: the start
/// fails, and nothing of an older checkpoint is seeded meanwhile.
#[test]
fn a_start_whose_source_cannot_be_made_again_seeds_nothing() {
    let dir = temp_dir("seeded");
    let store = DirStore::open(&dir, 5).unwrap();
    for n in 0..3u64 {
        let index = WalIndex::default();
        index.apply(Event::minimal(n as i64 + 1, 7, None, "playbook_started"));
        let at = SourcePosition {
            log: log(),
            positions: vec![Position::new(
                "p",
                &[],
                Fingerprint {
                    sequence: n + 1,
                    hash: 0,
                },
            )],
        };
        store
            .write(&Checkpoint::capture(&index, at).encode())
            .unwrap();
        std::thread::sleep(Duration::from_millis(3));
    }
    let calls = AtomicUsize::new(0);
    let index = Arc::new(WalIndex::default());
    let result = Drain::warm_start(
        Arc::clone(&index),
        Some(Checkpointing::new(DirStore::open(&dir, 5).unwrap())),
        || match calls.fetch_add(1, Ordering::Relaxed) {
            0 => Ok(Picky { refuse: true }), // refuses the newest
            1 => Err(io::Error::other("transient: broker busy")), // remake fails
            _ => Ok(Picky { refuse: false }), // accepts the oldest
        },
        DrainConfig::default(),
    );
    assert!(result.is_err(), "the source could not be made");
    assert!(
        index.execution_ids().is_empty(),
        "{:?}",
        index.execution_ids()
    );
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "no source made after the failure"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store whose writes panic.
#[derive(Debug)]
struct Panics(DirStore);
impl CheckpointStore for Panics {
    fn write(&self, _bytes: &[u8]) -> io::Result<String> {
        panic!("store bug")
    }
    fn newest_first(&self) -> io::Result<Vec<String>> {
        self.0.newest_first()
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.0.read(name)
    }
    fn location(&self) -> String {
        self.0.location()
    }
}

/// A write that panics is a failed write: counted, and the last checkpoint is tried again
/// (and fails again) rather than reported up to date.
#[test]
fn a_checkpoint_write_that_panics_is_a_failed_write() {
    let dir = temp_dir("panics");
    let (writer, source) = channel_wal();
    for n in 0..4 {
        writer.append(line(n));
    }
    let mut drain = Drain::new(
        Arc::new(WalIndex::default()),
        source,
        DrainConfig::default(),
    )
    .checkpoint_to(
        Checkpointing::new(Panics(DirStore::open(&dir, 3).unwrap())).every(Duration::ZERO),
    )
    .unwrap();
    drain.step().unwrap(); // applies 4, hands a checkpoint off; the writer panics
    std::thread::sleep(Duration::from_millis(100));
    let last = drain.shut_down();
    assert!(matches!(last, Some(LastCheckpoint::Failed(_))), "{last:?}");
    let report = drain.report().checkpoints.clone();
    assert_eq!((report.written, report.failed), (0, 2), "{report:?}");
    assert!(
        DirStore::open(&dir, 3)
            .unwrap()
            .newest_first()
            .unwrap()
            .is_empty()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bound past what the clock can add is no bound, not a panic.
#[test]
fn a_shutdown_bound_past_the_clocks_range_is_no_bound() {
    let dir = temp_dir("huge");
    let (writer, source) = channel_wal();
    writer.append(line(0));
    let mut drain = Drain::new(
        Arc::new(WalIndex::default()),
        source,
        DrainConfig::default(),
    )
    .checkpoint_to(
        Checkpointing::new(DirStore::open(&dir, 3).unwrap())
            .every(Duration::from_secs(3600))
            .last_within(Duration::MAX),
    )
    .unwrap();
    drain.step().unwrap();
    let last = drain.shut_down();
    assert!(
        matches!(last, Some(LastCheckpoint::Written { .. })),
        "{last:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A channel whose first commit fails (a broker that did not take the ack).
struct CommitFailsOnce(wal_index::ingest::ChannelSource, bool);
impl WalSource for CommitFailsOnce {
    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        self.0.pull(max, wait)
    }
    fn commit(&mut self) -> io::Result<()> {
        if std::mem::replace(&mut self.1, false) {
            return Err(io::Error::other("ack lost"));
        }
        Ok(())
    }
    fn position(&self) -> Option<SourcePosition> {
        self.0.position()
    }
}

/// A batch applied whose commit failed is still applied: the last checkpoint holds it.
#[test]
fn a_batch_whose_commit_failed_is_in_the_last_checkpoint() {
    let dir = temp_dir("commit");
    let (writer, source) = channel_wal();
    for n in 0..4 {
        writer.append(line(n));
    }
    let mut drain = Drain::new(
        Arc::new(WalIndex::default()),
        CommitFailsOnce(source, true),
        DrainConfig::default(),
    )
    .checkpoint_to(
        Checkpointing::new(DirStore::open(&dir, 3).unwrap()).every(Duration::from_secs(3600)),
    )
    .unwrap();
    drain.step().unwrap(); // applies 4; commit fails
    let last = drain.shut_down();
    assert!(
        matches!(last, Some(LastCheckpoint::Written { .. })),
        "{last:?}"
    );
    assert_eq!(
        DirStore::open(&dir, 3)
            .unwrap()
            .newest_first()
            .unwrap()
            .len(),
        1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
