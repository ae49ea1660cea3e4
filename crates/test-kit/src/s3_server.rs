//! An S3-protocol server for tests: `s3s-fs` on a loopback port, started and killed by the
//! test. `S3S_FS` names its binary (else `target/s3s-fs/bin/s3s-fs`, which
//! `scripts/install-s3s.sh` builds); with `SB_REQUIRE_S3` set, a missing binary fails the
//! test instead of skipping it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An `s3s-fs` server on a loopback port, serving one bucket, [`S3Server::BUCKET`], from a
/// directory of its own (removed when dropped).
#[derive(Debug)]
pub struct S3Server {
    binary: PathBuf,
    root: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl S3Server {
    /// The bucket it serves.
    pub const BUCKET: &'static str = "sbix";
    /// Its access key.
    pub const ACCESS_KEY: &'static str = "sbix";
    /// Its secret key.
    pub const SECRET_KEY: &'static str = "sbix-secret";

    /// Starts one, or `None` (the test skips) where there is no binary and `SB_REQUIRE_S3`
    /// is unset. `name` keeps concurrent tests' directories apart.
    pub fn start(name: &str) -> Option<S3Server> {
        let binary = std::env::var_os("S3S_FS").map(PathBuf::from).or_else(|| {
            let built =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/s3s-fs/bin/s3s-fs");
            built.exists().then_some(built)
        });
        let Some(binary) = binary else {
            assert!(
                std::env::var_os("SB_REQUIRE_S3").is_none(),
                "SB_REQUIRE_S3 is set but s3s-fs was not found (set S3S_FS or run scripts/install-s3s.sh)"
            );
            eprintln!("SKIP: no s3s-fs (set S3S_FS, or run scripts/install-s3s.sh)");
            return None;
        };
        let root = std::env::temp_dir().join(format!("sbix-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(S3Server::BUCKET)).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = S3Server {
            binary,
            root,
            port,
            child: None,
        };
        server.restart();
        Some(server)
    }

    /// Starts the process (again, on the same port and directory) and waits until it
    /// accepts connections.
    pub fn restart(&mut self) {
        let child = Command::new(&self.binary)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--access-key",
                S3Server::ACCESS_KEY,
                "--secret-key",
                S3Server::SECRET_KEY,
            ])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The options an `object_store` URL (`s3://sbix/...`) needs to reach it.
    pub fn url_options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_allow_http", "true".into()),
            ("aws_region", "us-east-1".into()),
            ("aws_access_key_id", S3Server::ACCESS_KEY.into()),
            ("aws_secret_access_key", S3Server::SECRET_KEY.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The file the server keeps an object's bytes in.
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.root.join(S3Server::BUCKET).join(key)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
