//! [`EhdbSource`]: a [`WalSource`] over the writer's feed, one connection per shard.

use std::io::{self, BufReader, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};
use wal_index::WalSource;
use wal_index::ingest::{Backfill, DecodeMode, Decoded, Pull};

use crate::config::{EhdbConfig, MISSED_HEARTBEATS, partition};
use crate::connect::{after, dial, keepalive, send_subscription};
use crate::frame::{FeedError, FrameReader};
use wal_index::checkpoint::{
    Fingerprint, LogIdentity, Position, RecentRecords, Refusal, ResumeCheck, SourcePosition,
};

/// How often a reader blocked on its socket looks at the stop flag and the idle deadline:
/// the bound on how long dropping the source waits for a reader that is reading.
const TICK: Duration = Duration::from_millis(100);

/// What an [`EhdbSource`] did, for logs, metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EhdbStats {
    /// Subscriptions that brought their shard up: the first byte arrived, or the
    /// connection stayed open for a second without an error (this writer version sends
    /// nothing while it has nothing new).
    pub connects: u64,
    /// Of those, the ones that ended an outage of their shard: the redials that succeeded.
    pub redials: u64,
    /// Times a shard went down (a failed dial, a lost or silent connection, a closed feed);
    /// the failed attempts while it stays down are not counted again.
    pub outages: u64,
    /// Frames read whole.
    pub frames: u64,
    /// Frames whose array was broken from some point on (the rest was skipped).
    pub frames_abandoned: u64,
    /// Records handed to the drain (good and bad).
    pub records: u64,
    /// Bytes of frames read.
    pub bytes: u64,
    /// The writer's heartbeats (`{"heartbeat":true}` frames).
    pub heartbeats: u64,
    /// Frames that held no record and were not heartbeats: empty arrays, and objects this
    /// reader does not know (a newer writer's control frames). Skipped.
    pub empty_frames: u64,
}

#[derive(Default)]
struct Counters {
    connects: AtomicU64,
    redials: AtomicU64,
    outages: AtomicU64,
    frames: AtomicU64,
    frames_abandoned: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    heartbeats: AtomicU64,
    empty_frames: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: statistics, read for reports only; they pair with nothing.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a frame read whole (a heartbeat, a frame with no record, and whether its
    /// array broke part-way).
    fn frame(&self, summary: &crate::frame::FrameSummary) {
        if summary.heartbeat {
            Self::add(&self.heartbeats, 1);
        } else if summary.records == 0 && !summary.abandoned {
            Self::add(&self.empty_frames, 1);
        }
        Self::add(&self.frames, 1);
        Self::add(&self.bytes, summary.bytes);
        if summary.abandoned {
            Self::add(&self.frames_abandoned, 1);
        }
    }

    fn get(&self) -> EhdbStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EhdbStats {
            connects: load(&self.connects),
            redials: load(&self.redials),
            outages: load(&self.outages),
            frames: load(&self.frames),
            frames_abandoned: load(&self.frames_abandoned),
            records: load(&self.records),
            bytes: load(&self.bytes),
            heartbeats: load(&self.heartbeats),
            empty_frames: load(&self.empty_frames),
        }
    }
}

/// Why a shard is not delivering.
#[derive(Debug, Clone)]
struct Outage {
    why: String,
    /// Dialling again cannot help (a frame over the cap comes back the same): the reader
    /// has stopped, and the drain is told not to retry.
    fatal: bool,
}

/// One shard's state, as the readers and `pull` share it.
#[derive(Debug, Clone, Default)]
struct ShardState {
    /// Why it is down, while it is.
    outage: Option<Outage>,
    /// Whether it has been down before (its next way up is a redial).
    down_before: bool,
    /// The highest `global_sequence` queued when the shard's frames first told that its
    /// backlog had ended ([`BacklogWatch`]): the head of its log, which the drain has
    /// backfilled once it pulled that far.
    head: Option<u64>,
}

/// The state the readers and the source share.
struct Shared {
    /// Set once, by `EhdbSource::drop`. Relaxed everywhere: it carries no data; a reader
    /// polls it before every read and at least every `TICK`, and the queue's own
    /// synchronisation covers what the reader hands over.
    stop: AtomicBool,
    /// Whether the readers decode payloads straight to their slim projection (the drain's
    /// [`WalSource::decode_as`]). Relaxed: read before each frame; a frame decoded in the
    /// other mode is still right, the index projects a whole event on apply.
    slim: AtomicBool,
    counters: Counters,
    /// Each shard's state. Locked by a reader when its shard goes down or comes up, and by
    /// `pull` once per call.
    shards: Mutex<Vec<ShardState>>,
    /// Why a resumed shard's log did not hold its checkpoint's last record, if one did not.
    refusal: Mutex<Option<String>>,
    /// Resumed shards whose checkpoint records have not been delivered and checked yet.
    /// Release on the decrement (`resumed`) pairs with the Acquire load in
    /// `EhdbSource::wait_resumed`.
    unverified: AtomicUsize,
}

