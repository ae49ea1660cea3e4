//! [`JetStreamRehydrate`]: one execution's events read from the stream by subject, the
//! per-execution read a drive uses when waiting for the drain cannot serve it.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use wal_index::flow::{DriveFallbacks, FallbackRead, ReadBounds};
use wal_index::ingest::DecodeMode;
use wal_index::{Event, ExecutionId};

use crate::config::{JetStreamConfig, Subjects};
use crate::connect::{JetStreamError, Runtime, open};

/// Where one execution's events live on the stream: a subject template whose
/// `{execution_id}` token is the execution's id and whose other `{…}` tokens match any
/// value.
///
/// Two layouts are in use:
///
/// | layout | template | an execution's filter |
/// |---|---|---|
/// | this crate's ([`Subjects`](crate::Subjects)) | `noetl.events.{shard}.{execution_id}` | `noetl.events.*.42` |
/// | production's NATS-era | `noetl.events.{tenant}.{org}.{execution_id}.{shard}` | `noetl.events.*.*.42.*` |
///
/// ```
/// use wal_source_nats::SubjectLayout;
///
/// let ours = SubjectLayout::default();
/// assert_eq!(ours.execution_filter(42), "noetl.events.*.42");
/// let production = SubjectLayout::tenant_org();
/// assert_eq!(production.execution_filter(42), "noetl.events.*.*.42.*");
/// let custom = SubjectLayout::parse("wal.{tenant}.acme.{execution_id}").unwrap();
/// assert_eq!(custom.execution_filter(-7), "wal.*.acme.-7");
/// assert!(SubjectLayout::parse("noetl.events.{shard}").is_err(), "no execution id token");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectLayout {
    /// The template's tokens: `None` for `{execution_id}`, `Some("*")` for any other
    /// placeholder, the literal otherwise.
    tokens: Vec<Option<String>>,
}

/// Why a subject template cannot name one execution's events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("subject template {template:?}: {why}")]
pub struct LayoutError {
    /// The template.
    pub template: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Default for SubjectLayout {
    /// This crate's layout, `noetl.events.{shard}.{execution_id}`.
    fn default() -> Self {
        SubjectLayout::parse("noetl.events.{shard}.{execution_id}").expect("a valid template")
    }
}

impl SubjectLayout {
    /// The layout [`Subjects`] publishes on, `<prefix>.{shard}.{execution_id}`.
    ///
    /// ```
    /// use wal_source_nats::{SubjectLayout, Subjects};
    ///
    /// let subjects = Subjects::with_prefix("wal.eu").unwrap();
    /// assert_eq!(SubjectLayout::of(&subjects).execution_filter(9), "wal.eu.*.9");
    /// ```
    pub fn of(subjects: &Subjects) -> SubjectLayout {
        SubjectLayout::parse(&format!("{}.{{shard}}.{{execution_id}}", subjects.prefix))
            .expect("a valid prefix makes a valid template")
    }

    /// Production's NATS-era layout, `noetl.events.{tenant}.{org}.{execution_id}.{shard}`.
    pub fn tenant_org() -> SubjectLayout {
        SubjectLayout::parse("noetl.events.{tenant}.{org}.{execution_id}.{shard}")
            .expect("a valid template")
    }

    /// Reads a template: dot-separated tokens, each a literal (no wildcard), a `{name}`
    /// placeholder, or exactly one `{execution_id}`.
    pub fn parse(template: &str) -> Result<SubjectLayout, LayoutError> {
        let error = |why| LayoutError {
            template: template.to_owned(),
            why,
        };
        let mut tokens = Vec::new();
        for token in template.split('.') {
            tokens.push(match token {
                "{execution_id}" => None,
                "" => return Err(error("an empty token")),
                t if t.starts_with('{') && t.ends_with('}') && t.len() > 2 => Some("*".to_owned()),
                t if t.contains(['*', '>', '{', '}', ' ']) => {
                    return Err(error("a token that is neither a literal nor a placeholder"));
                }
                t => Some(t.to_owned()),
            });
        }
        match tokens.iter().filter(|t| t.is_none()).count() {
            1 => Ok(SubjectLayout { tokens }),
            0 => Err(error("no {execution_id} token")),
            _ => Err(error("more than one {execution_id} token")),
        }
    }

