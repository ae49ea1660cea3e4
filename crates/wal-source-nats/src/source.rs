//! The JetStream consumer behind a [`WalSource`]: a pull consumer read through a prefetching
//! message stream, recreated whenever the connection or the consumer was lost.

use std::io;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, consumer};
use futures_util::{FutureExt, StreamExt};
use wal_index::WalSource;
use wal_index::checkpoint::{Fingerprint, LogIdentity, Position, Refusal, SourcePosition};
use wal_index::ingest::{Backfill, Pull, Record};

use crate::config::{ConsumerMode, JetStreamConfig};
use crate::connect::{JetStreamError, Runtime, open};

/// A [`WalSource`] over a JetStream stream.
///
/// # Model
///
/// The source owns a small Tokio runtime (one worker thread) on which the NATS client runs;
/// [`pull`](WalSource::pull) blocks the calling thread (the drain's) on it. The client keeps
/// up to [`prefetch`](JetStreamConfig::prefetch) messages in flight, so while the drain
/// applies a batch the next one is already arriving. Each record's `position` is its stream
/// sequence number.
///
/// # Failure and recovery
///
/// Nothing the broker does is fatal. While the connection is down `pull` returns an error
/// of kind [`NotConnected`](io::ErrorKind::NotConnected) (the drain turns that into
/// `healthy = 0` and retries with backoff) and the client reconnects on its own, with a
/// backoff that starts at 25 ms and is capped at
/// [`reconnect_max_delay`](JetStreamConfig::reconnect_max_delay). After any disconnect, a
/// missed heartbeat or a deleted consumer, the next `pull` creates the consumer again:
///
/// - replay-on-boot: a new ephemeral consumer that starts right after the last stream
///   sequence this source returned, so the drain sees neither a gap nor a duplicate;
/// - durable: the same durable name; the broker resumes after its acknowledgement floor,
///   so what was pulled but not yet committed is delivered again (at-least-once).
///
/// # Acknowledgement
///
/// In durable mode the consumer uses `AckPolicy::Explicit`: [`commit`](WalSource::commit)
/// acknowledges every message of the batches pulled since the last commit, after the drain
/// applied them. A message the broker sent to a connection that died before it arrived is
/// never acknowledged, so the broker sends it again after
/// [`ack_wait`](JetStreamConfig::ack_wait). (`AckPolicy::All`, one ack per batch, would be
/// cheaper and is wrong here: acknowledging a later message acknowledges that lost one
/// too.) Bad records are acknowledged with their batch (they were counted and skipped;
/// redelivering them would not make them decodable). Replay-on-boot acknowledges nothing
/// (`AckPolicy::None`).
///
/// # Limits
///
/// - `pull` must not be called from inside an async runtime (it blocks); run the drain on
///   its own thread, as [`Drain::spawn`](wal_index::Drain::spawn) does.
/// - Replay-on-boot rebuilds from what the stream *retains*: events the stream's limits have
///   already discarded are gone for a restarted pool.
/// - Resharding (changing the shard count) moves executions between pools; durable
///   positions do not move with them, so reshard with replay-on-boot.
pub struct JetStreamSource {
    client: async_nats::Client,
    context: jetstream::Context,
    config: JetStreamConfig,
    feed: Option<consumer::pull::Stream>,
    /// The first stream sequence this source has not returned yet (replay-on-boot resumes
    /// here after a consumer is lost).
    next_sequence: u64,
    /// Where the backfill stands: `None` until the first consumer exists.
    backfill: Option<BackfillState>,
    /// Durable mode: the messages returned and not yet acknowledged.
    unacked: Vec<jetstream::Message>,
    /// The last record returned (fingerprinted when a checkpoint asks), or a resumed
    /// checkpoint's: a stream never reuses a sequence, so one record names a position.
    handed: Option<Handed>,
    /// The stream's creation time (nanoseconds since the Unix epoch), once looked up: what
    /// tells this stream from one deleted and re-created under its name.
    created: Option<i128>,
    stats: JetStreamStats,
    /// Last, so the client and consumer are dropped while their runtime still exists.
    runtime: Runtime,
}

