//! The drive's step 3: an execution's state shard, read as production's worker reads it
//! (noetl/worker's `src/state_reader.rs`, v5.120.0).

use std::future::Future;

use chain_fold::{Event, ExecutionId};
use wal_index::DriveFallbacks;
use wal_index::flow::{FallbackRead, ShardAnswer, ShardRead};
use wal_index::ingest::DecodeMode;

use crate::codec::decode;
use crate::error::ShardError;
use crate::key::{CellSettings, ShardKind};
use crate::store::ShardStore;

/// Reads an execution's state shard: the key from the execution id and the pool's
/// [`CellSettings`], `sealed` then `open`.
///
/// | what the store says | answer |
/// |---|---|
/// | 404 on `sealed` | try `open` |
/// | 404 on both | [`ShardAnswer::NotFound`] |
/// | another error, or a non-2xx | [`ShardAnswer::Failed`] (`open` is not tried) |
/// | bytes that are not an Arrow IPC stream, no Utf8 `payload` column, no cell that is JSON | [`ShardAnswer::Failed`] |
/// | no event of the execution (cells that are JSON but not its events) | [`ShardAnswer::Empty`] (`open` is not tried) |
/// | the execution's events | [`ShardAnswer::Events`] |
///
/// Other columns are ignored, as production ignores them. The answer is not trusted:
/// the drive serves it only when its build from the expected head reaches genesis. Each
/// read runs on the store's own runtime, so the reader serves a drive on any executor (or
/// a blocking one); dropping the read aborts its request.
///
/// ```no_run
/// use state_shard::{CellSettings, ShardStore, StateShardReader};
/// use wal_index::{DriveBudget, DriveFlow};
///
/// let store = ShardStore::open("http://noetl-server:8082/api/internal/objects", std::iter::empty())?;
/// let shards = StateShardReader::new(store, CellSettings::from_env());
/// let flow = DriveFlow::new(DriveBudget::default()).fallbacks(&shards);
/// # let _ = flow;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct StateShardReader {
    store: ShardStore,
    cell: CellSettings,
    max_bytes: u64,
}

impl StateShardReader {
    /// The cap on one shard object's size by default: 64 MiB.
    pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

    /// Reads shards from `store` under `cell`'s keys, refusing objects over 64 MiB.
    pub fn new(store: ShardStore, cell: CellSettings) -> StateShardReader {
        StateShardReader {
            store,
            cell,
            max_bytes: StateShardReader::DEFAULT_MAX_BYTES,
        }
    }

    /// Refuses shard objects larger than `max_bytes` before reading them.
    pub fn max_bytes(mut self, max_bytes: u64) -> StateShardReader {
        self.max_bytes = max_bytes;
        self
    }

    /// The settings keys are made from.
    pub fn cell(&self) -> &CellSettings {
        &self.cell
    }

    /// Reads the execution's shard, decoding each cell once as `mode` says (the mode the
    /// pool's index stores, so a shard's event is the same bytes as the drain's).
    pub fn read(
        &self,
        execution_id: ExecutionId,
        mode: DecodeMode,
    ) -> impl Future<Output = ShardAnswer> + Send + 'static + use<> {
        let (store, max_bytes) = (self.store.clone(), self.max_bytes);
        let keys =
            [ShardKind::Sealed, ShardKind::Open].map(|kind| self.cell.key(execution_id, kind));
        async move {
            // One GET at a time: `open` is asked for only after `sealed` was not found.
            for key in keys {
                match store.get(&key, max_bytes).await {
                    Ok(None) => continue,
                    Ok(Some(bytes)) => {
                        return match events_of(&bytes, execution_id, mode) {
                            Ok(events) if events.is_empty() => ShardAnswer::Empty,
                            Ok(events) => ShardAnswer::Events(events),
                            Err(error) => ShardAnswer::Failed(error.to_string()),
                        };
                    }
                    Err(error) => return ShardAnswer::Failed(error.to_string()),
                }
            }
            ShardAnswer::NotFound
        }
    }

    /// [`read`](Self::read), waiting on the calling thread.
    pub fn read_blocking(&self, execution_id: ExecutionId, mode: DecodeMode) -> ShardAnswer {
        futures_lite::future::block_on(self.read(execution_id, mode))
    }

    /// Reads from the shard store first, then `retained` for the drive's step 4.
    pub fn then_retained<R: DriveFallbacks>(self, retained: R) -> ShardsThenRetained<R> {
        ShardsThenRetained {
            shards: self,
            retained,
        }
    }
}

/// The execution's events in a shard's bytes, each cell decoded once as `mode` says. An error when the
/// bytes are not a stream, the `payload` column is missing or not Utf8, or no cell is JSON;
/// cells that are JSON but not events, and events of other executions, are skipped.
pub fn events_of(
    bytes: &[u8],
    execution_id: ExecutionId,
    mode: DecodeMode,
) -> Result<Vec<Event>, ShardError> {
    let shard = decode(bytes)?;
    let payloads = shard.payloads()?;
    let mut json = 0usize;
    let mut events = Vec::new();
    for payload in payloads {
        match mode.decode(payload.as_bytes()) {
            Ok(event) => {
                json += 1;
                if event.execution_id() == execution_id {
                    events.push(event);
                }
            }
            Err(_) => {
                json += usize::from(
                    serde_json::from_str::<&serde_json::value::RawValue>(payload).is_ok(),
                );
            }
        }
    }
    if json == 0 {
        return Err(ShardError::NoEvents { rows: shard.rows() });
    }
    Ok(events)
}

impl DriveFallbacks for StateShardReader {
    fn state_shard(&self, execution_id: ExecutionId, mode: DecodeMode) -> ShardRead<'_> {
        Box::pin(self.read(execution_id, mode))
    }
}

/// A shard reader and a retained WAL: the drive's steps 3 and 4 (see
/// [`StateShardReader::then_retained`]).
#[derive(Debug, Clone)]
pub struct ShardsThenRetained<R> {
    shards: StateShardReader,
    retained: R,
}

impl<R: DriveFallbacks> DriveFallbacks for ShardsThenRetained<R> {
    fn state_shard(&self, execution_id: ExecutionId, mode: DecodeMode) -> ShardRead<'_> {
        self.shards.state_shard(execution_id, mode)
    }
    fn retained(&self, execution_id: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
        self.retained.retained(execution_id, mode)
    }
}
