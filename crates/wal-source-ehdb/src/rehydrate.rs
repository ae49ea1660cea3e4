//! Rehydrate on a miss through the feed: one execution's retained events, read from its
//! shard's feed within a deadline and a message cap, as today's worker bounds it.

use std::io::{self, BufReader, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chain_fold::{Event, ExecutionId};
use wal_index::DriveFallbacks;
use wal_index::flow::{FallbackRead, ReadBounds, blocking_read};
use wal_index::ingest::{DecodeMode, Decoded};

use crate::connect::{after, dial, send_subscription};
use crate::frame::{FeedError, FrameReader, FrameSummary, Limits};
use crate::shard::shard_of;

/// A [`DriveFallbacks`] whose retained WAL is the writer's feed.
///
/// Each [`retained`](DriveFallbacks::retained) call opens its own connection, subscribes
/// to the execution's shard from cursor 0 and reads the first frame, which holds
/// everything the writer retains: the subscription is caught up at its end, and the read
/// stops there. A record of another execution is recognised by its `execution_id` before
/// its payload is touched, and its payload is neither unescaped nor decoded.
///
/// Bounds, as today's worker sets them ([`ReadBounds`], set with [`bounds`](Self::bounds)):
/// a deadline for the whole read and a cap on the records read, of any execution. At either
/// bound the events found so far are returned; the
/// drive's build after the replay says whether they were enough. `None` only when the
/// writer could not be reached within the deadline (the replay did not happen).
///
/// ```no_run
/// use wal_index::{DriveBudget, DriveFlow};
/// use wal_index::rehydrate::RehydrateGate;
/// use wal_source_ehdb::EhdbRehydrate;
///
/// let retained = EhdbRehydrate::new("ehdb-writer:7070", 1);
/// let gate = RehydrateGate::default();
/// let flow = DriveFlow::new(DriveBudget::default())
///     .fallbacks(&retained)
///     .rehydrate_gate(&gate);
/// # let _ = flow;
/// ```
#[derive(Debug, Clone)]
pub struct EhdbRehydrate {
    addr: String,
    shards: u32,
    cursor: u64,
    bounds: ReadBounds,
    limits: Limits,
    /// Reads running now, shared by every clone, counted until each read's thread ends.
    running: Arc<AtomicUsize>,
    max_running: usize,
}

impl EhdbRehydrate {
    /// Reads from the writer's feed face at `addr`, whose log has `shards` shards, within
    /// today's bounds ([`ReadBounds::DEFAULT`]: 3 s, 100,000 records).
    pub fn new(addr: impl Into<String>, shards: u32) -> EhdbRehydrate {
        EhdbRehydrate {
            addr: addr.into(),
            shards: shards.max(1),
            cursor: 0,
            bounds: ReadBounds::DEFAULT,
            limits: Limits::default(),
            running: Arc::new(AtomicUsize::new(0)),
            max_running: EhdbRehydrate::DEFAULT_MAX_RUNNING,
        }
    }

    /// Reads running at once by default: today's `NOETL_STATE_INDEX_REHYDRATE_CONCURRENCY`,
    /// 2, the drive's [`RehydrateGate`](wal_index::rehydrate::RehydrateGate) default.
    pub const DEFAULT_MAX_RUNNING: usize = 2;

    /// At most `max` reads of the writer at once (at least 1), counted from a read's start
    /// to the end of its thread. The drive's gate releases its permit when the drive stops
    /// waiting for a read; the read itself runs on to its own deadline, and on the writer
    /// it is a subscription that prepares the execution's whole log shard. This cap holds
    /// the writer's load to `max` such subscriptions however many drives gave up on theirs:
    /// past it a read answers "no replay" at once, as a throttled one does.
    pub fn max_running(mut self, max: usize) -> EhdbRehydrate {
        self.max_running = max.max(1);
        self
    }

    /// Within other bounds: a deadline for the whole read and a cap on the records it
    /// reads, of any execution.
    pub fn bounds(mut self, bounds: ReadBounds) -> EhdbRehydrate {
        self.bounds = bounds;
        self
    }

    /// Reads only the records after `cursor` (default 0: the whole log), for a pool whose
    /// executions all start above it (the simulator's runs, each numbered above the last).
    pub fn cursor(mut self, cursor: u64) -> EhdbRehydrate {
        self.cursor = cursor;
        self
    }

    /// The caps on a frame and a payload.
    pub fn limits(mut self, limits: Limits) -> EhdbRehydrate {
        self.limits = limits;
        self
    }

    /// The replay itself: the events found, each decoded once as `mode` says, or why the
    /// writer could not be read at all.
    pub fn read(&self, execution_id: ExecutionId, mode: DecodeMode) -> io::Result<Vec<Event>> {
        let until = Instant::now() + self.bounds.deadline();
        let shard = shard_of(execution_id, self.shards);
        let mut input = subscribe(&self.addr, shard, self.cursor, until)?;
        let mut events = Vec::new();
        let mut reader = FrameReader::new(self.limits);
        reader.decode_as(mode);
        let read = reader.read_frame_of(
            &mut input,
            execution_id,
            self.bounds.max_records(),
            |record| {
                if let Ok(event) = record.event {
                    events.push(event);
                }
            },
        );
        // Caught up, capped, past the deadline or cut mid-frame: the events found so far
        // (an empty replay is a replay that found nothing, not a missing WAL).
        let _ = read;
        Ok(events)
    }
}

/// Reads everything the writer retains on `shard` after `cursor` (`0`: all of it): one
/// subscription, up to the end of its first frame (the subscription is caught up there),
/// each record handed to `each` as it is parsed, bad ones included. It is what a rehydrate
/// reads, unfiltered; the simulator's `replay ehdb://` uses it. An error if the writer
/// cannot be reached, the connection ends inside the frame or `deadline` passes first: the
/// read is whole or it is an error.
///
/// This writer version sends no frame at all while nothing follows the cursor, so an empty
/// shard is a [`TimedOut`](io::ErrorKind::TimedOut) error at the deadline, indistinguishable
/// from a writer still preparing a large frame (production's backlog takes ~36 s).
///
/// ```no_run
/// use std::time::Duration;
/// use wal_source_ehdb::{frame::Limits, read_retained};
///
/// let mut events = 0;
/// let summary = read_retained("127.0.0.1:7070", 0, 0, Duration::from_secs(600), Limits::default(), |record| {
///     events += usize::from(record.event.is_ok());
/// })?;
/// println!("{events} events in a frame of {} bytes", summary.bytes);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn read_retained(
    addr: &str,
    shard: u32,
    cursor: u64,
    deadline: Duration,
    limits: Limits,
    each: impl FnMut(Decoded),
) -> io::Result<FrameSummary> {
    let mut input = subscribe(addr, shard, cursor, after(deadline))?;
    match FrameReader::new(limits).read_frame(&mut input, each) {
        Ok(Some(summary)) => Ok(summary),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the writer at {addr} closed the feed before sending a frame"),
        )),
        Err(FeedError::Io(error)) => Err(error),
        Err(error) => Err(io::Error::new(io::ErrorKind::InvalidData, error)),
    }
}

