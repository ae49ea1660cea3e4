//! The real EHDB writer for integration tests and benchmarks: a temporary directory,
//! loopback ports, SIGKILL and restart on the same directory, SIGSTOP and SIGCONT. Enabled
//! by the `test-writer` feature.
//!
//! The binary is this repository's harness around EHDB's own engine
//! (`scripts/ehdb-writer.sh` builds it from the EHDB source tree `EHDB_SRC` names);
//! `EHDB_WRITER` names the binary. Where it is not set, [`Writer::start`] prints why and
//! returns `None`, so a test skips; with `SB_REQUIRE_EHDB` set (CI sets it once it built
//! the writer) a missing writer fails the test instead.
//!
//! ```no_run
//! use wal_source_ehdb::test_writer::Writer;
//!
//! let Some(mut writer) = Writer::start("my_test") else { return };
//! let (feed, ingest) = (writer.feed.clone(), writer.ingest.clone());
//! writer.kill();     // SIGKILL
//! writer.restart();  // same directory, same ports
//! # let _ = (feed, ingest);
//! ```

use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// A writer process over a directory of its own. Dropping it kills the process and removes
/// the directory.
pub struct Writer {
    binary: PathBuf,
    /// The writer's directory (its log).
    pub dir: PathBuf,
    /// The feed face, `127.0.0.1:PORT`.
    pub feed: String,
    /// The ingest face, `127.0.0.1:PORT`.
    pub ingest: String,
    /// The last global sequence the writer reported when it last started.
    pub tip: u64,
    load: Option<PathBuf>,
    child: Option<Child>,
}

impl Writer {
    /// Starts a writer on a fresh directory, or returns `None` after printing why the test
    /// is skipped.
    pub fn start(test: &str) -> Option<Writer> {
        Writer::start_loaded(test, None)
    }

    /// As [`Writer::start`], its log first loaded from `load` (one event envelope per
    /// line, each appended with the next global sequence) when given.
    pub fn start_loaded(test: &str, load: Option<&Path>) -> Option<Writer> {
        let binary = match std::env::var_os("EHDB_WRITER") {
            Some(path) => PathBuf::from(path),
            None => {
                assert!(
                    std::env::var_os("SB_REQUIRE_EHDB").is_none(),
                    "SB_REQUIRE_EHDB is set but EHDB_WRITER is not"
                );
                eprintln!(
                    "SKIP {test}: EHDB_WRITER is not set (EHDB_SRC=/path/to/ehdb scripts/ehdb-writer.sh builds the writer and prints its path)"
                );
                return None;
            }
        };
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sb-ehdb-{test}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the writer's directory");
        let mut writer = Writer {
            binary,
            dir,
            feed: "127.0.0.1:0".into(),
            ingest: "127.0.0.1:0".into(),
            tip: 0,
            load: load.map(Path::to_path_buf),
            child: None,
        };
        writer.launch();
        // A restart reopens the same log; it is not loaded again.
        writer.load = None;
        Some(writer)
    }

    /// Starts the process and waits for its ready line (the feed face must not be probed:
    /// this writer version stops accepting after one malformed subscription).
    fn launch(&mut self) {
        let dir = self.dir.to_string_lossy().into_owned();
        let mut command = Command::new(&self.binary);
        command.args([
            "--dir",
            &dir,
            "--feed",
            &self.feed,
            "--ingest",
            &self.ingest,
        ]);
        if let Some(load) = &self.load {
            command.arg("--load").arg(load);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", self.binary.display()));
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the writer's ready line");
        let field = |name: &str| -> String {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_owned))
                .unwrap_or_else(|| panic!("no {name} in the writer's ready line {line:?}"))
        };
        self.feed = field("feed");
        self.ingest = field("ingest");
        self.tip = field("tip").parse().expect("a numeric tip");
        self.child = Some(child);
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: no shutdown, no flush beyond what the writer already made durable.
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