/// Counters of what a [`JetStreamSource`] did, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JetStreamStats {
    /// Messages returned by `pull`.
    pub messages: u64,
    /// Consumers created (the first one included).
    pub consumers_created: u64,
    /// Pulls that found the feed broken (connection down, consumer gone, missed heartbeats).
    pub interruptions: u64,
    /// Batches acknowledged (durable mode).
    pub commits: u64,
    /// Messages the broker said it had delivered before (durable redeliveries).
    pub redelivered: u64,
    /// Messages still pending on the consumer when the last one was delivered: 0 means the
    /// source had caught up with the stream at that moment.
    pub pending: u64,
}

impl JetStreamSource {
    /// Connects to the broker in `config` and prepares the consumer.
    ///
    /// Fails on an invalid configuration or an unusable runtime. An unreachable broker is
    /// not an error: it waits up to [`api_timeout`](JetStreamConfig::api_timeout) for the
    /// first connection, then returns anyway; the client keeps reconnecting in the
    /// background and `pull` reports `NotConnected` until it is up, so a pool may start
    /// before its broker.
    pub fn connect(config: JetStreamConfig) -> Result<Self, JetStreamError> {
        let (runtime, client, context) = open(&config)?;
        let source = JetStreamSource {
            client,
            context,
            config,
            feed: None,
            next_sequence: 1,
            backfill: None,
            unacked: Vec::new(),
            handed: None,
            created: None,
            stats: JetStreamStats::default(),
            runtime,
        };
        source.wait_connected(source.config.api_timeout);
        Ok(source)
    }

