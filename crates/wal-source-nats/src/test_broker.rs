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

pub mod drill;

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

/// [`server_binary`], or `None` after printing why `test` is skipped; with
/// `SB_REQUIRE_NATS` set (CI sets it once it installed the server), a failure instead.
fn server_binary_or_skip(test: &str) -> Option<PathBuf> {
    let binary = server_binary();
    if binary.is_none() {
        assert!(
            std::env::var_os("SB_REQUIRE_NATS").is_none(),
            "SB_REQUIRE_NATS is set but nats-server was not found (set NATS_SERVER or install it)"
        );
        eprintln!(
            "SKIP {test}: nats-server not found (apt-get install nats-server, or set NATS_SERVER=/path/to/nats-server)"
        );
    }
    binary
}

/// Waits up to 20 s until the server `child`, named `name`, listens on `host:port`; panics
/// if it exits first (saying how) or never listens. `hint` follows the exit's message.
fn wait_listening(child: &mut Child, name: &str, host: &str, port: u16, hint: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((host, port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{name} exited at start ({status}){hint}");
        }
        assert!(Instant::now() < deadline, "{name} did not listen in 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
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
        let binary = server_binary_or_skip(test)?;
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
        let child = self.child.insert(child);
        wait_listening(child, "nats-server", "127.0.0.1", self.port, "");
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

/// A JetStream cluster of nodes on one machine, clustered with routes, each with its own
/// port, route port, store and `server_name` (`n0`, `n1`, ...). Enabled by the
/// `test-broker` feature. Dropping it kills every node and removes the stores (and, in the
/// partitionable form, the namespaces and links it made).
///
/// Each node is a process the test can SIGKILL and restart on the same store, or SIGSTOP
/// and SIGCONT (a process pause: the node keeps its sockets, answers nothing, and its peers
/// elect without it). [`Cluster::url`] names every node, so a client fails over.
///
/// [`Cluster::start`] puts every node on loopback. [`Cluster::start_partitionable`] puts
/// each node in a network namespace of its own, linked to the test's namespace by a veth
/// pair on one bridge, so [`Cluster::partition`] can cut one node off from the others and
/// from the clients (its link goes down) and [`Cluster::heal`] can bring it back. That
/// needs root and iproute2; where either is missing it returns `None` after saying why.
///
/// ```no_run
/// use wal_source_nats::test_broker::Cluster;
///
/// let Some(mut cluster) = Cluster::start("my_test", 3) else { return };
/// let url = cluster.url(); // nats://127.0.0.1:a,nats://127.0.0.1:b,nats://127.0.0.1:c
/// cluster.kill(0);
/// cluster.restart(0);
/// cluster.pause(1);
/// cluster.resume(1);
/// # let _ = url;
/// ```
pub struct Cluster {
    binary: PathBuf,
    nodes: Vec<Node>,
    dir: PathBuf,
    /// The namespaces and links of the partitionable form.
    network: Option<Network>,
}

struct Node {
    name: String,
    host: String,
    port: u16,
    child: Option<Child>,
    config: PathBuf,
}

/// How [`Cluster::start_with`] sets the cluster up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Each node in a network namespace of its own ([`Cluster::start_partitionable`]).
    pub partitionable: bool,
    /// `sync_interval: always` in every node's `jetstream` block: each write is synced to
    /// disk before it is acknowledged. nats-server 2.10 and later; 2.9 refuses to start
    /// with it, and [`Cluster::restart`] says so.
    pub sync_always: bool,
}

/// What [`Cluster::start_partitionable`] made: a bridge, and per node a namespace and the
/// host side of its veth pair.
struct Network {
    bridge: String,
    namespaces: Vec<String>,
    links: Vec<String>,
}

/// Runs `ip ARGS`; false (after printing why) if it failed.
fn ip(args: &[&str]) -> bool {
    match Command::new("ip")
        .args(args)
        .stderr(Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(error) => {
            eprintln!("ip {}: {error}", args.join(" "));
            false
        }
    }
}

impl Network {
    /// A bridge `10.213.<net>.254/24` and `size` namespaces at `.1`, `.2`, ...
    fn create(net: u8, size: usize) -> Option<Network> {
        // Names unique to this process and cluster (at most 15 bytes each), so a cleanup
        // never removes another run's devices; each is recorded only once it exists.
        let tag = format!(
            "{:x}",
            (std::process::id() << 8 | u32::from(net)) & 0xff_ffff
        );
        let bridge = format!("sb{tag}b");
        let mut network = Network {
            bridge: String::new(),
            namespaces: Vec::new(),
            links: Vec::new(),
        };
        let gateway = format!("10.213.{net}.254/24");
        if !ip(&["link", "add", &bridge, "type", "bridge"]) {
            return None;
        }
        network.bridge = bridge.clone();
        if !(ip(&["addr", "add", &gateway, "dev", &bridge]) && ip(&["link", "set", &bridge, "up"]))
        {
            return None; // Drop removes what was made
        }
        for i in 0..size {
            let namespace = format!("sb{tag}n{i}");
            let (host, peer) = (format!("sb{tag}v{i}"), format!("sb{tag}p{i}"));
            let address = format!("10.213.{net}.{}/24", i + 1);
            if !ip(&["netns", "add", &namespace]) {
                return None;
            }
            network.namespaces.push(namespace.clone());
            if !ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer]) {
                return None;
            }
            network.links.push(host.clone());
            let made = ip(&["link", "set", &peer, "netns", &namespace])
                && ip(&["link", "set", &host, "master", &bridge])
                && ip(&["link", "set", &host, "up"])
                && ip(&["-n", &namespace, "addr", "add", &address, "dev", &peer])
                && ip(&["-n", &namespace, "link", "set", &peer, "up"])
                && ip(&["-n", &namespace, "link", "set", "lo", "up"]);
            if !made {
                return None;
            }
        }
        Some(network)
    }

    /// Whether a TCP connection from inside namespace `from` reaches `host:port` (a
    /// firewall on the bridge, as Docker hosts set up, can drop what the test's own
    /// namespace still reaches).
    /// Tried for up to 10 s: a node opens its route port a moment after its client port.
    fn reaches(&self, from: usize, host: &str, port: u16) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reached = Command::new("ip")
                .args(["netns", "exec", &self.namespaces[from]])
                .args(["timeout", "3", "bash", "-c"])
                .arg(format!("exec 3<>/dev/tcp/{host}/{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if reached || Instant::now() > deadline {
                return reached;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A /24 of 10.213.0.0/16 that no route of this machine uses yet (another cluster's
    /// bridge, say), searched from `first` on.
    fn free_net(first: u8) -> Option<u8> {
        (0..250u16)
            .map(|k| ((u16::from(first) + k) % 250) as u8)
            .find(|net| {
                Command::new("ip")
                    .args(["route", "show", &format!("10.213.{net}.0/24")])
                    .output()
                    .is_ok_and(|out| out.status.success() && out.stdout.is_empty())
            })
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for link in &self.links {
            let _ = Command::new("ip").args(["link", "del", link]).status();
        }
        for namespace in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", namespace])
                .status();
        }
        if !self.bridge.is_empty() {
            let _ = Command::new("ip")
                .args(["link", "del", &self.bridge])
                .status();
        }
    }
}

impl Cluster {
    /// Starts `size` nodes on loopback and waits until each listens, or returns `None`
    /// after printing why the test is skipped (as [`Broker::start`]). JetStream elects its
    /// meta leader a few seconds later: create streams with a retry
    /// (`JetStreamPublisher::ensure_stream_replicated` waits for it).
    pub fn start(test: &str, size: usize) -> Option<Cluster> {
        Self::start_with(test, size, ClusterOptions::default())
    }

    /// [`Cluster::start`] with each node in a network namespace of its own, so that
    /// [`Cluster::partition`] can cut it off. `None` (after saying why) without root or
    /// iproute2, even with `SB_REQUIRE_NATS` set: a machine may have a broker and no
    /// namespaces.
    pub fn start_partitionable(test: &str, size: usize) -> Option<Cluster> {
        let options = ClusterOptions {
            partitionable: true,
            ..ClusterOptions::default()
        };
        Self::start_with(test, size, options)
    }

    /// [`Cluster::start`] with `options`.
    pub fn start_with(test: &str, size: usize, options: ClusterOptions) -> Option<Cluster> {
        let ClusterOptions {
            partitionable,
            sync_always,
        } = options;
        let binary = server_binary_or_skip(test)?;
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "wal-source-nats-cluster-{}-{serial}",
            std::process::id(),
        ));
        let network = if partitionable {
            // One /24 per cluster, not in use on this machine.
            let first = ((std::process::id() * 7 + serial) % 250) as u8;
            let Some((net, network)) =
                Network::free_net(first).and_then(|net| Some((net, Network::create(net, size)?)))
            else {
                eprintln!(
                    "SKIP {test}: cannot make network namespaces here (needs root and iproute2)"
                );
                return None;
            };
            Some((net, network))
        } else {
            None
        };
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let hosts: Vec<String> = (0..size)
            .map(|i| match &network {
                Some((net, _)) => format!("10.213.{net}.{}", i + 1),
                None => "127.0.0.1".to_owned(),
            })
            .collect();
        // Every listener is held until the configurations are written, so no two nodes get
        // the same port (a node binds its own a moment later). On loopback that also keeps
        // other processes off them meanwhile; a partitionable cluster's nodes bind their own
        // addresses, where these loopback listeners reserve nothing.
        let listeners: Vec<TcpListener> = (0..2 * size)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
            .collect();
        let port = |k: usize| listeners[k].local_addr().expect("a bound port").port();
        let ports: Vec<(u16, u16)> = (0..size).map(|i| (port(2 * i), port(2 * i + 1))).collect();
        let nodes = (0..size)
            .map(|i| {
                let name = format!("n{i}");
                let routes: Vec<String> = (0..size)
                    .filter(|&j| j != i)
                    .map(|j| format!("\"nats-route://{}:{}\"", hosts[j], ports[j].1))
                    .collect();
                let store = dir.join(&name);
                let config = dir.join(format!("{name}.conf"));
                let text = format!(
                    "server_name: {name}\nlisten: \"{host}:{}\"\n\
                     jetstream {{ store_dir: {:?}{} }}\n\
                     cluster {{\n  name: sb\n  listen: \"{host}:{}\"\n  routes: [{}]\n}}\n",
                    ports[i].0,
                    store.display().to_string(),
                    if sync_always {
                        ", sync_interval: always"
                    } else {
                        ""
                    },
                    ports[i].1,
                    routes.join(", "),
                    host = hosts[i],
                );
                std::fs::write(&config, text).expect("the node's configuration is written");
                Node {
                    name,
                    host: hosts[i].clone(),
                    port: ports[i].0,
                    child: None,
                    config,
                }
            })
            .collect();
        drop(listeners);
        let mut cluster = Cluster {
            binary,
            nodes,
            dir,
            network: network.map(|(_, network)| network),
        };
        for i in 0..size {
            cluster.restart(i);
        }
        if let Some(network) = &cluster.network {
            let routes = (0..size).all(|i| {
                (0..size)
                    .filter(|&j| j != i)
                    .all(|j| network.reaches(i, &cluster.nodes[j].host, ports[j].1))
            });
            if !routes {
                eprintln!(
                    "SKIP {test}: the nodes' namespaces do not reach each other over the bridge (a firewall on bridged traffic?)"
                );
                return None;
            }
        }
        Some(cluster)
    }

    /// Every node's address, comma-separated (what `JetStreamConfig::url` takes).
    pub fn url(&self) -> String {
        (0..self.nodes.len())
            .map(|i| self.node_url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `i`'s own address.
    pub fn node_url(&self, i: usize) -> String {
        format!("nats://{}:{}", self.nodes[i].host, self.nodes[i].port)
    }

    /// Node `i`'s `server_name` (what a stream's cluster info names as its leader).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The node whose `server_name` is `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.name == name)
    }

    /// How many nodes the cluster has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether [`Cluster::partition`] is available (the partitionable form).
    pub fn can_partition(&self) -> bool {
        self.network.is_some()
    }

    /// Starts node `i` (again) on its port and store, and waits until it listens.
    pub fn restart(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        assert!(node.child.is_none(), "node {} is running", node.name);
        let mut command = match &self.network {
            // `ip netns exec` enters the namespace and execs the server: the child's pid
            // is the server's, which `kill`, `pause` and `resume` signal.
            Some(network) => {
                let mut command = Command::new("ip");
                command
                    .args(["netns", "exec", &network.namespaces[i]])
                    .arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        let child = command
            .arg("-c")
            .arg(&node.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let hint = format!(
            "; a setting this nats-server does not know? (`sync_interval` needs 2.10 or later; \
             run {} -c {} to see)",
            self.binary.display(),
            node.config.display()
        );
        let name = format!("node {}", node.name);
        let child = node.child.insert(child);
        wait_listening(child, &name, &node.host, node.port, &hint);
    }

    /// SIGKILL node `i`: no shutdown, no flush.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP node `i`: it stops answering, with its connections open.
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// SIGCONT node `i` after [`Cluster::pause`].
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    /// Cuts node `i` off from every other node and from the clients: its link to the
    /// bridge goes down, and packets to and from it are lost (nothing is reset). Panics
    /// unless the cluster is partitionable.
    pub fn partition(&self, i: usize) {
        self.set_link(i, "down");
    }

    /// Brings node `i`'s link back after [`Cluster::partition`].
    pub fn heal(&self, i: usize) {
        self.set_link(i, "up");
    }

    fn set_link(&self, i: usize, state: &str) {
        let network = self
            .network
            .as_ref()
            .expect("partition needs Cluster::start_partitionable");
        assert!(
            ip(&["link", "set", &network.links[i], state]),
            "cannot set node {i}'s link {state}"
        );
    }

    fn signal(&self, i: usize, signal: &str) {
        let child = self.nodes[i].child.as_ref().expect("the node is running");
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill {signal} {}", child.id());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            // A paused process ignores nothing but SIGKILL, which is what `kill` sends.
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        // `network`, dropped after this, removes the links and namespaces.
    }
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("port", &self.port)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("nodes", &self.nodes.len())
            .field("dir", &self.dir)
            .field("partitionable", &self.network.is_some())
            .finish_non_exhaustive()
    }
}
