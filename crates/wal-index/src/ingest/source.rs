//! Where a drain reads the WAL from: an in-memory channel or a JSON-lines file.

use std::io::{self, BufRead};
use std::time::Duration;

use bytes::Bytes;
use chain_fold::{Event, EventError};

pub use crate::backfill::Backfill;

use super::decode::{DecodeMode, Record};
use crate::checkpoint::{
    Fingerprint, LogIdentity, Position, RecentRecords, Refusal, ResumeCheck, SourcePosition,
};

/// One record a source decoded itself: a source whose framing carries the payload in
/// another form (escaped inside a JSON string, say) decodes it once, straight from that
/// form, and checks the record's envelope against the event, instead of handing the drain
/// bytes to decode again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Its position in the log.
    pub position: u64,
    /// CRC-32C of the record's payload as the log holds it (before any decoding), the hash
    /// of its [`Fingerprint`]; 0 for a record without a payload.
    pub payload_crc: u32,
    /// The payload's length as the log holds it (0 for a record without a payload).
    pub payload_len: u32,
    /// The event, or why the record is not one (the drain counts it as bad).
    pub event: Result<Event, RecordError>,
}

/// Why a record is bad: its payload is not an event, or the source's framing around it is
/// wrong. Either way the drain counts it and applies its neighbours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The payload is not a chainable event.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The record around the payload is wrong (the source says how).
    #[error("{0}")]
    Envelope(String),
}

/// What one pull returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pull {
    /// Up to `max` records, in log order.
    Records(Vec<Record>),
    /// Up to `max` records the source decoded itself, in log order.
    Decoded(Vec<Decoded>),
    /// Nothing arrived within the wait; the log is still open.
    Idle,
    /// The log ended (file at EOF, every channel writer dropped) and everything was read.
    Closed,
}

/// A write-ahead log a [`Drain`](crate::Drain) pulls batches from.
pub trait WalSource: Send {
    /// Returns up to `max` records, waiting at most `wait` for the first one.
    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull>;

    /// Where this source stands against the head it learned at subscription (see
    /// [`Backfill`]). Asked after every pull; the default is [`Backfill::Unknown`], which
    /// leaves every drive on today's flow.
    fn backfill(&self) -> Backfill {
        Backfill::Unknown
    }

    /// Called by the drain once everything `pull` returned so far has been applied (bad
    /// records included: they were counted and skipped). A source whose log wants
    /// acknowledgements (a durable broker consumer) acknowledges here; the default does
    /// nothing. An error is handled like a failed pull: the records are delivered again
    /// later, and the index absorbs the duplicates.
    fn commit(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Called by [`Drain::new`](crate::Drain::new) with the mode the index wants its events
    /// in. A source that decodes its records itself ([`Pull::Decoded`]) decodes them this
    /// way from then on, so the index does not parse them again to project them; the
    /// default ignores it (the drain decodes [`Pull::Records`] itself, in this mode).
    fn decode_as(&mut self, mode: DecodeMode) {
        let _ = mode;
    }

    /// The log this source reads and, per partition, the last record it returned from
    /// `pull`: what a [checkpoint](crate::checkpoint) taken right after applying that pull
    /// resumes from. The default, `None`, says the source cannot resume, and the drain
    /// takes no checkpoint.
    fn position(&self) -> Option<SourcePosition> {
        None
    }

    /// The log this source reads, as its checkpoints name it ([`LogIdentity`]): a pool
    /// restores only a checkpoint taken of this log. `Ok(None)`, the default, says the
    /// source cannot resume, and a pool starting on it replays the log from its beginning;
    /// an error, that the log could not be asked (a broker that does not answer).
    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        Ok(None)
    }

