//! Where the WAL lives on the broker, how a pool reads its share of it, and the subject
//! scheme that makes the sharing possible.

use std::time::Duration;

use wal_index::config::ConfigError;

/// The stream production writes workflow events to.
pub const DEFAULT_STREAM: &str = "noetl_events";

/// The first two tokens of every event subject: `noetl.events.<shard>.<execution_id>`.
pub const DEFAULT_SUBJECT_PREFIX: &str = "noetl.events";

/// How a pool's consumer remembers what it has read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ConsumerMode {
    /// An ephemeral consumer that delivers the whole retained stream on every start, then
    /// follows the tail. Nothing is acknowledged; the index is rebuilt from the broker each
    /// time the process starts (production's cold-start path). If the consumer disappears
    /// (broker restart, inactivity), a new one resumes after the last sequence this process
    /// returned, so nothing is read twice and nothing is skipped.
    #[default]
    ReplayOnBoot,
    /// A durable consumer with this name. Delivery resumes where the last acknowledgement
    /// left off, across process restarts; [`JetStreamSource`](crate::JetStreamSource)
    /// acknowledges each message only after the drain applied it (`WalSource::commit`), so
    /// delivery is at-least-once and the index's idempotent apply absorbs redeliveries.
    Durable {
        /// The consumer's durable name (one per pool: pools sharing a name share the
        /// deliveries, which is rarely what an index wants).
        name: String,
    },
}

/// A pool's view of the WAL stream.
///
/// ```
/// use wal_source_nats::{ConsumerMode, JetStreamConfig, Subjects};
///
/// // Pool 1 of 4 reads executions whose id is 1 modulo 4, from a durable consumer.
/// let config = JetStreamConfig::new("nats://127.0.0.1:4222")
///     .filter(Subjects::default().shard_filter(1, 4))
///     .durable("state-builder-pool-1");
/// assert_eq!(config.filter_subject.as_deref(), Some("noetl.events.1.>"));
/// assert_eq!(config.mode, ConsumerMode::Durable { name: "state-builder-pool-1".into() });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamConfig {
    /// Broker address, `nats://host:port` (several, comma-separated, for a cluster).
    pub url: String,
    /// Stream name (default [`DEFAULT_STREAM`]).
    pub stream: String,
    /// Only subjects matching this filter are delivered (`None`: the whole stream). This is
    /// how pools shard executions: see [`Subjects::shard_filter`].
    pub filter_subject: Option<String>,
    /// Replay-on-boot (default) or durable.
    pub mode: ConsumerMode,
    /// Messages the client asks the broker for ahead of the drain. Larger hides the round
    /// trip during a backfill; smaller bounds client memory. Default 1,024.
    pub prefetch: usize,
    /// Bytes the client asks the broker for ahead of the drain, at most. The broker cuts off
    /// a client that holds more than its `max_pending` (64 MiB by default) undelivered, and
    /// a thousand production-sized envelopes (~73 KB) are more than that: the cap keeps a
    /// backfill of large payloads under it. Default 16 MiB.
    pub prefetch_bytes: usize,
    /// Idle heartbeat asked of the broker; two missed heartbeats make the source recreate
    /// its consumer. Default 1 s.
    pub heartbeat: Duration,
    /// Upper bound of the reconnect backoff (it starts at 25 ms and doubles). Default 1 s.
    pub reconnect_max_delay: Duration,
    /// How often the client pings the node it is connected to; once a third ping would go
    /// unanswered it drops the connection and fails over to another node of the URL list.
    /// This is what frees a client from a node that is alive but not answering (a paused
    /// process, a frozen VM, a half-open connection): TCP alone never tells. Default 2 s,
    /// so such a node is left 4 to 6 s after its last answer (the NATS client's own default,
    /// 60 s, would keep a pool on it for two to three minutes). The price: a broker that
    /// stalls longer than that makes its pools reconnect.
    pub ping_interval: Duration,
    /// Time limit of one JetStream API call (creating a consumer, looking up the stream).
    /// Default 2 s.
    pub api_timeout: Duration,
    /// Durable mode: how long the broker waits for a message's acknowledgement before it
    /// delivers the message again. A batch is acknowledged milliseconds after it arrives, so
    /// this only bounds how long a message lost with a dead connection stays missing.
    /// Default 5 s. Takes effect when the durable consumer is created.
    pub ack_wait: Duration,
    /// Replay-on-boot: after the feed breaks (a failover, a missed heartbeat, a lost
    /// connection), the records handed over in this window before the break, and those
    /// the next consumer hands over in this window after it was created, are checked
    /// against the stream's leader once the window has passed; the source rewinds to the
    /// first one the stream no longer holds. On a cluster a deposed leader (paused, cut
    /// off) can serve a consumer records it never committed, at sequences the new leader
    /// gives to other records moments later: without the check those are skipped for good.
    /// Longer than an election and the deposed node's step-down. Default 5 s; zero turns
    /// the check off.
    pub verify_window: Duration,
}

