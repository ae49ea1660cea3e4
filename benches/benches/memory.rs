//! Bench 7: memory. A counting allocator measures the heap an index holds per event beyond
//! the payload, and how far the byte ledger (`stats().bytes`) is from it.
//! `cargo bench -p sb-benches --bench memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use chain_fold::Event;
use wal_index::baseline::{MutexIndex, PapayaIndex, ShardedMutexIndex};
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

/// One WAL envelope of about `size` bytes: the four chain fields, the slim keys a consumer
/// reads (`status`, `result`), and a `trace` the slim projection drops (a third of it).
fn envelope(id: i64, execution: i64, prev: Option<i64>, ty: &str, size: usize) -> Vec<u8> {
    let prev = prev.map_or("null".to_string(), |p| p.to_string());
    let head = format!(
        r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{prev},"event_type":"{ty}","status":"ok","result":{{"data":""#
    );
    let fill = size.saturating_sub(head.len() + 30);
    let (result, trace) = (fill - fill / 3, fill / 3);
    format!(
        r#"{head}{}"}},"trace":{{"pad":"{}"}}}}"#,
        "r".repeat(result),
        "t".repeat(trace)
    )
    .into_bytes()
}

/// Executions of 27 events, interleaved 50 at a time as a busy WAL delivers them, decoded
/// from their envelopes as a drain does (the event is the only copy of its payload).
fn wal(executions: i64, size: usize) -> Vec<Event> {
    let mut out = Vec::new();
    for group in 0..(executions + 49) / 50 {
        for k in 0..27i64 {
            for exec in group * 50..(group * 50 + 50).min(executions) {
                let id = exec * 27 + k + 1;
                let ty = if k == 0 { "playbook_started" } else { "step" };
                let prev = (k > 0).then_some(id - 1);
                let bytes = envelope(id, exec, prev, ty, size);
                out.push(Event::from_json(&bytes).expect("a valid envelope"));
            }
        }
    }
    out
}

/// One measured state of one index.
struct Row {
    heap: isize,
    ledger: usize,
    events: usize,
    payload: usize,
}

fn state<I: StateIndex>(index: &I, base: isize, executions: i64) -> Row {
    let heap = live() - base;
    let ledger = index.stats().bytes;
    let (mut events, mut payload) = (0, 0);
    for exec in 0..executions {
        if let Some(chain) = index.chain(exec) {
            events += chain.len();
            payload += chain.iter().map(|e| e.payload().len()).sum::<usize>();
        }
    }
    Row {
        heap,
        ledger,
        events,
        payload,
    }
}

fn print(name: &str, slim: bool, size: usize, label: &str, row: &Row) {
    let n = row.events as f64;
    let heap = row.heap as f64;
    println!(
        "{:<9} {:>4} {:>5} {:<15} {:>7} {:>9.1} {:>9.1} {:>8.1} {:>9.1} {:>8.1}%",
        name,
        if slim { "slim" } else { "full" },
        size,
        label,
        row.events,
        row.payload as f64 / n,
        heap / n,
        heap / n - row.payload as f64 / n,
        row.ledger as f64 / n,
        100.0 * (row.ledger as f64 - heap) / heap,
    );
}

fn measure<I: StateIndex>(size: usize, slim: bool, executions: i64) {
    // The events are created after the base: they move into the index, which then holds
    // their only copy.
    let base = live();
    let events = wal(executions, size);
    let index = I::with_config(IndexConfig {
        slim,
        ..IndexConfig::default()
    });
    let mut batch = Vec::with_capacity(200);
    for event in events {
        batch.push(event);
        if batch.len() == 200 {
            index.apply_batch(std::mem::take(&mut batch));
        }
    }
    index.apply_batch(batch);
    let report = |label: &str| print(I::NAME, slim, size, label, &state(&index, base, executions));
    let build_every_tip = || {
        for exec in 0..executions {
            let tip = index.chain(exec).and_then(|c| c.max_id());
            index.build(exec, tip);
        }
    };
    report("applied");
    build_every_tip();
    report("+ cached spine");
    // Redeliveries: every 9th event again as it was, and every 27th (the tip) rewritten.
    let mut again = Vec::new();
    for exec in 0..executions {
        for k in (0..27i64).step_by(9) {
            let id = exec * 27 + k + 1;
            let ty = if k == 0 { "playbook_started" } else { "step" };
            let prev = (k > 0).then_some(id - 1);
            again.push(Event::from_json(&envelope(id, exec, prev, ty, size)).expect("valid"));
        }
        let tip = exec * 27 + 27;
        let mut rewritten = envelope(tip, exec, Some(tip - 1), "step", size);
        let at = rewritten.len() - 4;
        rewritten[at] = b'T';
        again.push(Event::from_json(&rewritten).expect("valid"));
    }
    index.apply_batch(again);
    build_every_tip();
    report("redelivered");
    for exec in (0..executions).step_by(2) {
        index.evict(exec);
    }
    report("half evicted");
    drop(index);
}

fn main() {
    println!("memory per resident event: 2,000 executions of 27 events, interleaved 50 at a time");
    println!(
        "{:<9} {:>4} {:>5} {:<15} {:>7} {:>9} {:>9} {:>8} {:>9} {:>9}",
        "engine",
        "kind",
        "size",
        "state",
        "events",
        "payload",
        "heap/ev",
        "beyond",
        "ledger/ev",
        "error"
    );
    for (size, slim) in [(256usize, false), (256, true), (1024, false), (1024, true)] {
        measure::<WalIndex>(size, slim, 2_000);
        measure::<PapayaIndex>(size, slim, 2_000);
        measure::<ShardedMutexIndex>(size, slim, 2_000);
        measure::<MutexIndex>(size, slim, 2_000);
    }
}