impl Shared {
    /// One resumed shard's checkpoint records were delivered and matched.
    fn resumed(&self) {
        // Release: pairs with the Acquire load in `wait_resumed`.
        self.unverified.fetch_sub(1, Ordering::Release);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn decode_mode(&self) -> DecodeMode {
        DecodeMode::for_slim(self.slim.load(Ordering::Relaxed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ShardState>> {
        self.shards.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn shard_down(&self, slot: usize, outage: Outage) {
        let mut shards = self.lock();
        if shards[slot].outage.is_none() {
            Counters::add(&self.counters.outages, 1);
        }
        shards[slot].outage = Some(outage);
        shards[slot].down_before = true;
    }

    fn shard_up(&self, slot: usize) {
        let mut shards = self.lock();
        Counters::add(&self.counters.connects, 1);
        if std::mem::take(&mut shards[slot].down_before) {
            Counters::add(&self.counters.redials, 1);
        }
        shards[slot].outage = None;
    }

    /// The error `pull` reports while a shard is down: a fatal outage if any (the drain
    /// stops), else the first outage, with how many shards are down.
    fn outage_error(&self, addr: &str) -> Option<io::Error> {
        let shards = self.lock();
        let mut down = shards.iter().filter_map(|s| s.outage.as_ref());
        let count = down.clone().count();
        let fatal = down.clone().find(|o| o.fatal);
        let (kind, first) = match fatal {
            Some(fatal) => (io::ErrorKind::InvalidInput, fatal),
            None => (io::ErrorKind::NotConnected, down.next()?),
        };
        Some(io::Error::new(
            kind,
            format!(
                "EHDB feed {addr}: {count} of {} shards down; {}",
                shards.len(),
                first.why
            ),
        ))
    }

    /// Records the head of a shard's log where its frames first told its backlog ended
    /// (later frames are live).
    fn backlog_ended(&self, slot: usize, cursor: u64) {
        self.lock()[slot].head.get_or_insert(cursor);
    }

    /// A fatal outage's error, if a shard has one.
    fn fatal_error(&self, addr: &str) -> Option<io::Error> {
        self.outage_error(addr)
            .filter(|error| error.kind() == io::ErrorKind::InvalidInput)
    }
}

/// A [`WalSource`] over an EHDB writer's events feed: one connection and one reader thread
/// per shard, each subscribing from a cursor and parsing its frames as they arrive.
///
/// # Model
///
/// Each reader parses its frames record by record ([`crate::frame`]) and queues each record,
/// decoded, for the drain ([`Pull::Decoded`]); the queue is bounded, so a reader waits for
/// the drain instead of holding a frame. A record's position is its `global_sequence`.
///
/// # Resume
///
/// A reader remembers the highest `global_sequence` it queued, good record or bad. After a
/// dropped connection, an idle deadline or a writer restart it dials again and subscribes
/// from that cursor, so the drain gets neither a gap nor a duplicate. Two kinds of bad
/// record fall outside that: one without a readable `global_sequence` does not move the
/// cursor (it is delivered again if the connection drops before the next record), and one
/// with a wrong, too high sequence moves it past records it did not see (the protocol's
/// ascending order is trusted). The cursor lives in
/// memory, with the index it describes: a restarted process starts from 0 with an empty
/// index, so a cursor can never run ahead of what the index holds (which a cursor persisted
/// apart from the index could). What the queue holds when the process ends is lost with
/// the index, and comes back with the replay from 0.
///
/// # Failure
///
/// While a shard is down, a `pull` that finds nothing queued returns an error of kind
/// [`NotConnected`](io::ErrorKind::NotConnected) (the drain sets `healthy = 0` and backs
/// off), every time until the shard is up again: its first byte arrived, or (without an
/// idle deadline) its subscription stayed open a second without an error. Records other shards queued are
/// still delivered meanwhile, so with several shards `healthy` reads 1 while the others
/// deliver; [`EhdbStats::outages`] counts every outage (the drain's source errors count
/// failed pulls, not outages). The reader redials with [`EhdbConfig::redial`]'s backoff. A
/// connection cut mid-frame, a writer that closes the feed, a connection silent past
/// [`EhdbConfig::idle_deadline`] and a dead peer found by keepalive are all outages.
///
/// One thing is not retried: a frame over [`Limits::max_frame_bytes`](crate::frame::Limits::max_frame_bytes). The writer would
/// send the same frame again from the same cursor, so the shard's reader stops and every
/// later `pull` (queued records or not) returns an
/// [`InvalidInput`](io::ErrorKind::InvalidInput) error, which the drain does not retry: the
/// cap must be raised (by default it admits every length a `u32` prefix can state but the
/// all-ones one).
///
/// Bad records are counted by the drain and their neighbours kept.
///
/// # Backfill
///
/// The source reads as behind ([`WalSource::backfill`]) until each shard's frames have
/// told where its backlog ends and the drain has pulled that far; stall clocks and early
/// reads follow it. The feed states no head, so the end is read off the frames as the
/// protocol allows: a batch that is not exactly the writer's cap
/// ([`EhdbConfig::feed_batch_limit`]), or a heartbeat after the connection's first (the
/// first precedes the writer's first poll). A quiet shard reads as caught up at its second
/// heartbeat; a resumed shard whose log holds nothing after its checkpoint, once its
/// checkpoint's records came. A writer that sends no heartbeat (older versions) leaves a
/// quiet shard behind until its first live record, and a backlog that is an exact multiple
/// of the cap behind until the next live batch: the feed cannot tell them from a slow
/// writer.
///
/// # Limits
///
/// - `pull` blocks the calling thread; run the drain on its own thread
///   ([`Drain::spawn`](wal_index::Drain::spawn)) or as a blocking task.
/// - Records of different shards interleave in arrival order; within a shard they keep the
///   feed's order.
/// - Dropping the source joins its readers: about 100 ms for one in the middle of a read
///   (a frame still streaming in included), and up to two
///   [`connect_timeout`](EhdbConfig::connect_timeout)s for one in the middle of a dial and
///   its subscription, plus whatever the system's name resolution takes.
/// - Before a shard's first subscription is up, `pull` reports no outage (the drain's
///   `healthy` is 1 from its first pull): a writer that is not up yet is an outage from the
///   first failed dial on.
/// - `pull(0, _)` is read as `pull(1, _)`, as the other sources do.
pub struct EhdbSource {
    config: EhdbConfig,
    /// Each record with the slot of the shard that read it.
    queue: Receiver<(usize, Decoded)>,
    /// The readers' end of the queue, until they are started (at the first pull, or at a
    /// resume).
    sender: Option<Sender<(usize, Decoded)>>,
    shared: Arc<Shared>,
    readers: Vec<JoinHandle<()>>,
    /// The highest `global_sequence` handed to the drain, per shard slot (a resumed
    /// shard's starts at its checkpoint's last record, which the index holds).
    pulled: Vec<u64>,
    /// The last good records handed to the drain, per shard slot (a resumed shard carries
    /// on from its checkpoint's).
    handed: Vec<RecentRecords>,
}

impl std::fmt::Debug for EhdbSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EhdbSource")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl EhdbSource {
    /// Starts one reader per shard. Never fails on the writer's account: a writer that is
    /// not up yet is dialled until it is (the drain reports the outage meanwhile).
    pub fn connect(config: EhdbConfig) -> io::Result<EhdbSource> {
        if config.shards.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an EHDB source needs at least one shard",
            ));
        }
        let mut sorted = config.shards.clone();
        sorted.sort_unstable();
        if let Some(twice) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "shard {} is named twice: its records would arrive twice",
                    twice[0]
                ),
            ));
        }
        let (sender, queue) = crossbeam_channel::bounded(config.queue_records.max(1));
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            slim: AtomicBool::new(false),
            counters: Counters::default(),
            shards: Mutex::new(vec![ShardState::default(); config.shards.len()]),
            refusal: Mutex::new(None),
            unverified: AtomicUsize::new(0),
        });
        Ok(EhdbSource {
            config: config.clone(),
            queue,
            sender: Some(sender),
            shared,
            readers: Vec::with_capacity(config.shards.len()),
            pulled: vec![config.cursor; config.shards.len()],
            handed: config
                .shards
                .iter()
                .map(|_| RecentRecords::covering(config.resume_depth, config.resume_bytes))
                .collect(),
        })
    }

    /// Starts the shard readers now rather than at the first pull, so the writer's backlog
    /// queues (as far as [`EhdbConfig::queue_records`] holds) while the pool does something
    /// else. A source resumes only before its readers start
    /// ([`WalSource::resume`](wal_index::WalSource::resume) starts them itself).
    pub fn start(&mut self) -> io::Result<()> {
        self.start_readers()
    }

    /// Starts one reader per shard, once: at [`start`](Self::start), the first pull, or a
    /// resume.
    fn start_readers(&mut self) -> io::Result<()> {
        let Some(sender) = self.sender.take() else {
            return Ok(());
        };
        let config = &self.config;
        for (slot, &shard) in config.shards.iter().enumerate() {
            let resume = config.resume_of(shard);
            // From just below the oldest record the position names, so the first good
            // records delivered are those, checked and dropped.
            let cursor = resume.map_or(config.cursor, |p| p.oldest().sequence.saturating_sub(1));
            let reader = ShardReader {
                config: config.clone(),
                shard,
                slot,
                cursor,
                expect: resume.map(ResumeCheck::new),
                sender: sender.clone(),
                shared: Arc::clone(&self.shared),
            };
            let thread = std::thread::Builder::new()
                .name(format!("ehdb-feed-{shard}"))
                .spawn(move || reader.run())?;
            self.readers.push(thread);
        }
        Ok(())
    }

    /// Takes a checkpoint's positions as where each named shard resumes: it counts as
    /// pulled up to the position's last record, and its last records carry on from it.
    fn resume_at(&mut self, positions: &[Position]) -> Result<(), Refusal> {
        if self.sender.is_none() {
            return Err(Refusal::Io(
                "the source's readers were started: it resumes before its first pull".to_owned(),
            ));
        }
        let names: Vec<String> = self.config.shards.iter().map(|&s| partition(s)).collect();
        if let Some(foreign) = positions.iter().find(|p| !names.contains(&p.partition)) {
            return Err(Refusal::Fingerprint {
                why: format!(
                    "the checkpoint names {:?}, a shard this source does not read",
                    foreign.partition
                ),
            });
        }
        self.config.resume = positions.to_vec();
        let mut resumed = 0;
        for (slot, &shard) in self.config.shards.iter().enumerate() {
            if let Some(p) = self.config.resume_of(shard) {
                self.pulled[slot] = p.last().sequence;
                self.handed[slot].extend_resumed(p);
                resumed += 1;
            }
        }
        // Relaxed: no reader runs yet; spawning them orders this store before their reads.
        self.shared.unverified.store(resumed, Ordering::Relaxed);
        Ok(())
    }

    /// What the source did so far.
    pub fn stats(&self) -> EhdbStats {
        self.shared.counters.get()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &EhdbConfig {
        &self.config
    }

    fn outage(&self) -> Option<io::Error> {
        self.shared.outage_error(&self.config.addr)
    }

    /// Notes how far the drain got in the record's shard, and hands the record over.
    fn handed_over(&mut self, (slot, record): (usize, Decoded)) -> Decoded {
        self.pulled[slot] = self.pulled[slot].max(record.position);
        // A position names good records: a bad one's position can move (one without a
        // readable sequence takes its neighbour's), so it is never fingerprinted.
        if record.event.is_ok() {
            self.handed[slot].push_sized(
                Fingerprint {
                    sequence: record.position,
                    hash: record.payload_crc,
                },
                record.payload_len as usize,
            );
        }
        record
    }

    /// Waits up to `limit` until every resumed shard's log delivered the checkpoint's
    /// records and they matched (`Ok(true)`), or a shard refused them (the refusal).
    /// `Ok(false)` at the limit: the writer has not answered yet (it may be down). Records
    /// of shards already checked queue meanwhile, as far as the queue holds them.
    fn wait_resumed(&self, limit: Duration) -> Result<bool, Refusal> {
        // A limit past what the clock can add is no limit.
        let deadline = Instant::now().checked_add(limit);
        loop {
            if let Some(refused) = self.refusal() {
                return Err(refused);
            }
            // Acquire: pairs with `Shared::resumed`.
            if self.shared.unverified.load(Ordering::Acquire) == 0 {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Why this source refused the checkpoint it resumed from: a resumed shard's log no
    /// longer holds the checkpoint's last record there. The shard's reader has stopped and
    /// the drain's pulls fail (not retried); the pool starts over from an empty index and
    /// cursor 0, and nothing of the refused checkpoint is served.
    pub fn refusal(&self) -> Option<Refusal> {
        let why = self
            .shared
            .refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        Some(Refusal::Fingerprint { why })
    }

    /// Every reader has ended and the queue is empty: each reader ends only at a fatal
    /// outage (the source itself is still here), so this is that outage.
    fn ended(&self) -> io::Result<Pull> {
        Err(self.outage().unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("EHDB feed {}: every shard's reader ended", self.config.addr),
            )
        }))
    }
}

