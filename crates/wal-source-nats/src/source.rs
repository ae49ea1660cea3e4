//! The JetStream consumer behind a [`WalSource`]: a pull consumer read through a prefetching
//! message stream, recreated whenever the connection or the consumer was lost.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

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
///   then, once [`verify_window`](JetStreamConfig::verify_window) has passed, the records
///   handed over around the break are checked against the stream (see below);
/// - durable: the same durable name; the broker resumes after its acknowledgement floor,
///   so what was pulled but not yet committed is delivered again (at-least-once).
///
/// # Records a deposed leader served
///
/// A stream sequence names one record only once the cluster committed it. On a cluster a
/// stream leader that was paused or cut off can, in the moment before it learns it was
/// deposed, host the replacement consumer and hand it records it stored but never
/// committed; the new leader gives those sequences to other records, and a consumer that
/// resumes after the last sequence returned would skip them for good (nats-server 2.9,
/// SIGSTOP of the stream leader: 20 sequences delivered twice over with re-sent copies, the
/// 20 events the cluster kept there never delivered). So in replay-on-boot, after each
/// break the records handed over in the window before it and by the next consumer in the
/// window after its creation are kept as fingerprints; once that window has passed (an
/// election and the deposed node's step-down) each is compared with what the stream's
/// leader holds at its sequence, and at the first that differs (or that the stream no
/// longer holds) the source drops its consumer and resumes *there*: the records from that
/// sequence on are delivered again, the index absorbing the ones it already had.
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
    /// Replay-on-boot: the records to check against the stream after a break.
    verifier: Verifier,
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
    /// Records checked against the stream after a break (replay-on-boot).
    pub verified: u64,
    /// Times the check found a record the stream no longer holds at its sequence, and the
    /// source resumed there.
    pub rewinds: u64,
    /// Checks given up after the broker failed to answer them repeatedly (the records
    /// they held went unchecked; a permission that allows consuming but not direct gets
    /// does this).
    pub unverified: u64,
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
            verifier: Verifier::default(),
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
                if self.verifying() {
                    self.verifier
                        .consumer_created(Instant::now() + self.config.verify_window);
                }
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
        self.note_break();
        self.stats.interruptions += 1;
        tracing::warn!(stream = %self.config.stream, %error, "JetStream feed interrupted");
        error
    }

    /// Whether records are kept for the check after a break (replay-on-boot with a window).
    fn verifying(&self) -> bool {
        matches!(self.config.mode, ConsumerMode::ReplayOnBoot)
            && !self.config.verify_window.is_zero()
    }

    /// The feed broke: what was handed over in the window before is suspect.
    fn note_break(&mut self) {
        if self.verifying() {
            self.verifier
                .broke(Instant::now(), self.config.verify_window);
        }
    }

    /// Compares the suspect records with what the stream's leader holds at their sequences;
    /// resumes at the first that differs. A check the broker did not answer is tried again
    /// at a later pull.
    fn verify_handed(&mut self) {
        let records = self.verifier.suspects();
        if records.is_empty() {
            self.verifier.cleared();
            return;
        }
        let (context, name) = (self.context.clone(), self.config.stream.clone());
        // Each lookup is bounded by the context's API timeout; the whole by one per 256.
        let limit = self.config.api_timeout
            * (2 + u32::try_from(records.len() / 256).unwrap_or(u32::MAX / 4));
        let checked = self
            .runtime
            .block_on_for(limit, held_at(context, name, records.clone()))
            .unwrap_or_else(|| Err("the broker did not answer in time".to_owned()));
        match checked {
            Ok(held) => {
                self.stats.verified += records.len() as u64;
                match first_divergence(&records, &held) {
                    None => self.verifier.cleared(),
                    Some(sequence) => self.rewind(sequence),
                }
            }
            Err(error) => {
                tracing::debug!(
                    stream = %self.config.stream,
                    %error,
                    "checking the records handed over around a break: later"
                );
                if !self
                    .verifier
                    .postpone(Instant::now() + Duration::from_millis(500))
                {
                    self.stats.unverified += 1;
                    tracing::warn!(
                        stream = %self.config.stream,
                        %error,
                        "gave up checking the records handed over around a break"
                    );
                }
            }
        }
    }

    /// The stream holds another record at `sequence` than the one this source returned (or
    /// none): resume there.
    fn rewind(&mut self, sequence: u64) {
        tracing::warn!(
            stream = %self.config.stream,
            sequence,
            returned_up_to = self.next_sequence - 1,
            "the stream no longer holds a record this source returned (served by a deposed \
             leader?): resuming at its sequence"
        );
        self.stats.rewinds += 1;
        self.feed = None;
        self.next_sequence = sequence;
        // Not a position to checkpoint: the next record returned is.
        self.handed = None;
        // What the next consumer hands over is checked in its turn.
        self.verifier = Verifier::default();
        self.verifier
            .broke(Instant::now(), self.config.verify_window);
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
        if self.verifying() {
            self.verifier.handed(
                Fingerprint::of(position, &record.payload),
                Instant::now(),
                self.config.verify_window,
            );
        }
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
    /// The stream's name, its creation time and the subject filter (see
    /// [`JetStreamSource`]'s checkpoints): looked up on the broker once.
    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        self.log_identity().map(Some)
    }

    /// Resumes after a [checkpoint](wal_index::checkpoint)'s one position (replay-on-boot;
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
    /// the same name, or read through another filter, has another [`log`](Self::log),
    /// which the restore already refuses. The broker is given at most `within` (and the
    /// source's `api_timeout`) to answer; one that does not is an [`Refusal::Io`].
    fn resume(&mut self, positions: &[Position], within: Duration) -> Result<(), Refusal> {
        match positions {
            [position] if position.partition == self.partition() => {
                self.resume_at(position, within)
            }
            _ => {
                let named: Vec<&str> = positions.iter().map(|p| p.partition.as_str()).collect();
                Err(Refusal::Fingerprint {
                    why: format!(
                        "the checkpoint's positions are in {named:?}, which this source does not read (it reads {:?} alone)",
                        self.partition()
                    ),
                })
            }
        }
    }
    /// The last message returned (its stream sequence and a CRC-32C of its payload), once
    /// the first consumer told the stream's creation time.
    ///
    /// None while records returned around a break are still to be checked against the
    /// stream (see "Records a deposed leader served"): a checkpoint then would name a
    /// position past records the stream may not hold, and a restore checks only the last.
    fn position(&self) -> Option<SourcePosition> {
        if self.verifier.pending() {
            return None;
        }
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
        if self.verifier.due(Instant::now()) {
            self.verify_handed();
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
                    self.note_break();
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

/// At most this many fingerprints are kept per window (about 4 MiB): in a backfill faster
/// than that, the oldest of a window go unchecked. A deposed leader's uncommitted records
/// are the newest.
const VERIFY_MAX: usize = 2048;

/// Checks that fail (the broker does not answer them) before the source gives up on one and
/// counts it in [`JetStreamStats::unverified`].
const VERIFY_ATTEMPTS: u32 = 5;

/// The records handed over recently, and after a break the ones to check.
#[derive(Debug, Default)]
struct Verifier {
    /// Handed over in the last window, oldest first.
    recent: VecDeque<(Fingerprint, Instant)>,
    /// After a break: the records to check, and when.
    suspect: Option<(Vec<Fingerprint>, Instant)>,
    /// Checks of the current suspects that failed.
    attempts: u32,
}

impl Verifier {
    fn handed(&mut self, record: Fingerprint, now: Instant, window: Duration) {
        while let Some(&(_, at)) = self.recent.front() {
            if now.duration_since(at) <= window && self.recent.len() < VERIFY_MAX {
                break;
            }
            self.recent.pop_front();
        }
        self.recent.push_back((record, now));
        if let Some((records, _)) = &mut self.suspect
            && records.len() < 2 * VERIFY_MAX
        {
            records.push(record);
        }
    }

    /// The records of the window before `now` become suspect; the check waits a window.
    fn broke(&mut self, now: Instant, window: Duration) {
        let (records, due) = self.suspect.get_or_insert_with(|| (Vec::new(), now));
        records.extend(
            self.recent
                .drain(..)
                .filter(|&(_, at)| now.duration_since(at) <= window)
                .map(|(record, _)| record),
        );
        // Each sequence once (breaks in a row hand over the same records), and a bounded
        // check: the newest before the break and the first after it are the ones a deposed
        // leader serves.
        records.sort_unstable_by_key(|r| r.sequence);
        records.dedup_by_key(|r| r.sequence);
        if records.len() > 2 * VERIFY_MAX {
            records.drain(..records.len() - 2 * VERIFY_MAX);
        }
        *due = (*due).max(now + window);
    }

    /// Whether records are waiting to be checked.
    fn pending(&self) -> bool {
        self.suspect.is_some()
    }

    /// A consumer created after a break: what it hands over until `due` is suspect too.
    fn consumer_created(&mut self, due: Instant) {
        if let Some((_, at)) = &mut self.suspect {
            *at = (*at).max(due);
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.suspect.as_ref().is_some_and(|&(_, at)| now >= at)
    }

    fn suspects(&self) -> Vec<Fingerprint> {
        self.suspect
            .as_ref()
            .map(|(records, _)| records.clone())
            .unwrap_or_default()
    }

    fn cleared(&mut self) {
        self.suspect = None;
        self.attempts = 0;
    }

    /// The check failed: try again at `to`; false once it has failed
    /// [`VERIFY_ATTEMPTS`] times (then it is dropped).
    fn postpone(&mut self, to: Instant) -> bool {
        self.attempts += 1;
        if self.attempts >= VERIFY_ATTEMPTS {
            self.cleared();
            return false;
        }
        if let Some((_, at)) = &mut self.suspect {
            *at = to;
        }
        true
    }
}

/// What the stream holds at a sequence, for the check after a break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// A record with this fingerprint.
    Record(Fingerprint),
    /// Below the stream's first sequence: discarded by its limits, nothing to compare.
    Discarded,
    /// Past the stream's last sequence, or deleted: not what was returned.
    Nothing,
}

/// The stream `name` and its state as the broker reports it now.
async fn stream_now(
    context: &jetstream::Context,
    name: &str,
) -> Result<(jetstream::stream::Stream, jetstream::stream::State), String> {
    let mut stream = context.get_stream(name).await.map_err(|e| e.to_string())?;
    let state = stream
        .info()
        .await
        .map_err(|e| e.to_string())?
        .state
        .clone();
    Ok((stream, state))
}

/// What the stream's leader holds at each of `records`' sequences (`STREAM.MSG.GET` is
/// answered by the leader).
async fn held_at(
    context: jetstream::Context,
    name: String,
    records: Vec<Fingerprint>,
) -> Result<Vec<Held>, String> {
    let (stream, state) = stream_now(&context, &name).await?;
    let mut held = Vec::with_capacity(records.len());
    for record in &records {
        let sequence = record.sequence;
        held.push(if sequence < state.first_sequence {
            Held::Discarded
        } else if sequence > state.last_sequence {
            Held::Nothing
        } else {
            match stream.get_raw_message(sequence).await {
                Ok(message) => Held::Record(Fingerprint::of(sequence, &message.payload)),
                Err(error)
                    if error.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound =>
                {
                    Held::Nothing
                }
                Err(error) => return Err(error.to_string()),
            }
        });
    }
    Ok(held)
}

/// The lowest sequence among `records` where the stream holds something else (`held`, in
/// the same order), if any.
fn first_divergence(records: &[Fingerprint], held: &[Held]) -> Option<u64> {
    records
        .iter()
        .zip(held)
        .filter(|&(record, held)| match held {
            Held::Record(stored) => stored != record,
            Held::Discarded => false,
            Held::Nothing => true,
        })
        .map(|(record, _)| record.sequence)
        .min()
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
    fn log_identity(&mut self) -> io::Result<LogIdentity> {
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

    /// Resumes after `position` (see [`WalSource::resume`] on this type).
    fn resume_at(&mut self, position: &Position, within: Duration) -> Result<(), Refusal> {
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
            .block_on_for(within.min(self.config.api_timeout), async move {
                let (stream, state) = stream_now(&context, &name).await?;
                let first = state.first_sequence;
                let held = stream.get_raw_message(sequence).await;
                Ok::<_, String>((first, held.map(|m| (m.subject.to_string(), m.payload))))
            })
            .unwrap_or_else(|| Err("the broker did not answer in time".to_owned()));
        let refused = |why: String| Refusal::Fingerprint { why };
        // The broker not answering is not the log refusing: an `Io` refusal.
        let (first, held) = looked
            .map_err(|why| Refusal::Io(format!("cannot look at sequence {sequence}: {why}")))?;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(sequence: u64, payload: &str) -> Fingerprint {
        Fingerprint::of(sequence, payload.as_bytes())
    }

    #[test]
    fn the_first_divergence_is_the_lowest_sequence_the_stream_holds_otherwise() {
        let returned = [fp(5, "a"), fp(6, "b"), fp(7, "c"), fp(8, "d")];
        let same = returned.map(Held::Record);
        assert_eq!(first_divergence(&returned, &same), None);
        // The records a deposed leader served at 6 and 7, the cluster's own there since.
        let replaced = [
            same[0],
            Held::Record(fp(6, "x")),
            Held::Record(fp(7, "y")),
            same[3],
        ];
        assert_eq!(first_divergence(&returned, &replaced), Some(6));
        // Discarded by the stream's limits: nothing to compare. Not held: a divergence.
        let limits = [Held::Discarded, same[1], Held::Nothing, same[3]];
        assert_eq!(first_divergence(&returned, &limits), Some(7));
        // Handed over out of order (a rewind): still the lowest.
        let out_of_order = [fp(8, "d"), fp(6, "b")];
        let held = [Held::Record(fp(8, "z")), Held::Record(fp(6, "w"))];
        assert_eq!(first_divergence(&out_of_order, &held), Some(6));
    }

    #[test]
    fn a_break_makes_the_window_before_it_and_after_the_next_consumer_suspect() {
        let window = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut verifier = Verifier::default();
        verifier.handed(fp(1, "old"), t0, window);
        verifier.handed(fp(2, "a"), t0 + Duration::from_secs(6), window);
        verifier.handed(fp(3, "b"), t0 + Duration::from_secs(7), window);
        assert!(
            !verifier.due(t0 + Duration::from_secs(100)),
            "nothing broke"
        );
        let broke = t0 + Duration::from_secs(8);
        verifier.broke(broke, window);
        // The next consumer came two seconds later: what it hands over is suspect too.
        verifier.consumer_created(broke + Duration::from_secs(2) + window);
        verifier.handed(fp(4, "c"), broke + Duration::from_secs(3), window);
        assert!(!verifier.due(broke + window));
        assert!(verifier.due(broke + Duration::from_secs(2) + window));
        assert_eq!(
            verifier
                .suspects()
                .iter()
                .map(|f| f.sequence)
                .collect::<Vec<_>>(),
            [2, 3, 4],
            "the record older than the window before the break is not"
        );
        verifier.cleared();
        assert!(!verifier.due(broke + Duration::from_secs(100)));
    }
}
