//! Where a run's WAL lives: an in-process channel (the default), a real NATS JetStream
//! broker or a real EHDB writer, where the producer publishes and the drain consumes
//! through the network.

mod ehdb;

pub use ehdb::{EhdbFeed, EhdbTarget};

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wal_index::flow::FallbackRead;
use wal_index::ingest::{ChannelSource, DecodeMode, Pull, WalWriter, channel_wal};
use wal_index::{DriveFallbacks, Event, ExecutionId, WalSource};
use wal_source_nats::{
    JetStreamConfig, JetStreamPublisher, JetStreamRehydrate, JetStreamSource, SubjectLayout,
    Subjects,
};

use crate::workload::{Item, items_from_payloads};

/// The WAL a run goes through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WalTarget {
    /// An in-process channel: measures the index alone.
    #[default]
    InProcess,
    /// A JetStream broker at this `nats://HOST:PORT`: each engine run gets its own stream
    /// (`sb_sim_<pid>_<engine>_<n>`, deleted afterwards); the backlog is published before the
    /// drain starts, so the cold start is a replay-on-boot from the broker.
    Nats(String),
    /// An EHDB writer: the producer publishes through its ingest face, the drain reads its
    /// feed face from the run's own first sequence ([`EhdbFeed`]); the backlog is published
    /// before the drain starts, so the cold start is the feed's first frame.
    Ehdb(EhdbTarget),
}

impl WalTarget {
    /// `None` for the in-process channel; a `nats://` URL for a broker; an
    /// `ehdb://HOST:FEED_PORT?ingest=PORT[&shards=N]` URL for an EHDB writer.
    pub fn parse(url: Option<&str>) -> Result<WalTarget, String> {
        match url {
            None => Ok(WalTarget::InProcess),
            Some(url) if url.starts_with("nats://") => Ok(WalTarget::Nats(url.to_owned())),
            Some(url) if url.starts_with("ehdb://") => EhdbTarget::parse(url, true)
                .map(WalTarget::Ehdb)
                .map_err(|e| format!("--wal {e}")),
            Some(other) => Err(format!(
                "--wal {other:?}: expected nats://HOST:PORT or ehdb://HOST:FEED_PORT?ingest=PORT (omit --wal for the in-process WAL)"
            )),
        }
    }

    /// How the report names it.
    pub fn describe(&self) -> String {
        match self {
            WalTarget::InProcess => "in-process channel".to_owned(),
            WalTarget::Nats(url) => format!("NATS JetStream at {url}"),
            WalTarget::Ehdb(target) => format!(
                "EHDB writer at feed {} (ingest {}, {} shard{})",
                target.feed,
                target.ingest.as_deref().unwrap_or("none"),
                target.shards,
                if target.shards == 1 { "" } else { "s" }
            ),
        }
    }

    /// Whether the drain's source blocks while it waits (a broker's or a writer's), so the
    /// drain runs on its own thread rather than as a task.
    pub fn blocks(&self) -> bool {
        !matches!(self, WalTarget::InProcess)
    }
}

/// The producing end of a run's WAL (also what the `worker_pool` example publishes with).
pub enum Feed {
    /// The in-process channel, its reading end until the drain takes it, and every payload
    /// appended (the log a pool that rolls replays, [`Feed::replay_channel`]).
    Channel(WalWriter, Option<ChannelSource>, Vec<Bytes>),
    /// A JetStream stream made for the run.
    Nats {
        /// The producer.
        publisher: Box<JetStreamPublisher>,
        /// The stream's subjects.
        subjects: Subjects,
        /// The run's stream; taken by `close`, else deleted on drop (every exit path, an
        /// error included, removes what the run created on the broker).
        stream: Option<String>,
        /// The drain's source configuration, until the drain takes it.
        config: Option<Box<JetStreamConfig>>,
    },
    /// The run's records on an EHDB writer.
    Ehdb(Box<EhdbFeed>),
}

/// What the producer did on the broker (re-sends are not records).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PublisherFigures {
    /// Records published (each once).
    pub published: u64,
    /// Re-sends after an acknowledgement did not come or a send failed.
    pub republished: u64,
    /// Acknowledgements that did not come.
    pub ack_failures: u64,
    /// Sends the client refused while disconnected.
    pub send_failures: u64,
    /// Retry rounds the producer waited for the broker.
    pub waits: u64,
    /// Messages the stream held at the end (records, plus duplicates of re-sends whose
    /// first copy had been stored). On EHDB, distinct sequences: a re-sent record is stored
    /// again under its first copy's sequence, and the feed serves a drain only records
    /// above its cursor, so a drain already past that sequence is never served the copy.
    pub stored: u64,
    /// EHDB: copies stored under a sequence an earlier copy holds (not in `stored`).
    pub stored_again: u64,
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Feed::Nats {
            publisher,
            stream: stream @ Some(_),
            ..
        } = self
            && let Some(name) = stream.take()
            && let Err(e) = publisher.delete_stream(&name)
        {
            eprintln!("sb-sim: could not delete stream {name:?}: {e}");
        }
    }
}

