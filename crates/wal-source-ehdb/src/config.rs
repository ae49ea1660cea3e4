//! [`EhdbConfig`]: where and how an [`EhdbSource`](crate::EhdbSource) reads the feed.

use std::time::Duration;

use wal_index::checkpoint::{LogIdentity, Position};
use wal_index::ingest::Backoff;

use crate::frame::Limits;

/// The writer's default cap on the records of one frame (its `EHDB_FEED_BATCH_LIMIT`).
pub const DEFAULT_FEED_BATCH_LIMIT: u64 = 2_000;

/// Where and how an [`EhdbSource`](crate::EhdbSource) reads the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EhdbConfig {
    /// The writer's feed face, `HOST:PORT`.
    pub addr: String,
    /// The shards this pool drains, each from [`cursor`](Self::cursor). Default: `[0]`.
    pub shards: Vec<u32>,
    /// The sort key of the last record already held: `0` is from the beginning, which is
    /// what a process that starts with an empty index uses.
    pub cursor: u64,
    /// Caps on one frame and one payload.
    pub limits: Limits,
    /// Records parsed ahead of the drain, across shards (default 1,024: with production's
    /// ~73 KB envelopes, about 75 MB). The reader waits while the queue is full, so a
    /// frame's size never decides the memory it takes.
    pub queue_records: usize,
    /// How long a connection attempt may take (default 2 s).
    pub connect_timeout: Duration,
    /// If set, a connection that delivers no byte for this long while its reader waits on
    /// it is taken as dead and redialled: a writer that accepts and never sends (stopped,
    /// not killed). Off by default: a writer that predates heartbeats sends nothing while
    /// it has nothing new, so a deadline must be longer than the quietest stretch of the
    /// feed; a writer that heartbeats is held to [`heartbeat`](Self::heartbeat) instead.
    pub idle_deadline: Option<Duration>,
    /// TCP keepalive's idle time and probe interval (default 10 s; `None` turns it off):
    /// a connection to a host that went away fails within a few probes instead of
    /// blocking its reader forever.
    pub keepalive: Option<Duration>,
    /// The pause between redials (default: 25 ms doubling to 1 s).
    pub redial: Backoff,
    /// The most records the writer puts in one frame (its `EHDB_FEED_BATCH_LIMIT`;
    /// default 2,000, the writer's own default), or `None` for a writer that sends a whole
    /// backlog in one frame. It decides when a shard's backfill is over (see
    /// [`EhdbSource`](crate::EhdbSource), "Backfill"); it never limits what is read.
    pub feed_batch_limit: Option<u64>,
    /// A checkpoint's positions to resume from (set by the source's
    /// [`resume`](wal_index::WalSource::resume)); empty: every shard starts at
    /// [`cursor`](Self::cursor).
    pub(crate) resume: Vec<Position>,
    /// The heartbeat interval asked of the writer (`heartbeat_ms` in the subscription;
    /// default 5 s, upstream's own client's; `None` asks for none). Once a connection has
    /// received a heartbeat, three intervals without a byte are an outage, and the shard is
    /// redialled from the last record handed over: a half-open socket is found within
    /// 15 s. A writer that predates heartbeats ignores the request and is never held to it.
    pub heartbeat: Option<Duration>,
    /// How many of a shard's last records a checkpoint names at most, and a resume checks
    /// (default [`DEFAULT_RESUME_DEPTH`]). A writer that crashes loses at most its shard's
    /// unsealed part, which it seals at a number of records or of bytes, whichever comes
    /// first; this must be at least the writer's record threshold.
    pub resume_depth: usize,
    /// Fewer records are named once the newest of them cover this many payload bytes
    /// (default [`DEFAULT_RESUME_BYTES`]); it must be at least the writer's byte threshold.
    /// With production's ~73 KB envelopes a checkpoint names ~116 records, and a resume
    /// reads back ~8 MiB instead of ~75 MB.
    pub resume_bytes: u64,
}

/// EHDB's default seal threshold by record count (its `DEFAULT_SEAL_MAX_RECORDS`): the most
/// records a writer's crash can lose from a shard, so the most a resume checks.
pub const DEFAULT_RESUME_DEPTH: usize = 1024;

/// EHDB's default seal threshold by size (its `DEFAULT_SEAL_MAX_BYTES`, 8 MiB): the most
/// bytes a writer's crash can lose from a shard.
pub const DEFAULT_RESUME_BYTES: u64 = 8 << 20;

/// Missed heartbeats after which a connection is taken as dead (upstream's client's rule).
pub(crate) const MISSED_HEARTBEATS: u32 = 3;

impl EhdbConfig {
    /// Shard 0 of the writer at `addr`, from the beginning.
    pub fn new(addr: impl Into<String>) -> EhdbConfig {
        EhdbConfig {
            addr: addr.into(),
            shards: vec![0],
            cursor: 0,
            limits: Limits::default(),
            queue_records: 1024,
            connect_timeout: Duration::from_secs(2),
            idle_deadline: None,
            keepalive: Some(Duration::from_secs(10)),
            redial: Backoff::default(),
            feed_batch_limit: Some(DEFAULT_FEED_BATCH_LIMIT),
            resume: Vec::new(),
            heartbeat: Some(Duration::from_secs(5)),
            resume_depth: DEFAULT_RESUME_DEPTH,
            resume_bytes: DEFAULT_RESUME_BYTES,
        }
    }

    /// Drains `shards` instead of shard 0.
    pub fn shards(mut self, shards: impl IntoIterator<Item = u32>) -> EhdbConfig {
        self.shards = shards.into_iter().collect();
        self
    }

    /// Starts after `cursor` instead of at the beginning.
    pub fn cursor(mut self, cursor: u64) -> EhdbConfig {
        self.cursor = cursor;
        self
    }

    /// The log identity its checkpoints carry: the writer's address and the shards drained,
    /// in ascending order (a pool that lists its shards in another order reads the same
    /// log).
    pub fn log_identity(&self) -> LogIdentity {
        let mut shards = self.shards.clone();
        shards.sort_unstable();
        let shards: Vec<String> = shards.iter().map(u32::to_string).collect();
        LogIdentity::new(
            "ehdb",
            self.addr.clone(),
            format!("shards={}", shards.join(",")),
        )
    }

    /// This shard's position to resume from, if the checkpoint has one.
    pub(crate) fn resume_of(&self, shard: u32) -> Option<&Position> {
        let name = partition(shard);
        self.resume.iter().find(|p| p.partition == name)
    }
}

/// A shard's partition name in a checkpoint.
pub(crate) fn partition(shard: u32) -> String {
    format!("shard {shard}")
}