    /// Resumes after a checkpoint's `positions`, before the first pull: the next pull
    /// returns the first record the checkpoint does not hold. The source checks, waiting at
    /// most `within` for its log to answer, that the log still holds the records each
    /// position names ([`ResumeCheck`]: exactly those, none missing, changed or added
    /// between), and refuses otherwise ([`Refusal::Fingerprint`]; a log that did not answer
    /// in time: [`Refusal::Io`]). A pool seeds its index from the checkpoint only after
    /// `Ok`, so nothing of a checkpoint its log no longer holds is served; after a refusal
    /// it drops this source (it may have read part of the log) and makes a new one for an
    /// older checkpoint or for a replay. [`Drain::warm_start`](crate::Drain::warm_start)
    /// does all of that.
    ///
    /// The default refuses: a source that cannot resume.
    fn resume(&mut self, positions: &[Position], within: Duration) -> Result<(), Refusal> {
        let _ = (positions, within);
        Err(Refusal::CannotResume)
    }
}

// A forwarding impl that forgot a method would silently take the trait's default (a boxed
// source that never resumes, say): the lint makes a forgotten one an error wherever clippy
// runs (CI runs it with `-D warnings`).
#[deny(clippy::missing_trait_methods)]
impl<S: WalSource + ?Sized> WalSource for Box<S> {
    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        (**self).pull(max, wait)
    }

    fn commit(&mut self) -> io::Result<()> {
        (**self).commit()
    }

    fn backfill(&self) -> Backfill {
        (**self).backfill()
    }

    fn decode_as(&mut self, mode: DecodeMode) {
        (**self).decode_as(mode)
    }

    fn position(&self) -> Option<SourcePosition> {
        (**self).position()
    }

    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        (**self).log()
    }

    fn resume(&mut self, positions: &[Position], within: Duration) -> Result<(), Refusal> {
        (**self).resume(positions, within)
    }
}

/// Creates an in-memory WAL: the writer appends payloads, the source yields them in order.
///
/// ```
/// use std::time::Duration;
/// use wal_index::WalSource;
/// use wal_index::ingest::{Pull, channel_wal};
///
/// let (writer, mut source) = channel_wal();
/// writer.append(br#"{"event_id":1,"execution_id":1}"#.to_vec());
/// drop(writer);
/// let Pull::Records(batch) = source.pull(200, Duration::ZERO).unwrap() else { panic!() };
/// assert_eq!(batch.len(), 1);
/// assert_eq!(source.pull(200, Duration::ZERO).unwrap(), Pull::Closed);
/// ```
pub fn channel_wal() -> (WalWriter, ChannelSource) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (
        WalWriter {
            tx,
            next: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
        },
        ChannelSource {
            rx,
            backlog: None,
            taken: 0,
            handed: [None, None],
        },
    )
}