/// Where a pool finds a run's WAL: what it configures its drain's source and its drives'
/// per-execution read with, through each source crate's own constructors (the
/// `worker_pool` example shows the three arms).
#[derive(Debug, Clone)]
pub enum PoolWal {
    /// The in-process channel: its reading end is [`Feed::source`].
    Channel,
    /// The run's JetStream stream, and the layout of its subjects.
    JetStream {
        /// The broker and the run's stream.
        config: Box<JetStreamConfig>,
        /// How an execution's subject is named.
        layout: SubjectLayout,
    },
    /// The run's records on an EHDB writer.
    Ehdb {
        /// The writer's feed face, `HOST:PORT`.
        feed: String,
        /// The writer's shard count.
        shards: u32,
        /// The sequence before the run's first record: where the run's drain starts.
        cursor: u64,
    },
}

impl Feed {
    /// Opens the WAL for `engine` (a name for the broker's stream). The drain's source is
    /// [`Feed::source`], taken once the backlog is published.
    pub fn open(target: &WalTarget, engine: &str) -> io::Result<Feed> {
        match target {
            WalTarget::InProcess => {
                let (writer, source) = channel_wal();
                Ok(Feed::Channel(writer, Some(source), Vec::new()))
            }
            WalTarget::Ehdb(target) => Ok(Feed::Ehdb(Box::new(EhdbFeed::open(target)?))),
            WalTarget::Nats(url) => {
                // A name never used before in this process: a roll runs the same engine
                // twice, and a broker still deleting the first run's stream (a large one can
                // take longer than the delete's timeout) must not share files with the next.
                static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                // Relaxed: only unique numbers are needed.
                let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let stream = format!("sb_sim_{}_{engine}_{run}", std::process::id());
                let subjects =
                    Subjects::with_prefix(format!("sb_sim.{}.{engine}.{run}", std::process::id()))
                        .ok_or_else(|| io::Error::other("engine name is not a subject token"))?;
                let config = JetStreamConfig::new(url.clone()).stream(&stream);
                let mut publisher = JetStreamPublisher::connect(&config, subjects.clone(), 1)
                    .map_err(io::Error::other)?;
                let broker = url.clone();
                let mut last_line = Instant::now() - Duration::from_secs(60);
                publisher.on_wait(move |waiting| {
                    // One line a second at most while the broker is away.
                    if last_line.elapsed() >= Duration::from_secs(1) {
                        last_line = Instant::now();
                        eprintln!(
                            "sb-sim: {} publications not acknowledged by {broker} for {:.1} s; re-sending",
                            waiting.unacknowledged,
                            waiting.waited.as_secs_f64()
                        );
                    }
                });
                publisher
                    .ensure_stream(&stream, Duration::from_secs(10))
                    .map_err(io::Error::other)?;
                Ok(Feed::Nats {
                    publisher: Box::new(publisher),
                    subjects,
                    stream: Some(stream),
                    config: Some(Box::new(config)),
                })
            }
        }
    }

    /// The per-execution read a drive uses when waiting cannot serve it, through the
    /// transport a pool would use: on a broker, the run's stream read by the execution's
    /// subject ([`JetStreamRehydrate`]); on an EHDB writer, none unless `ehdb_feed_reads`
    /// (then its feed read from the run's first record,
    /// [`EhdbRehydrate`](wal_source_ehdb::EhdbRehydrate): the feed has no read by
    /// execution, so the writer prepares the shard's whole log for each read, 17-22 s at
    /// production's volume, under the lock its producers' publications wait on, and goes on
    /// preparing after the read gave up at its 3 s deadline: a pool on EHDB reads state
    /// shards instead); on the in-process channel, `retained`, the records the producer
    /// published, by execution. Call it before [`Feed::source`] takes the broker's
    /// configuration.
    pub fn per_execution_reads(
        &self,
        retained: Arc<RetainedWal>,
        ehdb_feed_reads: bool,
    ) -> io::Result<Arc<dyn DriveFallbacks>> {
        match self {
            Feed::Nats {
                subjects,
                config: Some(config),
                ..
            } => {
                let reads =
                    JetStreamRehydrate::connect((**config).clone(), SubjectLayout::of(subjects))
                        .map_err(io::Error::other)?;
                Ok(Arc::new(reads))
            }
            Feed::Ehdb(feed) if ehdb_feed_reads => Ok(Arc::new(feed.rehydrate())),
            Feed::Ehdb(_) => Ok(Arc::new(NoRead)),
            _ => Ok(retained),
        }
    }

