//! The drain's contract with a source that fails: it retries with backoff, reports
//! `healthy` down then up, commits only after applying, and stops on configuration errors
//! or when retries are off.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use wal_index::ingest::{Backoff, Pull, Record};
use wal_index::{Drain, DrainConfig, IndexConfig, IndexObserver, StateIndex, WalIndex, WalSource};

/// What a scripted source does on each pull.
enum Step {
    Fail(io::ErrorKind),
    Records(Vec<&'static str>),
}

/// Plays `steps`, then closes; logs every pull and commit, with the index's event count at
/// commit time.
struct Scripted {
    steps: VecDeque<Step>,
    index: Arc<WalIndex>,
    log: Arc<Mutex<Vec<String>>>,
    position: u64,
}

impl WalSource for Scripted {
    fn pull(&mut self, _max: usize, _wait: Duration) -> io::Result<Pull> {
        match self.steps.pop_front() {
            None => Ok(Pull::Closed),
            Some(Step::Fail(kind)) => {
                self.log.lock().unwrap().push(format!("fail {kind:?}"));
                Err(io::Error::new(kind, "scripted"))
            }
            Some(Step::Records(payloads)) => {
                self.log
                    .lock()
                    .unwrap()
                    .push(format!("pull {}", payloads.len()));
                Ok(Pull::Records(
                    payloads
                        .into_iter()
                        .map(|p| {
                            self.position += 1;
                            Record {
                                position: self.position,
                                payload: Bytes::from_static(p.as_bytes()),
                            }
                        })
                        .collect(),
                ))
            }
        }
    }

    fn commit(&mut self) -> io::Result<()> {
        let events = self.index.stats().events;
        self.log.lock().unwrap().push(format!("commit at {events}"));
        Ok(())
    }
}

#[derive(Default)]
struct Health(Mutex<Vec<bool>>);

impl IndexObserver for Health {
    fn healthy(&self, up: bool) {
        self.0.lock().unwrap().push(up);
    }
}

const E1: &str = r#"{"event_id":1,"execution_id":9,"event_type":"playbook_started"}"#;
const E2: &str = r#"{"event_id":2,"execution_id":9,"prev_event_id":1}"#;

fn run(steps: Vec<Step>, retry: Option<Backoff>) -> (io::Result<u64>, Vec<String>, Vec<bool>) {
    let health = Arc::new(Health::default());
    let index = Arc::new(WalIndex::with_observer(
        IndexConfig::default(),
        health.clone(),
    ));
    let log = Arc::new(Mutex::new(Vec::new()));
    let source = Scripted {
        steps: steps.into(),
        index: Arc::clone(&index),
        log: Arc::clone(&log),
        position: 0,
    };
    let config = DrainConfig {
        retry,
        ..DrainConfig::default()
    };
    let mut drain = Drain::new(index, source, config);
    let result = drain.run_until_closed().map(|r| r.source_errors);
    let log = log.lock().unwrap().clone();
    let health = health.0.lock().unwrap().clone();
    (result, log, health)
}

fn fast() -> Option<Backoff> {
    Some(Backoff {
        first: Duration::from_millis(1),
        max: Duration::from_millis(4),
    })
}

#[test]
fn an_outage_is_retried_and_healthy_goes_down_then_up() {
    let (result, log, health) = run(
        vec![
            Step::Records(vec![E1]),
            Step::Fail(io::ErrorKind::NotConnected),
            Step::Fail(io::ErrorKind::ConnectionAborted),
            Step::Records(vec![E2, "not json"]),
        ],
        fast(),
    );
    assert_eq!(result.unwrap(), 2);
    assert_eq!(
        log,
        [
            "pull 1",
            "commit at 1",
            "fail NotConnected",
            "fail ConnectionAborted",
            "pull 2",
            // The bad record's batch is committed too: it was counted and skipped.
            "commit at 2",
        ]
    );
    assert_eq!(health, [true, false, true]);
}

#[test]
fn without_retries_the_first_error_ends_the_run() {
    let (result, log, health) = run(
        vec![
            Step::Fail(io::ErrorKind::NotConnected),
            Step::Records(vec![E1]),
        ],
        None,
    );
    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::NotConnected);
    assert_eq!(log, ["fail NotConnected"]);
    assert_eq!(health, [false]);
}

#[test]
fn a_configuration_error_is_never_retried() {
    let (result, log, _) = run(
        vec![
            Step::Fail(io::ErrorKind::InvalidInput),
            Step::Records(vec![E1]),
        ],
        fast(),
    );
    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    assert_eq!(log, ["fail InvalidInput"]);
}

#[test]
fn backoff_pauses_double_up_to_the_cap() {
    let backoff = Backoff {
        first: Duration::from_millis(10),
        max: Duration::from_millis(70),
    };
    let pauses: Vec<u128> = (1..=6).map(|n| backoff.pause(n).as_millis()).collect();
    assert_eq!(pauses, [10, 20, 40, 70, 70, 70]);
    assert_eq!(backoff.pause(u32::MAX), Duration::from_millis(70));
}

#[test]
fn a_stopped_drain_does_not_sleep_out_its_backoff() {
    let index = Arc::new(WalIndex::default());
    let source = Scripted {
        steps: (0..1000)
            .map(|_| Step::Fail(io::ErrorKind::NotConnected))
            .collect(),
        index: Arc::clone(&index),
        log: Arc::default(),
        position: 0,
    };
    let config = DrainConfig {
        retry: Some(Backoff {
            first: Duration::from_secs(30),
            max: Duration::from_secs(30),
        }),
        ..DrainConfig::default()
    };
    let handle = Drain::new(index, source, config).spawn();
    std::thread::sleep(Duration::from_millis(50));
    let started = std::time::Instant::now();
    let report = handle.stop().unwrap();
    assert_eq!(report.source_errors, 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stop waited {:?} for a 30 s backoff",
        started.elapsed()
    );
}

/// A source that only remembers the decode mode it was told.
struct Told(Arc<Mutex<Vec<wal_index::ingest::DecodeMode>>>);

impl WalSource for Told {
    fn pull(&mut self, _max: usize, _wait: Duration) -> io::Result<Pull> {
        Ok(Pull::Closed)
    }

    fn decode_as(&mut self, mode: wal_index::ingest::DecodeMode) {
        self.0.lock().unwrap().push(mode);
    }
}

/// The drain tells its source the mode the index stores events in, once, when it is made:
/// a source that decodes its own records then parses each one once.
#[test]
fn the_drain_tells_its_source_how_the_index_stores_events() {
    use wal_index::ingest::DecodeMode;
    for (slim, mode) in [(true, DecodeMode::Slim), (false, DecodeMode::Whole)] {
        let told = Arc::new(Mutex::new(Vec::new()));
        let index = Arc::new(WalIndex::new(IndexConfig {
            slim,
            ..IndexConfig::default()
        }));
        let _drain = Drain::new(index, Told(Arc::clone(&told)), DrainConfig::default());
        assert_eq!(*told.lock().unwrap(), vec![mode]);
    }
    // Today's design parses whole envelopes (it keeps no slim decode of its own).
    let told = Arc::new(Mutex::new(Vec::new()));
    let index = Arc::new(wal_index::baseline::MutexIndex::new(IndexConfig {
        slim: true,
        ..IndexConfig::default()
    }));
    let _drain = Drain::new(index, Told(Arc::clone(&told)), DrainConfig::default());
    assert_eq!(*told.lock().unwrap(), vec![DecodeMode::Whole]);
}
