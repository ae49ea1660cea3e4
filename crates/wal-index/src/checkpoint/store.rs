//! [`CheckpointStore`]: where checkpoints are kept. A store keeps bytes; which checkpoint
//! a pool restores is [`restore_newest`](super::restore_newest)'s choice, the same for every
//! store.

use std::io;

/// Where a pool keeps its checkpoints: a local directory ([`DirStore`](super::DirStore)),
/// or, with the `object-store` feature, a bucket (`BucketStore`).
///
/// A store names each checkpoint it writes with a name it never reuses, and lists them
/// newest first. It promises that a checkpoint it lists is whole: a write that fails or
/// is cut short leaves the checkpoints listed before it as they were. It does not promise
/// the bytes are intact (a disk can rot, an operator can copy the wrong file): every read
/// is verified ([`Checkpoint::decode`](super::Checkpoint::decode)) before anything is served.
///
/// A store implements storage only: write, list, read, and where it is. The methods block:
/// a pool calls them at start and from the drain's checkpoint writer, a thread of its own.
/// From async code, call them (and [`restore_newest`](super::restore_newest)) through the
/// runtime's blocking pool (`tokio::task::spawn_blocking`).
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

    /// One checkpoint's bytes as a reader, which a restore reads a block at a time
    /// ([`Checkpoint::read_from`](super::Checkpoint::read_from)). The default reads them
    /// whole ([`read`](Self::read)); a store that can stream them (a file) does.
    fn open(&self, name: &str) -> io::Result<Box<dyn io::Read + Send + '_>> {
        Ok(Box::new(io::Cursor::new(self.read(name)?)))
    }

    /// Where the store is, for reports and errors (a directory, a bucket's URL).
    fn location(&self) -> String;
}
