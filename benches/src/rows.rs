//! What the lean design's rows ask of an index ([`Rows`]: the engine, the comparator and
//! [`LeanIndex`] alike), the drain's workload, and the reader threads that build meanwhile.
//! Shared by `--bench lean` (criterion) and `--bench lean_paired` (alternated passes).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use chain_fold::{Event, Spine};
use wal_index::{IndexConfig, StateIndex};

use crate::lean::LeanIndex;
use crate::{interleaved_from, linear, payload, timed_index};

/// What a row asks of an index.
pub trait Rows: Send + Sync + 'static {
    /// The row's name in reports.
    const NAME: &'static str;
    /// An empty index with its default configuration.
    fn empty() -> Self;
    /// Applies `events` as one batch.
    fn apply_batch(&self, events: Vec<Event>);
    /// Applies one event.
    fn apply(&self, event: Event) {
        self.apply_batch(vec![event]);
    }
    /// The spine of `execution_id` at `head`, if it is served.
    fn spine(&self, execution_id: i64, head: i64) -> Option<Spine>;
}

/// A [`StateIndex`] with its default configuration; `TIMED`: with an observer that takes
/// every build's duration (and records nothing), as a pool's with metrics does, else the
/// default observer, which times no build.
#[derive(Debug)]
pub struct Indexed<I, const TIMED: bool = false>(pub I);

impl<I: StateIndex + 'static, const TIMED: bool> Rows for Indexed<I, TIMED> {
    const NAME: &'static str = if TIMED { "lockfree_timed" } else { I::NAME };
    fn empty() -> Self {
        Indexed(if TIMED {
            timed_index()
        } else {
            I::with_config(IndexConfig::default())
        })
    }
    fn apply_batch(&self, events: Vec<Event>) {
        self.0.apply_batch(events);
    }
    fn apply(&self, event: Event) {
        self.0.apply(event);
    }
    fn spine(&self, execution_id: i64, head: i64) -> Option<Spine> {
        self.0.build(execution_id, Some(head)).spine
    }
}

impl Rows for LeanIndex {
    const NAME: &'static str = "lean";
    fn empty() -> Self {
        LeanIndex::default()
    }
    fn apply_batch(&self, events: Vec<Event>) {
        LeanIndex::apply_batch(self, events);
    }
    fn apply(&self, event: Event) {
        LeanIndex::apply(self, event);
    }
    fn spine(&self, execution_id: i64, head: i64) -> Option<Spine> {
        self.build(execution_id, Some(head))
    }
}

/// How many executions one drain pass applies: 27 events each, the last terminal, 50 live
/// at a time (20,000 events, 64-byte payloads).
pub const DRAIN_EXECUTIONS: i64 = 740;

/// The WAL of drain pass `pass`: executions numbered from `pass * DRAIN_EXECUTIONS` (the
/// same executions every pass when `pass` is always 0, fresh ones when it counts up).
pub fn drain_wal(pass: i64, body: &Bytes) -> Vec<Event> {
    interleaved_from(pass * DRAIN_EXECUTIONS, DRAIN_EXECUTIONS, 27, 50, body)
}

/// An index for the drain rows: it holds execution -1, 27 events of 1 KiB, which
/// [`Readers`] build.
pub fn drain_index<R: Rows>() -> Arc<R> {
    let index = Arc::new(R::empty());
    index.apply_batch(linear(-1, 1, 27, false, &payload(1024)));
    index
}

/// Applies `wal` in 200-event batches, as a drain pass does.
pub fn drain_pass<R: Rows>(index: &R, wal: &[Event]) {
    for batch in wal.chunks(200) {
        index.apply_batch(batch.to_vec());
    }
}

/// Threads building execution -1 (see [`drain_index`]) at head 27 until dropped.
#[derive(Debug)]
pub struct Readers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Readers {
    /// Starts `count` threads and returns once each has built once.
    pub fn start<R: Rows>(index: &Arc<R>, count: usize) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let threads = (0..count)
            .map(|_| {
                let (index, stop, started) =
                    (Arc::clone(index), Arc::clone(&stop), Arc::clone(&started));
                std::thread::spawn(move || {
                    black_box(index.spine(-1, 27));
                    // Relaxed here and below: the counter and the stop flag carry no data.
                    started.fetch_add(1, Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        black_box(index.spine(-1, 27));
                    }
                })
            })
            .collect::<Vec<_>>();
        while started.load(Ordering::Relaxed) < count {
            assert!(
                !threads.iter().any(std::thread::JoinHandle::is_finished),
                "a reader thread ended before it built"
            );
            std::thread::yield_now();
        }
        Readers { stop, threads }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A custom harness's rounds: the first command-line argument that is a number (`cargo
/// bench` passes `--bench` first), else `default`; at least `least`.
pub fn rounds_from_args(default: usize, least: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(default)
        .max(least)
}

/// The median of `values` (the upper one of an even count), sorting them in place.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