    /// Waits up to `limit` for the connection to be up; true if it is.
    pub fn wait_connected(&self, limit: Duration) -> bool {
        let client = self.client.clone();
        self.runtime
            .block_on_for(limit, async move {
                while client.connection_state() != State::Connected {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .is_some()
    }

    /// What the source did so far.
    pub fn stats(&self) -> JetStreamStats {
        self.stats
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &JetStreamConfig {
        &self.config
    }

    /// The stream sequence the next record will have at the earliest.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    async fn open_feed(
        context: &jetstream::Context,
        config: &JetStreamConfig,
        next_sequence: u64,
    ) -> io::Result<(consumer::pull::Stream, BackfillState)> {
        let stream = context
            .get_stream(&config.stream)
            .await
            .map_err(|e| feed_error("cannot look up the stream", &config.stream, e))?;
        let head = stream.cached_info().state.last_sequence;
        let created = stream.cached_info().created.unix_timestamp_nanos();
        let filter_subject = config.filter_subject.clone().unwrap_or_default();
        let consumer: consumer::PullConsumer = match &config.mode {
            ConsumerMode::ReplayOnBoot => stream
                .create_consumer(consumer::pull::Config {
                    deliver_policy: if next_sequence <= 1 {
                        consumer::DeliverPolicy::All
                    } else {
                        consumer::DeliverPolicy::ByStartSequence {
                            start_sequence: next_sequence,
                        }
                    },
                    ack_policy: consumer::AckPolicy::None,
                    filter_subject,
                    // An abandoned consumer (this process died) goes away on its own.
                    inactive_threshold: Duration::from_secs(30),
                    ..Default::default()
                })
                .await
                .map_err(|e| feed_error("cannot create the consumer on", &config.stream, e))?,
            ConsumerMode::Durable { name } => stream
                .get_or_create_consumer(
                    name,
                    consumer::pull::Config {
                        durable_name: Some(name.clone()),
                        deliver_policy: consumer::DeliverPolicy::All,
                        // Not AckPolicy::All: acknowledging a later message would also
                        // acknowledge earlier ones the broker delivered to a connection
                        // that died before they arrived, and they would never come again.
                        ack_policy: consumer::AckPolicy::Explicit,
                        ack_wait: config.ack_wait,
                        filter_subject,
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| feed_error("cannot create the consumer on", &config.stream, e))?,
        };
        let at_subscription = BackfillState {
            created,
            head,
            pending: consumer.cached_info().num_pending,
            caught_up: consumer.cached_info().num_pending == 0,
        };
        let feed = consumer
            .stream()
            .max_messages_per_batch(config.prefetch.max(1))
            .max_bytes_per_batch(config.prefetch_bytes.max(1 << 20))
            .heartbeat(config.heartbeat)
            .expires(config.heartbeat * 10)
            .messages()
            .await
            .map_err(|e| feed_error("cannot start the consumer on", &config.stream, e))?;
        Ok((feed, at_subscription))
    }

    /// Creates the consumer (after the first one: again, after an interruption) from the
    /// first sequence not returned yet.
    fn open_consumer(&mut self) -> io::Result<()> {
        let opened = self.runtime.block_on_for(
            self.config.api_timeout,
            Self::open_feed(&self.context, &self.config, self.next_sequence),
        );
        match opened {
            Some(Ok((feed, at_subscription))) => {
                // A stream deleted and re-created under this running source is another
                // log: what the index holds came from the old one, and a checkpoint
                // would name the new one's sequences under the old identity. The drain
                // stops (not retried); the pool starts again from an empty index.
                if let Some(created) = self.created
                    && created != at_subscription.created
                {
                    return Err(self.interrupted(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "stream {:?} was re-created under this source (created {created}, now {}): its log is another one",
                            self.config.stream, at_subscription.created
                        ),
                    )));
                }
                // The head is learned once: a consumer re-created after an outage
                // resumes the same backfill, it does not start a new one.
                self.created.get_or_insert(at_subscription.created);
                self.backfill.get_or_insert(at_subscription);
                self.feed = Some(feed);
                self.stats.consumers_created += 1;
            }
            Some(Err(error)) => return Err(self.interrupted(error)),
            None => {
                return Err(self.interrupted(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("creating the consumer on {} timed out", self.config.stream),
                )));
            }
        }
        Ok(())
    }

    fn interrupted(&mut self, error: io::Error) -> io::Error {
        self.feed = None;
        self.stats.interruptions += 1;
        tracing::warn!(stream = %self.config.stream, %error, "JetStream feed interrupted");
        error
    }

    fn take(&mut self, message: jetstream::Message, batch: &mut Vec<Record>) {
        let (position, delivered, pending) = match message.info() {
            Ok(info) => (info.stream_sequence, info.delivered, info.pending),
            // Not a JetStream delivery (cannot happen on a pull consumer): keep the payload,
            // the drain decodes it like any other record.
            Err(_) => (self.next_sequence, 1, self.stats.pending),
        };
        self.next_sequence = self.next_sequence.max(position + 1);
        self.stats.messages += 1;
        self.stats.pending = pending;
        if let Some(backfill) = &mut self.backfill {
            backfill.pending = pending;
            // Past the head, or nothing left for this consumer: the history is through.
            // Once through, a redelivery does not make the source behind again.
            backfill.caught_up |= position >= backfill.head || pending == 0;
        }
        if delivered > 1 {
            self.stats.redelivered += 1;
        }
        let record = Record {
            position,
            payload: message.payload.clone(),
        };
        self.handed = Some(Handed::Record(record.clone()));
        batch.push(record);
        if matches!(self.config.mode, ConsumerMode::Durable { .. }) {
            self.unacked.push(message);
        }
    }
}

/// The backfill as the first consumer saw it, and how far the source got.
#[derive(Debug, Clone, Copy)]
struct BackfillState {
    /// The stream's creation time, nanoseconds since the Unix epoch.
    created: i128,
    /// The stream's last sequence when the first consumer was created.
    head: u64,
    /// Messages the consumer still had to deliver, as of the last delivery.
    pending: u64,
    /// Sticky: the history was handed over.
    caught_up: bool,
}

impl WalSource for JetStreamSource {
    /// The last message returned (its stream sequence and a CRC-32C of its payload), once
    /// the first consumer told the stream's creation time.
    fn position(&self) -> Option<SourcePosition> {
        Some(SourcePosition {
            log: self.identity(self.created?),
            positions: vec![Position::new(
                self.partition(),
                &[],
                self.handed.as_ref()?.fingerprint(),
            )],
        })
    }

