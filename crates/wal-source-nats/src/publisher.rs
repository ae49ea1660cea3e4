//! The producing side, for tools and tests: creates the stream if it is missing and
//! publishes events on their execution's subject with pipelined, retried acknowledgements.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use bytes::Bytes;

use crate::config::{JetStreamConfig, Subjects};
use crate::connect::{JetStreamError, Runtime, open};

/// Publishes WAL events to a JetStream stream from synchronous code.
///
/// Publications are pipelined: [`publish`](JetStreamPublisher::publish) returns once the message
/// is handed to the client, and acknowledgements are collected in windows of
/// [`JetStreamPublisher::WINDOW`]. A publication the broker did not acknowledge (it was down, the
/// ack timed out) is sent again, so a message can be stored twice; the index absorbs
/// duplicates, and nothing acknowledged is ever lost.
///
/// Acknowledgements are awaited concurrently, and every unacknowledged publication of a
/// window is re-sent at once, in rounds: after a broker restart the whole window recovers in
/// about one acknowledgement timeout, not one per message. Each publication has its own
/// deadline ([`JetStreamPublisher::RETRY_FOR`] since it was first sent); a round that found
/// publications unacknowledged is reported to the [`on_wait`](JetStreamPublisher::on_wait) hook,
/// so a tool can say what it is waiting for.
pub struct JetStreamPublisher {
    client: async_nats::Client,
    url: String,
    context: jetstream::Context,
    subjects: Subjects,
    shards: u32,
    in_flight: VecDeque<Pending>,
    retry_for: Duration,
    stats: PublisherStats,
    on_wait: Option<WaitHook>,
    /// Last, so the context is dropped while its runtime still exists.
    runtime: Runtime,
}

/// What [`JetStreamPublisher::on_wait`] installs.
type WaitHook = Box<dyn FnMut(&PublishRetry) + Send>;

/// One publication awaiting its acknowledgement.
struct Pending {
    subject: String,
    payload: Bytes,
    /// `None` when the last send itself failed (the client was disconnected).
    ack: Option<PublishAckFuture>,
    first_sent: Instant,
}

/// What a publisher has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublisherStats {
    /// Publications (each record once).
    pub published: u64,
    /// Re-sends handed to the client after a missing acknowledgement or a failed send.
    pub republished: u64,
    /// Acknowledgements that did not come (timeout, broker error).
    pub ack_failures: u64,
    /// Sends the client refused (disconnected).
    pub send_failures: u64,
    /// Retry rounds that found unacknowledged publications (each waited for the broker).
    pub waits: u64,
}

/// Reported to the [`JetStreamPublisher::on_wait`] hook after each retry round that found
/// publications unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishRetry {
    /// Publications of this window still unacknowledged (about to be re-sent).
    pub unacknowledged: usize,
    /// Since the oldest of them was first sent.
    pub waited: Duration,
}

impl JetStreamPublisher {
    /// Most publications awaiting their acknowledgement.
    pub const WINDOW: usize = 1024;
    /// How long a publication is re-sent before the publisher gives up on it.
    pub const RETRY_FOR: Duration = Duration::from_secs(120);

    /// Connects to `config.url`; events go to `subjects`, spread over `shards` shard tokens.
    pub fn connect(
        config: &JetStreamConfig,
        subjects: Subjects,
        shards: u32,
    ) -> Result<Self, JetStreamError> {
        let (runtime, client, context) = open(config)?;
        Ok(JetStreamPublisher {
            client,
            url: config.url.clone(),
            runtime,
            context,
            subjects,
            shards: shards.max(1),
            in_flight: VecDeque::new(),
            retry_for: Self::RETRY_FOR,
            stats: PublisherStats::default(),
            on_wait: None,
        })
    }

    /// Calls `hook` after each retry round that found publications unacknowledged (a tool
    /// prints a line: the publisher is waiting for the broker).
    pub fn on_wait(&mut self, hook: impl FnMut(&PublishRetry) + Send + 'static) {
        self.on_wait = Some(Box::new(hook));
    }

    /// Messages the stream `name` holds now.
    pub fn stream_messages(&self, name: &str) -> Result<u64, JetStreamError> {
        Ok(self.stream_info(name)?.state.messages)
    }