/// The appending end of [`channel_wal`]. Clone it to append from several threads.
#[derive(Debug, Clone)]
pub struct WalWriter {
    tx: crossbeam_channel::Sender<Record>,
    next: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl WalWriter {
    /// Appends one payload; returns its position, or `None` if the source was dropped.
    pub fn append(&self, payload: impl Into<Bytes>) -> Option<u64> {
        // Relaxed: positions only need to be unique; the channel orders the records.
        let position = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.tx
            .send(Record {
                position,
                payload: payload.into(),
            })
            .ok()
            .map(|()| position)
    }
}

/// The reading end of [`channel_wal`].
///
/// Its head is the number of records queued when it is first pulled (a drain started on a
/// channel that already holds a backlog backfills exactly those):
///
/// ```
/// use std::time::Duration;
/// use wal_index::WalSource;
/// use wal_index::ingest::{Backfill, channel_wal};
///
/// let (writer, mut source) = channel_wal();
/// for id in 1..=3 {
///     writer.append(format!(r#"{{"event_id":{id},"execution_id":1}}"#));
/// }
/// source.pull(2, Duration::ZERO).unwrap();
/// assert_eq!(source.backfill(), Backfill::Behind { remaining: Some(1) });
/// source.pull(2, Duration::ZERO).unwrap();
/// assert_eq!(source.backfill(), Backfill::CaughtUp);
/// ```
#[derive(Debug)]
pub struct ChannelSource {
    rx: crossbeam_channel::Receiver<Record>,
    /// Records queued at the first pull (the backlog), once that pull happened.
    backlog: Option<u64>,
    /// Records handed over so far.
    taken: u64,
    /// The last record handed over and the one before it (their positions and payloads:
    /// fingerprinted only when a checkpoint asks).
    handed: [Option<Record>; 2],
}

/// The log identity of an in-process channel.
fn channel_log() -> LogIdentity {
    LogIdentity::new("channel", "in-process", "")
}

impl WalSource for ChannelSource {
    fn backfill(&self) -> Backfill {
        match self.backlog {
            None => Backfill::Unknown,
            Some(backlog) if self.taken >= backlog => Backfill::CaughtUp,
            Some(backlog) => Backfill::Behind {
                remaining: Some(backlog - self.taken),
            },
        }
    }

    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        self.backlog.get_or_insert(self.rx.len() as u64);
        let first = match self.rx.recv_timeout(wait) {
            Ok(record) => record,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => return Ok(Pull::Idle),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(Pull::Closed),
        };
        let mut batch = Vec::with_capacity(max.clamp(1, 1024));
        batch.push(first);
        while batch.len() < max {
            match self.rx.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        self.taken += batch.len() as u64;
        let mut last = batch.iter().rev().take(2).cloned();
        let (newest, previous) = (last.next(), last.next());
        self.handed = match previous {
            Some(previous) => [newest, Some(previous)],
            None => [newest, self.handed[0].take()],
        };
        Ok(Pull::Records(batch))
    }

    /// The last record handed over (its position and a CRC-32C of its payload), and the
    /// one before. An in-process channel ends with its process; a process that replays its
    /// log into a fresh channel (the simulator's roll) resumes from them.
    fn position(&self) -> Option<SourcePosition> {
        self.handed[0].as_ref()?;
        Some(SourcePosition {
            log: channel_log(),
            positions: vec![Position {
                partition: "channel".to_owned(),
                // `handed` is newest first; a position is oldest first.
                records: self
                    .handed
                    .iter()
                    .rev()
                    .flatten()
                    .map(|r| Fingerprint::of(r.position, &r.payload))
                    .collect(),
            }],
        })
    }

    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        Ok(Some(channel_log()))
    }

    /// Takes the records up to the position off the channel, checking that they are the
    /// fingerprinted ones, so the next pull starts right after it. The records up to the
    /// position must already be queued (a process's log replayed into a fresh channel, as
    /// the simulator's roll does); a channel that ends before it, or holds other records
    /// there, is refused with [`Refusal::Fingerprint`]. `within` is not needed: the channel
    /// answers at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_index::ingest::{Pull, channel_wal};
    /// use wal_index::WalSource;
    ///
    /// let (writer, mut first) = channel_wal();
    /// let payloads: Vec<String> = (1..=4).map(|id| format!(r#"{{"event_id":{id},"execution_id":1}}"#)).collect();
    /// for p in &payloads[..2] { writer.append(p.clone()); }
    /// first.pull(10, Duration::ZERO)?;
    /// let positions = first.position().unwrap().positions;
    ///
    /// // The same log replayed into a new channel: the resumed source starts after it.
    /// let (writer, mut resumed) = channel_wal();
    /// for p in &payloads { writer.append(p.clone()); }
    /// resumed.resume(&positions, Duration::ZERO).unwrap();
    /// let Pull::Records(rest) = resumed.pull(10, Duration::ZERO)? else { panic!() };
    /// assert_eq!(rest.len(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn resume(&mut self, positions: &[Position], _within: Duration) -> Result<(), Refusal> {
        let position = only_partition(positions, "channel")?;
        let fingerprint = |r: &Record| Fingerprint::of(r.position, &r.payload);
        let mut check = ResumeCheck::new(position);
        let oldest = position.oldest().sequence;
        let mut handed: [Option<Record>; 2] = [None, None];
        while !check.done() {
            let Ok(record) = self.rx.try_recv() else {
                return check.ended();
            };
            if record.position < oldest {
                continue;
            }
            check.record(fingerprint(&record))?;
            handed = [Some(record), handed[0].take()];
        }
        self.handed = handed;
        Ok(())
    }
}

