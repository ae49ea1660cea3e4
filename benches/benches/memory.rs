//! Bench 7: memory. A counting allocator measures the heap an index holds per event beyond
//! the payload, and how far the byte ledger (`stats().bytes`) is from it.
//! `cargo bench -p sb-benches --bench memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use chain_fold::Event;
use sb_benches::{interleaved, payload};
use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::{IndexConfig, StateIndex, WalIndex};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are the caller's; the counter update has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes
        // through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as for `dealloc`; `new_size` comes from the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn measure<I: StateIndex>(payload_bytes: usize, executions: i64) {
    let shared = payload(payload_bytes);
    let before = live();
    let index = I::with_config(IndexConfig::default());
    // Every event owns its payload, as a drain's decoded events do.
    let events: Vec<Event> = interleaved(executions, 27, 50, &shared)
        .into_iter()
        .filter(|e| !e.is_terminal())
        .map(|e| {
            let owned = Bytes::copy_from_slice(e.payload());
            Event::from_parts(e.id(), e.execution_id(), e.prev(), e.event_type(), owned)
        })
        .collect();
    let n = events.len() as f64;
    let mut batch = Vec::with_capacity(200);
    for event in events {
        batch.push(event);
        if batch.len() == 200 {
            index.apply_batch(std::mem::take(&mut batch));
        }
    }
    index.apply_batch(batch);
    let heap = (live() - before) as f64;
    let ledger = index.stats().bytes as f64;
    for exec in 0..executions {
        let tip = index.chain(exec).and_then(|c| c.max_id());
        index.build(exec, tip);
    }
    let with_spines = (live() - before) as f64;
    println!(
        "{:<9} {:>8} {:>8} {:>14.0} {:>14.0} {:>16.0} {:>16.0} {:>12.1}%",
        I::NAME,
        payload_bytes,
        n,
        heap / n,
        heap / n - shared.len() as f64,
        ledger / n,
        (with_spines - heap) / n,
        100.0 * (ledger - heap) / heap,
    );
    drop(index);
}

fn main() {
    println!("memory per resident event (27-event executions, no terminal events)");
    println!(
        "{:<9} {:>8} {:>8} {:>14} {:>14} {:>16} {:>16} {:>13}",
        "engine",
        "payload",
        "events",
        "heap per event",
        "beyond payload",
        "ledger per event",
        "+ cached spine",
        "ledger error"
    );
    for payload_bytes in [64usize, 1024] {
        measure::<WalIndex>(payload_bytes, 2_000);
        measure::<ShardedMutexIndex>(payload_bytes, 2_000);
        measure::<MutexIndex>(payload_bytes, 2_000);
    }
}
