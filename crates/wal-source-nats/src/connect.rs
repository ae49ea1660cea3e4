//! The client runtime, the connection settings every part of this crate shares, and the
//! crate's error type.

use std::time::Duration;

use crate::config::JetStreamConfig;

/// Why a source or publisher could not be set up. Broker outages are not errors of this
/// type: they are retried (see [`JetStreamSource`](crate::JetStreamSource)).
#[derive(Debug, thiserror::Error)]
pub enum JetStreamError {
    /// A setting the broker would reject; names the variable that holds it.
    #[error("invalid WAL configuration: {0}")]
    Config(#[from] wal_index::config::ConfigError),
    /// The client's runtime could not start.
    #[error("cannot start the NATS client runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The address could not be used to connect (malformed URL, unknown option).
    #[error("cannot connect to {url}: {message}")]
    Connect {
        /// The address.
        url: String,
        /// The client's explanation.
        message: String,
    },
    /// Nothing answered at the address: no NATS server accepted a connection in time (the
    /// publisher's set-up; sources keep retrying instead).
    #[error("nothing answers at {url}: no NATS server accepted a connection within {waited:?}")]
    Unreachable {
        /// The address.
        url: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// A JetStream call failed (publisher set-up only; sources retry instead).
    #[error("JetStream: {0}")]
    JetStream(String),
}

/// A one-worker Tokio runtime that owns the NATS client's connection task, so the client
/// keeps reading from the socket while the caller's thread applies a batch.
pub(crate) struct Runtime(tokio::runtime::Runtime);

impl Runtime {
    pub(crate) fn new() -> Result<Self, JetStreamError> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wal-nats-client")
            .enable_all()
            .build()
            .map(Runtime)
            .map_err(JetStreamError::Runtime)
    }

    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.0.block_on(future)
    }

    /// A handle to enter the runtime with (`handle.enter()`) while the owner is borrowed
    /// mutably: the client's streams create timers when polled or dropped, which needs a
    /// current runtime.
    pub(crate) fn handle(&self) -> tokio::runtime::Handle {
        self.0.handle().clone()
    }

    /// Runs `future` for at most `limit`; `None` if it did not finish. (Tokio timers must
    /// be created inside the runtime, hence the wrapper.)
    pub(crate) fn block_on_for<F: Future>(
        &self,
        limit: std::time::Duration,
        future: F,
    ) -> Option<F::Output> {
        self.0
            .block_on(async move { tokio::time::timeout(limit, future).await })
            .ok()
    }

    /// The JetStream context spawns its acknowledgement task on creation, so it must be
    /// made inside the runtime.
    pub(crate) fn jetstream(
        &self,
        client: async_nats::Client,
        timeout: std::time::Duration,
    ) -> async_nats::jetstream::Context {
        let _inside = self.0.enter();
        let mut context = async_nats::jetstream::new(client);
        context.set_timeout(timeout);
        context
    }
}

/// The reconnect delay after `attempts` failed attempts: 25 ms doubling up to `max`, the
/// drain's own [`Backoff`](wal_index::ingest::Backoff) schedule.
pub(crate) fn reconnect_delay(attempts: usize, max: Duration) -> Duration {
    wal_index::ingest::Backoff {
        first: Duration::from_millis(25),
        max,
    }
    .pause(u32::try_from(attempts).unwrap_or(u32::MAX))
}

/// Connects without failing on an unreachable broker: the client retries in the background,
/// forever, with [`reconnect_delay`].
fn connect(
    runtime: &Runtime,
    config: &JetStreamConfig,
) -> Result<async_nats::Client, JetStreamError> {
    let max = config.reconnect_max_delay;
    let options = async_nats::ConnectOptions::new()
        .name("state-builder-wal")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(config.api_timeout)
        .ping_interval(config.ping_interval)
        .reconnect_delay_callback(move |attempts| reconnect_delay(attempts, max));
    // Several comma-separated addresses name a cluster; the client picks among them.
    let addresses: Vec<&str> = config.url.split(',').map(str::trim).collect();
    runtime
        .block_on(options.connect(addresses))
        .map_err(|e| JetStreamError::Connect {
            url: config.url.clone(),
            message: e.to_string(),
        })
}

/// What a source and a publisher both hold: the runtime, the client on it, and a JetStream
/// context with `config.api_timeout`. Validates `config` first.
pub(crate) fn open(
    config: &JetStreamConfig,
) -> Result<(Runtime, async_nats::Client, async_nats::jetstream::Context), JetStreamError> {
    config.validate()?;
    let runtime = Runtime::new()?;
    let client = connect(&runtime, config)?;
    let context = runtime.jetstream(client.clone(), config.api_timeout);
    Ok((runtime, client, context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_backoff_doubles_and_caps() {
        let max = Duration::from_secs(1);
        let delays: Vec<u64> = (0..9)
            .map(|n| reconnect_delay(n, max).as_millis() as u64)
            .collect();
        assert_eq!(delays, [25, 25, 50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(reconnect_delay(usize::MAX, max), max);
    }

    #[test]
    fn a_cluster_is_several_comma_separated_addresses() {
        let runtime = Runtime::new().unwrap();
        // Nothing listens on port 1; with retry_on_initial_connect the client is created
        // anyway and keeps trying, so both addresses must have parsed.
        let config = JetStreamConfig::new("nats://127.0.0.1:1, nats://127.0.0.1:2");
        assert!(connect(&runtime, &config).is_ok());
        let config = JetStreamConfig::new("nats://127.0.0.1:1,nats://[bad");
        assert!(matches!(
            connect(&runtime, &config),
            Err(JetStreamError::Connect { .. })
        ));
    }

    #[test]
    fn malformed_url_is_a_typed_error() {
        let runtime = Runtime::new().unwrap();
        let config = JetStreamConfig::new("nats://[not a host");
        match connect(&runtime, &config) {
            Err(JetStreamError::Connect { url, .. }) => assert_eq!(url, config.url),
            other => panic!("expected a Connect error, got {other:?}"),
        }
    }
}
