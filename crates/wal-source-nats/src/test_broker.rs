//! A throwaway `nats-server -js` for integration tests: a free loopback port, a temporary
//! store, SIGKILL and restart on the same store. Enabled by the `test-broker` feature.
//!
//! ```no_run
//! use wal_source_nats::test_broker::Broker;
//!
//! // `None` (after printing why) where no nats-server binary exists.
//! let Some(mut broker) = Broker::start("my_test") else { return };
//! let url = broker.url();
//! broker.kill();     // SIGKILL
//! broker.restart();  // same port, same store
//! # let _ = url;
//! ```

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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
    /// The loopback port it listens on.
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

    /// `nats://127.0.0.1:<port>`.
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
