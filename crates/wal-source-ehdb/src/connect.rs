//! Dialling the writer: every address a name resolves to, within one deadline, with
//! `TCP_NODELAY` (the feed's frames are small once caught up) and, where asked, TCP
//! keepalive; the subscription a connection opens with.

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Connects to `addr` (`HOST:PORT`), trying each address it resolves to until `until`.
pub(crate) fn dial(addr: &str, until: Instant) -> io::Result<TcpStream> {
    let mut last = None;
    for resolved in addr.to_socket_addrs()? {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&resolved, left) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{addr} could not be reached in time (or resolves to no address)"),
        )
    }))
}

/// Turns on TCP keepalive: after `idle` without traffic the kernel probes the peer every
/// `idle`, three times (where the platform lets both be set; elsewhere its defaults
/// apply), so a peer that stopped answering (a lost host, a partition) fails the
/// connection's next read after about four times `idle` instead of leaving it blocked
/// forever. A peer that is alive but silent (a stopped process) still answers the
/// probes: that is what an idle deadline is for.
pub(crate) fn keepalive(stream: &TcpStream, idle: Duration) -> io::Result<()> {
    let probes = socket2::TcpKeepalive::new().with_time(idle);
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
    let probes = probes.with_interval(idle).with_retries(3);
    socket2::SockRef::from(stream).set_tcp_keepalive(&probes)
}

/// `wait` from now, or a year from now for a wait too long to add to an `Instant` (a
/// `Duration::MAX` timeout meaning "none").
pub(crate) fn after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(Duration::from_secs(365 * 86_400)))
        .unwrap_or(now)
}

/// Sends the one frame a subscriber writes: `{"shard": S, "cursor": C}`, and
/// `"heartbeat_ms": H` when heartbeats are asked for (a writer that predates them ignores
/// the key).
pub(crate) fn send_subscription(
    stream: &TcpStream,
    shard: u32,
    cursor: u64,
    heartbeat: Option<Duration>,
) -> io::Result<()> {
    // Zero asks for none, as the protocol reads it.
    let request = match heartbeat.map(|h| h.as_millis()).filter(|&ms| ms > 0) {
        Some(ms) => format!(r#"{{"shard":{shard},"cursor":{cursor},"heartbeat_ms":{ms}}}"#),
        None => format!(r#"{{"shard":{shard},"cursor":{cursor}}}"#),
    };
    let mut stream = stream;
    stream.write_all(&crate::frame::frame(request.as_bytes()))
}
