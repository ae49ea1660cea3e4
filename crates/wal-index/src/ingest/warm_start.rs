//! [`Drain::warm_start`]: a pool's start in one call, from its newest checkpoint that its
//! log still holds, else an older one, else the log's beginning.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::drain::{Drain, DrainConfig};
use super::source::WalSource;
use crate::checkpoint::{self, Checkpointable, Checkpointing, Position, Refusal, RestoreReport};
use crate::index::StateIndex;

/// What [`Drain::warm_start`] started from.
#[derive(Debug, Default)]
pub struct WarmStart {
    /// The checkpoint restored (its name in the store), or `None`: the drain replays the
    /// log from its beginning.
    pub checkpoint: Option<String>,
    /// The checkpoints tried and refused, newest first, each with its reason: damaged, of
    /// another index shape or log, or no longer held by the log (the source's word).
    pub refused: Vec<(String, Refusal)>,
    /// Where the drain resumes: the restored checkpoint's positions.
    pub resumed_at: Option<Vec<Position>>,
    /// Records the source says are still to come before the head it learned, where it can
    /// count them at start (the records to replay; `None`: it cannot say yet).
    pub to_replay: Option<u64>,
    /// Bytes read from the restored checkpoint.
    pub bytes: u64,
    /// What the restore did with its executions.
    pub restore: RestoreReport,
    /// From the call to the drain ready to step: listing, reading, the source's check and
    /// seeding the index.
    pub took: Duration,
}

impl<I: StateIndex + Checkpointable, S: WalSource> Drain<I, S> {
    /// Starts a pool's drain from its newest checkpoint that verifies, was taken of the
    /// source's log ([`WalSource::log`]) from an index of this shape, and that the log still
    /// holds ([`WalSource::resume`]); else from an older one; else from the log's beginning
    /// with `index` empty. `index` must be empty; `make_source` makes the pool's source at
    /// the log's beginning, and is called again after each refusal of the log (a source
    /// that refused may have read part of the log). The drain checkpoints to `checkpoints`
    /// from then on; with `None` it neither restores nor checkpoints.
    ///
    /// Every refusal is in the returned [`WarmStart`] with its reason and on the index's
    /// observer (`checkpoint_refused_total{reason}`). An error only where a source cannot
    /// be made or its log not asked (nothing is seeded after it), or the checkpoint
    /// writer's thread not started (the index may then hold the restored checkpoint: drop
    /// it rather than start it again). It
    /// blocks on the store and the source: from async code, call it from the runtime's
    /// blocking pool.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use wal_index::checkpoint::{Checkpointing, DirStore};
    /// use wal_index::ingest::JsonLinesSource;
    /// use wal_index::{Drain, DrainConfig, StateIndex, WalIndex};
    ///
    /// let dir = std::env::temp_dir().join(format!("sbix-warm-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let wal = dir.join("wal.jsonl");
    /// let line = |id: u64| match id {
    ///     1 => format!(r#"{{"event_id":1,"execution_id":5,"event_type":"playbook_started"}}"#),
    ///     _ => format!(r#"{{"event_id":{id},"execution_id":5,"prev_event_id":{},"event_type":"step"}}"#, id - 1),
    /// };
    /// let lines = |n: u64| (1..=n).map(|id| line(id) + "\n").collect::<String>();
    /// std::fs::write(&wal, lines(2))?;
    /// let checkpoints = || Ok::<_, std::io::Error>(Checkpointing::new(DirStore::open(dir.join("ckpt"), 3)?));
    ///
    /// // A first pool replays the file and checkpoints it when it ends.
    /// let (mut drain, start) = Drain::warm_start(
    ///     Arc::new(WalIndex::default()), Some(checkpoints()?), || JsonLinesSource::open(&wal), DrainConfig::default())?;
    /// assert!(start.checkpoint.is_none());
    /// drain.run_until_closed()?;
    /// drop(drain);
    ///
    /// // The log grows; the next pool restores and reads only the new line.
    /// std::fs::write(&wal, lines(3))?;
    /// let index = Arc::new(WalIndex::default());
    /// let (mut drain, start) = Drain::warm_start(
    ///     index.clone(), Some(checkpoints()?), || JsonLinesSource::open(&wal), DrainConfig::default())?;
    /// assert!(start.checkpoint.is_some() && start.refused.is_empty());
    /// assert_eq!(drain.run_until_closed()?.events, 1);
    /// assert_eq!(index.build(5, Some(3)).spine.unwrap().ids(), vec![1, 2, 3]);
    /// # drop(drain);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn warm_start(
        index: Arc<I>,
        checkpoints: Option<Checkpointing>,
        mut make_source: impl FnMut() -> io::Result<S>,
        config: DrainConfig,
    ) -> io::Result<(Drain<I, S>, WarmStart)> {
        let started = Instant::now();
        let mut source = make_source()?;
        let mut start = WarmStart::default();
        let Some(checkpoints) = checkpoints else {
            start.took = started.elapsed();
            return Ok((Drain::new(index, source, config), start));
        };
        if let Some(log) = source.log()? {
            // A source that refused (or could not be remade) is replaced before the next try.
            let mut spent = false;
            let mut failed: Option<io::Error> = None;
            let restored =
                checkpoint::restore_newest(&*checkpoints.store, &*index, &log, |candidate| {
                    if failed.is_some() {
                        // No source to ask: nothing more is seeded, the error is returned.
                        return Err(Refusal::Io("the pool's source could not be made".into()));
                    }
                    if spent {
                        source = make_source().map_err(|e| {
                            let refusal = Refusal::Io(e.to_string());
                            failed = Some(e);
                            refusal
                        })?;
                    }
                    spent = true;
                    source.resume(&candidate.positions, checkpoints.resume_within)
                });
            if let Some(error) = failed {
                return Err(error);
            }
            if spent && restored.used.is_none() {
                source = make_source()?;
            }
            start.checkpoint = restored.used;
            start.refused = restored.refused;
            start.resumed_at = restored.positions;
            start.bytes = restored.bytes;
            start.restore = restored.report;
        }
        start.to_replay = source.backfill().remaining();
        let drain = Drain::new(index, source, config).checkpoint_to(checkpoints)?;
        start.took = started.elapsed();
        Ok((drain, start))
    }
}
