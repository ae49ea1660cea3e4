//! A writer of our own that speaks the feed's protocol (no code of the real one): it
//! serves a fixed log of shard 0, answers each subscription with every record after the
//! subscriber's cursor in one frame, and can cut a connection after a given number of bytes
//! or send raw frames, which the real writer never does.
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
                let Some(cursor) = read_subscription(&mut connection) else {
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
                    .filter(|r| r.global_sequence > cursor)
                    .cloned()
                    .collect();
                match behaviour {
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

/// Reads one subscribe frame and returns its cursor.
fn read_subscription(connection: &mut TcpStream) -> Option<u64> {
    let mut prefix = [0u8; 4];
    connection.read_exact(&mut prefix).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(prefix) as usize];
    connection.read_exact(&mut body).ok()?;
    let request: serde_json::Value = serde_json::from_slice(&body).ok()?;
    assert_eq!(request["shard"], 0, "the subscription names its shard");
    request["cursor"].as_u64()
}

/// The real writer (`scripts/ehdb-writer.sh` builds its harness; `EHDB_WRITER` names the
/// binary). `None`, saying so, where it is absent, unless `SB_REQUIRE_EHDB` is set, where a
/// missing writer fails the test instead of skipping it.
pub fn real_writer_binary() -> Option<std::path::PathBuf> {
    match std::env::var_os("EHDB_WRITER") {
        Some(path) => Some(path.into()),
        None => {
            assert!(
                std::env::var_os("SB_REQUIRE_EHDB").is_none(),
                "SB_REQUIRE_EHDB is set but EHDB_WRITER is not"
            );
            eprintln!("SKIP: EHDB_WRITER is not set (scripts/ehdb-writer.sh builds the writer)");
            None
        }
    }
}

/// A running real writer over a directory it can be killed and restarted on.
pub struct RealWriter {
    binary: std::path::PathBuf,
    pub dir: std::path::PathBuf,
    pub feed: String,
    pub ingest: String,
    /// The tip the writer reported when it last started.
    pub tip: u64,
    child: Option<std::process::Child>,
}

impl RealWriter {
    /// Starts the writer on a fresh directory under the system's temp dir.
    pub fn start(binary: std::path::PathBuf, name: &str) -> RealWriter {
        let dir = std::env::temp_dir().join(format!("sb-ehdb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut writer = RealWriter {
            binary,
            dir,
            feed: "127.0.0.1:0".into(),
            ingest: "127.0.0.1:0".into(),
            tip: 0,
            child: None,
        };
        writer.launch();
        writer
    }

    /// Starts the process and waits for its ready line (the feed face must not be probed:
    /// this writer version stops accepting after one malformed subscription).
    fn launch(&mut self) {
        use std::io::BufRead;
        let mut child = std::process::Command::new(&self.binary)
            .args([
                "--dir",
                &self.dir.to_string_lossy(),
                "--feed",
                &self.feed,
                "--ingest",
                &self.ingest,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("the writer starts");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the writer's ready line");
        let field = |name: &str| -> String {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_owned))
                .unwrap_or_else(|| panic!("no {name} in the ready line {line:?}"))
        };
        self.feed = field("feed");
        self.ingest = field("ingest");
        self.tip = field("tip").parse().expect("a numeric tip");
        self.child = Some(child);
    }

    /// SIGKILL: no shutdown, no flush beyond what was acknowledged.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same directory and the same ports.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for RealWriter {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
