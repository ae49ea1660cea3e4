//! Checkpoints: the index and the WAL position it is consistent with, in one object, so a
//! restarted pool replays seconds of the log instead of all of it.
//!
//! # The model
//!
//! A [`Checkpoint`] holds every resident execution's events as the index holds them (their
//! canonical bytes, slim or whole as configured, written as event images, so restoring
//! never runs the canonical decoder again), each with its recency, and, per partition of the
//! source (an EHDB shard, a JetStream stream), the [`Position`]: [`Fingerprint`]s of the last
//! records the drain applied, as many as the source's log needs ([`Position`] has the rule
//! and each source's depth). Both come from one moment: the drain captures them between two
//! batches, after applying the first and before pulling the second, so every record at or
//! before the position is in the image. The cursor can never run ahead of the events.
//!
//! Events past the position may be in the image too (a drive's tail events, a rehydrate);
//! the resumed drain applies them again, an overwrite by id that changes no byte.
//!
//! A position names records by their sequences *and* CRC-32Cs of their payloads because a
//! log can reuse sequence numbers: an EHDB writer that loses its unsealed tail writes new
//! records under the lost ones' numbers, anywhere in that tail. A source that resumes from
//! a checkpoint reads its log again from just below the position's oldest record and
//! requires exactly the fingerprinted records up to its last ([`ResumeCheck`]), rather than
//! trusting the numbers.
//!
//! # What a checkpoint does not carry
//!
//! - **The finished set** (executions evicted after their terminal event): a restored index
//!   starts without it, where a replay from the beginning would rebuild the newest ones.
//!   A drive for an execution that finished shortly before the checkpoint waits out its
//!   deadline instead of ending at once, and a late tail event of such an execution
//!   re-creates a partial chain until it is swept.
//! - **Sink-gate marks**: they belong to the pool's sink, which does not survive the
//!   restart either; the pool marks again what it has not sunk.
//! - **Stall records**: the restored drain is behind until it catches up, and stall clocks
//!   start when it is caught up, as after any restart.
//!
//! # Where they are kept
//!
//! A [`CheckpointStore`] names each checkpoint with a name it never reuses and lists them
//! newest first; every read is verified before anything is served. [`DirStore`] keeps them
//! in a local directory (a temporary name, `fsync`, rename, `fsync` of the directory), for a
//! node's disk or a persistent volume. `BucketStore` (feature `object-store`, with
//! `object-store-aws`, `-gcp` or `-azure` for the clouds' clients) keeps them in an object
//! store, which follows a pool that a roll reschedules onto another node: each body under a
//! key never reused, then a small pointer replaced by a conditional put.
//!
//! # Refusals
//!
//! A checkpoint that is torn, truncated, fails a block's checksum, has another format
//! version, was taken with another index shape (slim or whole, spine order) or of another
//! log is [refused](Refusal) with its reason; nothing from it is served. A pool then tries
//! the next older one, then replays from the beginning. Every source checks its log when it
//! resumes, so a pool loads a checkpoint ([`CheckpointStore::load`]), resumes its source,
//! and seeds its index ([`Checkpoint::restore_into`]) only after the source's word
//! (docs/deployment.md has the sequence; [`CheckpointStore::restore_newest`] seeds at once).
//! The format is specified in docs/checkpoint-format.md.
//!
//! ```
//! use wal_index::checkpoint::{Checkpoint, CheckpointStore, DirStore, LogIdentity, SourcePosition};
//! use wal_index::{Event, IndexConfig, StateIndex, WalIndex};
//!
//! let index = WalIndex::default();
//! index.apply(Event::minimal(1, 7, None, "playbook_started"));
//! index.apply(Event::minimal(2, 7, Some(1), "step"));
//! let log = LogIdentity::new("channel", "example", "");
//! let at = SourcePosition { log: log.clone(), positions: Vec::new() };
//!
//! let dir = std::env::temp_dir().join(format!("sbix-doc-{}", std::process::id()));
//! let store = DirStore::open(&dir, 2)?;
//! store.write(&Checkpoint::capture(&index, at).encode())?;
//!
//! let restored = store.restore_newest(IndexConfig::default(), &log);
//! let index = restored.index;
//! assert_eq!(index.build(7, Some(2)).spine.unwrap().ids(), vec![1, 2]);
//! assert!(restored.refused.is_empty());
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), std::io::Error>(())
//! ```

#[cfg(feature = "object-store")]
mod bucket_store;
mod cursor;
mod dir_store;
mod format;
mod store;

use std::time::Instant;

use chain_fold::{Event, ExecutionId, SpineOrder};

use crate::WalIndex;
use crate::config::IndexConfig;
use crate::index::StateIndex;
use crate::labels::RefusalLabel;

#[cfg(feature = "object-store")]
pub use bucket_store::BucketStore;
pub use cursor::{Fingerprint, LogIdentity, Position, RecentRecords, ResumeCheck, SourcePosition};
pub use dir_store::DirStore;
pub use store::{CheckpointStore, Restored};