    /// The subject filter that matches every event of `execution_id`.
    pub fn execution_filter(&self, execution_id: ExecutionId) -> String {
        let id = execution_id.to_string();
        let tokens: Vec<&str> = self
            .tokens
            .iter()
            .map(|t| t.as_deref().unwrap_or(&id))
            .collect();
        tokens.join(".")
    }
}

/// A [`DriveFallbacks`] whose retained WAL is the JetStream stream: each
/// [`retained`](DriveFallbacks::retained) read creates an ephemeral consumer filtered on
/// the execution's subject ([`SubjectLayout`]), takes the messages it had pending when it
/// was created (the broker's per-subject index finds them; nothing else is sent), and
/// deletes it.
///
/// # Costs and limits
///
/// - One consumer creation and one delete per read, plus the execution's messages: a
///   read's cost follows the execution, not the stream's backlog, which is what makes it
///   useful while the drain is still replaying that backlog.
/// - Bounded by its [`ReadBounds`] ([`bounds`](JetStreamRehydrate::bounds); today's by
///   default, 3 s and 100,000 messages): a read that hits
///   either answers `None` rather than a short history. (A short history could never be
///   served anyway, since a spine must reach genesis; `None` says so at once.)
/// - The read runs on the source's own client runtime, so any executor, or a blocking
///   drive, can await it, and dropping the future (a drive's fallback timeout) aborts it.
/// - Messages that are not events, or are another execution's, are skipped.
///
/// ```no_run
/// use wal_index::rehydrate::RehydrateGate;
/// use wal_index::{DriveBudget, DriveFlow};
/// use wal_source_nats::{JetStreamRehydrate, JetStreamConfig, SubjectLayout};
///
/// let retained = JetStreamRehydrate::connect(
///     JetStreamConfig::new("nats://127.0.0.1:4222"),
///     SubjectLayout::tenant_org(),
/// )?;
/// let gate = RehydrateGate::default();
/// let flow = DriveFlow::new(DriveBudget::default())
///     .fallbacks(&retained)
///     .rehydrate_gate(&gate);
/// # let _ = flow;
/// # Ok::<(), wal_source_nats::JetStreamError>(())
/// ```
pub struct JetStreamRehydrate {
    context: jetstream::Context,
    config: JetStreamConfig,
    layout: SubjectLayout,
    bounds: ReadBounds,
    /// Last, so the client is dropped while its runtime still exists.
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for JetStreamRehydrate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamRehydrate")
            .field("stream", &self.config.stream)
            .field("layout", &self.layout)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl JetStreamRehydrate {
    /// Reads `config.stream` at `config.url` (its filter and mode are not used: a read
    /// names its execution's subject itself). Like a source, it does not fail on an
    /// unreachable broker; its reads do, until the broker is back.
    pub fn connect(
        config: JetStreamConfig,
        layout: SubjectLayout,
    ) -> Result<JetStreamRehydrate, JetStreamError> {
        let (runtime, _client, context) = open(&config)?;
        Ok(JetStreamRehydrate {
            context,
            config,
            layout,
            bounds: ReadBounds::DEFAULT,
            runtime: Arc::new(runtime),
        })
    }

    /// Within other bounds: a deadline for the whole read and a cap on its messages
    /// (today's: [`ReadBounds::DEFAULT`], 3 s and 100,000).
    pub fn bounds(mut self, bounds: ReadBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// One execution's retained events, in stream order, each decoded once as `mode` says;
    /// `Ok(empty)` if the stream holds none. Blocks the calling thread (the
    /// [`DriveFallbacks`] form does not).
    pub fn read(&self, execution_id: ExecutionId, mode: DecodeMode) -> std::io::Result<Vec<Event>> {
        let read = self.read_task(execution_id, mode);
        self.runtime.block_on(async move {
            read.await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
        })
    }

    /// The read as a task on the client's runtime, bounded by the deadline.
    fn read_task(
        &self,
        execution_id: ExecutionId,
        mode: DecodeMode,
    ) -> tokio::task::JoinHandle<std::io::Result<Vec<Event>>> {
        let (context, stream) = (self.context.clone(), self.config.stream.clone());
        let filter = self.layout.execution_filter(execution_id);
        let (deadline, cap) = (self.bounds.deadline(), self.bounds.max_records());
        self.runtime.handle().spawn(async move {
            let read = read_execution(&context, &stream, filter, (execution_id, mode), cap);
            tokio::time::timeout(deadline, read)
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("reading execution {execution_id} passed its deadline"),
                    ))
                })
        })
    }
}

