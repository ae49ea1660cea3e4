//! Ingestion: the [`Drain`] that pulls the WAL into an index, and the [`WalSource`]s it
//! pulls from (an in-process channel, a JSON-lines file; `wal-source-nats` adds JetStream).

mod checkpointer;
mod decode;
mod drain;
mod source;

pub use checkpointer::{CheckpointReport, Checkpointing};
pub use decode::{DecodeMode, Record};

pub use drain::{Backoff, BadRecord, Drain, DrainConfig, DrainHandle, DrainReport};
pub use source::{
    Backfill, ChannelSource, Decoded, JSON_LINES_RESUME_DEPTH, JsonLinesSource, Pull, RecordError,
    WalSource, WalWriter, channel_wal,
};