impl WalSource for EhdbSource {
    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        self.start_readers()?;
        // A fatal outage stops the drain even while other shards keep the queue full.
        if let Some(fatal) = self.shared.fatal_error(&self.config.addr) {
            return Err(fatal);
        }
        let first = match self.queue.try_recv() {
            Ok(record) => record,
            Err(TryRecvError::Empty) => {
                if let Some(down) = self.outage() {
                    return Err(down);
                }
                match self.queue.recv_timeout(wait) {
                    Ok(record) => record,
                    Err(RecvTimeoutError::Timeout) => {
                        return self.outage().map_or(Ok(Pull::Idle), Err);
                    }
                    Err(RecvTimeoutError::Disconnected) => return self.ended(),
                }
            }
            Err(TryRecvError::Disconnected) => return self.ended(),
        };
        let mut batch = Vec::with_capacity(max.clamp(1, 1024));
        batch.push(self.handed_over(first));
        while batch.len() < max {
            match self.queue.try_recv() {
                Ok(record) => batch.push(self.handed_over(record)),
                Err(_) => break,
            }
        }
        Ok(Pull::Decoded(batch))
    }

    /// Each reader decodes payloads `mode`'s way from its next frame on.
    fn decode_as(&mut self, mode: DecodeMode) {
        self.shared
            .slim
            .store(mode == DecodeMode::Slim, Ordering::Relaxed);
    }

    /// Each shard that has delivered (or was resumed): its last good records handed to the
    /// drain (up to [`EhdbConfig::resume_depth`]), as `shard N`; the log is the writer's
    /// address and the shards drained ([`EhdbConfig::log_identity`]).
    fn position(&self) -> Option<SourcePosition> {
        let positions = self
            .config
            .shards
            .iter()
            .zip(&self.handed)
            .filter_map(|(&shard, recent)| recent.position(partition(shard)))
            .collect();
        Some(SourcePosition {
            log: self.config.log_identity(),
            positions,
        })
    }

    /// The writer's address and the shards drained ([`EhdbConfig::log_identity`]).
    fn log(&mut self) -> io::Result<Option<LogIdentity>> {
        Ok(Some(self.config.log_identity()))
    }

    /// Each shard a position names (`shard N`) subscribes from just below the oldest
    /// record its position names (see [`EhdbConfig::resume_depth`] and
    /// [`EhdbConfig::resume_bytes`]), and its reader checks that the good records delivered
    /// up to the last applied one are exactly the fingerprinted ones (their sequences and
    /// the CRC-32C of their payloads as the log holds them), none missing, changed or
    /// added, before it hands on anything, and drops them (the index holds them). Shards
    /// without a position start at [`EhdbConfig::cursor`]. Returns once every resumed
    /// shard matched; a writer whose log no longer holds the records (it lost its tail, or
    /// wrote other records under the same numbers anywhere in it) is refused with
    /// [`Refusal::Fingerprint`] ([`EhdbSource::refusal`] keeps it, and later pulls fail);
    /// a writer that does not answer within `within` with [`Refusal::Io`]. Either way the
    /// pool drops this source and makes a new one. Only before the first pull.
    fn resume(&mut self, positions: &[Position], within: Duration) -> Result<(), Refusal> {
        self.resume_at(positions)?;
        self.start_readers()
            .map_err(|e| Refusal::Io(format!("cannot start the shard readers: {e}")))?;
        match self.wait_resumed(within)? {
            true => Ok(()),
            false => Err(Refusal::Io(format!(
                "the writer at {} did not deliver the checkpoint's records within {within:?}",
                self.config.addr
            ))),
        }
    }

    /// Behind until every shard's frames have told where its backlog ends (see
    /// [`EhdbSource`], "Backfill") and the drain has pulled each shard up to there.
    fn backfill(&self) -> Backfill {
        let shards = self.shared.lock();
        let caught_up = shards
            .iter()
            .zip(&self.pulled)
            .all(|(shard, &pulled)| shard.head.is_some_and(|head| pulled >= head));
        if caught_up {
            Backfill::CaughtUp
        } else {
            Backfill::Behind { remaining: None }
        }
    }
}

