//! [`EhdbSource`]: a [`WalSource`] over the writer's feed, one connection per shard.

use std::io::{self, BufReader, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use wal_index::WalSource;
use wal_index::ingest::{Backoff, Decoded, Pull};

use crate::frame::{FeedError, FrameReader, Limits};

/// Where and how an [`EhdbSource`] reads the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EhdbConfig {
    /// The writer's feed face, `HOST:PORT`.
    pub addr: String,
    /// The shards this pool drains, each from [`cursor`](Self::cursor). Default: `[0]`.
    pub shards: Vec<u32>,
    /// The sort key of the last record already held: `0` is from the beginning, which is
    /// what a process that starts with an empty index uses.
    pub cursor: u64,
    /// Caps on one frame and one payload.
    pub limits: Limits,
    /// Records parsed ahead of the drain, across shards (default 1,024: with production's
    /// ~73 KB envelopes, about 75 MB). The reader waits while the queue is full, so a
    /// frame's size never decides the memory it takes.
    pub queue_records: usize,
    /// How long a connection attempt may take (default 2 s).
    pub connect_timeout: Duration,
    /// If set, a connection that delivers no byte for this long is taken as dead and
    /// redialled: a writer that accepts and never sends (stopped, not killed). Off by
    /// default: this writer version sends nothing while it has nothing new, so a deadline
    /// must be longer than the quietest stretch of the feed.
    pub idle_deadline: Option<Duration>,
    /// The pause between redials (default: 25 ms doubling to 1 s).
    pub redial: Backoff,
}

impl EhdbConfig {
    /// Shard 0 of the writer at `addr`, from the beginning.
    pub fn new(addr: impl Into<String>) -> EhdbConfig {
        EhdbConfig {
            addr: addr.into(),
            shards: vec![0],
            cursor: 0,
            limits: Limits::default(),
            queue_records: 1024,
            connect_timeout: Duration::from_secs(2),
            idle_deadline: None,
            redial: Backoff::default(),
        }
    }

    /// Drains `shards` instead of shard 0.
    pub fn shards(mut self, shards: impl IntoIterator<Item = u32>) -> EhdbConfig {
        self.shards = shards.into_iter().collect();
        self
    }

    /// Starts after `cursor` instead of at the beginning.
    pub fn cursor(mut self, cursor: u64) -> EhdbConfig {
        self.cursor = cursor;
        self
    }
}

/// What an [`EhdbSource`] did, for logs, metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedStats {
    /// Connections made (the first one of each shard included).
    pub connects: u64,
    /// Connections lost and dialled again.
    pub redials: u64,
    /// Frames read whole.
    pub frames: u64,
    /// Frames whose array was broken from some point on (the rest was skipped).
    pub frames_abandoned: u64,
    /// Records handed to the drain (good and bad).
    pub records: u64,
    /// Bytes of frames read.
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    connects: AtomicU64,
    redials: AtomicU64,
    frames: AtomicU64,
    frames_abandoned: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: statistics, read for reports only.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> FeedStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FeedStats {
            connects: load(&self.connects),
            redials: load(&self.redials),
            frames: load(&self.frames),
            frames_abandoned: load(&self.frames_abandoned),
            records: load(&self.records),
            bytes: load(&self.bytes),
        }
    }
}

/// What a shard's reader hands the source.
enum Message {
    Record(Decoded),
    /// The connection is down (the reader redials); the drain reports the outage.
    Down(io::Error),
}