/// The one position a single-partition source resumes from, named `partition`.
fn only_partition<'a>(positions: &'a [Position], partition: &str) -> Result<&'a Position, Refusal> {
    match positions {
        [position] if position.partition == partition => Ok(position),
        _ => {
            let named: Vec<&str> = positions.iter().map(|p| p.partition.as_str()).collect();
            Err(Refusal::Fingerprint {
                why: format!(
                    "the checkpoint names partitions {named:?}; this source reads {partition:?} alone"
                ),
            })
        }
    }
}

/// A JSON-lines WAL file: one payload per line. Blank lines are skipped; a line that is not
/// valid UTF-8 or JSON is still yielded, so the drain counts it as a bad record with its
/// line number instead of stopping.
///
/// A read error ends a pull with the lines read whole before it (an error alone when there
/// were none); a line cut by the error is kept, and the next pull reads on from where the
/// error stopped it.
///
/// At the end of the file the source closes, or, [`following`](Self::following) a file a
/// producer appends to, waits for more: a pull at the end returns
/// [`Pull::Idle`] after its wait, and a last line not yet ended by `\n` is held until it is.
#[derive(Debug)]
pub struct JsonLinesSource<R> {
    reader: R,
    line: u64,
    done: bool,
    /// At the end of the file, wait for more instead of closing.
    follow: bool,
    log: LogIdentity,
    /// The bytes of a line a read error cut short, read again by the next pull.
    partial: Vec<u8>,
    /// A read error met after some lines of a pull: those lines were returned, and the
    /// next pull returns the error.
    deferred: Option<io::Error>,
    /// The last lines returned (their fingerprints).
    recent: RecentRecords,
}

/// How many of its last lines a JSON-lines source's checkpoint names ([`crate::checkpoint`]
/// states the rule): a file truncated and written again anywhere in its last this many
/// lines is refused.
pub const JSON_LINES_RESUME_DEPTH: usize = 1024;

impl<R: BufRead + Send> JsonLinesSource<R> {
    /// Reads from any buffered reader (its log identity: `file`, unnamed).
    pub fn new(reader: R) -> Self {
        JsonLinesSource {
            reader,
            line: 0,
            done: false,
            follow: false,
            log: LogIdentity::new("file", "", ""),
            partial: Vec::new(),
            deferred: None,
            recent: RecentRecords::new(JSON_LINES_RESUME_DEPTH),
        }
    }

    /// Follows the file as a producer appends to it (as `tail -f` does): at its end a pull
    /// waits for more and returns [`Pull::Idle`] instead of closing, and only lines ended
    /// by `\n` are returned, so a line the producer is still writing is never cut.
    pub fn following(mut self) -> Self {
        self.follow = true;
        self
    }

    /// With `log` as the identity its checkpoints carry.
    pub fn with_log(mut self, log: LogIdentity) -> Self {
        self.log = log;
        self
    }

    /// Skips the lines up to the position's last one, checking that every line the position
    /// names is there, unchanged, with no other line between them, so the next pull returns
    /// the first line the checkpoint does not hold. A file that no longer holds those lines
    /// (rewritten, truncated) is refused with [`Refusal::Fingerprint`].
    fn resume_at(&mut self, position: &Position) -> Result<(), Refusal> {
        let mut check = ResumeCheck::new(position);
        let oldest = position.oldest().sequence;
        let mut buf = Vec::new();
        while !check.done() {
            buf.clear();
            let read = self
                .reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| Refusal::Io(e.to_string()))?;
            if read == 0 {
                check.ended()?;
            }
            self.line += 1;
            trim_line_end(&mut buf);
            if self.line < oldest || buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            check.record(Fingerprint::of(self.line, &buf))?;
        }
        self.recent = RecentRecords::resumed(position, JSON_LINES_RESUME_DEPTH);
        Ok(())
    }

    /// The next line whole, its line end dropped; `None` at the end of the file. A read
    /// error keeps what it had read of the line for the next call.
    fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let before = self.partial.len();
        let read = self.reader.read_until(b'\n', &mut self.partial)?;
        if read == 0 && before == 0 {
            return Ok(None);
        }
        if self.follow && self.partial.last() != Some(&b'\n') {
            // The producer is still writing this line: kept for a later pull.
            return Ok(None);
        }
        let mut line = std::mem::take(&mut self.partial);
        trim_line_end(&mut line);
        Ok(Some(line))
    }
}