/// What of the index's configuration shapes its image: a checkpoint is restored only into
/// an index of the same shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexShape {
    /// Slim events or whole ones.
    pub slim: bool,
    /// The spine order.
    pub order: SpineOrder,
}

impl IndexShape {
    /// The shape of an index with `config`.
    pub fn of(config: &IndexConfig) -> IndexShape {
        IndexShape {
            slim: config.slim,
            order: config.order,
        }
    }

    fn order_code(self) -> u8 {
        match self.order {
            SpineOrder::Causal => 0,
            SpineOrder::EventId => 1,
        }
    }

    fn order_from_code(code: u8) -> Option<SpineOrder> {
        match code {
            0 => Some(SpineOrder::Causal),
            1 => Some(SpineOrder::EventId),
            _ => None,
        }
    }
}

/// One resident execution's events, in the order the index holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionImage {
    /// The execution.
    pub execution_id: ExecutionId,
    /// How long it had been neither applied to nor built for when the checkpoint was
    /// captured, in milliseconds: its recency, which a restore keeps (see
    /// [`Checkpoint::restore_into`]).
    pub idle_ms: u64,
    /// Its events.
    pub events: Vec<Event>,
}

/// An image of an index and the position it is consistent with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// When it was captured, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The shape of the index it was captured from.
    pub shape: IndexShape,
    /// The log it was captured against.
    pub log: LogIdentity,
    /// The drain's position in each partition.
    pub positions: Vec<Position>,
    /// The resident executions, ascending by id.
    pub executions: Vec<ExecutionImage>,
}

impl Checkpoint {
    /// Captures `index` at the source position `at`. Call it where no record past `at` is
    /// being applied by the drain (the drain calls it between batches). It loads each
    /// resident execution's published snapshot: a build or a drive running meanwhile
    /// neither waits nor is waited for.
    pub fn capture(index: &WalIndex, at: SourcePosition) -> Checkpoint {
        let now = Instant::now();
        let executions = index
            .execution_ids()
            .into_iter()
            .filter_map(|execution_id| {
                let (chain, idle) = index.chain_and_idle_at(execution_id, now)?;
                let events: Vec<Event> = chain.iter().cloned().collect();
                (!events.is_empty()).then_some(ExecutionImage {
                    execution_id,
                    idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
                    events,
                })
            })
            .collect();
        Checkpoint {
            created_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            shape: IndexShape::of(index.config()),
            log: at.log,
            positions: at.positions,
            executions,
        }
    }

    /// The bytes of one checkpoint file (docs/checkpoint-format.md).
    pub fn encode(&self) -> Vec<u8> {
        format::encode(self)
    }

    /// Reads and verifies one checkpoint file: every block's checksum, the format version,
    /// the counts of the trailer. Bad bytes are a [`Refusal`], never a panic; nothing is
    /// allocated that the bytes do not hold.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, Refusal> {
        format::decode(bytes)
    }

    /// The events it holds.
    pub fn events(&self) -> usize {
        self.executions.iter().map(|e| e.events.len()).sum()
    }

    /// Checks that this checkpoint can seed an index with `config` reading `log`.
    pub fn check(&self, config: &IndexConfig, log: &LogIdentity) -> Result<(), Refusal> {
        let wanted = IndexShape::of(config);
        if self.shape != wanted {
            return Err(Refusal::Shape {
                found: self.shape,
                wanted,
            });
        }
        if &self.log != log {
            return Err(Refusal::OtherLog {
                found: Box::new(self.log.clone()),
                wanted: Box::new(log.clone()),
            });
        }
        Ok(())
    }

    /// Seeds `index` (empty) with this checkpoint's executions, after
    /// [`check`](Checkpoint::check), as a replay of the log up to the checkpoint's position
    /// would have left it:
    ///
    /// - an execution whose image holds a terminal event is applied as one batch, so it is
    ///   evicted and remembered as finished, as the batch that held that event evicted it
    ///   (the sink gate's marks are not carried, so nothing holds it);
    /// - the others keep their recency: an execution idle past the index's TTL is not
    ///   restored (the old pool's next sweep would have evicted it), the most recent ones
    ///   are kept within the execution cap and, by their images' bytes, the byte ceiling,
    ///   and they are restored least recent first, so the LRU order among them is the old
    ///   pool's; one sweep of the index's limits then ends the restore, so the index is
    ///   within its caps by its own ledger before the drain starts. The TTL clocks of the
    ///   restored executions start again at the restore.
    ///
    /// Each restored execution is one replay ([`StateIndex::rehydrate`]): on the engine one
    /// published snapshot, its events as the image holds them. Any index takes it; only the
    /// engine captures one.
    pub fn restore_into<I: StateIndex>(&self, index: &I) -> RestoreReport {
        let config = index.config();
        let mut report = RestoreReport::default();
        let (finished, mut live): (Vec<&ExecutionImage>, Vec<&ExecutionImage>) = self
            .executions
            .iter()
            .partition(|e| e.events.iter().any(Event::is_terminal));
        for execution in finished {
            index.apply_batch(execution.events.clone());
            report.finished += 1;
        }
        let ttl_ms = config
            .eviction
            .ttl
            .map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        // Most recent first; ties by id, so a restore is deterministic.
        live.sort_by_key(|e| (e.idle_ms, e.execution_id));
        let (mut kept, mut bytes) = (Vec::with_capacity(live.len()), 0usize);
        for execution in live {
            if ttl_ms.is_some_and(|ttl| execution.idle_ms >= ttl) {
                report.past_ttl += 1;
                continue;
            }
            let size: usize = execution.events.iter().map(Event::image_len).sum();
            let over_count = config
                .eviction
                .max_executions
                .is_some_and(|max| kept.len() >= max);
            let over_bytes = config
                .eviction
                .max_bytes
                .is_some_and(|max| bytes.saturating_add(size) > max);
            if over_count || over_bytes {
                report.over_caps += 1;
                continue;
            }
            bytes += size;
            kept.push(execution);
        }
        for execution in kept.iter().rev() {
            index.rehydrate(execution.execution_id, execution.events.iter().cloned());
        }
        report.restored = kept.len();
        let swept = index.enforce_limits_at(Instant::now()).evicted.len();
        report.restored -= swept.min(report.restored);
        report.over_caps += swept;
        report
    }
}

