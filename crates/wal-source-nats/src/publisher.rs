//! The producing side, for tools and tests: creates the stream if it is missing and
//! publishes events on their execution's subject with pipelined, retried acknowledgements.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use bytes::Bytes;

use crate::config::{NatsWalConfig, Subjects};
use crate::connect::{NatsWalError, Runtime, open};

/// Publishes WAL events to a JetStream stream from synchronous code.
///
/// Publications are pipelined: [`publish`](WalPublisher::publish) returns once the message
/// is handed to the client, and acknowledgements are collected in windows of
/// [`WalPublisher::WINDOW`]. A publication the broker did not acknowledge (it was down, the
/// ack timed out) is sent again until [`flush`](WalPublisher::flush)'s deadline, so a
/// message can be stored twice; the index absorbs duplicates, and nothing acknowledged is
/// ever lost.
pub struct WalPublisher {
    client: async_nats::Client,
    url: String,
    context: jetstream::Context,
    subjects: Subjects,
    shards: u32,
    in_flight: VecDeque<(String, Bytes, PublishAckFuture)>,
    retry_for: Duration,
    published: u64,
    republished: u64,
    /// Last, so the context is dropped while its runtime still exists.
    runtime: Runtime,
}

impl WalPublisher {
    /// Most publications awaiting their acknowledgement.
    pub const WINDOW: usize = 1024;

    /// Connects to `config.url`; events go to `subjects`, spread over `shards` shard tokens.
    pub fn connect(
        config: &NatsWalConfig,
        subjects: Subjects,
        shards: u32,
    ) -> Result<Self, NatsWalError> {
        let (runtime, client, context) = open(config)?;
        Ok(WalPublisher {
            client,
            url: config.url.clone(),
            runtime,
            context,
            subjects,
            shards: shards.max(1),
            in_flight: VecDeque::new(),
            retry_for: Duration::from_secs(30),
            published: 0,
            republished: 0,
        })
    }

    /// Creates the stream `name` over every event subject (file storage, limits-based
    /// retention), or leaves an existing one as it is. Waits up to `limit` for the broker;
    /// if no broker accepted the connection by then, the error says so
    /// ([`NatsWalError::Unreachable`]).
    pub fn ensure_stream(&self, name: &str, limit: Duration) -> Result<(), NatsWalError> {
        let config = stream::Config {
            name: name.to_owned(),
            subjects: vec![self.subjects.all()],
            storage: stream::StorageType::File,
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
                    return Err(NatsWalError::Unreachable {
                        url: self.url.clone(),
                        waited: limit,
                    });
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(NatsWalError::JetStream(format!(
                        "cannot create stream {name:?}: {e}"
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Deletes the stream `name` (tools clean up the streams they made).
    pub fn delete_stream(&self, name: &str) -> Result<(), NatsWalError> {
        self.runtime
            .block_on(self.context.delete_stream(name))
            .map(|_| ())
            .map_err(|e| NatsWalError::JetStream(format!("cannot delete stream {name:?}: {e}")))
    }

    /// Publishes `payload` on `execution_id`'s subject.
    pub fn publish(&mut self, execution_id: i64, payload: Bytes) -> Result<(), NatsWalError> {
        let subject = self.subjects.subject(execution_id, self.shards);
        self.publish_on(subject, payload)
    }

    /// Publishes `payload` on an explicit subject (a record whose execution is unknown).
    pub fn publish_on(&mut self, subject: String, payload: Bytes) -> Result<(), NatsWalError> {
        if self.in_flight.len() >= Self::WINDOW {
            self.settle(Self::WINDOW / 2)?;
        }
        let ack = self.send(&subject, payload.clone())?;
        self.in_flight.push_back((subject, payload, ack));
        self.published += 1;
        Ok(())
    }

    /// Waits until every publication so far is acknowledged, re-sending the ones that were
    /// not; fails if some are still unacknowledged after 30 s of retrying.
    pub fn flush(&mut self) -> Result<(), NatsWalError> {
        self.settle(self.in_flight.len())
    }

    /// Publications, and re-sends after a missing acknowledgement.
    pub fn counts(&self) -> (u64, u64) {
        (self.published, self.republished)
    }

    fn send(&self, subject: &str, payload: Bytes) -> Result<PublishAckFuture, NatsWalError> {
        self.runtime
            .block_on(self.context.publish(subject.to_owned(), payload))
            .map_err(|e| NatsWalError::JetStream(format!("publish on {subject}: {e}")))
    }

    fn settle(&mut self, count: usize) -> Result<(), NatsWalError> {
        let deadline = Instant::now() + self.retry_for;
        for _ in 0..count.min(self.in_flight.len()) {
            let Some((subject, payload, mut ack)) = self.in_flight.pop_front() else {
                break;
            };
            let mut failures = 0;
            loop {
                match self.runtime.block_on(ack.into_future()) {
                    Ok(_) => break,
                    Err(e) if Instant::now() >= deadline => {
                        return Err(NatsWalError::JetStream(format!(
                            "no acknowledgement for a publication on {subject} after retrying: {e}"
                        )));
                    }
                    Err(_) => {
                        failures += 1;
                        // 25 ms doubling to 1 s, as the drain retries its source.
                        std::thread::sleep(wal_index::ingest::Backoff::default().pause(failures));
                        self.republished += 1;
                        ack = self.retry_send(&subject, &payload, deadline)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn retry_send(
        &self,
        subject: &str,
        payload: &Bytes,
        deadline: Instant,
    ) -> Result<PublishAckFuture, NatsWalError> {
        loop {
            match self.send(subject, payload.clone()) {
                Ok(ack) => return Ok(ack),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl std::fmt::Debug for WalPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalPublisher")
            .field("subjects", &self.subjects)
            .field("shards", &self.shards)
            .field("in_flight", &self.in_flight.len())
            .field("published", &self.published)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_where_nothing_listens_is_reported_as_unreachable() {
        // Nothing listens on port 1.
        let config = NatsWalConfig::new("nats://127.0.0.1:1");
        let publisher = WalPublisher::connect(&config, Subjects::default(), 1).unwrap();
        match publisher.ensure_stream("s", Duration::from_millis(500)) {
            Err(NatsWalError::Unreachable { url, .. }) => assert_eq!(url, config.url),
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }
}