/// Creates the filtered consumer, takes what it had pending, deletes it.
async fn read_execution(
    context: &jetstream::Context,
    stream: &str,
    filter_subject: String,
    (execution_id, mode): (ExecutionId, DecodeMode),
    cap: u64,
) -> std::io::Result<Vec<Event>> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            format!("{what} (stream {stream:?}, execution {execution_id}): {e}"),
        )
    };
    let stream = context
        .get_stream(stream)
        .await
        .map_err(|e| failed("cannot look up the stream", &e))?;
    // Named before it exists, so a read dropped while the broker creates it still deletes
    // it: the delete is armed first.
    static READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed: a unique suffix, nothing else.
    let n = READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("rehydrate-{}-{n}", std::process::id());
    let _delete = DeleteOnDrop {
        stream: stream.clone(),
        name: name.clone(),
    };
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            name: Some(name),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            filter_subject,
            inactive_threshold: Duration::from_secs(5),
            ..Default::default()
        })
        .await
        .map_err(|e| failed("cannot create the consumer", &e))?;
    let pending = consumer.cached_info().num_pending;
    async {
        if pending > cap {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("execution {execution_id} has {pending} messages, over the cap of {cap}"),
            ));
        }
        let mut events = Vec::with_capacity(usize::try_from(pending).unwrap_or(0).min(4096));
        if pending == 0 {
            return Ok(events);
        }
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(usize::try_from(pending.min(1024)).unwrap_or(1024))
            .messages()
            .await
            .map_err(|e| failed("cannot start the consumer", &e))?;
        // Up to what was pending at creation: later messages are the drain's. A delivery
        // that leaves nothing pending also ends the read (messages counted at creation may
        // have been removed since, by age or a purge).
        let mut taken = 0;
        while taken < pending {
            let message = match messages.next().await {
                Some(Ok(message)) => message,
                Some(Err(e)) => return Err(failed("the consumer failed", &e)),
                None => return Err(failed("the consumer ended", &"early")),
            };
            taken += 1;
            let last = message.info().is_ok_and(|info| info.pending == 0);
            if let Ok(event) = mode.decode(&message.payload)
                && event.execution_id() == execution_id
            {
                events.push(event);
            }
            if last {
                break;
            }
        }
        Ok(events)
    }
    .await
}

/// Deletes a read's consumer when the read ends, however it ends (done, its deadline, an
/// abort), on the client's runtime: the broker would drop it after its inactivity threshold
/// anyway, but a burst of reads must not pile consumers up.
struct DeleteOnDrop {
    stream: jetstream::stream::Stream,
    name: String,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let (stream, name) = (self.stream.clone(), std::mem::take(&mut self.name));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = stream.delete_consumer(&name).await;
            });
        }
    }
}

/// The read runs on the client's runtime; the future only waits for it, and dropping the
/// future aborts it.
impl DriveFallbacks for JetStreamRehydrate {
    fn retained(&self, execution_id: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
        let task = AbortOnDrop(self.read_task(execution_id, mode));
        Box::pin(async move {
            let mut task = task;
            (&mut task.0).await.ok()?.ok()
        })
    }
}

/// A task handle that aborts its task when dropped (a drive stopped waiting for it).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