/// What [`Checkpoint::restore_into`] did with a checkpoint's executions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Executions restored and resident.
    pub restored: usize,
    /// Executions whose image held a terminal event: applied and evicted as finished.
    pub finished: usize,
    /// Executions idle past the index's TTL at capture: not restored.
    pub past_ttl: usize,
    /// The least recent executions that the execution cap or the byte ceiling left out.
    pub over_caps: usize,
}

/// An index a drain can checkpoint ([`Drain::checkpoint_to`](crate::Drain::checkpoint_to)).
/// The engine captures its published snapshots; the comparators keep today's behaviour, in
/// which nothing survives a restart, and capture nothing.
pub trait Checkpointable {
    /// A checkpoint of this index at the source position `at`, or `None` if this index
    /// does not checkpoint.
    fn checkpoint(&self, at: SourcePosition) -> Option<Checkpoint>;
}

impl Checkpointable for WalIndex {
    fn checkpoint(&self, at: SourcePosition) -> Option<Checkpoint> {
        Some(Checkpoint::capture(self, at))
    }
}

/// Why a checkpoint was not used. Nothing from a refused checkpoint is ever served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The file does not start with the checkpoint magic.
    #[error("not a checkpoint (no magic number)")]
    NotACheckpoint,
    /// Another format version.
    #[error("format version {found}; this build reads {supported}")]
    FormatVersion {
        /// The file's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file ends inside a block or before its trailer: torn or truncated.
    #[error("torn or truncated: it ends inside the block at byte {at} or before its trailer")]
    Truncated {
        /// Where the incomplete block starts.
        at: usize,
    },
    /// A block's checksum does not match its bytes.
    #[error("the block at byte {block_at} fails its checksum")]
    Checksum {
        /// Where the block starts.
        block_at: usize,
    },
    /// A block verifies but does not say what the format says it must.
    #[error("malformed at the block at byte {at}: {what}")]
    Malformed {
        /// Where the block starts.
        at: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// An event image that does not read back.
    #[error("an event in the block at byte {at}: {why}")]
    Image {
        /// Where the block starts.
        at: usize,
        /// Why.
        why: chain_fold::ImageError,
    },
    /// Taken from an index of another shape.
    #[error("taken from an index of shape {found:?}; this index is {wanted:?}")]
    Shape {
        /// The checkpoint's shape.
        found: IndexShape,
        /// The restoring index's shape.
        wanted: IndexShape,
    },
    /// Taken of another log.
    #[error("taken of {found}; this pool reads {wanted}")]
    OtherLog {
        /// The checkpoint's log.
        found: Box<LogIdentity>,
        /// The log the pool reads.
        wanted: Box<LogIdentity>,
    },
    /// The log no longer holds the fingerprinted record at the position.
    #[error("the log no longer holds the checkpoint's last record: {why}")]
    Fingerprint {
        /// What the source found instead.
        why: String,
    },
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Io(String),
}

impl Refusal {
    /// Its reason, as `checkpoint_refused_total{reason}` labels it.
    pub fn reason(&self) -> RefusalLabel {
        match self {
            Refusal::NotACheckpoint => RefusalLabel::NotACheckpoint,
            Refusal::FormatVersion { .. } => RefusalLabel::FormatVersion,
            Refusal::Truncated { .. } => RefusalLabel::Truncated,
            Refusal::Checksum { .. } => RefusalLabel::Checksum,
            Refusal::Malformed { .. } | Refusal::Image { .. } => RefusalLabel::Malformed,
            Refusal::Shape { .. } => RefusalLabel::IndexShape,
            Refusal::OtherLog { .. } => RefusalLabel::OtherLog,
            Refusal::Fingerprint { .. } => RefusalLabel::Fingerprint,
            Refusal::Io(_) => RefusalLabel::Io,
        }
    }

    /// Its reason's label text.
    pub fn label(&self) -> &'static str {
        self.reason().label()
    }
}