impl Drop for EhdbSource {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // A reader waiting for queue room, dialling, pausing or reading sees the flag
        // within one slice of its wait (20 ms, a connect timeout, 20 ms, `TICK`).
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

/// One shard's reader: dial, subscribe from the cursor, parse frames, queue records; on any
/// failure mark the shard down and dial again from the last queued record.
struct ShardReader {
    config: EhdbConfig,
    shard: u32,
    slot: usize,
    /// The highest `global_sequence` queued: where the next subscription starts.
    cursor: u64,
    /// A resumed shard's check of its checkpoint's records, until the good records
    /// delivered matched them all.
    expect: Option<ResumeCheck>,
    sender: Sender<(usize, Decoded)>,
    shared: Arc<Shared>,
}

/// What one subscription's frames tell about where the shard's backlog ends. Nothing on
/// the wire names the head: the writer answers a subscription with the records after its
/// cursor, at most [`EhdbConfig::feed_batch_limit`] to a batch, never an empty one; and,
/// when heartbeats were asked for, sends one heartbeat at once (before its first poll) and
/// another each time it has been parked an interval with nothing new.
///
/// The backlog has ended at a frame's end when that frame
/// - is a batch with fewer records than the cap (the writer had no more when it polled),
///   or more (it does not cap at that number), or any batch when no cap is configured;
/// - is a heartbeat after the first one of the connection (the writer polled and found
///   nothing; the first says nothing, it precedes the first poll).
///
/// A frame whose array broke part-way (its count is not the writer's), an empty array
/// (which the writer never sends) and an unknown control object tell nothing.
#[derive(Debug)]
struct BacklogWatch {
    cap: Option<u64>,
    /// Heartbeats on this connection so far.
    heartbeats: u32,
}

impl BacklogWatch {
    fn new(cap: Option<u64>) -> BacklogWatch {
        BacklogWatch { cap, heartbeats: 0 }
    }

