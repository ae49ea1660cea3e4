//! A NATS JetStream write-ahead log for [`wal_index`]: the drain of a worker pool reads its
//! share of the `noetl_events` stream, and survives the broker and itself restarting.
//!
//! # Model
//!
//! Producers publish every workflow event on its execution's subject,
//! `noetl.events.<shard>.<execution_id>` ([`Subjects`]). A worker pool runs one
//! [`Drain`](wal_index::Drain) over one [`JetStreamSource`], whose consumer filters on the
//! pool's shard token, so each execution's whole chain reaches exactly one pool and pools
//! never talk to each other. Two consumer modes ([`ConsumerMode`]):
//!
//! - **replay-on-boot** (default): an ephemeral consumer delivers the whole retained stream
//!   at every start, then follows the tail. The index is rebuilt from the broker; nothing
//!   is acknowledged. This is production's cold-start path.
//! - **durable**: a named consumer, acknowledged after each applied batch; a restarted
//!   pool resumes where it left off (at-least-once, duplicates absorbed by the index).
//!
//! # Costs
//!
//! One Tokio worker thread per source for the client connection; up to
//! [`prefetch`](JetStreamConfig::prefetch) messages buffered in the client; in durable mode,
//! one acknowledgement publish per message (no round trip). Payloads are handed to the index as the `Bytes` the
//! client received, without a copy.
//!
//! # Failure
//!
//! The broker going away is an outage, not an error: the source reports it, the drain
//! sets `healthy` to 0 and retries with backoff ([`DrainConfig::retry`]), the client
//! reconnects, and the consumer is recreated where it stopped. Undecodable messages are
//! counted and skipped by the drain like any bad WAL record.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use wal_index::{Drain, DrainConfig, StateIndex, WalIndex};
//! use wal_source_nats::{JetStreamSource, JetStreamConfig, Subjects};
//!
//! // Pool 0 of 2, replay-on-boot, broker and stream from the environment's defaults.
//! let config = JetStreamConfig::new("nats://127.0.0.1:4222").filter(Subjects::default().shard_filter(0, 2));
//! let source = JetStreamSource::connect(config)?;
//! let index = Arc::new(WalIndex::default());
//! let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
//! // ... drives call index.drive_async(execution_id, Some(tip), &flow).await ...
//! drain.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`DrainConfig::retry`]: wal_index::DrainConfig::retry

mod config;
mod connect;
mod publisher;
mod rehydrate;
mod source;
pub mod subject;
#[cfg(feature = "test-broker")]
pub mod test_broker;

pub use config::{ConsumerMode, DEFAULT_STREAM, DEFAULT_SUBJECT_PREFIX, JetStreamConfig, Subjects};
pub use connect::JetStreamError;
pub use publisher::{JetStreamPublisher, PublishRetry, PublisherStats};
pub use rehydrate::{JetStreamRehydrate, LayoutError, SubjectLayout};
pub use source::{JetStreamSource, JetStreamStats};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
