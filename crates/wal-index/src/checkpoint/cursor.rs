//! Where a checkpoint stands in its log: which log ([`LogIdentity`]), and per partition the
//! last records applied ([`Position`]), each named by a [`Fingerprint`]; the ring a source
//! keeps them in ([`RecentRecords`]); and the check a resuming source runs against what its
//! log holds now ([`ResumeCheck`]).
//!
//! [`Position`] states the rule every source follows.

use std::collections::VecDeque;
use std::fmt;

use super::Refusal;

/// A record of the log, named so that a record written later under the same sequence
/// number is told apart from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// The record's sequence in its partition (an EHDB global sequence, a stream
    /// sequence, a line number).
    pub sequence: u64,
    /// CRC-32C of the record's payload as the log holds it.
    pub hash: u32,
}

impl Fingerprint {
    /// The fingerprint of the record at `sequence` whose payload is `payload`.
    pub fn of(sequence: u64, payload: &[u8]) -> Fingerprint {
        Fingerprint {
            sequence,
            hash: crc32c::crc32c(payload),
        }
    }
}

/// Where the drain stands in one partition of its source: the last records it applied
/// there, oldest first.
///
/// # The rule every source follows
///
/// A fingerprint is a record's sequence in its partition and a CRC-32C of the record's
/// payload *as the log holds it*: the bytes a producer published (a JetStream message's
/// payload, an EHDB record's `payload` string unescaped, a JSON-lines line without its line
/// end), never a projection of them. A record whose link, type or any other field changed
/// has another fingerprint, whatever the index keeps of it.
///
/// A position holds the last `depth` records a source handed over in its partition, oldest
/// first. A source resuming from it reads its log again from just below the oldest and
/// requires the records it finds up to the newest to be exactly those, in order: a record
/// missing, changed, or added between two of them refuses the checkpoint. How many records
/// that must be is the source's to state, from what its log can do:
///
/// | source | depth | why that many |
/// |---|---|---|
/// | EHDB | the last 1,024, fewer once the newest cover 8 MiB of payload (`EhdbConfig::resume_depth`, `resume_bytes`) | a writer that crashes loses at most its shard's unsealed part, which it seals at 1,024 records or 8 MiB, whichever comes first (EHDB's `DEFAULT_SEAL_MAX_RECORDS`, `DEFAULT_SEAL_MAX_BYTES`); every record of ours it lost is among those, so a refill anywhere in the lost tail changes one of them |
/// | JetStream | 1 | a stream never reuses a sequence while it exists, and a stream re-created under its name is another log (its creation time is in the identity) |
/// | JSON-lines | 1,024 | a file truncated and written again: the same bound as EHDB's tail |
/// | in-process channel | 2 | its log ends with its process |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The partition's name as the source knows it (`"shard 3"`, a subject filter).
    pub partition: String,
    /// The last records applied, oldest first, ascending by sequence; never empty (a
    /// decoded checkpoint with an empty one is refused as malformed).
    pub records: Vec<Fingerprint>,
}

impl Position {
    /// A position whose newest record is `last`, with `older` before it (oldest first).
    pub fn new(partition: impl Into<String>, older: &[Fingerprint], last: Fingerprint) -> Position {
        let mut records = older.to_vec();
        records.push(last);
        Position {
            partition: partition.into(),
            records,
        }
    }

    /// The last record applied.
    pub fn last(&self) -> Fingerprint {
        // `records` is never empty: every constructor and the decoder make sure of it.
        self.records.last().copied().unwrap_or(Fingerprint {
            sequence: 0,
            hash: 0,
        })
    }

    /// The oldest record the position names: a resuming source reads from just below it.
    pub fn oldest(&self) -> Fingerprint {
        self.records.first().copied().unwrap_or_else(|| self.last())
    }
}

/// Which log a checkpoint was taken of: a checkpoint of another log is refused.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogIdentity {
    /// `"ehdb"`, `"jetstream"`, `"channel"`, ...
    pub transport: String,
    /// The log's name (a stream's name, a writer's address).
    pub name: String,
    /// What else makes it this log and not another of that name (a stream's creation time
    /// and subject filter; a writer's shards).
    pub detail: String,
}

