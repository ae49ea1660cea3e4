//! What checkpoints cost and what a restore takes, over a backlog of the simulator's
//! production-sized envelopes, in process, side by side in each round:
//!
//! - the drain alone, without checkpoints and with them at the default cadence (every 60 s
//!   or 512 MiB applied), each into a fresh engine storing slim events (production's
//!   setting), the two alternating which runs first;
//! - one checkpoint of the drained index: the capture on the drain's thread, the encoding,
//!   the durable write;
//! - the restore: reading the file's bytes, verifying and decoding them, seeding a new index;
//!   and, beside it, reading the same bytes alone, two ways: into one allocation the file's
//!   size (`std::fs::read`: the file's bytes in memory, the floor a restore is measured
//!   against, since a restore too ends with the image in fresh memory) and through one
//!   reused 4 MiB buffer (the page cache's copy alone, which keeps nothing);
//! - memory: a counting allocator takes the heap's peak while the checkpoint is captured,
//!   encoded and written as the drain's writer does (`CheckpointStore::write_owned`), beyond
//!   the heap before the capture (the drained index); and while a restore runs, beyond the
//!   heap before it started, beside what the restored index holds when it ends. It counts
//!   the bytes allocations ask for, live at once: a `realloc` that moves counts only its
//!   change of size, not the moment both copies exist, and the allocator's own rounding and
//!   metadata are not counted. The counting is one relaxed `fetch_add` and one `fetch_max`
//!   per allocation, in every row alike.
//!
//! ```sh
//! cargo run --release -p sb-sim --example checkpoint_restore -- 17803 3 /tmp/checkpoints
//! ```
//!
//! Arguments: the backlog's events (default 17,803, production's retained volume), the
//! rounds (default 3), and the directory the checkpoints are written to (default: one under
//! the system's temporary directory, deleted afterwards; it must hold about twice the
//! checkpoint's size). Prints each round and the medians.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use sb_sim::run::SimConfig;
use sb_sim::workload::{Generator, Item, Shape};
use wal_index::checkpoint::{
    self, Checkpoint, CheckpointStore, Checkpointing, DirStore, LogIdentity, SourcePosition,
};
use wal_index::ingest::channel_wal;
use wal_index::{Drain, DrainConfig, StateIndex, WalIndex};

