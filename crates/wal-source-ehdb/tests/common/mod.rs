//! A writer of our own that speaks the feed's protocol (no code of the real one): it
//! serves a fixed log of shard 0, and either answers each subscription as the writer that
//! production runs now does ([`Behaviour::Capped`]: batches of at most its cap, never
//! empty, and the `{"heartbeat":true}` object when `heartbeat_ms` was asked for, one at
//! once and one per interval parked), or as the older writer does (every record after the
//! cursor in one frame), or cuts a connection after a given number of bytes or sends raw
//! frames, which no writer does. The real writer is `wal_source_ehdb::test_writer`.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One record of the log.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub global_sequence: u64,
    pub execution_id: String,
    pub payload: String,
}

impl LogRecord {
    /// A minimal event of `execution` with this id and link, at `global_sequence`.
    pub fn event(global_sequence: u64, execution: i64, id: i64, prev: Option<i64>) -> LogRecord {
        let payload = match prev {
            None => format!(
                r#"{{"event_id":{id},"execution_id":{execution},"event_type":"playbook_started"}}"#
            ),
            Some(prev) => format!(
                r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{prev},"event_type":"step"}}"#
            ),
        };
        LogRecord {
            global_sequence,
            execution_id: execution.to_string(),
            payload,
        }
    }

    /// As [`LogRecord::event`], its payload padded with a string of `pad` bytes (an
    /// envelope's size, for tests that need frames of many megabytes).
    pub fn padded(
        global_sequence: u64,
        execution: i64,
        id: i64,
        prev: Option<i64>,
        pad: usize,
    ) -> LogRecord {
        let mut record = LogRecord::event(global_sequence, execution, id, prev);
        record.payload.pop();
        record
            .payload
            .push_str(&format!(r#","pad":"{}"}}"#, "p".repeat(pad)));
        record
    }

    /// The record as the feed writes it, encoded by serde_json (an encoder independent of
    /// the reader under test).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "global_sequence": self.global_sequence,
            "execution_id": self.execution_id,
            "transaction_id": format!("tx-{}", self.global_sequence),
            "payload": self.payload,
        })
    }
}

/// A frame holding `records`.
pub fn frame_of(records: &[LogRecord]) -> Vec<u8> {
    let array: Vec<serde_json::Value> = records.iter().map(LogRecord::json).collect();
    let body = serde_json::to_vec(&array).expect("serializable");
    wal_source_ehdb::frame::frame(&body)
}

/// What a connection does, in order of connections (the last one repeats).
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Every record after the cursor in one frame, then stay open and silent.
    Serve,
    /// As `Serve`, but close after writing this many bytes of the frame.
    CutAfter(usize),
    /// Write these bytes, then stay open.
    Raw(Vec<u8>),
    /// Write these bytes, then a space every 20 ms, for as long as the connection lasts.
    Trickle(Vec<u8>),
    /// Send nothing, and close after this many milliseconds.
    CloseAfterMs(u64),
    /// As production's writer with `EHDB_FEED_BATCH_LIMIT = limit`: if the subscription
    /// asked for `heartbeat_ms`, a heartbeat at once, before the first poll; then the
    /// records after the cursor, at most `limit` to a batch, back to back; then, parked, a
    /// heartbeat each `heartbeat_ms` for as long as the connection lasts. A subscription to
    /// a shard other than 0 gets no record: a quiet shard.
    Capped { limit: usize },
    /// As `Capped`, but after `beats` heartbeats in all the writer goes silent and keeps
    /// the connection open: a half-open socket, as far as the subscriber can tell.
    GoesSilentAfter { limit: usize, beats: u32 },
    /// As `Capped`, but its first poll takes `ms` (a slow store): the first heartbeat, then
    /// silence that long, then the batches.
    SlowFirstPoll { limit: usize, ms: u64 },
}

