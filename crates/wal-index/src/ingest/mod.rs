//! Ingestion: the [`Drain`] that pulls the WAL into an index, its start from a checkpoint
//! ([`Drain::warm_start`]), and the [`WalSource`]s it pulls from (an in-process channel, a
//! JSON-lines file; `wal-source-nats` adds JetStream, `wal-source-ehdb` EHDB's feed).

mod decode;
mod drain;
mod source;
mod warm_start;

pub use decode::{DecodeMode, Record};

pub use drain::{Backoff, BadRecord, Drain, DrainConfig, DrainHandle, DrainHealth, DrainReport};
pub use source::{
    Backfill, ChannelSource, Decoded, JSON_LINES_RESUME_DEPTH, JsonLinesSource, Pull, RecordError,
    WalSource, WalWriter, channel_wal,
};
pub use warm_start::WarmStart;
