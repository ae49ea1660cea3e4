//! Why a shard could not be read.

/// Why a shard could not be read or decoded. Each is production's reader `Error` outcome:
/// the drive counts it `fallback` and goes on to the retained WAL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The object store failed, or answered with a status other than 2xx and 404.
    #[error("the object store failed: {0}")]
    Store(String),
    /// The object is larger than the reader's cap (it was not read).
    #[error("the shard is {size} bytes, above the reader's cap of {limit}")]
    TooLarge {
        /// The object's size.
        size: u64,
        /// The cap.
        limit: u64,
    },
    /// The bytes are not an Arrow IPC stream (or it is cut inside a message).
    #[error("not an Arrow IPC stream: {0}")]
    Decode(String),
    /// A batch has no column named `payload`.
    #[error("the shard has no `payload` column")]
    NoPayloadColumn,
    /// The `payload` column is not Utf8 with 32-bit offsets.
    #[error("the `payload` column is {0}, not Utf8")]
    PayloadType(String),
    /// No `payload` cell is a JSON event (all null or unparsable).
    #[error("no `payload` cell of the shard's {rows} rows is an event")]
    NoEvents {
        /// Rows in the shard.
        rows: usize,
    },
}