impl JetStreamConfig {
    /// Replay-on-boot over the whole default stream at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        JetStreamConfig {
            url: url.into(),
            stream: DEFAULT_STREAM.to_owned(),
            filter_subject: None,
            mode: ConsumerMode::ReplayOnBoot,
            prefetch: 1024,
            prefetch_bytes: 16 << 20,
            heartbeat: Duration::from_secs(1),
            reconnect_max_delay: Duration::from_secs(1),
            ping_interval: Duration::from_secs(2),
            api_timeout: Duration::from_secs(2),
            ack_wait: Duration::from_secs(5),
            verify_window: Duration::from_secs(5),
        }
    }

    /// Another stream.
    pub fn stream(mut self, stream: impl Into<String>) -> Self {
        self.stream = stream.into();
        self
    }

    /// Only subjects matching `filter`.
    pub fn filter(mut self, filter: impl Into<String>) -> Self {
        self.filter_subject = Some(filter.into());
        self
    }

    /// Another [`verify_window`](JetStreamConfig::verify_window) (zero: no check).
    pub fn verify_window(mut self, window: Duration) -> Self {
        self.verify_window = window;
        self
    }

    /// How long a record skipped across a break (one whose sequence a deposed leader
    /// served with another record) stays missing before this source rewinds to it, when
    /// the broker answers: the [`verify_window`](JetStreamConfig::verify_window) after the
    /// last consumer was created, the check (up to two
    /// [`api_timeout`](JetStreamConfig::api_timeout)s for the 256 records a break
    /// typically leaves suspect) and the new consumer (one more). A hole in a chain that
    /// lasts this long across a leader change is the check at work, not a loss: an
    /// index's [`stall_after`](wal_index::IndexConfig::stall_after) above it (plus the
    /// redelivery after the rewind) reports only holes the check did not close. A check
    /// the broker leaves unanswered is tried again, so during an outage a hole can last
    /// longer; the default stall bound, 30 s, leaves room for that.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_source_nats::JetStreamConfig;
    ///
    /// let config = JetStreamConfig::new("nats://127.0.0.1:4222");
    /// assert_eq!(config.rewind_within(), Duration::from_secs(11));
    /// assert!(config.rewind_within() < wal_index::IndexConfig::DEFAULT_STALL_AFTER);
    /// // No check: a skipped record is never rewound to.
    /// assert_eq!(config.verify_window(Duration::ZERO).rewind_within(), Duration::ZERO);
    /// ```
    pub fn rewind_within(&self) -> Duration {
        if self.verify_window.is_zero() {
            return Duration::ZERO;
        }
        self.verify_window + self.api_timeout * 3
    }

    /// A durable consumer named `name` instead of replay-on-boot.
    pub fn durable(mut self, name: impl Into<String>) -> Self {
        self.mode = ConsumerMode::Durable { name: name.into() };
        self
    }

    /// Reads the pool's settings from the environment:
    ///
    /// | variable | meaning | default |
    /// |---|---|---|
    /// | `NOETL_WAL_NATS_URL` | broker address | `nats://127.0.0.1:4222` |
    /// | `NOETL_WAL_STREAM` | stream name | `noetl_events` |
    /// | `NOETL_WAL_SUBJECT_FILTER` | this pool's filter | the whole stream |
    /// | `NOETL_WAL_DURABLE` | durable consumer name | unset: replay-on-boot |
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`JetStreamConfig::from_env`] over any lookup function.
    ///
    /// ```
    /// use wal_source_nats::{ConsumerMode, JetStreamConfig};
    ///
    /// let config = JetStreamConfig::from_lookup(|var| match var {
    ///     "NOETL_WAL_SUBJECT_FILTER" => Some("noetl.events.0.>".into()),
    ///     _ => None,
    /// })
    /// .unwrap();
    /// assert_eq!(config.mode, ConsumerMode::ReplayOnBoot);
    /// assert!(JetStreamConfig::from_lookup(|v| (v == "NOETL_WAL_STREAM").then(|| "a.b".into())).is_err());
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |var: &str| {
            lookup(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut config = JetStreamConfig::new(
            get("NOETL_WAL_NATS_URL").unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned()),
        );
        if let Some(stream) = get("NOETL_WAL_STREAM") {
            config.stream = stream;
        }
        config.filter_subject = get("NOETL_WAL_SUBJECT_FILTER");
        if let Some(name) = get("NOETL_WAL_DURABLE") {
            config.mode = ConsumerMode::Durable { name };
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the names the broker would reject, so a typo fails at start-up with the
    /// variable that holds it instead of as a retried broker error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad_name = |name: &str| {
            name.is_empty()
                || name
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
        };
        if bad_name(&self.stream) {
            return Err(ConfigError {
                var: "NOETL_WAL_STREAM",
                value: self.stream.clone(),
                expected: "a stream name without whitespace, '.', '*', '>', '/' or '\\'",
            });
        }
        if let ConsumerMode::Durable { name } = &self.mode
            && bad_name(name)
        {
            return Err(ConfigError {
                var: "NOETL_WAL_DURABLE",
                value: name.clone(),
                expected: "a consumer name without whitespace, '.', '*', '>', '/' or '\\'",
            });
        }
        if let Some(filter) = &self.filter_subject
            && !valid_subject(filter, true)
        {
            return Err(ConfigError {
                var: "NOETL_WAL_SUBJECT_FILTER",
                value: filter.clone(),
                expected: "a subject filter: non-empty dot-separated tokens, '*' or a final '>'",
            });
        }
        if !self.url.starts_with("nats://") && !self.url.contains(':') {
            return Err(ConfigError {
                var: "NOETL_WAL_NATS_URL",
                value: self.url.clone(),
                expected: "nats://host:port",
            });
        }
        Ok(())
    }
}