    /// The stream's information as the broker gives it now.
    fn stream_info(&self, name: &str) -> Result<stream::Info, JetStreamError> {
        self.runtime
            .block_on(async {
                let mut stream = self.context.get_stream(name).await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(stream.info().await?.clone())
            })
            .map_err(|e| JetStreamError::JetStream(format!("cannot read stream {name:?}: {e}")))
    }

    /// Creates the stream `name` over every event subject (file storage, limits-based
    /// retention), or leaves an existing one as it is. Waits up to `limit` for the broker;
    /// if no broker accepted the connection by then, the error says so
    /// ([`JetStreamError::Unreachable`]).
    pub fn ensure_stream(&self, name: &str, limit: Duration) -> Result<(), JetStreamError> {
        self.ensure_stream_replicated(name, 1, limit)
    }

    /// [`JetStreamPublisher::ensure_stream`] with `replicas` copies of every message on a
    /// JetStream cluster (a stream with 3 replicas acknowledges a publication once two of
    /// them stored it, and survives the loss of one node). On a cluster that has just
    /// started, JetStream refuses to create streams until it has elected its meta leader; this
    /// waits for that within `limit` too. `replicas` above the cluster's size is an error
    /// once `limit` has passed.
    pub fn ensure_stream_replicated(
        &self,
        name: &str,
        replicas: usize,
        limit: Duration,
    ) -> Result<(), JetStreamError> {
        let config = stream::Config {
            name: name.to_owned(),
            subjects: vec![self.subjects.all()],
            storage: stream::StorageType::File,
            num_replicas: replicas.max(1),
            ..Default::default()
        };
        let deadline = Instant::now() + limit;
        loop {
            let attempt = self.runtime.block_on(async {
                self.context
                    .get_or_create_stream(config.clone())
                    .await
                    .map(|_| ())
            });
            match attempt {
                Ok(()) => return Ok(()),
                Err(_)
                    if Instant::now() >= deadline
                        && self.client.connection_state()
                            != async_nats::connection::State::Connected =>
                {
                    return Err(JetStreamError::Unreachable {
                        url: self.url.clone(),
                        waited: limit,
                    });
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(JetStreamError::JetStream(format!(
                        "cannot create stream {name:?}: {e}"
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The `server_name` of the node that leads the stream `name` on a cluster (`None` on a
    /// single server, or while the stream has no leader).
    pub fn stream_leader(&self, name: &str) -> Result<Option<String>, JetStreamError> {
        Ok(self.stream_info(name)?.cluster.and_then(|c| c.leader))
    }

    /// Deletes the stream `name` (tools clean up the streams they made).
    pub fn delete_stream(&self, name: &str) -> Result<(), JetStreamError> {
        self.runtime
            .block_on(self.context.delete_stream(name))
            .map(|_| ())
            .map_err(|e| JetStreamError::JetStream(format!("cannot delete stream {name:?}: {e}")))
    }

    /// Publishes `payload` on `execution_id`'s subject.
    pub fn publish(&mut self, execution_id: i64, payload: Bytes) -> Result<(), JetStreamError> {
        let subject = self.subjects.subject(execution_id, self.shards);
        self.publish_on(subject, payload)
    }

    /// Publishes `payload` on an explicit subject (a record whose execution is unknown).
    pub fn publish_on(&mut self, subject: String, payload: Bytes) -> Result<(), JetStreamError> {
        if self.in_flight.len() >= Self::WINDOW {
            self.settle(Self::WINDOW / 2)?;
        }
        let ack = match self.send(&subject, payload.clone()) {
            Ok(ack) => Some(ack),
            Err(_) => {
                // Disconnected: the next settle re-sends it.
                self.stats.send_failures += 1;
                None
            }
        };
        self.in_flight.push_back(Pending {
            subject,
            payload,
            ack,
            first_sent: Instant::now(),
        });
        self.stats.published += 1;
        Ok(())
    }

    /// Waits until every publication so far is acknowledged, re-sending the ones that were
    /// not; fails if one is still unacknowledged [`JetStreamPublisher::RETRY_FOR`] after it was
    /// first sent.
    pub fn flush(&mut self) -> Result<(), JetStreamError> {
        self.settle(self.in_flight.len())
    }

    /// Publications, and re-sends after a missing acknowledgement.
    pub fn counts(&self) -> (u64, u64) {
        (self.stats.published, self.stats.republished)
    }

    /// Everything the publisher counted.
    pub fn stats(&self) -> PublisherStats {
        self.stats
    }

    fn send(&self, subject: &str, payload: Bytes) -> Result<PublishAckFuture, JetStreamError> {
        self.runtime
            .block_on(self.context.publish(subject.to_owned(), payload))
            .map_err(|e| JetStreamError::JetStream(format!("publish on {subject}: {e}")))
    }

    /// Settles the `count` oldest publications: awaits their acknowledgements concurrently,
    /// then re-sends every one that failed, all at once, and goes again, pausing between
    /// rounds (25 ms doubling to 1 s) while the broker is away.
    fn settle(&mut self, count: usize) -> Result<(), JetStreamError> {
        let take = count.min(self.in_flight.len());
        let mut window: Vec<Pending> = self.in_flight.drain(..take).collect();
        let mut rounds = 0;
        loop {
            let acks: Vec<_> = window.iter_mut().map(|p| p.ack.take()).collect();
            let sent: Vec<bool> = acks.iter().map(Option::is_some).collect();
            let acknowledged: Vec<bool> =
                self.runtime
                    .block_on(futures_util::future::join_all(acks.into_iter().map(
                        |ack| async move {
                            match ack {
                                Some(ack) => ack.await.is_ok(),
                                None => false,
                            }
                        },
                    )));
            let mut unacknowledged = Vec::new();
            for ((pending, ok), sent) in window.into_iter().zip(acknowledged).zip(sent) {
                if !ok {
                    self.stats.ack_failures += u64::from(sent);
                    unacknowledged.push(pending);
                }
            }
            if unacknowledged.is_empty() {
                return Ok(());
            }
            let oldest = unacknowledged
                .iter()
                .map(|p| p.first_sent)
                .min()
                .unwrap_or_else(Instant::now);
            if oldest.elapsed() >= self.retry_for {
                let error = JetStreamError::JetStream(format!(
                    "no acknowledgement for a publication on {} after re-sending it for {:?}",
                    unacknowledged[0].subject, self.retry_for
                ));
                // Back in line, oldest first: a later flush re-sends them instead of
                // reporting success for records that were never acknowledged.
                for pending in unacknowledged.into_iter().rev() {
                    self.in_flight.push_front(pending);
                }
                return Err(error);
            }
            rounds += 1;
            self.stats.waits += 1;
            if let Some(hook) = &mut self.on_wait {
                hook(&PublishRetry {
                    unacknowledged: unacknowledged.len(),
                    waited: oldest.elapsed(),
                });
            }
            std::thread::sleep(wal_index::ingest::Backoff::default().pause(rounds));
            // A refused send means the client is still disconnected (its command queue is
            // full, each further send would wait a whole API timeout): the rest of the round
            // waits for the next one.
            for pending in &mut unacknowledged {
                match self.send(&pending.subject, pending.payload.clone()) {
                    Ok(ack) => {
                        self.stats.republished += 1;
                        pending.ack = Some(ack);
                    }
                    Err(_) => {
                        self.stats.send_failures += 1;
                        break;
                    }
                }
            }
            window = unacknowledged;
        }
    }
}

impl std::fmt::Debug for JetStreamPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamPublisher")
            .field("subjects", &self.subjects)
            .field("shards", &self.shards)
            .field("in_flight", &self.in_flight.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_where_nothing_listens_is_reported_as_unreachable() {
        // Nothing listens on port 1.
        let config = JetStreamConfig::new("nats://127.0.0.1:1");
        let publisher = JetStreamPublisher::connect(&config, Subjects::default(), 1).unwrap();
        match publisher.ensure_stream("s", Duration::from_millis(500)) {
            Err(JetStreamError::Unreachable { url, .. }) => assert_eq!(url, config.url),
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }
}
