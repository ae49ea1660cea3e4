//! The drain after many threads have read the index: what a pass costs each design once
//! `K` threads have built from it, for `K` growing within one process.
//!
//! Why it is its own bench: a store to an `ArcSwap` pays the debts of every thread that
//! holds a node of arc-swap's debt list, and that list is global to the process and never
//! shrinks (a thread that exits leaves its node for the next thread to reuse). Every
//! thread that has ever loaded an `ArcSwap` at the same time as others adds a node that
//! each later store walks: the engine's drain stores one chain snapshot per execution of a
//! batch and two per terminal eviction, the lean design one per execution of a batch. The
//! directory's reclamation (seize) also keeps one record per thread that used it, but walks
//! them once per batch of retired entries, not per store. The lock-based design (today's
//! `MutexIndex`) has no per-thread state. The benches of the other groups run with at most
//! three threads, so this cost does not show there.
//!
//! Each step grows the number of threads that have read to `K`: `K` threads, started
//! together, each build once from every design's index and wait until all have, then end.
//! Then each design drains `ROUNDS` passes, the designs taking turns (the order rotated
//! every round), each keeping its own index; a pass is the `lean_paired` bench's
//! `same_ids_alone` pass (20,000 events of 740 executions, 200-event batches, the same
//! executions every pass), on this thread, with no reader running. It prints each design's
//! median pass and its ratio to the same design's median at `K = 0`. The lock-based
//! design keeps no per-thread state, so its column shows how much the machine itself
//! moved between steps: on a shared VM that is tens of percent from one second to the
//! next, so read a step's ratios against that column, and run the bench more than once.
//!
//! `cargo bench -p sb-benches --bench reader_threads [-- ROUNDS]` (default 51; about 1 minute).
//! `STEPS=8,32,128` sets the thread counts after the first step, which is always 0
//! (ascending: the list only grows; a count at or below the last adds no thread).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use chain_fold::Event;
use sb_benches::lean::LeanIndex;
use sb_benches::payload;
use sb_benches::rows::{
    Indexed, Rows, drain_index, drain_pass, drain_wal, median, rounds_from_args,
};
use wal_index::WalIndex;
use wal_index::baseline::{MutexIndex, PapayaIndex};

/// One design under test: its name, an index, and a pass and a read against it.
trait Design {
    fn name(&self) -> &'static str;
    fn pass(&self, wal: &[Event]) -> f64;
    fn read(&self);
}

struct Under<R: Rows>(Arc<R>);

impl<R: Rows> Design for Under<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn pass(&self, wal: &[Event]) -> f64 {
        let started = Instant::now();
        drain_pass(&*self.0, wal);
        started.elapsed().as_secs_f64() * 1e3
    }

    fn read(&self) {
        std::hint::black_box(self.0.spine(-1, 27));
    }
}

fn under<R: Rows + 'static>() -> Arc<dyn Design + Send + Sync> {
    Arc::new(Under(drain_index::<R>()))
}

/// Starts `count` threads that each read every design once, all alive at once, and
/// returns when they have ended.
fn read_from(designs: &[Arc<dyn Design + Send + Sync>], count: usize) {
    let barrier = Arc::new(Barrier::new(count + 1));
    let threads: Vec<_> = (0..count)
        .map(|_| {
            let designs = designs.to_vec();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                for design in &designs {
                    design.read();
                }
                barrier.wait();
            })
        })
        .collect();
    barrier.wait();
    for thread in threads {
        thread.join().expect("a reading thread panicked");
    }
}

/// Untimed passes of each design before the first step: the lock-based design's passes
/// take a few to settle (its first ones ran about 1.4x its later ones).
const WARM_PASSES: usize = 10;

fn main() {
    let rounds = rounds_from_args(51, 3);
    let steps: Vec<usize> = std::env::var("STEPS")
        .ok()
        .map(|steps| {
            steps
                .split(',')
                .filter_map(|s| s.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![0, 8, 32, 128]);
    // The ratios are to the first step, which is therefore always no other thread.
    let steps: Vec<usize> = std::iter::once(0)
        .chain(steps.into_iter().filter(|&threads| threads > 0))
        .collect();
    let designs = [
        under::<Indexed<WalIndex>>(),
        under::<LeanIndex>(),
        under::<Indexed<PapayaIndex>>(),
        under::<Indexed<MutexIndex>>(),
    ];
    // A thread that touches no index, started and ended before anything is timed: glibc's
    // allocator takes a faster path until a process's first thread starts, which would
    // otherwise make the first step look faster for every design for a reason that has
    // nothing to do with how many threads read.
    std::thread::spawn(|| ())
        .join()
        .expect("an empty thread panicked");
    let wal = drain_wal(0, &payload(64));
    for _ in 0..WARM_PASSES {
        for design in &designs {
            design.pass(&wal);
        }
    }
    println!(
        "{rounds} rounds per step, designs in turn: each design's median pass (ms) of 20,000 \
         events, and in brackets its ratio to the same design's median at the first step"
    );
    print!("{:>8}", "threads");
    for design in &designs {
        print!("  {:>19}", design.name());
    }
    println!();
    let mut first: Vec<Option<f64>> = vec![None; designs.len()];
    let mut grown = 0;
    for &threads in &steps {
        if threads > grown {
            read_from(&designs, threads);
            grown = threads;
        }
        let mut passes = vec![Vec::with_capacity(rounds); designs.len()];
        for round in 0..rounds {
            for turn in 0..designs.len() {
                let which = (round + turn) % designs.len();
                passes[which].push(designs[which].pass(&wal));
            }
        }
        print!("{grown:>8}");
        for (which, passes) in passes.iter_mut().enumerate() {
            let ms = median(passes);
            let first = *first[which].get_or_insert(ms);
            print!("  {ms:>9.3} ({:>5.2}x)", ms / first);
        }
        println!();
    }
}
