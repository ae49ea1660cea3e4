//! A writer of our own that speaks the feed's protocol (no code of the real one): it
//! serves a fixed log of shard 0, answers each subscription with every record after the
//! subscriber's cursor in one frame, and can cut a connection after a given number of bytes
//! or send raw frames, which the real writer never does. The real writer is
//! `wal_source_ehdb::test_writer`.
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
    /// As upstream's writer with `EHDB_FEED_BATCH_LIMIT`: a heartbeat (a frame with no
    /// record) first if `heartbeat_first`, then the records after the cursor at most
    /// `limit` to a frame, then a heartbeat every `heartbeat_ms` for as long as the
    /// connection lasts. A subscription to a shard other than 0 gets no record: a quiet
    /// shard.
    Capped {
        limit: usize,
        heartbeat_first: bool,
        heartbeat_ms: u64,
    },
}

/// A frame with no record: the writer's heartbeat.
pub fn heartbeat() -> Vec<u8> {
    frame_of(&[])
}

/// The writer: a listener on loopback and the subscriptions it received.
pub struct FakeWriter {
    pub addr: String,
    pub cursors: Arc<Mutex<Vec<u64>>>,
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
        let thread = std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = Vec::new();
            for (n, connection) in listener.incoming().enumerate() {
                let Ok(mut connection) = connection else {
                    return;
                };
                let Some((shard, cursor)) = read_subscription(&mut connection) else {
                    continue;
                };
                seen.lock().unwrap().push(cursor);
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
                        matches!(behaviour, Behaviour::Capped { .. }),
                        "only a capped writer serves other shards"
                    );
                }
                match behaviour {
                    Behaviour::Capped {
                        limit,
                        heartbeat_first,
                        heartbeat_ms,
                    } => {
                        std::thread::spawn(move || {
                            if heartbeat_first {
                                let _ = connection.write_all(&heartbeat());
                                std::thread::sleep(std::time::Duration::from_millis(heartbeat_ms));
                            }
                            for chunk in after.chunks(limit.max(1)) {
                                if connection.write_all(&frame_of(chunk)).is_err() {
                                    return;
                                }
                            }
                            loop {
                                std::thread::sleep(std::time::Duration::from_millis(heartbeat_ms));
                                if connection.write_all(&heartbeat()).is_err() {
                                    return;
                                }
                            }
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
            _thread: thread,
        }
    }

    pub fn cursors(&self) -> Vec<u64> {
        self.cursors.lock().unwrap().clone()
    }
}

/// Reads one subscribe frame and returns its shard and cursor.
fn read_subscription(connection: &mut TcpStream) -> Option<(u64, u64)> {
    let mut prefix = [0u8; 4];
    connection.read_exact(&mut prefix).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(prefix) as usize];
    connection.read_exact(&mut body).ok()?;
    let request: serde_json::Value = serde_json::from_slice(&body).ok()?;
    Some((request["shard"].as_u64()?, request["cursor"].as_u64()?))
}