    /// Against the head the first consumer saw: the stream's last sequence then, and the
    /// consumer's own count of what it had to deliver (which honours a subject filter).
    /// Caught up once a delivered message reaches that sequence or leaves nothing pending,
    /// and from the start when nothing was pending (an empty stream, a filter that matches
    /// nothing retained, a durable consumer at its acknowledgement floor). What is left is
    /// the consumer's pending count, live messages that arrived meanwhile included.
    fn backfill(&self) -> Backfill {
        match self.backfill {
            None => Backfill::Unknown,
            Some(state) if state.caught_up => Backfill::CaughtUp,
            Some(state) => Backfill::Behind {
                remaining: Some(state.pending),
            },
        }
    }

    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        let runtime = self.runtime.handle();
        let _inside = runtime.enter();
        if self.client.connection_state() != State::Connected {
            // The consumer may not survive what happens to the connection: once it is up
            // again, a new one is opened below.
            self.feed = None;
            // Give the reconnect a chance within this pull's wait before reporting.
            if !self.wait_connected(wait) {
                return Err(self.interrupted(io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!("not connected to {}", self.config.url),
                )));
            }
        }
        if self.feed.is_none() {
            self.open_consumer()?;
        }
        let Some(feed) = self.feed.as_mut() else {
            return Ok(Pull::Idle);
        };
        let first = self.runtime.block_on_for(wait, feed.next());
        let first = match first {
            None => {
                tracing::trace!(next_sequence = self.next_sequence, "idle");
                return Ok(Pull::Idle);
            }
            Some(None) => {
                return Err(self.interrupted(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the consumer's message stream ended",
                )));
            }
            Some(Some(Err(error))) => {
                return Err(self.interrupted(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("JetStream consumer: {error}"),
                )));
            }
            Some(Some(Ok(message))) => message,
        };
        let mut batch = Vec::with_capacity(max.clamp(1, 1024));
        self.take(first, &mut batch);
        while batch.len() < max {
            let Some(feed) = self.feed.as_mut() else {
                break;
            };
            // Only what the client already holds: the batch never waits for more.
            match feed.next().now_or_never() {
                Some(Some(Ok(message))) => self.take(message, &mut batch),
                // A broken feed: the next pull opens a new consumer.
                Some(Some(Err(_)) | None) => {
                    self.feed = None;
                    break;
                }
                None => break,
            }
        }
        tracing::trace!(
            records = batch.len(),
            next_sequence = self.next_sequence,
            pending = self.stats.pending,
            "pulled"
        );
        Ok(Pull::Records(batch))
    }

    fn commit(&mut self) -> io::Result<()> {
        let runtime = self.runtime.handle();
        let _inside = runtime.enter();
        if self.unacked.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.unacked);
        // One ack per message (AckPolicy::Explicit): each is a fire-and-forget publish, so a
        // batch of 200 costs 200 small writes and no round trip.
        let acked = self
            .runtime
            .block_on_for(self.config.api_timeout, async move {
                for message in &batch {
                    message.ack().await?;
                }
                Ok::<(), async_nats::Error>(())
            });
        match acked {
            Some(Ok(())) => {
                self.stats.commits += 1;
                Ok(())
            }
            // Not fatal: the broker redelivers what was not acknowledged.
            Some(Err(error)) => Err(self.interrupted(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("acknowledging a batch: {error}"),
            ))),
            None => Err(self.interrupted(io::Error::new(
                io::ErrorKind::TimedOut,
                "acknowledging a batch timed out",
            ))),
        }
    }
}

impl Drop for JetStreamSource {
    fn drop(&mut self) {
        let runtime = self.runtime.handle();
        let _inside = runtime.enter();
        self.feed = None;
        self.unacked.clear();
    }
}

impl std::fmt::Debug for JetStreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamSource")
            .field("config", &self.config)
            .field("next_sequence", &self.next_sequence)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn feed_error(what: &str, stream: &str, error: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("{what} stream {stream:?}: {error}"),
    )
}

/// A record returned, kept for the next checkpoint's position, or a resumed checkpoint's.
#[derive(Debug, Clone)]
enum Handed {
    Record(Record),
    Known(Fingerprint),
}

impl Handed {
    fn fingerprint(&self) -> Fingerprint {
        match self {
            Handed::Record(record) => Fingerprint::of(record.position, &record.payload),
            Handed::Known(fingerprint) => *fingerprint,
        }
    }
}

