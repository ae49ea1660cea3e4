//! [`DirStore`]: checkpoints in a local directory (a node's disk or a persistent volume),
//! written durably, the newest few kept.

use crate::sync::Mutex;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{Checkpoint, LogIdentity, Position, Refusal};
use crate::WalIndex;
use crate::config::IndexConfig;
use crate::index::StateIndex;
use crate::labels::CheckpointLabel;

/// A file name's prefix and suffix: `checkpoint-<ms>-<n>.sbix`, so names sort by age.
const PREFIX: &str = "checkpoint-";
const SUFFIX: &str = ".sbix";

/// Checkpoints in one directory: each written under a temporary name, synced, renamed into
/// place and the directory synced, so a checkpoint that has a name is whole; the newest
/// `keep` are kept and older ones deleted after each write.
///
/// A crash mid-write leaves at most a temporary file (`.tmp`), which is never read and is
/// deleted by the next write. A write that fails (a full disk) leaves the previous
/// checkpoints as they were. Names sort by age even across a restart whose clock went
/// back: a store carries on from the newest name it finds.
///
/// One process writes to a directory: a second one's pruning would delete the first's
/// checkpoints and temporary files (whole checkpoints are never damaged, but they are
/// lost). Give each pool its own directory.
pub struct DirStore {
    dir: PathBuf,
    keep: usize,
    /// The newest name's (milliseconds, count): the next name sorts above it.
    newest: Mutex<(u128, u64)>,
}

impl std::fmt::Debug for DirStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirStore")
            .field("dir", &self.dir)
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

/// What [`DirStore::restore_newest`] found.
#[derive(Debug)]
pub struct Restored {
    /// The index: seeded from the newest checkpoint that verified, or empty.
    pub index: WalIndex,
    /// Where the drain resumes: the used checkpoint's positions (`None`: no checkpoint was
    /// used, so the drain replays the log from its beginning).
    pub positions: Option<Vec<Position>>,
    /// The checkpoint used, if any.
    pub used: Option<PathBuf>,
    /// The checkpoints tried and refused, newest first, each with its reason.
    pub refused: Vec<(PathBuf, Refusal)>,
    /// Bytes read from the used checkpoint.
    pub bytes: u64,
}

impl DirStore {
    /// The store in `dir` (created if missing), keeping the newest `keep` checkpoints (at
    /// least 1).
    pub fn open(dir: impl AsRef<Path>, keep: usize) -> io::Result<DirStore> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let store = DirStore {
            dir,
            keep: keep.max(1),
            newest: Mutex::new((0, 0)),
        };
        let newest = store
            .newest_first()?
            .first()
            .and_then(|path| parse_name(path))
            .unwrap_or((0, 0));
        *store.newest.lock() = newest;
        // A process that died mid-write left its temporary file: never read, gone now.
        store.remove_temporaries()?;
        Ok(store)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes one checkpoint's bytes durably: a temporary file, `fsync`, rename, `fsync`
    /// of the directory; then deletes checkpoints past the newest `keep` and stale
    /// temporary files. Returns the checkpoint's path.
    pub fn write(&self, bytes: &[u8]) -> io::Result<PathBuf> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let (millis, n) = {
            let mut newest = self.newest.lock();
            // Above the newest name whatever the clock says.
            *newest = if now > newest.0 {
                (now, 0)
            } else {
                (newest.0, newest.1 + 1)
            };
            *newest
        };
        let name = format!("{PREFIX}{millis:020}-{n:06}{SUFFIX}");
        let path = self.dir.join(&name);
        let temporary = self.dir.join(format!("{name}.tmp"));
        let written = (|| {
            let mut file = File::options()
                .write(true)
                .create_new(true)
                .open(&temporary)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            drop(file);
            fs::rename(&temporary, &path)?;
            File::open(&self.dir)?.sync_all()
        })();
        if let Err(error) = written {
            let _ = fs::remove_file(&temporary);
            return Err(error);
        }
        // The checkpoint is durable: a failed prune leaves an extra file, not a failed write.
        let _ = self.prune();
        Ok(path)
    }

    /// The checkpoints present, newest first.
    pub fn newest_first(&self) -> io::Result<Vec<PathBuf>> {
        let mut found: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX))
            })
            .collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        Ok(found)
    }

    /// Deletes checkpoints past the newest `keep`, and temporary files no write of this
    /// store has open (those of a process that died mid-write).
    fn prune(&self) -> io::Result<()> {
        for old in self.newest_first()?.into_iter().skip(self.keep) {
            fs::remove_file(old)?;
        }
        self.remove_temporaries()
    }

    /// Deletes temporary files: writes are serialized (one in flight), so one present
    /// between writes is a dead process's.
    fn remove_temporaries(&self) -> io::Result<()> {
        for entry in fs::read_dir(&self.dir)?.filter_map(Result::ok) {
            let path = entry.path();
            let stale = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(".tmp"));
            // Writes are serialized by the drain (one in flight), so a temporary file
            // present now is a dead process's.
            if stale {
                let _ = fs::remove_file(path);
            }
        }
        Ok(())
    }

    /// Reads and verifies the checkpoint at `path` and checks it was taken of `log` from an
    /// index of `config`'s shape; seeds nothing. A pool whose source checks the log before
    /// anything is served (EHDB's `EhdbSource::wait_resumed`) loads, resumes its source,
    /// waits for its word, and only then seeds its index ([`Checkpoint::restore_into`]);
    /// on a refusal it loads the next older one. Returns the checkpoint and its size.
    pub fn load(
        &self,
        path: &Path,
        config: &IndexConfig,
        log: &LogIdentity,
    ) -> Result<(Checkpoint, u64), Refusal> {
        let bytes = fs::read(path).map_err(|e| Refusal::Io(e.to_string()))?;
        let checkpoint = Checkpoint::decode(&bytes)?;
        checkpoint.check(config, log)?;
        Ok((checkpoint, bytes.len() as u64))
    }

    /// An index with `config` seeded from the newest checkpoint that verifies and was taken
    /// of `log` with this index's shape, trying older ones after each refusal, and an empty
    /// index when none does (the drain then replays from the beginning). Every refusal is
    /// returned with its reason and reported to the index's observer
    /// (`checkpoint_refused_total{reason}`; the one used: `checkpoints_total{outcome="restored"}`).
    pub fn restore_newest(&self, config: IndexConfig, log: &LogIdentity) -> Restored {
        self.restore_newest_with(WalIndex::new(config), log)
    }

    /// [`restore_newest`](DirStore::restore_newest) into `index` (empty; its configuration
    /// and observer are kept).
    pub fn restore_newest_with(&self, index: WalIndex, log: &LogIdentity) -> Restored {
        let mut refused = Vec::new();
        let candidates = match self.newest_first() {
            Ok(found) => found,
            Err(error) => {
                refused.push((self.dir.clone(), Refusal::Io(error.to_string())));
                Vec::new()
            }
        };
        for path in candidates {
            match self.load(&path, index.config(), log) {
                Ok((checkpoint, bytes)) => {
                    checkpoint.restore_into(&index);
                    index.observer().checkpoint(CheckpointLabel::Restored);
                    return Restored {
                        index,
                        positions: Some(checkpoint.positions),
                        used: Some(path),
                        refused,
                        bytes,
                    };
                }
                Err(why) => {
                    index.observer().checkpoint_refused(why.reason());
                    refused.push((path, why));
                }
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

/// A checkpoint name's (milliseconds, count).
fn parse_name(path: &Path) -> Option<(u128, u64)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (millis, n) = stem.split_once('-')?;
    Some((millis.parse().ok()?, n.parse().ok()?))
}
