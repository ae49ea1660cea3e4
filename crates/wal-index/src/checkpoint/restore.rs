//! Restoring: seeding an index from a checkpoint, and choosing which checkpoint, the newest
//! one that verifies, is of the pool's log and that the log still holds.
//!
//! A store only keeps bytes ([`CheckpointStore`]); the choice is this module's, one rule for
//! every store and every index. A pool starting from a WAL source does not call it directly:
//! [`Drain::warm_start`](crate::Drain::warm_start) does, with the source's resume as the
//! last check before anything is seeded.

use std::time::Instant;

use chain_fold::Event;

use super::{Checkpoint, CheckpointStore, ExecutionImage, LogIdentity, Position, Refusal};
use crate::config::IndexConfig;
use crate::index::StateIndex;
use crate::labels::CheckpointLabel;

impl Checkpoint {
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

/// Reads and verifies the checkpoint `name` from `store` and checks it was taken of `log`
/// from an index of `config`'s shape; seeds nothing. Returns the checkpoint and its size in
/// bytes.
pub fn load(
    store: &dyn CheckpointStore,
    name: &str,
    config: &IndexConfig,
    log: &LogIdentity,
) -> Result<(Checkpoint, u64), Refusal> {
    let mut reader = store.open(name).map_err(|e| Refusal::Io(e.to_string()))?;
    let (checkpoint, bytes) = Checkpoint::read_from(&mut reader)?;
    checkpoint.check(config, log)?;
    Ok((checkpoint, bytes))
}

/// Seeds `index` (empty) from the newest checkpoint in `store` that verifies, was taken of
/// `log` from an index of this one's shape, and that `accept` takes; older ones are tried
/// after each refusal, and when none is taken `index` stays empty (the drain then replays
/// the log from its beginning).
///
/// `accept` is the log's word, asked before anything is seeded: a pool passes its source's
/// [`resume`](crate::WalSource::resume), so a checkpoint whose records the log no longer
/// holds is refused and never served (a pool without a log to ask passes `|_| Ok(())`).
/// Where a checkpoint could not be read (another pool's write, in a shared bucket, deleted
/// it after it was listed), the store is listed once more and the checkpoints not yet tried
/// are tried. Every refusal is returned with its reason and reported to the index's observer
/// (`checkpoint_refused_total{reason}`; the one used: `checkpoints_total{outcome="restored"}`).
///
/// It blocks on the store: from async code, call it through the runtime's blocking pool.
///
/// ```
/// use wal_index::checkpoint::{self, Checkpoint, CheckpointStore, DirStore, LogIdentity, SourcePosition};
/// use wal_index::{Event, StateIndex, WalIndex};
///
/// let index = WalIndex::default();
/// index.apply(Event::minimal(1, 7, None, "playbook_started"));
/// index.apply(Event::minimal(2, 7, Some(1), "step"));
/// let log = LogIdentity::new("channel", "example", "");
/// let at = SourcePosition { log: log.clone(), positions: Vec::new() };
///
/// let dir = std::env::temp_dir().join(format!("sbix-restore-doc-{}", std::process::id()));
/// let store = DirStore::open(&dir, 2)?;
/// store.write(&Checkpoint::capture(&index, at).encode())?;
///
/// let restarted = WalIndex::default();
/// let restored = checkpoint::restore_newest(&store, &restarted, &log, |_| Ok(()));
/// assert_eq!(restarted.build(7, Some(2)).spine.unwrap().ids(), vec![1, 2]);
/// assert!(restored.used.is_some() && restored.refused.is_empty());
///
/// // Another log's pool restores nothing from it.
/// let other = WalIndex::default();
/// let refused = checkpoint::restore_newest(&store, &other, &LogIdentity::new("file", "b", ""), |_| Ok(()));
/// assert_eq!((refused.used, refused.refused[0].1.label()), (None, "other_log"));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn restore_newest<I: StateIndex>(
    store: &dyn CheckpointStore,
    index: &I,
    log: &LogIdentity,
    mut accept: impl FnMut(&Checkpoint) -> Result<(), Refusal>,
) -> Restored {
    let mut restored = Restored::default();
    for attempt in 0..2 {
        let candidates = match store.newest_first() {
            Ok(found) => found,
            Err(error) => {
                let listing = (store.location(), Refusal::Io(error.to_string()));
                restored.refused.push(listing);
                break;
            }
        };
        for name in candidates {
            if restored.refused.iter().any(|(tried, _)| *tried == name) {
                continue;
            }
            let taken = load(store, &name, index.config(), log)
                .and_then(|(checkpoint, bytes)| accept(&checkpoint).map(|()| (checkpoint, bytes)));
            match taken {
                Ok((checkpoint, bytes)) => {
                    restored.report = checkpoint.restore_into(index);
                    index.observer().checkpoint(CheckpointLabel::Restored);
                    restored.positions = Some(checkpoint.positions);
                    restored.used = Some(name);
                    restored.bytes = bytes;
                    return restored;
                }
                Err(why) => {
                    index.observer().checkpoint_refused(why.reason());
                    restored.refused.push((name, why));
                }
            }
        }
        let unreadable = restored
            .refused
            .iter()
            .any(|(_, why)| matches!(why, Refusal::Io(_)));
        if attempt == 0 && !unreadable {
            break;
        }
    }
    restored
}

/// What [`restore_newest`] found and did.
#[derive(Debug, Default)]
pub struct Restored {
    /// Where the drain resumes: the used checkpoint's positions (`None`: no checkpoint was
    /// used, so the drain replays the log from its beginning).
    pub positions: Option<Vec<Position>>,
    /// The name of the checkpoint used, if any.
    pub used: Option<String>,
    /// The checkpoints tried and refused, newest first, each with its reason (a store that
    /// could not be listed appears under its [`location`](CheckpointStore::location)).
    pub refused: Vec<(String, Refusal)>,
    /// Bytes read from the used checkpoint.
    pub bytes: u64,
    /// What the restore did with the used checkpoint's executions.
    pub report: RestoreReport,
}