/// Counts the heap's live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are the caller's; the counters have no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: the counters order nothing; each is read after the measured work, on
        // the thread that joined or outlived it.
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes
        // through `alloc` or `realloc` here).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed)
                + (new_size - layout.size());
            PEAK.fetch_max(live, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: as for `dealloc`; `new_size` comes from the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts a peak measurement: the live bytes now, which the peak then starts from.
fn peak_from_here() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// The peak since [`peak_from_here`] returned `base`, beyond `base`.
fn peak_beyond(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

/// Reads `path` through one reused buffer of 4 MiB; returns the bytes read.
fn read_through_buffer(path: &std::path::Path) -> u64 {
    let mut file = std::fs::File::open(path).expect("readable");
    let mut buffer = vec![0u8; 4 << 20];
    let mut total = 0;
    loop {
        match file.read(&mut buffer).expect("readable") {
            0 => return total,
            n => total += n as u64,
        }
    }
}

/// One drain of `items` into a fresh engine, with or without checkpoints; its seconds, the
/// checkpoints it wrote, and the index.
fn drain_once(items: &[Item], checkpoints: Option<&DirStore>) -> (f64, u64, Arc<WalIndex>) {
    let index = Arc::new(WalIndex::new(SimConfig::production_index()));
    let (wal, source) = channel_wal();
    for item in items {
        wal.append(item.payload.clone());
    }
    drop(wal);
    let mut drain = Drain::new(Arc::clone(&index), source, DrainConfig::default());
    if let Some(store) = checkpoints {
        let store = DirStore::open(store.dir(), 2).expect("the checkpoint directory");
        drain = drain
            .checkpoint_to(Checkpointing::new(store))
            .expect("a writer thread");
    }
    let started = Instant::now();
    drain.run_until_closed().expect("in-process");
    let secs = started.elapsed().as_secs_f64();
    // Dropping the drain lets the write in flight finish (outside the timed drain).
    let written = drain.report().checkpoints.captured;
    drop(drain);
    (secs, written, index)
}

/// The figures of one round, seconds unless named otherwise.
#[derive(Default, Clone, Copy)]
struct Round {
    drain: f64,
    drain_checkpointed: f64,
    checkpoints_taken: u64,
    capture: f64,
    encode: f64,
    write: f64,
    read: f64,
    read_buffered: f64,
    decode: f64,
    seed: f64,
    restore: f64,
    bytes: u64,
    events: usize,
    /// Peak heap beyond the drained index while capturing, encoding and writing.
    write_peak: usize,
    /// Peak heap beyond the heap before the restore, during the restore.
    restore_peak: usize,
    /// What the restored index holds when the restore ends, beyond the heap before it.
    restored_holds: usize,
}

fn round(items: &[Item], store: &DirStore, checkpointed_first: bool) -> Round {
    let mut r = Round::default();
    // The two drains alternate which runs first from round to round.
    let index = if checkpointed_first {
        let (secs, taken, index) = drain_once(items, Some(store));
        (r.drain_checkpointed, r.checkpoints_taken) = (secs, taken);
        r.drain = drain_once(items, None).0;
        index
    } else {
        r.drain = drain_once(items, None).0;
        let (secs, taken, index) = drain_once(items, Some(store));
        (r.drain_checkpointed, r.checkpoints_taken) = (secs, taken);
        index
    };

    let log = LogIdentity::new("channel", "in-process", "");
    let at = SourcePosition {
        log: log.clone(),
        positions: Vec::new(),
    };
    // As the drain's writer does: the capture, then its encoding, handed to the store by
    // value; the capture lives until the write returns.
    let base = peak_from_here();
    let started = Instant::now();
    let checkpoint = Checkpoint::capture(&index, at);
    r.capture = started.elapsed().as_secs_f64();
    r.events = checkpoint.events();
    let started = Instant::now();
    let bytes = checkpoint.encode();
    r.encode = started.elapsed().as_secs_f64();
    r.bytes = bytes.len() as u64;
    let started = Instant::now();
    let name = store.write_owned(bytes).expect("written");
    r.write = started.elapsed().as_secs_f64();
    drop(checkpoint);
    r.write_peak = peak_beyond(base);

    // Reading the bytes alone, then the whole restore (which reads them again).
    let started = Instant::now();
    let read = std::fs::read(store.path_of(&name)).expect("readable");
    r.read = started.elapsed().as_secs_f64();
    assert_eq!(read.len() as u64, r.bytes);
    let started = Instant::now();
    assert_eq!(read_through_buffer(&store.path_of(&name)), r.bytes);
    r.read_buffered = started.elapsed().as_secs_f64();
    // The restore's two parts on those bytes: verify and decode, then seed an index.
    let started = Instant::now();
    let decoded = Checkpoint::decode(&read).expect("verifies");
    r.decode = started.elapsed().as_secs_f64();
    drop(read);
    let started = Instant::now();
    let seeded = WalIndex::new(SimConfig::production_index());
    decoded.restore_into(&seeded);
    r.seed = started.elapsed().as_secs_f64();
    drop((decoded, seeded));
    let base = peak_from_here();
    let started = Instant::now();
    let restored_index = WalIndex::new(SimConfig::production_index());
    let restored = checkpoint::restore_newest(store, &restored_index, &log, |_| Ok(()));
    r.restore = started.elapsed().as_secs_f64();
    r.restored_holds = LIVE.load(Ordering::Relaxed).saturating_sub(base);
    r.restore_peak = peak_beyond(base);
    assert!(restored.refused.is_empty(), "{:?}", restored.refused);
    assert_eq!(restored_index.stats().events, index.stats().events);
    r
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints the medians of `all` rounds, the peaks and the worst round.
fn summarize(all: &[Round]) {
    let m = |f: fn(&Round) -> f64| median(all.iter().map(f));
    let bytes = all[0].bytes as f64;
    println!(
        "median: drain {:.0} ms, with checkpoints at the default cadence {:.0} ms ({:+.1}%)",
        m(|r| r.drain) * 1e3,
        m(|r| r.drain_checkpointed) * 1e3,
        (m(|r| r.drain_checkpointed) / m(|r| r.drain) - 1.0) * 100.0
    );
    println!(
        "median: checkpoint {:.0} MB: capture {:.1} ms (the drain's thread), encode {:.0} ms and write {:.0} ms (the writer's)",
        bytes / 1e6,
        m(|r| r.capture) * 1e3,
        m(|r| r.encode) * 1e3,
        m(|r| r.write) * 1e3
    );
    let most = |f: fn(&Round) -> usize| all.iter().map(f).max().unwrap_or(0) as f64;
    println!(
        "peak heap, the most of any round: writing {:.1} MB = {:.3}x the image beyond the index; restoring {:.1} MB, where the restored index ends holding {:.1} MB",
        most(|r| r.write_peak) / 1e6,
        most(|r| r.write_peak) / bytes,
        most(|r| r.restore_peak) / 1e6,
        most(|r| r.restored_holds) / 1e6
    );
    let slowest = all.iter().map(|r| r.restore).fold(0.0, f64::max);
    let worst = all.iter().map(|r| r.restore / r.read).fold(0.0, f64::max);
    println!(
        "every round: restore at least {:.2} GB/s, at most {:.2}x its round's read; median restore / read through a buffer {:.2}x",
        bytes / 1e9 / slowest,
        worst,
        m(|r| r.restore / r.read_buffered)
    );
    println!(
        "median: restore {:.0} ms = {:.2} GB/s; reading the bytes alone {:.0} ms = {:.2} GB/s; restore / read {:.2}x",
        m(|r| r.restore) * 1e3,
        bytes / 1e9 / m(|r| r.restore),
        m(|r| r.read) * 1e3,
        bytes / 1e9 / m(|r| r.read),
        m(|r| r.restore) / m(|r| r.read)
    );
    println!(
        "median: of the restore's parts, verify and decode {:.0} ms, seed the index {:.0} ms",
        m(|r| r.decode) * 1e3,
        m(|r| r.seed) * 1e3
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(17_803);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let (dir, temporary) = match args.next() {
        Some(dir) => (std::path::PathBuf::from(dir), false),
        None => (
            std::env::temp_dir().join(format!("sb-sim-checkpoint-bench-{}", std::process::id())),
            true,
        ),
    };
    let store = DirStore::open(&dir, 2).expect("the checkpoint directory");
    let items = Generator::new(Shape::default()).take(events);
    let payload: usize = items.iter().map(|i| i.payload.len()).sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{events} envelopes, {:.0} MB of payload, {cores} cores, checkpoints in {}",
        payload as f64 / 1e6,
        dir.display()
    );
    let mut all = Vec::new();
    for k in 0..rounds {
        let r = round(&items, &store, k % 2 == 1);
        println!(
            "round {k}: drain {:.0} ms, with checkpoints {:.0} ms ({} taken); checkpoint of {} events, {:.0} MB: capture {:.1} ms, encode {:.0} ms, write {:.0} ms, peak {:.0} MB; read {:.0} ms (through a buffer {:.0} ms), decode {:.0} ms, seed {:.0} ms, restore {:.0} ms (peak {:.1} MB, the index then {:.1} MB)",
            r.drain * 1e3,
            r.drain_checkpointed * 1e3,
            r.checkpoints_taken,
            r.events,
            r.bytes as f64 / 1e6,
            r.capture * 1e3,
            r.encode * 1e3,
            r.write * 1e3,
            r.write_peak as f64 / 1e6,
            r.read * 1e3,
            r.read_buffered * 1e3,
            r.decode * 1e3,
            r.seed * 1e3,
            r.restore * 1e3,
            r.restore_peak as f64 / 1e6,
            r.restored_holds as f64 / 1e6
        );
        all.push(r);
    }
    summarize(&all);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
