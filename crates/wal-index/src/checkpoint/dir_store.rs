//! [`DirStore`]: checkpoints in a local directory (a node's disk or a persistent volume),
//! written durably, the newest few kept.

use crate::sync::Mutex;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::CheckpointStore;
use super::name::CheckpointName;

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
/// lost). Give each pool its own directory. A directory stays on its node: a pool that a
/// roll reschedules elsewhere finds it only on a persistent volume that follows it, or
/// keeps its checkpoints in a bucket instead (`BucketStore`, feature `object-store`).
///
/// ```
/// use wal_index::checkpoint::{CheckpointStore, DirStore};
///
/// let dir = std::env::temp_dir().join(format!("sbix-dir-doc-{}", std::process::id()));
/// let store = DirStore::open(&dir, 2)?;
/// for body in [&b"one"[..], b"two", b"three"] {
///     store.write(body)?;
/// }
/// let names = store.newest_first()?;
/// assert_eq!(names.len(), 2, "the newest two are kept");
/// assert_eq!(store.read(&names[0])?, b"three");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct DirStore {
    dir: PathBuf,
    keep: usize,
    /// The newest name: the next name sorts above it.
    newest: Mutex<Option<CheckpointName>>,
}

impl std::fmt::Debug for DirStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirStore")
            .field("dir", &self.dir)
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
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
            newest: Mutex::new(None),
        };
        let newest = store.newest_first()?;
        *store.newest.lock() = newest.first().and_then(|name| CheckpointName::parse(name));
        // A process that died mid-write left its temporary file: never read, gone now.
        store.remove_temporaries()?;
        Ok(store)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the checkpoint `name` (a name [`newest_first`](CheckpointStore::newest_first)
    /// or [`write`](CheckpointStore::write) returned).
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The next name: above the newest whatever the clock says.
    fn next_name(&self) -> String {
        let mut newest = self.newest.lock();
        let name = CheckpointName::next(*newest, None);
        *newest = Some(name);
        name.to_string()
    }

    /// Deletes checkpoints past the newest `keep`, and temporary files no write of this
    /// store has open (those of a process that died mid-write).
    fn prune(&self) -> io::Result<()> {
        for old in self.newest_first()?.into_iter().skip(self.keep) {
            fs::remove_file(self.dir.join(old))?;
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
                .and_then(|n| n.strip_suffix(".tmp"))
                .is_some_and(|n| CheckpointName::parse(n).is_some());
            if stale {
                let _ = fs::remove_file(path);
            }
        }
        Ok(())
    }
}

impl CheckpointStore for DirStore {
    /// Writes one checkpoint's bytes durably: a temporary file, `fsync`, rename, `fsync`
    /// of the directory; then deletes checkpoints past the newest `keep` and stale
    /// temporary files.
    fn write(&self, bytes: &[u8]) -> io::Result<String> {
        let name = self.next_name();
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
        Ok(name)
    }

    /// The checkpoints this store wrote, newest first, ordered by the numbers in their
    /// names. A file whose name the store would not have written (another tool's, another
    /// version's) is neither listed nor pruned nor counted.
    fn newest_first(&self) -> io::Result<Vec<String>> {
        let mut found: Vec<(CheckpointName, String)> = fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter_map(|name| Some((CheckpointName::parse(&name)?, name)))
            .collect();
        found.sort_unstable_by_key(|(key, _)| std::cmp::Reverse(*key));
        Ok(found.into_iter().map(|(_, name)| name).collect())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path_of(name))
    }

    /// The file itself: a restore reads it a block at a time.
    fn open(&self, name: &str) -> io::Result<Box<dyn io::Read + Send + '_>> {
        Ok(Box::new(File::open(self.path_of(name))?))
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }
}
