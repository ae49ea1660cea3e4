//! A real `nats-server -js` on a free loopback port with a temporary store, and the event
//! chains the tests publish through it.

#![allow(dead_code, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Where the server binary is: `$NATS_SERVER`, then `PATH`, then Debian's `/usr/sbin`.
fn server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

/// A broker process. Dropping it kills the process and removes the store.
pub struct Broker {
    binary: PathBuf,
    child: Option<Child>,
    pub port: u16,
    store: PathBuf,
}

impl Broker {
    /// Starts a broker, or returns `None` after printing why the test is skipped. With
    /// `SB_REQUIRE_NATS=1` (CI sets it once it installed the server) a missing server is a
    /// failure instead.
    pub fn start(test: &str) -> Option<Broker> {
        let Some(binary) = server_binary() else {
            assert!(
                std::env::var_os("SB_REQUIRE_NATS").is_none(),
                "SB_REQUIRE_NATS is set but nats-server was not found (set NATS_SERVER or install it)"
            );
            eprintln!(
                "SKIP {test}: nats-server not found (apt-get install nats-server, or set NATS_SERVER=/path/to/nats-server)"
            );
            return None;
        };
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let store = std::env::temp_dir().join(format!(
            "wal-source-nats-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut broker = Broker {
            binary,
            child: None,
            port,
            store,
        };
        broker.restart();
        Some(broker)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the process again on the same port and store.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the broker is running");
        let child = Command::new(&self.binary)
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen in 20 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL: no shutdown, no flush; the store is what the kernel has.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// The events of one execution: a root, then `len - 1` events each linked to the previous,
/// ids `execution * 1000 + 1 ..`, none terminal.
pub fn chain(execution: i64, len: i64) -> Vec<(i64, Bytes)> {
    (1..=len)
        .map(|k| {
            let id = execution * 1000 + k;
            let payload = if k == 1 {
                format!(
                    r#"{{"event_id":{id},"execution_id":{execution},"event_type":"playbook_started","result":{{"k":{k}}}}}"#
                )
            } else {
                format!(
                    r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{},"event_type":"step_completed","result":{{"k":{k}}}}}"#,
                    id - 1
                )
            };
            (execution, Bytes::from(payload))
        })
        .collect()
}

/// The tip of [`chain`]`(execution, len)`.
pub fn tip(execution: i64, len: i64) -> i64 {
    execution * 1000 + len
}

/// Waits for `done`, polling, up to `limit`.
pub fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The sum of every sample of `series` (all label sets) in a Prometheus exposition.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(series)?;
            let value = if rest.starts_with('{') {
                rest.rsplit_once(' ')?.1
            } else {
                rest.strip_prefix(' ')?
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}
