//! [`CheckpointStore`]: where checkpoints are kept, and the restore that every store shares
//! (the newest that verifies, then older ones, then nothing).

use std::io;

use super::{Checkpoint, LogIdentity, Position, Refusal};
use crate::WalIndex;
use crate::config::IndexConfig;
use crate::index::StateIndex;
use crate::labels::CheckpointLabel;

/// Where a pool keeps its checkpoints: a local directory ([`DirStore`](super::DirStore)),
/// or, with the `object-store` feature, a bucket (`BucketStore`).
///
/// A store names each checkpoint it writes with a name it never reuses, and lists them
/// newest first. It promises that a checkpoint it lists is whole: a write that fails or
/// is cut short leaves the checkpoints listed before it as they were. It does not promise
/// the bytes are intact (a disk can rot, an operator can copy the wrong file): every read
/// is verified ([`Checkpoint::decode`]) before anything is served.
///
/// The methods block: a pool calls them at start and from the drain's checkpoint writer,
/// a thread of its own. From async code, call [`restore_newest`](Self::restore_newest)
/// through the runtime's blocking pool (`tokio::task::spawn_blocking`).
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// Writes one checkpoint's bytes so that, once this returns `Ok`, the checkpoint is
    /// listed and survives a crash of this process (and, for a bucket, of this node);
    /// then forgets checkpoints past the newest the store keeps. Returns the new name.
    fn write(&self, bytes: &[u8]) -> io::Result<String>;

    /// [`write`](Self::write), taking the bytes: a store that must own them (a bucket's
    /// client sends them from a task of its own) keeps them instead of copying them. The
    /// drain's checkpoint writer calls this, so its peak is one encoded copy of the image.
    fn write_owned(&self, bytes: Vec<u8>) -> io::Result<String> {
        self.write(&bytes)
    }

    /// The checkpoints present, newest first.
    fn newest_first(&self) -> io::Result<Vec<String>>;

    /// One checkpoint's bytes, as written (or as damaged since).
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;

    /// Where the store is, for reports and errors (a directory, a bucket's URL).
    fn location(&self) -> String;

    /// Reads and verifies the checkpoint `name` and checks it was taken of `log` from an
    /// index of `config`'s shape; seeds nothing. A pool whose source checks the log before
    /// anything is served (EHDB's `EhdbSource::wait_resumed`) loads, resumes its source,
    /// waits for its word, and only then seeds its index ([`Checkpoint::restore_into`]);
    /// on a refusal it loads the next older one. Returns the checkpoint and its size.
    fn load(
        &self,
        name: &str,
        config: &IndexConfig,
        log: &LogIdentity,
    ) -> Result<(Checkpoint, u64), Refusal> {
        let bytes = self.read(name).map_err(|e| Refusal::Io(e.to_string()))?;
        let checkpoint = Checkpoint::decode(&bytes)?;
        checkpoint.check(config, log)?;
        Ok((checkpoint, bytes.len() as u64))
    }

    /// An index with `config` seeded from the newest checkpoint that verifies and was taken
    /// of `log` with this index's shape, trying older ones after each refusal, and an empty
    /// index when none does (the drain then replays from the beginning). Every refusal is
    /// returned with its reason and reported to the index's observer
    /// (`checkpoint_refused_total{reason}`; the one used: `checkpoints_total{outcome="restored"}`).
    fn restore_newest(&self, config: IndexConfig, log: &LogIdentity) -> Restored {
        self.restore_newest_with(WalIndex::new(config), log)
    }

    /// [`restore_newest`](Self::restore_newest) into `index` (empty; its configuration and
    /// observer are kept). Where a checkpoint could not be read (another pool's write, in a
    /// shared bucket, deleted it after it was listed), the store is listed once more and
    /// the checkpoints not yet tried are tried.
    fn restore_newest_with(&self, index: WalIndex, log: &LogIdentity) -> Restored {
        let mut refused: Vec<(String, Refusal)> = Vec::new();
        for attempt in 0..2 {
            let candidates = match self.newest_first() {
                Ok(found) => found,
                Err(error) => {
                    refused.push((self.location(), Refusal::Io(error.to_string())));
                    break;
                }
            };
            for name in candidates {
                if refused.iter().any(|(tried, _)| *tried == name) {
                    continue;
                }
                match self.load(&name, index.config(), log) {
                    Ok((checkpoint, bytes)) => {
                        checkpoint.restore_into(&index);
                        index.observer().checkpoint(CheckpointLabel::Restored);
                        return Restored {
                            index,
                            positions: Some(checkpoint.positions),
                            used: Some(name),
                            refused,
                            bytes,
                        };
                    }
                    Err(why) => {
                        index.observer().checkpoint_refused(why.reason());
                        refused.push((name, why));
                    }
                }
            }
            let unreadable = refused.iter().any(|(_, why)| matches!(why, Refusal::Io(_)));
            if attempt == 0 && !unreadable {
                break;
            }
        }
        Restored {
            index,
            positions: None,
            used: None,
            refused,
            bytes: 0,
        }
    }
}

/// What [`CheckpointStore::restore_newest`] found.
#[derive(Debug)]
pub struct Restored {
    /// The index: seeded from the newest checkpoint that verified, or empty.
    pub index: WalIndex,
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
}