/// Dials `addr` and subscribes to `shard` from `cursor`; reads end at `until`.
fn subscribe(
    addr: &str,
    shard: u32,
    cursor: u64,
    until: Instant,
) -> io::Result<BufReader<Deadline>> {
    let stream = dial(addr, until)?;
    send_subscription(&stream, shard, cursor, None)?;
    Ok(BufReader::with_capacity(
        256 << 10,
        Deadline { stream, until },
    ))
}

/// Each read runs on a thread of its own ([`blocking_read`]): the feed's client blocks, and
/// an async drive must not park its executor's worker on it. The read ends at its own
/// deadline even when the drive stopped waiting for it first.
impl DriveFallbacks for EhdbRehydrate {
    fn retained(&self, execution_id: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
        // Relaxed: a count that bounds concurrent subscriptions; no data is published
        // through it (each read's thread owns what it reads).
        if self.running.fetch_add(1, Ordering::Relaxed) >= self.max_running {
            self.running.fetch_sub(1, Ordering::Relaxed);
            return Box::pin(std::future::ready(None));
        }
        let feed = self.clone();
        let ends = Running(Arc::clone(&self.running));
        blocking_read(move || {
            let _ends = ends;
            feed.read(execution_id, mode).ok()
        })
    }
}

/// Counts a read out of [`EhdbRehydrate`]'s running reads when its thread ends (or when it
/// never started: dropped with the closure).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        // Relaxed: as in `retained`.
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection whose reads end at a deadline for the whole read, not per call.
struct Deadline {
    stream: TcpStream,
    until: Instant,
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let passed = || io::Error::new(io::ErrorKind::TimedOut, "the read's deadline passed");
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(passed());
        }
        self.stream.set_read_timeout(Some(left))?;
        match self.stream.read(buf) {
            // A socket's read timeout is `WouldBlock` on Unix and `TimedOut` on Windows.
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(passed())
            }
            read => read,
        }
    }
}