    /// Notes a frame read whole; whether the backlog has ended at its end.
    fn frame(&mut self, frame: &crate::frame::FrameSummary) -> bool {
        if frame.heartbeat {
            self.heartbeats = self.heartbeats.saturating_add(1);
            return self.heartbeats >= 2;
        }
        if frame.abandoned || frame.scanned == 0 {
            return false;
        }
        self.cap.is_none_or(|cap| frame.scanned != cap)
    }
}

/// How one connection ended.
enum SessionEnd {
    /// The source is being dropped.
    Stopped,
    /// The log does not hold the checkpoint's last record where it should: the shard's
    /// reader stops.
    Refused(String),
    /// An outage; `progressed` if the connection delivered anything first.
    Failed { error: FeedError, progressed: bool },
}

impl ShardReader {
    fn run(mut self) {
        let mut failures = 0u32;
        loop {
            let (error, progressed) = match self.session() {
                SessionEnd::Stopped => return,
                SessionEnd::Refused(why) => {
                    let why = format!("shard {}: checkpoint refused: {why}", self.shard);
                    *self
                        .shared
                        .refusal
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(why.clone());
                    self.shared
                        .shard_down(self.slot, Outage { why, fatal: true });
                    return;
                }
                SessionEnd::Failed { error, progressed } => (error, progressed),
            };
            if self.shared.stopping() {
                return;
            }
            let fatal = matches!(error, FeedError::FrameTooLarge { .. });
            self.shared.shard_down(
                self.slot,
                Outage {
                    why: format!("shard {}: {error}", self.shard),
                    fatal,
                },
            );
            if fatal {
                return;
            }
            // A connection that delivered something ended the previous outage: this one
            // is new, and is backed off from the start.
            failures = if progressed {
                1
            } else {
                failures.saturating_add(1)
            };
            self.pause(self.config.redial.pause(failures));
        }
    }

