//! A pool's state-shard settings from production's environment variables.

use std::io;

use crate::key::CellSettings;
use crate::reader::StateShardReader;
use crate::store::ShardStore;
use crate::writer::{ShardWriter, WriterConfig};

/// Whether a pool reads and writes state shards, and where, from the environment
/// production's worker reads:
///
/// | variable | meaning | default |
/// |---|---|---|
/// | `NOETL_STATE_SHARD_READ` | read a drive's shard after its deadline (truthy: `1`, `true`, `yes`, `on`) | off |
/// | `NOETL_STATE_SHARD_READ_VERIFY` | compare a served shard with the retained WAL | off |
/// | `NOETL_STATE_SHARD_WRITE` | write shards from this pool's drain | off |
/// | `NOETL_STATE_SHARD_URL` | where: `s3://…`, `gs://…`, `az://…`, `http(s)://server/api/internal/objects`, or a directory (this project's: production derives it from its server's address) | none: nothing read or written |
/// | `NOETL_RESULT_CELL_ENV`, `_REGION`, `NOETL_RESULT_CELL`, `NOETL_RESULT_SHARD_COUNT`, `NOETL_SNOWFLAKE_EPOCH_MS` | the key ([`CellSettings`]) | `dev`, `local`, `local-0`, 256, 2024-01-01 |
/// | `NOETL_STATE_SHARD_OPEN_MIN_INTERVAL_SECS`, `_MAX_OPEN`, `_OPEN_TTL_SECS`, `_EXTRACTED_BUDGET` | the writer ([`WriterConfig`]) | 30, 8192, 3600, 4096 |
///
/// ```
/// use state_shard::ShardSettings;
///
/// let env = [("NOETL_STATE_SHARD_READ", " Yes "), ("NOETL_STATE_SHARD_URL", "s3://shards/pool-a")];
/// let settings = ShardSettings::from_lookup(|k| env.iter().find(|e| e.0 == k).map(|e| e.1.to_string()));
/// assert!(settings.read && !settings.write && !settings.read_verify);
/// assert_eq!(settings.location.as_deref(), Some("s3://shards/pool-a"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSettings {
    /// Read shards on a drive's miss.
    pub read: bool,
    /// Verify a served shard against the retained WAL.
    pub read_verify: bool,
    /// Write shards from the drain.
    pub write: bool,
    /// The store's location ([`ShardStore::open`]).
    pub location: Option<String>,
    /// The key's settings.
    pub cell: CellSettings,
    /// The writer's settings.
    pub writer: WriterConfig,
}

/// Production's truthy values: trimmed, case-insensitive `1`, `true`, `yes`, `on`.
fn truthy(value: Option<String>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

impl ShardSettings {
    /// The settings in `lookup` (an environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> ShardSettings {
        ShardSettings {
            read: truthy(lookup("NOETL_STATE_SHARD_READ")),
            read_verify: truthy(lookup("NOETL_STATE_SHARD_READ_VERIFY")),
            write: truthy(lookup("NOETL_STATE_SHARD_WRITE")),
            location: lookup("NOETL_STATE_SHARD_URL").filter(|l| !l.trim().is_empty()),
            cell: CellSettings::from_lookup(&lookup),
            writer: WriterConfig::from_lookup(&lookup),
        }
    }

    /// The settings in the process environment.
    pub fn from_env() -> ShardSettings {
        ShardSettings::from_lookup(|name| std::env::var(name).ok())
    }

    /// The store, when reads or writes are on; an error when they are on without a
    /// location, or the location does not open. `options` configure a cloud store
    /// (`std::env::vars()`, as the clouds' SDKs read it).
    pub fn store(
        &self,
        options: impl IntoIterator<Item = (String, String)>,
    ) -> io::Result<Option<ShardStore>> {
        if !self.read && !self.write {
            return Ok(None);
        }
        let location = self.location.as_deref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "NOETL_STATE_SHARD_READ or _WRITE is on, but NOETL_STATE_SHARD_URL names no store",
            )
        })?;
        ShardStore::open(location, options).map(Some)
    }

    /// The reader, when reads are on.
    pub fn reader(&self, store: &ShardStore) -> Option<StateShardReader> {
        self.read
            .then(|| StateShardReader::new(store.clone(), self.cell.clone()))
    }

    /// The writer, started, when writes are on.
    pub fn start_writer(&self, store: &ShardStore) -> io::Result<Option<ShardWriter>> {
        if !self.write {
            return Ok(None);
        }
        ShardWriter::start(store.clone(), self.cell.clone(), self.writer.clone()).map(Some)
    }
}