/// Drops a line's `\n` or `\r\n`.
fn trim_line_end(buf: &mut Vec<u8>) {
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
}

impl JsonLinesSource<io::BufReader<std::fs::File>> {
    /// Opens a file; its checkpoints carry the log identity `file` and the path.
    pub fn open(path: impl AsRef<std::path::Path>) -> io::Result<Self> {
        let path = path.as_ref();
        Ok(
            Self::new(io::BufReader::new(std::fs::File::open(path)?)).with_log(LogIdentity::new(
                "file",
                path.display().to_string(),
                "",
            )),
        )
    }
}

impl<R: BufRead + Send> WalSource for JsonLinesSource<R> {
    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        if let Some(error) = self.deferred.take() {
            return Err(error);
        }
        // A followed file has no end: each pull reads on from where the last one stopped.
        self.done &= !self.follow;
        let batch = self.read_lines(max)?;
        if !batch.is_empty() {
            return Ok(Pull::Records(batch));
        }
        if !self.follow {
            return Ok(Pull::Closed);
        }
        // At the end of a followed file: look again in short slices within the wait.
        let deadline = std::time::Instant::now() + wait;
        loop {
            let slice = deadline.saturating_duration_since(std::time::Instant::now());
            if slice.is_zero() {
                return Ok(Pull::Idle);
            }
            std::thread::sleep(slice.min(FOLLOW_POLL));
            self.done = false;
            let batch = self.read_lines(max)?;
            if !batch.is_empty() {
                return Ok(Pull::Records(batch));
            }
        }
    }

    /// The last lines returned: their numbers and CRC-32Cs of their bytes.
    fn position(&self) -> Option<SourcePosition> {
        Some(SourcePosition {
            log: self.log.clone(),
            positions: vec![self.recent.position("lines")?],
        })
    }

    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        Ok(Some(self.log.clone()))
    }

    /// Reads the file up to the position's last line, checking every line the position
    /// names ([`JSON_LINES_RESUME_DEPTH`]), so the next pull returns the first line the
    /// checkpoint does not hold; a file rewritten or truncated there is refused with
    /// [`Refusal::Fingerprint`]. `within` is not needed: a file answers at once.
    fn resume(&mut self, positions: &[Position], _within: Duration) -> Result<(), Refusal> {
        self.resume_at(only_partition(positions, "lines")?)
    }
}

/// How often a followed file at its end is looked at again.
const FOLLOW_POLL: Duration = Duration::from_millis(5);

impl<R: BufRead + Send> JsonLinesSource<R> {
    /// Up to `max` lines whole (blank ones skipped); at a read error after some lines, those
    /// lines, the error kept for the next pull.
    fn read_lines(&mut self, max: usize) -> io::Result<Vec<Record>> {
        let mut batch = Vec::new();
        while !self.done && batch.len() < max {
            let line = match self.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    self.done = true;
                    break;
                }
                // The lines read whole are returned; the error comes with the next pull.
                Err(error) if !batch.is_empty() => {
                    self.deferred = Some(error);
                    break;
                }
                Err(error) => return Err(error),
            };
            self.line += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.recent.push(Fingerprint::of(self.line, &line));
            batch.push(Record {
                position: self.line,
                payload: Bytes::from(line),
            });
        }
        Ok(batch)
    }
}