    /// One connection: dial, subscribe, read frames until it fails or the source stops.
    fn session(&mut self) -> SessionEnd {
        let mut progressed = false;
        let stream = match self.subscribe() {
            Ok(stream) => stream,
            Err(error) => return self.failed(error.into(), progressed),
        };
        let feed = FeedStream {
            stream: &stream,
            shared: &self.shared,
            idle_deadline: self.config.idle_deadline,
            liveness: None,
            slot: self.slot,
            up_pending_since: Some(Instant::now()),
        };
        let mut input = BufReader::with_capacity(256 << 10, feed);
        let mut frames = FrameReader::new(self.config.limits);
        let mut backlog = BacklogWatch::new(self.config.feed_batch_limit);
        loop {
            let mut gone = false;
            frames.decode_as(self.shared.decode_mode());
            let cursor = &mut self.cursor;
            let expect = &mut self.expect;
            let mut refused = None;
            let (sender, shared, slot) = (&self.sender, &*self.shared, self.slot);
            let read = frames.read_frame(&mut input, |record| {
                if gone {
                    return;
                }
                let position = record.position;
                match check_resumed(expect, &record, shared) {
                    Err(why) => {
                        refused = Some(why.to_string());
                        gone = true;
                        return;
                    }
                    // One of the checkpoint's records, or a bad record before them: the
                    // index holds what it gave. Dropped, and not asked for again.
                    Ok(true) => {
                        *cursor = (*cursor).max(position);
                        return;
                    }
                    Ok(false) => {}
                }
                if send(sender, shared, (slot, record)) {
                    progressed = true;
                    Counters::add(&shared.counters.records, 1);
                    // Bad records too: they are counted once, and not asked for again.
                    *cursor = (*cursor).max(position);
                } else {
                    gone = true;
                }
            });
            if let Some(why) = refused {
                return SessionEnd::Refused(why);
            }
            if gone || self.shared.stopping() {
                return SessionEnd::Stopped;
            }
            match read {
                Ok(Some(summary)) => {
                    progressed = true;
                    if let Some(end) = self.after_frame(&summary, &mut backlog, input.get_mut()) {
                        return end;
                    }
                }
                Ok(None) => {
                    let closed = io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the writer closed the feed",
                    );
                    return self.failed(closed.into(), progressed);
                }
                Err(error) => return self.failed(error, progressed),
            }
        }
    }