/// The writer's heartbeat frame: the JSON object `{"heartbeat":true}`, 18 bytes.
pub fn heartbeat() -> Vec<u8> {
    wal_source_ehdb::frame::frame(br#"{"heartbeat":true}"#)
}

/// The writer: a listener on loopback and the subscriptions it received.
pub struct FakeWriter {
    pub addr: String,
    pub cursors: Arc<Mutex<Vec<u64>>>,
    /// Each subscription's `heartbeat_ms`, `None` where it asked for none.
    pub heartbeats_asked: Arc<Mutex<Vec<Option<u64>>>>,
    _thread: JoinHandle<()>,
}

impl FakeWriter {
    pub fn start(log: Vec<LogRecord>, behaviours: Vec<Behaviour>) -> FakeWriter {
        FakeWriter::start_on("127.0.0.1:0", log, behaviours)
    }

    /// As [`FakeWriter::start`], listening on `addr`.
    pub fn start_on(addr: &str, log: Vec<LogRecord>, behaviours: Vec<Behaviour>) -> FakeWriter {
        let listener = TcpListener::bind(addr).expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let cursors = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&cursors);
        let heartbeats_asked = Arc::new(Mutex::new(Vec::new()));
        let asked = Arc::clone(&heartbeats_asked);
        let thread = std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = Vec::new();
            for (n, connection) in listener.incoming().enumerate() {
                let Ok(mut connection) = connection else {
                    return;
                };
                let Some((shard, cursor, heartbeat_ms)) = read_subscription(&mut connection) else {
                    continue;
                };
                seen.lock().unwrap().push(cursor);
                asked.lock().unwrap().push(heartbeat_ms);
                let behaviour = behaviours
                    .get(n)
                    .or(behaviours.last())
                    .cloned()
                    .unwrap_or(Behaviour::Serve);
                let after: Vec<LogRecord> = log
                    .iter()
                    .filter(|r| shard == 0 && r.global_sequence > cursor)
                    .cloned()
                    .collect();
                if shard != 0 {
                    assert!(
                        matches!(
                            behaviour,
                            Behaviour::Capped { .. }
                                | Behaviour::GoesSilentAfter { .. }
                                | Behaviour::SlowFirstPoll { .. }
                        ),
                        "only a capped writer serves other shards"
                    );
                }
                match behaviour {
                    Behaviour::Capped { .. }
                    | Behaviour::GoesSilentAfter { .. }
                    | Behaviour::SlowFirstPoll { .. } => {
                        let (limit, beats, poll_ms) = match behaviour {
                            Behaviour::GoesSilentAfter { limit, beats } => (limit, beats, 0),
                            Behaviour::SlowFirstPoll { limit, ms } => (limit, u32::MAX, ms),
                            Behaviour::Capped { limit } => (limit, u32::MAX, 0),
                            _ => unreachable!(),
                        };
                        std::thread::spawn(move || {
                            let mut connection =
                                capped(connection, &after, limit, heartbeat_ms, beats, poll_ms);
                            // Open (and silent) until the subscriber closes it.
                            let mut sink = [0u8; 64];
                            while matches!(connection.read(&mut sink), Ok(n) if n > 0) {}
                        });
                    }
                    Behaviour::Serve => {
                        let _ = connection.write_all(&frame_of(&after));
                        open.push(connection);
                    }
                    Behaviour::CutAfter(bytes) => {
                        let frame = frame_of(&after);
                        let _ = connection.write_all(&frame[..bytes.min(frame.len())]);
                        let _ = connection.shutdown(std::net::Shutdown::Both);
                    }
                    Behaviour::Raw(bytes) => {
                        let _ = connection.write_all(&bytes);
                        open.push(connection);
                    }
                    Behaviour::CloseAfterMs(ms) => {
                        std::thread::spawn(move || {
                            std::thread::sleep(std::time::Duration::from_millis(ms));
                            let _ = connection.shutdown(std::net::Shutdown::Both);
                        });
                    }
                    Behaviour::Trickle(bytes) => {
                        std::thread::spawn(move || {
                            let _ = connection.write_all(&bytes);
                            while connection.write_all(b" ").is_ok() {
                                std::thread::sleep(std::time::Duration::from_millis(20));
                            }
                        });
                    }
                }
            }
        });
        FakeWriter {
            addr,
            cursors,
            heartbeats_asked,
            _thread: thread,
        }
    }

    pub fn cursors(&self) -> Vec<u64> {
        self.cursors.lock().unwrap().clone()
    }
}

/// Reads one subscribe frame: its shard, cursor and `heartbeat_ms` (absent, null or 0:
/// none, as the writer reads it).
fn read_subscription(connection: &mut TcpStream) -> Option<(u64, u64, Option<u64>)> {
    let mut prefix = [0u8; 4];
    connection.read_exact(&mut prefix).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(prefix) as usize];
    connection.read_exact(&mut body).ok()?;
    let request: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let heartbeat_ms = request["heartbeat_ms"].as_u64().filter(|&ms| ms > 0);
    Some((
        request["shard"].as_u64()?,
        request["cursor"].as_u64()?,
        heartbeat_ms,
    ))
}

/// Production's writer on one connection: a heartbeat at once if asked, the records in
/// batches of at most `limit` (never an empty one), then a heartbeat per interval parked;
/// at most `beats` heartbeats in all. Returns the connection once it stops.
fn capped(
    mut connection: TcpStream,
    after: &[LogRecord],
    limit: usize,
    heartbeat_ms: Option<u64>,
    beats: u32,
    first_poll_ms: u64,
) -> TcpStream {
    let mut sent = 0u32;
    let beat = |connection: &mut TcpStream, sent: &mut u32| {
        if heartbeat_ms.is_none() || *sent >= beats {
            return true;
        }
        *sent += 1;
        connection.write_all(&heartbeat()).is_ok()
    };
    if !beat(&mut connection, &mut sent) {
        return connection;
    }
    std::thread::sleep(std::time::Duration::from_millis(first_poll_ms));
    for chunk in after.chunks(limit.max(1)) {
        if connection.write_all(&frame_of(chunk)).is_err() {
            return connection;
        }
    }
    let Some(ms) = heartbeat_ms else {
        return connection;
    };
    while sent < beats {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        if !beat(&mut connection, &mut sent) {
            break;
        }
    }
    connection
}