/// The state the readers and the source share.
struct Shared {
    stop: AtomicBool,
    counters: Counters,
    /// Each shard's live connection, so dropping the source can unblock its reader.
    connections: Mutex<Vec<Option<TcpStream>>>,
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
/// A reader remembers the `global_sequence` of the last good record it queued. After a
/// dropped connection, an idle deadline or a writer restart it dials again and subscribes
/// from that cursor, so the drain gets neither a gap nor a duplicate. The cursor lives in
/// memory, with the index it describes: a restarted process starts from 0 with an empty
/// index, so a cursor can never run ahead of what the index holds (which a cursor persisted
/// apart from the index could). What the queue holds when the process ends is lost with
/// the index, and comes back with the replay from 0.
///
/// # Failure
///
/// Nothing the writer does is fatal. While a shard is down, `pull` returns one error of
/// kind [`NotConnected`](io::ErrorKind::NotConnected) per outage (the drain sets
/// `healthy = 0` and backs off) and the reader redials with [`EhdbConfig::redial`]'s
/// backoff. A frame over the cap, a connection cut mid-frame and a broken array are
/// handled the same way; bad records are counted by the drain and their neighbours kept.
///
/// # Limits
///
/// - `pull` blocks the calling thread; run the drain on its own thread
///   ([`Drain::spawn`](wal_index::Drain::spawn)) or as a blocking task.
/// - Records of different shards interleave in arrival order; within a shard they keep the
///   feed's order.
pub struct EhdbSource {
    config: EhdbConfig,
    queue: Receiver<Message>,
    shared: Arc<Shared>,
    readers: Vec<JoinHandle<()>>,
    /// An outage reported by a reader while `pull` was filling a batch: reported next.
    pending_down: Option<io::Error>,
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
        let (sender, queue) = crossbeam_channel::bounded(config.queue_records.max(1));
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            connections: Mutex::new((0..config.shards.len()).map(|_| None).collect()),
        });
        let mut readers = Vec::with_capacity(config.shards.len());
        for (slot, &shard) in config.shards.iter().enumerate() {
            let reader = ShardReader {
                config: config.clone(),
                shard,
                slot,
                cursor: config.cursor,
                sender: sender.clone(),
                shared: Arc::clone(&shared),
            };
            let thread = std::thread::Builder::new()
                .name(format!("ehdb-feed-{shard}"))
                .spawn(move || reader.run())?;
            readers.push(thread);
        }
        Ok(EhdbSource {
            config,
            queue,
            shared,
            readers,
            pending_down: None,
        })
    }

    /// What the source did so far.
    pub fn stats(&self) -> FeedStats {
        self.shared.counters.get()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &EhdbConfig {
        &self.config
    }
}

impl WalSource for EhdbSource {
    fn pull(&mut self, max: usize, wait: Duration) -> io::Result<Pull> {
        if let Some(down) = self.pending_down.take() {
            return Err(down);
        }
        let first = match self.queue.recv_timeout(wait) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => return Ok(Pull::Idle),
            // Every reader ended: only when the source is being dropped.
            Err(RecvTimeoutError::Disconnected) => return Ok(Pull::Closed),
        };
        let mut batch = Vec::with_capacity(max.clamp(1, 1024));
        match first {
            Message::Down(error) => return Err(error),
            Message::Record(record) => batch.push(record),
        }
        while batch.len() < max {
            match self.queue.try_recv() {
                Ok(Message::Record(record)) => batch.push(record),
                Ok(Message::Down(error)) => {
                    self.pending_down = Some(error);
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(Pull::Decoded(batch))
    }
}

impl Drop for EhdbSource {
    fn drop(&mut self) {
        // Relaxed: the readers also see the shutdown of their sockets below; the flag only
        // keeps them from dialling again.
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Ok(connections) = self.shared.connections.lock() {
            for connection in connections.iter().flatten() {
                let _ = connection.shutdown(Shutdown::Both);
            }
        }
        // Unblock readers waiting for queue room.
        while self.queue.try_recv().is_ok() {}
        for reader in self.readers.drain(..) {
            // A reader parked on a full queue sees the flag within one retry interval.
            let _ = reader.join();
        }
    }
}

/// One shard's reader: dial, subscribe from the cursor, parse frames, queue records; on any
/// failure report the outage and dial again from the last queued record.
struct ShardReader {
    config: EhdbConfig,
    shard: u32,
    slot: usize,
    cursor: u64,
    sender: Sender<Message>,
    shared: Arc<Shared>,
}

impl ShardReader {
    fn stopping(&self) -> bool {
        // Relaxed: see `EhdbSource::drop`.
        self.shared.stop.load(Ordering::Relaxed)
    }

    fn run(mut self) {
        let mut failures = 0u32;
        let mut reported_down = false;
        while !self.stopping() {
            let mut progressed = false;
            let error = match self.session(&mut progressed) {
                Ok(()) => io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!(
                        "the writer at {} closed the feed of shard {}",
                        self.config.addr, self.shard
                    ),
                ),
                Err(error) => error,
            };
            if self.stopping() {
                break;
            }
            if progressed {
                // A session that read a frame ended an outage: the next failure is a new
                // one, reported again and backed off from the start.
                failures = 0;
                reported_down = false;
            }
            failures = failures.saturating_add(1);
            // Relaxed: see `Counters::add`.
            if self.shared.counters.connects.load(Ordering::Relaxed) > 0 {
                Counters::add(&self.shared.counters.redials, 1);
            }
            if !reported_down {
                reported_down = true;
                let down = io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!(
                        "EHDB feed {} shard {}: {error}",
                        self.config.addr, self.shard
                    ),
                );
                if !self.send(Message::Down(down)) {
                    break;
                }
            }
            self.pause(self.config.redial.pause(failures));
        }
    }