impl LogIdentity {
    /// A log identity from its three parts.
    pub fn new(
        transport: impl Into<String>,
        name: impl Into<String>,
        detail: impl Into<String>,
    ) -> LogIdentity {
        LogIdentity {
            transport: transport.into(),
            name: name.into(),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for LogIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.transport, self.name)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// A source's log and its position in each partition, as of the last record it handed to
/// the drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// The log.
    pub log: LogIdentity,
    /// One entry per partition the source has delivered from.
    pub positions: Vec<Position>,
}

/// The last `depth` records a source handed over in one partition: what its next
/// checkpoint's [`Position`] names. A source pushes every record it hands over (good or
/// bad: a bad record is a record of the log too), in log order.
///
/// ```
/// use wal_index::checkpoint::{Fingerprint, RecentRecords};
///
/// let mut recent = RecentRecords::new(2);
/// assert!(recent.position("lines").is_none());
/// for line in 1..=3u64 {
///     recent.push(Fingerprint::of(line, format!("line {line}").as_bytes()));
/// }
/// let position = recent.position("lines").unwrap();
/// assert_eq!(position.records.iter().map(|f| f.sequence).collect::<Vec<_>>(), vec![2, 3]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentRecords {
    depth: usize,
    /// With [`RecentRecords::covering`]: the payload bytes the newest records must cover
    /// before older ones are let go.
    cover_bytes: Option<u64>,
    /// The records and their payloads' sizes (0 where not known: a resumed position's).
    ring: VecDeque<(Fingerprint, u32)>,
    /// The sizes in `ring`, summed.
    bytes: u64,
}

impl RecentRecords {
    /// An empty ring that keeps the last `depth` records (at least 1).
    pub fn new(depth: usize) -> RecentRecords {
        let depth = depth.max(1);
        RecentRecords {
            depth,
            cover_bytes: None,
            ring: VecDeque::with_capacity(depth.min(4096)),
            bytes: 0,
        }
    }

    /// A ring that keeps at most `depth` records, and fewer once the newest of them cover
    /// `bytes` of payload ([`push_sized`](Self::push_sized)): what a log that can lose at
    /// most `depth` records *or* `bytes` of them (a writer that seals its part at whichever
    /// comes first) needs checked.
    ///
    /// ```
    /// use wal_index::checkpoint::{Fingerprint, RecentRecords};
    ///
    /// let mut recent = RecentRecords::covering(1024, 100);
    /// for seq in 1..=10u64 {
    ///     recent.push_sized(Fingerprint::of(seq, b"x"), 40);
    /// }
    /// // The newest three cover 100 bytes (120): the older ones are let go.
    /// let kept = recent.position("shard 0").unwrap().records;
    /// assert_eq!(kept.iter().map(|f| f.sequence).collect::<Vec<_>>(), vec![8, 9, 10]);
    /// ```
    pub fn covering(depth: usize, bytes: u64) -> RecentRecords {
        RecentRecords {
            cover_bytes: Some(bytes),
            ..RecentRecords::new(depth)
        }
    }

    /// A ring that carries on from a checkpoint's `position` (its newest `depth` records).
    pub fn resumed(position: &Position, depth: usize) -> RecentRecords {
        let mut ring = RecentRecords::new(depth);
        ring.extend_resumed(position);
        ring
    }

    /// Carries on from a checkpoint's `position` (its records' sizes are not known: they
    /// are let go once newer records cover the ring's bytes, or past its depth).
    pub fn extend_resumed(&mut self, position: &Position) {
        for &record in &position.records {
            self.push_sized(record, 0);
        }
    }

    /// Notes a record handed over.
    pub fn push(&mut self, record: Fingerprint) {
        self.push_sized(record, 0);
    }

    /// Notes a record handed over whose payload is `len` bytes long.
    pub fn push_sized(&mut self, record: Fingerprint, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.ring.push_back((record, len));
        self.bytes += u64::from(len);
        while let Some(&(_, oldest)) = self.ring.front() {
            let covered = self
                .cover_bytes
                .is_some_and(|cover| self.bytes - u64::from(oldest) >= cover);
            if self.ring.len() <= self.depth && !covered {
                break;
            }
            self.ring.pop_front();
            self.bytes -= u64::from(oldest);
        }
    }