    /// What a frame read whole tells: a heartbeat holds the writer to its heartbeats from
    /// then on; the backlog's end is the shard's head, or, for a resumed shard whose
    /// checkpoint records have not all come, a log that ends below them (a refusal).
    fn after_frame(
        &self,
        summary: &crate::frame::FrameSummary,
        backlog: &mut BacklogWatch,
        feed: &mut FeedStream<'_>,
    ) -> Option<SessionEnd> {
        self.shared.counters.frame(summary);
        let ended = backlog.frame(summary);
        // The writer heartbeats only while parked: after a heartbeat past the first (the
        // first precedes its first poll) it owes one each interval, and three missed are
        // an outage. A batch means it is polling again, which may take long: no deadline
        // until its next heartbeat.
        if summary.heartbeat && backlog.heartbeats >= 2 {
            feed.liveness = self
                .config
                .heartbeat
                .filter(|beat| !beat.is_zero())
                .map(|beat| beat.saturating_mul(MISSED_HEARTBEATS));
        } else if summary.scanned > 0 {
            feed.liveness = None;
        }
        if !ended {
            return None;
        }
        // A log that ends below the checkpoint's records refuses it, on the protocol's
        // sure sign (a heartbeat past the first); a batch shorter than the configured cap
        // is sure only from a writer that does not heartbeat (a cap configured above the
        // writer's would make every batch look short).
        let sure = summary.heartbeat || backlog.heartbeats == 0;
        if sure && let Some(Err(refused)) = self.expect.as_ref().map(ResumeCheck::ended) {
            return Some(SessionEnd::Refused(refused.to_string()));
        }
        self.shared.backlog_ended(self.slot, self.cursor);
        None
    }

    fn failed(&self, error: FeedError, progressed: bool) -> SessionEnd {
        if self.shared.stopping() {
            SessionEnd::Stopped
        } else {
            SessionEnd::Failed { error, progressed }
        }
    }

    /// Dials the writer and sends the subscription from the cursor.
    fn subscribe(&self) -> io::Result<TcpStream> {
        let stream = dial(&self.config.addr, after(self.config.connect_timeout))?;
        if let Some(idle) = self.config.keepalive {
            keepalive(&stream, idle)?;
        }
        let tick = [self.config.idle_deadline, self.config.heartbeat]
            .into_iter()
            .flatten()
            .fold(TICK, Duration::min);
        stream.set_read_timeout(Some(tick.max(Duration::from_millis(1))))?;
        stream.set_write_timeout(Some(self.config.connect_timeout))?;
        send_subscription(&stream, self.shard, self.cursor, self.config.heartbeat)?;
        Ok(stream)
    }

