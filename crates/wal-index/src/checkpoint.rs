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
//! resumes ([`WalSource::resume`](crate::WalSource::resume)), and the index is seeded only
//! after the source's word: [`restore_newest`] holds that rule, and
//! [`Drain::warm_start`](crate::Drain::warm_start) is the one call a pool makes (it makes the
//! source, restores, resumes, and starts the drain with checkpoints). The format is
//! specified in docs/checkpoint-format.md.
//!
//! # Layout
//!
//! `cursor` (where a checkpoint stands in the log: fingerprints, positions, the log's
//! identity), `format` (the bytes), `store`, `dir_store` and `bucket_store` (where they
//! are kept, under names of one rule, `name`), `restore` (which one a pool takes, and seeding an index from it), `writer`
//! (the drain's cadence and the thread that writes). No module here imports the drain.
//!
//! ```
//! use wal_index::checkpoint::{self, Checkpoint, CheckpointStore, DirStore, LogIdentity, SourcePosition};
//! use wal_index::{Event, StateIndex, WalIndex};
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
//! let restarted = WalIndex::default();
//! let restored = checkpoint::restore_newest(&store, &restarted, &log, |_| Ok(()));
//! assert_eq!(restarted.build(7, Some(2)).spine.unwrap().ids(), vec![1, 2]);
//! assert!(restored.refused.is_empty());
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), std::io::Error>(())
//! ```

#[cfg(feature = "object-store")]
mod bucket_store;
mod cursor;
mod dir_store;
mod format;
mod name;
mod restore;
mod store;
mod writer;

use std::time::Instant;

use chain_fold::{Event, ExecutionId, SpineOrder};

use crate::config::IndexConfig;
use crate::engine::WalIndex;
use crate::index::StateIndex;
use crate::labels::RefusalLabel;

#[cfg(feature = "object-store")]
pub use bucket_store::BucketStore;
pub use cursor::{Fingerprint, LogIdentity, Position, RecentRecords, ResumeCheck, SourcePosition};
pub use dir_store::DirStore;
pub use restore::{RestoreReport, Restored, load, restore_newest};
pub use store::CheckpointStore;
pub(crate) use writer::Checkpointer;
pub use writer::{CheckpointReport, Checkpointing, LastCheckpoint};

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

    /// [`decode`](Checkpoint::decode) from a reader (a file), a block at a time into one
    /// reused buffer: the file is never held whole, and nothing is allocated that its bytes
    /// do not hold. Returns the checkpoint and the bytes read. A read error is a
    /// [`Refusal::Io`].
    pub fn read_from(reader: &mut dyn std::io::Read) -> Result<(Checkpoint, u64), Refusal> {
        format::decode_from(reader)
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
    /// The pool's source cannot resume from a checkpoint (the default of
    /// [`WalSource::resume`](crate::WalSource::resume)).
    #[error("the source cannot resume from a checkpoint")]
    CannotResume,
    /// The file could not be read, or the log did not answer in time.
    #[error("i/o: {0}")]
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
            Refusal::CannotResume => RefusalLabel::CannotResume,
            Refusal::Io(_) => RefusalLabel::Io,
        }
    }

    /// Its reason's label text.
    pub fn label(&self) -> &'static str {
        self.reason().label()
    }
}