fn valid_subject(subject: &str, wildcards: bool) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    tokens.iter().enumerate().all(|(i, token)| {
        !token.is_empty()
            && !token.chars().any(char::is_whitespace)
            && match *token {
                "*" => wildcards,
                ">" => wildcards && i + 1 == tokens.len(),
                t => !t.contains(['*', '>']),
            }
    })
}

/// The subject scheme `<prefix>.<shard>.<execution_id>`, with `shard = execution_id %
/// shards`. Producers publish each event on its execution's subject; a pool filters on one
/// shard token, so every execution's whole chain lands in exactly one pool and pools never
/// coordinate. Changing the shard count re-homes executions, so a resharded deployment
/// rebuilds from the retained stream (replay-on-boot) rather than from durable positions.
///
/// ```
/// use wal_source_nats::Subjects;
///
/// let subjects = Subjects::default();
/// assert_eq!(subjects.subject(42, 4), "noetl.events.2.42");
/// assert_eq!(subjects.shard_filter(2, 4), "noetl.events.2.>");
/// assert_eq!(subjects.all(), "noetl.events.>");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    pub(crate) prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Subjects {
            prefix: DEFAULT_SUBJECT_PREFIX.to_owned(),
        }
    }
}

impl Subjects {
    /// Another prefix (one or more dot-separated tokens without wildcards), or `None` if it
    /// is not a valid literal subject.
    pub fn with_prefix(prefix: impl Into<String>) -> Option<Self> {
        let prefix = prefix.into();
        valid_subject(&prefix, false).then_some(Subjects { prefix })
    }

    /// The subject an event of `execution_id` is published on when executions are spread
    /// over `shards` pools (`shards == 0` is treated as 1). Event ids do not matter: a chain
    /// never crosses executions.
    pub fn subject(&self, execution_id: i64, shards: u32) -> String {
        // Euclidean remainder: a negative id still maps to a shard in 0..shards.
        let shard = execution_id.rem_euclid(i64::from(shards.max(1)));
        format!("{}.{shard}.{execution_id}", self.prefix)
    }

    /// The filter of pool `shard` (of `shards`).
    pub fn shard_filter(&self, shard: u32, shards: u32) -> String {
        format!("{}.{}.>", self.prefix, shard % shards.max(1))
    }

    /// The filter that matches every event subject: the stream's subject list.
    pub fn all(&self) -> String {
        format!("{}.>", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_validation() {
        for ok in ["a", "a.b", "a.*.c", "a.>", "noetl.events.3.>"] {
            assert!(valid_subject(ok, true), "{ok}");
        }
        for bad in ["", "a..b", ".a", "a.", "a.>.b", "a b", "a.b*"] {
            assert!(!valid_subject(bad, true), "{bad:?}");
        }
        assert!(!valid_subject("a.*", false));
        assert!(Subjects::with_prefix("x.>").is_none());
        assert_eq!(
            Subjects::with_prefix("wal").unwrap().subject(7, 0),
            "wal.0.7"
        );
        assert_eq!(Subjects::default().subject(-3, 2), "noetl.events.1.-3");
    }

    #[test]
    fn env_errors_name_the_variable() {
        let err = JetStreamConfig::from_lookup(|v| {
            (v == "NOETL_WAL_SUBJECT_FILTER").then(|| "noetl.>.x".into())
        })
        .unwrap_err();
        assert_eq!(err.var, "NOETL_WAL_SUBJECT_FILTER");
        let err =
            JetStreamConfig::from_lookup(|v| (v == "NOETL_WAL_DURABLE").then(|| "a b".into()))
                .unwrap_err();
        assert_eq!(err.var, "NOETL_WAL_DURABLE");
        let config = JetStreamConfig::from_lookup(|v| match v {
            "NOETL_WAL_NATS_URL" => Some(" nats://10.0.0.1:4222 ".into()),
            "NOETL_WAL_DURABLE" => Some("pool-a".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(config.url, "nats://10.0.0.1:4222");
        assert_eq!(config.stream, DEFAULT_STREAM);
        assert_eq!(
            config.mode,
            ConsumerMode::Durable {
                name: "pool-a".into()
            }
        );
    }
}