    /// One connection: dial, subscribe, read frames until it fails.
    fn session(&mut self, progressed: &mut bool) -> io::Result<()> {
        let stream = self.dial()?;
        Counters::add(&self.shared.counters.connects, 1);
        if let Ok(mut connections) = self.shared.connections.lock() {
            connections[self.slot] = stream.try_clone().ok();
        }
        let request = format!(r#"{{"shard":{},"cursor":{}}}"#, self.shard, self.cursor);
        let mut writer = &stream;
        writer.write_all(&crate::frame::frame(request.as_bytes()))?;
        writer.flush()?;
        let mut input = BufReader::with_capacity(256 << 10, &stream);
        let mut frames = FrameReader::new(self.config.limits);
        loop {
            let mut queued_ok = true;
            let cursor = &mut self.cursor;
            let sender = &self.sender;
            let shared = &self.shared;
            let read = frames.read_frame(&mut input, |record| {
                if !queued_ok {
                    return;
                }
                let good = record.event.is_ok();
                let position = record.position;
                if send(sender, shared, Message::Record(record)) {
                    Counters::add(&shared.counters.records, 1);
                    if good {
                        *cursor = position;
                    }
                } else {
                    queued_ok = false;
                }
            });
            match read {
                Ok(Some(summary)) => {
                    *progressed = true;
                    Counters::add(&self.shared.counters.frames, 1);
                    Counters::add(&self.shared.counters.bytes, summary.bytes);
                    if summary.abandoned {
                        Counters::add(&self.shared.counters.frames_abandoned, 1);
                    }
                }
                Ok(None) => return Ok(()),
                Err(FeedError::Io(error)) => return Err(error),
                Err(error @ FeedError::FrameTooLarge { .. }) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, error));
                }
            }
            if !queued_ok || self.stopping() {
                return Ok(());
            }
        }
    }

    fn dial(&self) -> io::Result<TcpStream> {
        let mut last = None;
        for addr in self.config.addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.config.connect_timeout) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    stream.set_read_timeout(self.config.idle_deadline)?;
                    return Ok(stream);
                }
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolves to no address", self.config.addr),
            )
        }))
    }

    fn send(&self, message: Message) -> bool {
        send(&self.sender, &self.shared, message)
    }

    /// Sleeps `pause`, in slices, so a dropped source is not kept waiting.
    fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        while !self.stopping() {
            let now = Instant::now();
            if now >= until {
                return;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }
}

/// Queues `message`, waiting for room; false once the source is gone.
fn send(sender: &Sender<Message>, shared: &Shared, mut message: Message) -> bool {
    loop {
        match sender.try_send(message) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                // Relaxed: see `EhdbSource::drop`.
                if shared.stop.load(Ordering::Relaxed) {
                    return false;
                }
                message = back;
                match sender.send_timeout(message, Duration::from_millis(20)) {
                    Ok(()) => return true,
                    Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => return false,
                    Err(crossbeam_channel::SendTimeoutError::Timeout(back)) => message = back,
                }
            }
        }
    }
}