    /// SIGSTOP: the process keeps its sockets (connections stay open, the kernel still
    /// answers keepalive probes) but sends nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Writer::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let status = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status()
                .expect("kill(1) runs");
            assert!(status.success(), "kill {signal} {pid} failed");
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// When a [`CutProxy`] cuts a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Never.
    Never,
    /// After this many bytes from the writer.
    After(u64),
    /// Halfway through the first frame, as its length prefix states it.
    HalfOfFirstFrame,
}

/// A TCP proxy in front of a writer's feed face that cuts chosen connections after some of
/// the writer's bytes, and keeps the cursor each subscription asked for: a dropped
/// connection mid-frame, on demand.
pub struct CutProxy {
    /// Where subscribers connect, `127.0.0.1:PORT`.
    pub addr: String,
    cursors: Arc<Mutex<Vec<u64>>>,
    bytes: Arc<AtomicU64>,
    _thread: JoinHandle<()>,
}

impl CutProxy {
    /// Proxies to `upstream`; connection `n` is cut as `cuts[n]` says (past the end of
    /// `cuts`: never).
    pub fn start(upstream: &str, cuts: Vec<Cut>) -> std::io::Result<CutProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let cursors = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&cursors);
        let bytes = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::clone(&bytes);
        let upstream = upstream.to_owned();
        let thread = std::thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { return };
                let Ok(writer) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let cut = cuts.get(n).copied().unwrap_or(Cut::Never);
                let (seen, forwarded) = (Arc::clone(&seen), Arc::clone(&forwarded));
                std::thread::spawn(move || proxy(client, writer, cut, &seen, &forwarded));
            }
        });
        Ok(CutProxy {
            addr,
            cursors,
            bytes,
            _thread: thread,
        })
    }

    /// The cursors the subscriptions asked for, in order.
    pub fn cursors(&self) -> Vec<u64> {
        self.cursors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Bytes forwarded from the writer so far, over every connection.
    pub fn bytes_from_writer(&self) -> u64 {
        // Relaxed: a statistic; it pairs with nothing.
        self.bytes.load(Ordering::Relaxed)
    }
}

/// One proxied connection: the subscription forwarded (its cursor kept), then the writer's
/// bytes copied until the cut.
fn proxy(
    mut client: TcpStream,
    mut writer: TcpStream,
    cut: Cut,
    seen: &Mutex<Vec<u64>>,
    forwarded: &AtomicU64,
) {
    let mut prefix = [0u8; 4];
    if client.read_exact(&mut prefix).is_err() {
        return;
    }
    let mut body = vec![0u8; u32::from_be_bytes(prefix).min(1 << 16) as usize];
    if client.read_exact(&mut body).is_err() {
        return;
    }
    let text = String::from_utf8_lossy(&body);
    let cursor = text
        .split("\"cursor\":")
        .nth(1)
        .map(|rest| {
            rest.trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(u64::MAX);
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(cursor);
    if writer.write_all(&prefix).is_err() || writer.write_all(&body).is_err() {
        return;
    }
    let mut limit = match cut {
        Cut::Never => u64::MAX,
        Cut::After(bytes) => bytes,
        Cut::HalfOfFirstFrame => {
            let mut frame_prefix = [0u8; 4];
            if writer.read_exact(&mut frame_prefix).is_err()
                || client.write_all(&frame_prefix).is_err()
            {
                return;
            }
            forwarded.fetch_add(4, Ordering::Relaxed);
            u64::from(u32::from_be_bytes(frame_prefix)) / 2
        }
    };
    let mut buf = vec![0u8; 64 << 10];
    while limit > 0 {
        let want = usize::try_from(limit).unwrap_or(usize::MAX).min(buf.len());
        match writer.read(&mut buf[..want]) {
            Ok(0) | Err(_) => break,
            Ok(got) => {
                if client.write_all(&buf[..got]).is_err() {
                    break;
                }
                limit -= got as u64;
                forwarded.fetch_add(got as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = writer.shutdown(Shutdown::Both);
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("dir", &self.dir)
            .field("feed", &self.feed)
            .field("ingest", &self.ingest)
            .field("tip", &self.tip)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CutProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CutProxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}