    /// The newest record noted.
    pub fn last(&self) -> Option<Fingerprint> {
        self.ring.back().map(|&(record, _)| record)
    }

    /// The position these records make in `partition`, or `None` before the first.
    pub fn position(&self, partition: impl Into<String>) -> Option<Position> {
        (!self.ring.is_empty()).then(|| Position {
            partition: partition.into(),
            records: self.ring.iter().map(|&(record, _)| record).collect(),
        })
    }
}

/// A resuming source's check of what its log delivers from just below a position's oldest
/// record: every record up to the position's newest must be the next one the position
/// names. Feed it the records in log order ([`ResumeCheck::record`]); once
/// [`done`](ResumeCheck::done), the records after are new.
///
/// ```
/// use wal_index::checkpoint::{Fingerprint, Position, ResumeCheck};
///
/// let f = |seq: u64, text: &str| Fingerprint::of(seq, text.as_bytes());
/// let position = Position::new("lines", &[f(4, "a"), f(7, "b")], f(9, "c"));
///
/// let mut check = ResumeCheck::new(&position);
/// assert_eq!(check.record(f(4, "a")), Ok(true)); // one of the checkpoint's: dropped
/// assert_eq!(check.record(f(7, "b")), Ok(true));
/// assert_eq!(check.record(f(9, "c")), Ok(true));
/// assert!(check.done());
/// assert_eq!(check.record(f(10, "d")), Ok(false)); // new: hand it on
///
/// // A record the log gained between two of the checkpoint's (a reused sequence):
/// let mut check = ResumeCheck::new(&position);
/// check.record(f(4, "a")).unwrap();
/// assert!(check.record(f(5, "refill")).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct ResumeCheck {
    expect: VecDeque<Fingerprint>,
    last: Fingerprint,
}

impl ResumeCheck {
    /// The check of `position`.
    pub fn new(position: &Position) -> ResumeCheck {
        ResumeCheck {
            expect: position.records.iter().copied().collect(),
            last: position.last(),
        }
    }

    /// Whether every record of the position was found.
    pub fn done(&self) -> bool {
        self.expect.is_empty()
    }

    /// The next record the log must deliver, while not [`done`](Self::done).
    pub fn expected(&self) -> Option<Fingerprint> {
        self.expect.front().copied()
    }

    /// Checks one delivered record: `Ok(true)` when it is the next of the checkpoint's
    /// records (the index holds it: drop it), `Ok(false)` once they were all found (a new
    /// record: hand it on), and the refusal when the log holds another record where the
    /// checkpoint's next one was, or a record the checkpoint did not see among its own.
    ///
    /// A log whose oldest records of the position are gone is refused too, even when the
    /// rest match: a retention that reclaimed old parts looks the same on the wire as a
    /// crash whose lost records went to other partitions while re-sent ones kept their
    /// sequences. The refusal costs a replay; accepting would serve a record the log lost.
    pub fn record(&mut self, found: Fingerprint) -> Result<bool, Refusal> {
        let Some(&expected) = self.expect.front() else {
            return Ok(false);
        };
        if found != expected {
            let why = if found.sequence < expected.sequence {
                format!(
                    "the log holds a record at sequence {} that the checkpoint did not apply (before its {expected:?}, up to {:?})",
                    found.sequence, self.last
                )
            } else if found.sequence == expected.sequence {
                format!("the log holds {found:?} where the checkpoint's {expected:?} was")
            } else {
                format!(
                    "the log no longer holds the checkpoint's {expected:?} (the next record is {found:?})"
                )
            };
            return Err(Refusal::Fingerprint { why });
        }
        self.expect.pop_front();
        Ok(true)
    }

    /// The refusal when the log ended (or a caught-up feed went quiet) before every record
    /// of the position was found.
    pub fn ended(&self) -> Result<(), Refusal> {
        match self.expect.front() {
            None => Ok(()),
            Some(expected) => Err(Refusal::Fingerprint {
                why: format!(
                    "the log ends before the checkpoint's {expected:?} (it lost its tail)"
                ),
            }),
        }
    }
}