    /// Where a pool finds this run's WAL. Call it before [`Feed::source`] takes the
    /// broker's configuration.
    pub fn pool_wal(&self) -> io::Result<PoolWal> {
        match self {
            Feed::Channel(..) => Ok(PoolWal::Channel),
            Feed::Nats {
                subjects,
                config: Some(config),
                ..
            } => Ok(PoolWal::JetStream {
                config: config.clone(),
                layout: SubjectLayout::of(subjects),
            }),
            Feed::Nats { config: None, .. } => {
                Err(io::Error::other("the run's source was already taken"))
            }
            Feed::Ehdb(feed) => Ok(feed.pool_wal()),
        }
    }

    /// The drain's source: what was published so far is its backlog (a replay-on-boot on a
    /// broker, the first frame on a writer). Taken once.
    pub fn source(&mut self) -> io::Result<Box<dyn WalSource>> {
        let taken = || io::Error::other("the run's source was already taken");
        match self {
            Feed::Channel(_, source, _) => Ok(Box::new(source.take().ok_or_else(taken)?)),
            Feed::Nats { config, .. } => {
                let config = config.take().ok_or_else(taken)?;
                Ok(Box::new(
                    JetStreamSource::connect(*config).map_err(io::Error::other)?,
                ))
            }
            Feed::Ehdb(feed) => Ok(Box::new(feed.source()?)),
        }
    }

    /// The in-process log for a new pool: a new channel holding every record appended so
    /// far, under the same positions, that later appends go to (the old pool's channel
    /// closes). `None` for a broker or a writer, whose log a new pool reads itself.
    pub fn replay_channel(&mut self) -> Option<ChannelSource> {
        let Feed::Channel(writer, _, log) = self else {
            return None;
        };
        let (replay, source) = channel_wal();
        for payload in log.iter() {
            replay.append(payload.clone());
        }
        *writer = replay;
        Some(source)
    }

    /// Publishes one record.
    pub fn append(&mut self, item: &Item) -> io::Result<()> {
        match self {
            Feed::Channel(writer, _, log) => {
                writer.append(item.payload.clone());
                log.push(item.payload.clone());
                Ok(())
            }
            Feed::Ehdb(feed) => feed.append(item),
            Feed::Nats {
                publisher,
                subjects,
                ..
            } => match item.ids {
                Some((execution_id, _)) => publisher.publish(execution_id, item.payload.clone()),
                // Undecodable: any subject of the stream; the drain counts it as bad.
                None => publisher.publish_on(subjects.subject(0, 1), item.payload.clone()),
            }
            .map_err(io::Error::other),
        }
    }

    /// Everything appended so far is in the log (acknowledged by the broker).
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            // Each record is acknowledged as it is published.
            Feed::Channel(..) | Feed::Ehdb(_) => Ok(()),
            Feed::Nats { publisher, .. } => publisher.flush().map_err(io::Error::other),
        }
    }

    /// True when the drain ends by itself once the feed is dropped (the channel closes); a
    /// broker stream or a writer's feed stays open, so the run stops the drain once it
    /// consumed everything.
    pub fn closes_on_drop(&self) -> bool {
        matches!(self, Feed::Channel(..))
    }

    /// Deletes the run's stream (broker) or closes the channel. A writer's log keeps the
    /// run's records.
    pub fn close(mut self) -> io::Result<()> {
        match &mut self {
            Feed::Channel(..) | Feed::Ehdb(_) => Ok(()),
            Feed::Nats {
                publisher, stream, ..
            } => match stream.take() {
                Some(name) => publisher.delete_stream(&name).map_err(io::Error::other),
                None => Ok(()),
            },
        }
    }

    /// The producer's figures, and what the stream holds now (broker and writer runs).
    pub fn publisher_figures(&self) -> Option<PublisherFigures> {
        let (publisher, stream) = match self {
            Feed::Channel(..) => return None,
            Feed::Ehdb(feed) => return Some(feed.figures()),
            Feed::Nats {
                publisher, stream, ..
            } => (publisher, stream),
        };
        let stats = publisher.stats();
        let stored = stream
            .as_deref()
            .and_then(|name| publisher.stream_messages(name).ok())
            .unwrap_or(0);
        Some(PublisherFigures {
            published: stats.published,
            republished: stats.republished,
            ack_failures: stats.ack_failures,
            send_failures: stats.send_failures,
            waits: stats.waits,
            stored,
            stored_again: 0,
        })
    }
}