impl JetStreamSource {
    /// The identity its checkpoints carry: the stream's name, its creation time (so a
    /// stream deleted and re-created under the same name is another log) and the subject
    /// filter (a pool reading another filter reads another log: a checkpoint of one never
    /// restores on the other, even from a shared directory or prefix). Looks the stream up
    /// on the broker.
    pub fn log_identity(&mut self) -> io::Result<LogIdentity> {
        let created = match self.created {
            Some(created) => created,
            None => {
                let created = self.stream_created()?;
                *self.created.get_or_insert(created)
            }
        };
        Ok(self.identity(created))
    }

    fn identity(&self, created: i128) -> LogIdentity {
        LogIdentity::new(
            "jetstream",
            self.config.stream.clone(),
            format!(
                "created={created} filter={}",
                self.config.filter_subject.as_deref().unwrap_or(">")
            ),
        )
    }

    fn partition(&self) -> String {
        self.config
            .filter_subject
            .clone()
            .unwrap_or_else(|| "stream".to_owned())
    }

    fn stream_created(&self) -> io::Result<i128> {
        let (context, name) = (self.context.clone(), self.config.stream.clone());
        self.runtime
            .block_on_for(self.config.api_timeout, async move {
                let stream = context
                    .get_stream(&name)
                    .await
                    .map_err(|e| feed_error("cannot look up the stream", &name, e))?;
                Ok(stream.cached_info().created.unix_timestamp_nanos())
            })
            .unwrap_or_else(|| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("looking up stream {:?} timed out", self.config.stream),
                ))
            })
    }

    /// Resumes after a [checkpoint](wal_index::checkpoint)'s `position` (replay-on-boot;
    /// a durable consumer resumes from its own acknowledgement floor instead), then starts
    /// the next consumer right after it. The stream must still hold what the position
    /// names, or have lost nothing after it:
    ///
    /// - the message at the position's sequence is there with the same payload, and its
    ///   subject is one this source's filter reads; or
    /// - it is gone because the stream's limits discarded it and everything before it
    ///   (the stream's first sequence is the next one): nothing after the position is
    ///   missing.
    ///
    /// Anything else is refused with [`Refusal::Fingerprint`] (another record there, a
    /// message of another filter, a gap after the position); the pool then tries an older
    /// checkpoint, then replays from the beginning. A stream deleted and re-created under
    /// the same name, or read through another filter, has another
    /// [`log_identity`](Self::log_identity), which the restore already refuses.
    pub fn resume(mut self, position: &Position) -> Result<Self, Refusal> {
        if !matches!(self.config.mode, ConsumerMode::ReplayOnBoot) {
            return Err(Refusal::Io(
                "a durable consumer resumes from its acknowledgement floor, not a checkpoint"
                    .to_owned(),
            ));
        }
        let last = position.last();
        let sequence = last.sequence;
        let (context, name) = (self.context.clone(), self.config.stream.clone());
        let looked = self
            .runtime
            .block_on_for(self.config.api_timeout, async move {
                let mut stream = context.get_stream(&name).await.map_err(|e| e.to_string())?;
                let first = stream
                    .info()
                    .await
                    .map_err(|e| e.to_string())?
                    .state
                    .first_sequence;
                let held = stream.get_raw_message(sequence).await;
                Ok::<_, String>((first, held.map(|m| (m.subject.to_string(), m.payload))))
            })
            .unwrap_or_else(|| Err("the broker did not answer in time".to_owned()));
        let refused = |why: String| Refusal::Fingerprint { why };
        let (first, held) =
            looked.map_err(|why| refused(format!("cannot look at sequence {sequence}: {why}")))?;
        match held {
            Ok((subject, payload)) => {
                if let Some(filter) = &self.config.filter_subject
                    && !crate::subject::matches(filter, &subject)
                {
                    return Err(refused(format!(
                        "sequence {sequence} is a message on {subject:?}, which filter {filter:?} does not read"
                    )));
                }
                if Fingerprint::of(sequence, &payload) != last {
                    return Err(refused(format!(
                        "the stream holds another record at sequence {sequence}"
                    )));
                }
            }
            Err(why) if first == sequence + 1 => {
                tracing::info!(sequence, %why, "the checkpoint's last message expired; nothing after it is missing");
            }
            Err(why) => {
                return Err(refused(format!(
                    "the stream does not hold sequence {sequence} and its first sequence is {first}: {why}"
                )));
            }
        }
        self.next_sequence = sequence + 1;
        self.handed = Some(Handed::Known(last));
        Ok(self)
    }
}
