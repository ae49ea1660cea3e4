//! How the drain turns WAL payloads into events: the one decode policy of every route.
//!
//! An index that stores slim events (the engine with [`IndexConfig::slim`] set) is handed events
//! decoded straight to their slim projection, so its own projection on apply is free; one
//! that stores whole events is handed them whole. The drain decodes the records a source
//! hands it as bytes ([`Pull::Records`]) this way, and tells a source that decodes its own
//! records ([`Pull::Decoded`]) the same mode ([`WalSource::decode_as`]), so every route
//! parses a record once.
//!
//! [`IndexConfig::slim`]: crate::IndexConfig::slim
//! [`Pull::Records`]: super::Pull::Records
//! [`Pull::Decoded`]: super::Pull::Decoded
//! [`WalSource::decode_as`]: super::WalSource::decode_as

use bytes::Bytes;
use chain_fold::{Event, EventError};

/// One raw WAL record: its position in the log and its payload, not yet decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Sequence number (channel) or 1-based line number (file).
    pub position: u64,
    /// The payload bytes.
    pub payload: Bytes,
}

/// How a payload becomes an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeMode {
    /// Whole: the payload's canonical bytes ([`Event::from_json`]).
    #[default]
    Whole,
    /// Straight to the slim projection ([`Event::from_json_slim`]).
    Slim,
}

impl DecodeMode {
    /// The mode for an index that stores slim events (`slim`) or whole ones.
    pub fn for_slim(slim: bool) -> DecodeMode {
        if slim {
            DecodeMode::Slim
        } else {
            DecodeMode::Whole
        }
    }

    /// Decodes one payload this way.
    ///
    /// ```
    /// use wal_index::ingest::DecodeMode;
    ///
    /// let payload = br#"{"event_id":1,"execution_id":2,"worker_id":"w","result":{"ok":true}}"#;
    /// let whole = DecodeMode::Whole.decode(payload)?;
    /// let slim = DecodeMode::Slim.decode(payload)?;
    /// assert_eq!(slim.payload(), whole.to_slim().payload());
    /// assert_eq!(slim.payload(), br#"{"event_id":1,"execution_id":2,"result":{"ok":true}}"#);
    /// # Ok::<(), chain_fold::EventError>(())
    /// ```
    pub fn decode(self, payload: &[u8]) -> Result<Event, EventError> {
        match self {
            DecodeMode::Whole => Event::from_json(payload),
            DecodeMode::Slim => Event::from_json_slim(payload),
        }
    }
}

/// A pull at least this large is decoded on several threads.
const PARALLEL_DECODE_BYTES: usize = 256 << 10;

/// Decodes `records` in log order, each as `mode` says: on `threads` threads side by side
/// when the pull is large, else on this one.
///
/// The runs are contiguous, so concatenating their results keeps the log's order. The
/// calling thread decodes the first run itself and joins the others (scoped threads, one
/// per run and pull: a spawn costs tens of microseconds against the tens of milliseconds a
/// backfill's pull takes to decode). A run whose thread cannot start is decoded here.
pub(crate) fn decode_records(
    records: Vec<Record>,
    mode: DecodeMode,
    threads: usize,
) -> Vec<(u64, Result<Event, EventError>)> {
    let decode = |run: &[Record]| -> Vec<(u64, Result<Event, EventError>)> {
        run.iter()
            .map(|record| (record.position, mode.decode(&record.payload)))
            .collect()
    };
    let bytes: usize = records.iter().map(|r| r.payload.len()).sum();
    let threads = threads.clamp(1, records.len().max(1));
    if threads == 1 || bytes < PARALLEL_DECODE_BYTES {
        return decode(&records);
    }
    let runs = runs_of_equal_bytes(&records, threads, bytes);
    std::thread::scope(|scope| {
        let spawned: Vec<_> = runs[1..]
            .iter()
            .map(|run| {
                let started = std::thread::Builder::new()
                    .name("wal-decode".into())
                    .spawn_scoped(scope, || decode(run));
                (run, started)
            })
            .collect();
        let mut decoded = decode(runs[0]);
        for (run, started) in spawned {
            match started.map(|thread| thread.join()) {
                Ok(Ok(events)) => decoded.extend(events),
                // The decoder panicked (a bug: bad input is a typed error): the panic goes
                // on here, as it would have on this thread.
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                // The thread did not start: this thread decodes the run.
                Err(_) => decoded.extend(decode(run)),
            }
        }
        decoded
    })
}

/// `records` cut into at most `threads` contiguous runs of about `bytes / threads` bytes
/// each (decoding costs by the byte: envelopes of mixed sizes cut by count leave one thread
/// waiting for another). None is empty.
fn runs_of_equal_bytes(records: &[Record], threads: usize, bytes: usize) -> Vec<&[Record]> {
    let share = bytes.div_ceil(threads).max(1);
    let mut runs = Vec::with_capacity(threads);
    let (mut start, mut filled) = (0, 0);
    for (at, record) in records.iter().enumerate() {
        filled += record.payload.len();
        if filled >= share && runs.len() + 1 < threads {
            runs.push(&records[start..=at]);
            (start, filled) = (at + 1, 0);
        }
    }
    if start < records.len() {
        runs.push(&records[start..]);
    }
    runs
}

#[cfg(all(test, not(any(wal_index_loom, wal_index_shuttle))))]
mod tests {
    use super::{Record, runs_of_equal_bytes};

    /// The runs cover the records in order, none empty, at most one per thread, and no run
    /// holds more than its share plus one record.
    #[test]
    fn runs_cut_by_bytes_cover_every_record_in_order() {
        let sizes = [
            vec![10, 10, 10, 10],
            vec![1, 1, 1, 1000, 1, 1],
            vec![1000],
            vec![5; 17],
            vec![700, 1, 1, 1, 1, 1, 1, 300],
        ];
        for sizes in sizes {
            let records: Vec<Record> = sizes
                .iter()
                .enumerate()
                .map(|(at, &len)| Record {
                    position: at as u64,
                    payload: vec![b'x'; len].into(),
                })
                .collect();
            let bytes: usize = sizes.iter().sum();
            for threads in 1..=4 {
                let runs = runs_of_equal_bytes(&records, threads, bytes);
                assert!(
                    !runs.is_empty() && runs.len() <= threads,
                    "{sizes:?} / {threads}"
                );
                let positions: Vec<u64> = runs
                    .iter()
                    .flat_map(|r| r.iter().map(|r| r.position))
                    .collect();
                assert_eq!(positions, (0..sizes.len() as u64).collect::<Vec<_>>());
                let share = bytes.div_ceil(threads);
                let largest = sizes.iter().max().copied().unwrap_or(0);
                for run in &runs {
                    assert!(!run.is_empty());
                    let run_bytes: usize = run.iter().map(|r| r.payload.len()).sum();
                    assert!(
                        run_bytes < share + largest,
                        "{sizes:?} / {threads}: {run_bytes}"
                    );
                }
            }
        }
    }
}