/// Reads every record an EHDB writer retains (on `shard`, or on every shard of `target`,
/// merged in `global_sequence` order) into replay items, `drive_rate` of them triggering
/// drives (seeded). Bad records are left out and counted on standard error; each shard's
/// read is whole or an error (up to ten minutes for its first frame, the whole backlog).
pub fn read_writer(
    target: &EhdbTarget,
    shard: Option<u32>,
    drive_rate: f64,
    seed: u64,
) -> io::Result<Vec<Item>> {
    let shards = match shard {
        Some(shard) if shard >= target.shards => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("--shard {shard}: the writer has {} shard(s)", target.shards),
            ));
        }
        Some(shard) => shard..shard + 1,
        None => 0..target.shards,
    };
    let mut records: Vec<(u64, Bytes)> = Vec::new();
    let mut bad = 0u64;
    for shard in shards {
        wal_source_ehdb::read_retained(
            &target.feed,
            shard,
            0,
            Duration::from_secs(600),
            wal_source_ehdb::frame::Limits::default(),
            |record| match record.event {
                Ok(event) => {
                    records.push((record.position, Bytes::copy_from_slice(event.payload())))
                }
                Err(_) => bad += 1,
            },
        )
        .map_err(|e| io::Error::new(e.kind(), format!("shard {shard} of {}: {e}", target.feed)))?;
    }
    if bad > 0 {
        eprintln!("sb-sim: {bad} bad records in the writer's log were left out of the replay");
    }
    records.sort_by_key(|(position, _)| *position);
    let payloads: Vec<Bytes> = records.into_iter().map(|(_, payload)| payload).collect();
    Ok(items_from_payloads(payloads, drive_rate, seed))
}

/// Reads every message retained by `stream` (optionally only `filter`'s subjects) into
/// replay items, `drive_rate` of them triggering drives (seeded).
pub fn read_stream(
    url: &str,
    stream: &str,
    filter: Option<&str>,
    drive_rate: f64,
    seed: u64,
) -> io::Result<Vec<Item>> {
    let mut config = JetStreamConfig::new(url).stream(stream);
    config.filter_subject = filter.map(str::to_owned);
    let mut source = JetStreamSource::connect(config).map_err(io::Error::other)?;
    let mut payloads: Vec<Bytes> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match source.pull(1024, Duration::from_millis(500)) {
            Ok(Pull::Records(records)) => {
                payloads.extend(records.into_iter().map(|r| r.payload));
                if source.stats().pending == 0 {
                    break;
                }
            }
            Ok(Pull::Decoded(records)) => payloads.extend(
                records
                    .into_iter()
                    .filter_map(|r| r.event.ok())
                    .map(|e| Bytes::copy_from_slice(e.payload())),
            ),
            // An empty (or fully filtered-out) stream delivers nothing.
            Ok(Pull::Idle | Pull::Closed) if source.stats().consumers_created > 0 => break,
            Ok(Pull::Idle | Pull::Closed) => {}
            Err(e) if Instant::now() >= deadline => {
                return Err(io::Error::other(format!(
                    "cannot read stream {stream:?} from {url}: {e}"
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    Ok(items_from_payloads(payloads, drive_rate, seed))
}

/// No per-execution read: the pool's drives wait, and fall back (an EHDB pool without its
/// feed reads).
#[derive(Debug)]
struct NoRead;

impl DriveFallbacks for NoRead {}

/// The WAL a worker can replay from on a miss (rehydrate): every record published so far,
/// by execution. The producer records each item as it publishes it; a drive reads its own
/// execution's records.
#[derive(Debug, Default)]
pub struct RetainedWal {
    by_execution: RwLock<HashMap<ExecutionId, Vec<Bytes>>>,
}

impl RetainedWal {
    /// Keeps `item` (a record without ids is not an event of any execution).
    pub fn record(&self, item: &Item) {
        let Some((execution, _)) = item.ids else {
            return;
        };
        if let Ok(mut records) = self.by_execution.write() {
            records
                .entry(execution)
                .or_default()
                .push(item.payload.clone());
        }
    }
}

/// In memory: each read answers at once, on the drive's own thread.
impl DriveFallbacks for RetainedWal {
    fn retained(&self, execution_id: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
        Box::pin(std::future::ready(self.events_of(execution_id, mode)))
    }
}

impl RetainedWal {
    /// One execution's retained events, each decoded once as `mode` says (`None` if it has
    /// none).
    fn events_of(&self, execution_id: ExecutionId, mode: DecodeMode) -> Option<Vec<Event>> {
        let records = self.by_execution.read().ok()?;
        Some(
            records
                .get(&execution_id)?
                .iter()
                .filter_map(|payload| mode.decode(payload).ok())
                .collect(),
        )
    }
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Feed::Channel(..) => "Channel",
            Feed::Nats { .. } => "Nats",
            Feed::Ehdb(..) => "Ehdb",
        };
        f.debug_tuple("Feed").field(&kind).finish()
    }
}