    /// Sleeps `pause`, in slices, so a dropped source is not kept waiting.
    fn pause(&self, pause: Duration) {
        let until = after(pause);
        while !self.shared.stopping() {
            let now = Instant::now();
            if now >= until {
                return;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }
}

/// How long a subscription that delivers nothing must stay open before its shard counts as
/// up again (this writer version sends nothing while it has nothing new, so a quiet feed
/// cannot wait for a byte; a writer that accepts and closes at once stays down). With an
/// idle deadline a shard is up only once a byte arrives: a stopped writer's kernel still
/// accepts connections.
const UP_AFTER: Duration = Duration::from_secs(1);

/// The connection as the frame reader sees it: a read that times out every `TICK` is
/// retried until a byte arrives, the source is dropped (an error that ends the session),
/// or the idle deadline passes without a byte (an outage). The first byte, or [`UP_AFTER`]
/// without an error, brings the shard up.
struct FeedStream<'a> {
    stream: &'a TcpStream,
    shared: &'a Shared,
    idle_deadline: Option<Duration>,
    /// Once the writer has sent a heartbeat: the silence after which the connection is
    /// dead (three heartbeat intervals).
    liveness: Option<Duration>,
    /// The shard's slot in `Shared::shards`.
    slot: usize,
    /// When the subscription was sent, until the session brings its shard up.
    up_pending_since: Option<Instant>,
}

impl FeedStream<'_> {
    /// Brings the shard up if the session has earned it: a byte, or [`UP_AFTER`] open.
    fn mark_up(&mut self, got_byte: bool) {
        if let Some(since) = self.up_pending_since
            && (got_byte || since.elapsed() >= UP_AFTER)
        {
            self.up_pending_since = None;
            self.shared.shard_up(self.slot);
        }
    }

    fn stopped() -> io::Error {
        // Not `Interrupted`, which `std`'s read helpers retry.
        io::Error::new(io::ErrorKind::ConnectionAborted, "the source was dropped")
    }
}

impl Read for FeedStream<'_> {
    /// Silence is timed from this call's start: the time the reader spent between reads
    /// (waiting for the drain's queue) is not the writer's silence.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let waiting_since = Instant::now();
        loop {
            if self.shared.stopping() {
                // Checked before every read, so a frame still streaming in does not keep a
                // dropped source waiting for its end.
                return Err(Self::stopped());
            }
            match self.stream.read(buf) {
                Ok(n) => {
                    // Only a byte brings a shard up: an end of file never does.
                    if n > 0 {
                        self.mark_up(true);
                    }
                    return Ok(n);
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    if self.idle_deadline.is_none() {
                        self.mark_up(false);
                    }
                    let silent = waiting_since.elapsed();
                    if let Some(idle) = self.idle_deadline
                        && silent >= idle
                    {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no byte for {idle:?} (the idle deadline)"),
                        ));
                    }
                    if let Some(dead) = self.liveness
                        && silent >= dead
                    {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "no byte for {dead:?}: the writer stopped heartbeating ({MISSED_HEARTBEATS} beats missed)"
                            ),
                        ));
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Queues `record`, waiting for room; false once the source is gone.
fn send(sender: &Sender<(usize, Decoded)>, shared: &Shared, mut record: (usize, Decoded)) -> bool {
    loop {
        match sender.try_send(record) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                if shared.stopping() {
                    return false;
                }
                match sender.send_timeout(back, Duration::from_millis(20)) {
                    Ok(()) => return true,
                    Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => return false,
                    Err(crossbeam_channel::SendTimeoutError::Timeout(again)) => record = again,
                }
            }
        }
    }
}

/// A resumed shard's check of one delivered record against its checkpoint's records:
/// `Ok(true)` when the record is one of them, or a bad record before they were all found
/// (bad records were counted when first delivered; a position names good ones), so it is
/// dropped; `Ok(false)` once they were all found (hand it on); the refusal when the log
/// holds another record where the checkpoint's was, lacks one, or holds one more.
fn check_resumed(
    expect: &mut Option<ResumeCheck>,
    record: &Decoded,
    shared: &Shared,
) -> Result<bool, Refusal> {
    let Some(check) = expect else {
        return Ok(false);
    };
    let mut dropped = true;
    if record.event.is_ok() {
        dropped = check.record(Fingerprint {
            sequence: record.position,
            hash: record.payload_crc,
        })?;
    }
    if check.done() {
        *expect = None;
        shared.resumed();
    }
    Ok(dropped)
}
