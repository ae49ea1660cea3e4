//! The snapshot cell: an atomically replaceable `Arc<T>` whose replaced values are freed by
//! writers, through the reclamation domain of `reclaim.rs`, so a store costs the same
//! however many threads have read.
//!
//! # The model
//!
//! The cell owns one strong count of the value it publishes, held as the raw pointer
//! `Arc::into_raw` gives. A reader enters the process's reclamation domain, loads the
//! pointer and either takes a count of its own ([`load`]) or reads through the pointer
//! ([`peek`], [`peek_arc`]), and leaves. A writer replaces the pointer ([`store`], [`swap`],
//! [`compare_and_swap`]) and retires the old value: the count the cell held on it is
//! released by a later reclaim ([`reclaim_retired`], which only writers call), once no
//! reader that could hold the pointer is inside.
//!
//! # Why not arc-swap
//!
//! `arc_swap::ArcSwap` reclaims exactly, at the store: the writer walks every node of
//! arc-swap's debt list and pays the debts recorded against the old value. That list is
//! global to the process and only grows: each thread that loads an `ArcSwap` while the
//! others hold their nodes adds one. A store therefore costs time in proportion to the most
//! threads that ever read at once, anywhere in the process; the drain stores once per
//! execution of every batch (the repository's docs/benchmarks.md, section 15). Here a store
//! is a pointer swap and a push onto the domain's list, and a reclaim, run by writes and
//! sweeps, walks the domain's 64 reader stripes.
//!
//! # Costs and limits
//!
//! - **Releases are late, and writers make them.** A replaced value waits in its writer's
//!   batch until the write ends, then lives until the second reclaim after that finds no
//!   reader of the previous generation inside (`reclaim.rs`). Writes reclaim (an apply, a
//!   batch, a rehydrate, an eviction) and so does every sweep, which a drain runs on its interval even when idle, so values wait a
//!   batch or two on a busy index and a sweep interval on an idle one; the domain is the
//!   process's, so any index's write frees what any index retired. Past 4,096 retired
//!   values the thread that retires reclaims, whatever it is: that bounds what builds
//!   retire when nothing writes, and is the one case in which a build frees replaced
//!   snapshots. Otherwise no read frees one (a reader that took its own count still frees
//!   it if it is the last, as with any `Arc`).
//! - **The ledger does not see what waits.** An evicted chain or a replaced spine is out
//!   of the byte ledger at once and out of memory when it is freed.
//! - **A reader inside for long holds back every free in the process** (a cold build of a
//!   long chain, a descheduled build): the values wait; nothing blocks.
//! - **A write allocates** one list node per batch it retires (24 bytes, and the batch's
//!   vector); a build that replaces a spine, one node.
//! - **A read** is two read-modify-writes on the thread's own stripe and two loads of the
//!   domain's generation (`reclaim.rs`), where arc-swap's wrote a debt slot.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, LazyLock};

use super::reclaim::{Freeable, ReadGuard, Reclaimer};

/// The process's reclamation domain, shared by every cell.
static DOMAIN: LazyLock<Reclaimer> = LazyLock::new(Reclaimer::new);

thread_local! {
    /// This thread's reader stripe in [`DOMAIN`] (`usize::MAX` until its first read).
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    /// How many reads this thread is inside: only the outermost counts itself in the domain
    /// (a build reads the spine cache and, inside that, the chain).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// What this thread's writes retired since its last flush to [`DOMAIN`]: a writer
    /// retires a batch's replaced snapshots in one push ([`reclaim_retired`], which every
    /// write ends with, or [`WRITER_BATCH`] of them).
    static WRITTEN: RefCell<Written> = const { RefCell::new(Written(Vec::new())) };
}

/// A thread's retired values not yet pushed to [`DOMAIN`]. A thread that ends with some (a
/// write that unwound before its flush) pushes them as it goes, so none is lost.
struct Written(Vec<Freeable>);

impl Drop for Written {
    fn drop(&mut self) {
        // SAFETY: as in `flush_written`; `DOMAIN` is a static, alive while threads end.
        unsafe { DOMAIN.retire(std::mem::take(&mut self.0)) };
    }
}

/// How many values a writer's thread keeps before it pushes them to [`DOMAIN`].
const WRITER_BATCH: usize = 256;

/// This thread inside [`DOMAIN`], for as long as it lives: counted by the outermost one.
struct Inside {
    _counted: Option<ReadGuard<'static>>,
}

impl Drop for Inside {
    fn drop(&mut self) {
        DEPTH.with(|depth| depth.set(depth.get() - 1));
    }
}

/// Enters [`DOMAIN`] on this thread's stripe, unless this thread is inside already. The
/// guard is made before the depth counts it, so a read is never left uncounted.
fn enter() -> Inside {
    let outermost = DEPTH.with(|depth| depth.get() == 0);
    let counted = outermost.then(|| {
        let stripe = STRIPE.with(|stripe| {
            if stripe.get() == usize::MAX {
                stripe.set(DOMAIN.new_stripe());
            }
            stripe.get()
        });
        DOMAIN.enter_on(stripe)
    });
    DEPTH.with(|depth| depth.set(depth.get() + 1));
    Inside { _counted: counted }
}

/// How many retired values make the thread that retires one reclaim, whatever it is: a
/// bound on what waits when no writer runs (builds replace spines too).
const BACKLOG_BOUND: usize = 4096;

/// An atomically replaceable `Arc<T>` (see the module documentation).
pub(crate) struct Swap<T> {
    /// `Arc::into_raw` of the published value; the cell owns one count of it.
    current: AtomicPtr<T>,
    /// The cell owns an `Arc<T>`: `Send` and `Sync` exactly when `Arc<T>` is.
    owns: PhantomData<Arc<T>>,
}

impl<T> Drop for Swap<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Arc::into_raw` and the cell owns one count of it.
        // `&mut self` proves no thread is inside a read of this cell (a read borrows it),
        // so none is about to take a count through the pointer; a reader that took its own
        // keeps the value alive past this release.
        drop(unsafe { Arc::from_raw(*self.current.get_mut()) });
    }
}

impl<T> std::fmt::Debug for Swap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swap").finish_non_exhaustive()
    }
}

/// A cell publishing `value`.
pub(crate) fn new_swap<T>(value: Arc<T>) -> Swap<T> {
    Swap {
        current: AtomicPtr::new(Arc::into_raw(value).cast_mut()),
        owns: PhantomData,
    }
}

/// Runs `f` on the current pointer, inside the domain.
fn with_current<T, R>(cell: &Swap<T>, f: impl FnOnce(*const T) -> R) -> R {
    let _inside = enter();
    // SeqCst, not only acquire: `reclaim.rs`'s argument puts this load after the reader's
    // second read of the generation in one total order. It pairs with the SeqCst swap or
    // compare-exchange that installed the pointer, so the value's construction happens
    // before any read through it. (A plain load on x86.)
    f(cell.current.load(Ordering::SeqCst))
}

/// Loads the current value as an owned `Arc`.
pub(crate) fn load<T>(cell: &Swap<T>) -> Arc<T> {
    with_current(cell, |current| {
        // SAFETY: `current` was published when this reader, inside the domain, loaded it,
        // and the cell's count on it is released only by a reclaim after this reader
        // leaves (`reclaim.rs`), so it is alive; the count taken here is the caller's own.
        unsafe {
            Arc::increment_strong_count(current);
            Arc::from_raw(current)
        }
    })
}

/// Runs `f` on the current value without touching its reference count, so concurrent
/// readers of one hot cell do not contend on it. Keep `f` short: the thread stays inside
/// the domain while it runs, which holds back every free due meanwhile.
pub(crate) fn peek<T, R>(cell: &Swap<T>, f: impl FnOnce(&T) -> R) -> R {
    // SAFETY: alive while this reader is inside, as in `load`; `f` returns before the
    // reader leaves, and `R` cannot borrow from the value.
    with_current(cell, |current| f(unsafe { &*current }))
}

/// [`peek`] with the `Arc` itself lent, not cloned: its identity is what a later
/// [`compare_and_swap`] compares, so a build can load a cell, decide, and replace it.
pub(crate) fn peek_arc<T, R>(cell: &Swap<T>, f: impl FnOnce(&Arc<T>) -> R) -> R {
    with_current(cell, |current| {
        // SAFETY: alive while this reader is inside, as in `load`. The `Arc` stands for the
        // cell's own count and is never dropped (`ManuallyDrop`, also if `f` panics), so
        // lending it changes no count; `f` may clone it, which takes a count of its own.
        let lent = ManuallyDrop::new(unsafe { Arc::from_raw(current) });
        f(&lent)
    })
}

/// Releases one `Arc<T>` count held as a raw pointer: what a reclaim runs for a retired
/// value of a `Swap<T>`.
///
/// # Safety
///
/// `value` is an `Arc::into_raw` pointer whose count the caller owns.
unsafe fn release<T>(value: *const ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Arc::from_raw(value.cast::<T>()) });
}

/// A write's retirement of the cell's count on `old`, just replaced: kept in this thread's
/// batch until the write ends ([`reclaim_retired`]) or the batch is full.
fn retire_written<T: Send + Sync + 'static>(old: *const T) {
    let freeable: Freeable = (old.cast(), release::<T>);
    let full = WRITTEN.try_with(|written| {
        let mut written = written.borrow_mut();
        written.0.push(freeable);
        written.0.len() >= WRITER_BATCH
    });
    match full {
        Ok(true) => flush_written(),
        Ok(false) => {}
        // This thread's batch is gone (a write from another thread-local's destructor):
        // the value goes to the domain on its own.
        // SAFETY: as in `flush_written`, for the one value.
        Err(_) => unsafe { DOMAIN.retire(vec![freeable]) },
    }
}

/// Pushes this thread's batch to [`DOMAIN`].
fn flush_written() {
    let written = WRITTEN
        .try_with(|written| std::mem::take(&mut written.borrow_mut().0))
        .unwrap_or_default();
    // SAFETY: each value stands for the count a cell held on a value this thread replaced
    // in it (`store`, `swap`), so no reader entering from now on reaches it through that
    // cell; nothing else releases that count; `release::<T>` is sound on any thread since
    // `T: Send + Sync`.
    unsafe { DOMAIN.retire(written) };
}

/// A build's retirement of the cell's count on `old` (a spine it replaced by
/// compare-and-swap): pushed at once, since a build does not end with a reclaim. Past the
/// domain's backlog bound the build reclaims (see the module documentation).
fn retire_built<T: Send + Sync + 'static>(old: *const T) {
    // SAFETY: as in `flush_written`, for the one value.
    unsafe { DOMAIN.retire(vec![(old.cast(), release::<T> as unsafe fn(*const ()))]) };
    if DOMAIN.backlog() > BACKLOG_BOUND {
        reclaim_retired();
    }
}

/// Publishes `value` (SeqCst; pairs with every read's load). For writes, which end with
/// [`reclaim_retired`]: the replaced value waits in this thread's batch until then.
pub(crate) fn store<T: Send + Sync + 'static>(cell: &Swap<T>, value: Arc<T>) {
    let old = cell
        .current
        .swap(Arc::into_raw(value).cast_mut(), Ordering::SeqCst);
    retire_written(old);
}

/// Publishes `value` and returns what it replaced (SeqCst). For writes, as [`store`].
pub(crate) fn swap<T: Send + Sync + 'static>(cell: &Swap<T>, value: Arc<T>) -> Arc<T> {
    let old = cell
        .current
        .swap(Arc::into_raw(value).cast_mut(), Ordering::SeqCst);
    // SAFETY: the cell's count on `old` is still held (it is retired below, and released
    // only by a later reclaim), so taking a count of the caller's own is sound.
    let previous = unsafe {
        Arc::increment_strong_count(old);
        Arc::from_raw(old)
    };
    retire_written(old);
    previous
}

/// Replaces `current` with `new` only if `current` is still published; returns whether it
/// did. For builds: the replaced value is pushed to the domain at once. Pointer identity:
/// sound because the caller holds `current` (a count of its own, or lent by [`peek_arc`]
/// while inside the domain), so its allocation cannot be freed and reused while it
/// compares.
pub(crate) fn compare_and_swap<T: Send + Sync + 'static>(
    cell: &Swap<T>,
    current: &Arc<T>,
    new: Arc<T>,
) -> bool {
    let new = Arc::into_raw(new).cast_mut();
    // SeqCst on success, as `swap`; on failure nothing is read through the pointer seen.
    match cell.current.compare_exchange(
        Arc::as_ptr(current).cast_mut(),
        new,
        Ordering::SeqCst,
        Ordering::Relaxed,
    ) {
        Ok(old) => {
            retire_built(old);
            true
        }
        Err(_) => {
            // SAFETY: `new` came from `Arc::into_raw` above and was never published, so
            // this is its only owner.
            drop(unsafe { Arc::from_raw(new) });
            false
        }
    }
}

/// Frees what the domain can free now, on the calling thread: two reclaims, so that on a
/// quiet process what was retired just before is freed too (a value is freed by the second
/// reclaim after it was retired). A writer calls it after a batch or an eviction, outside
/// any read of a cell; it returns at once if another thread is reclaiming.
pub(crate) fn reclaim_retired() {
    flush_written();
    DOMAIN.reclaim();
    DOMAIN.reclaim();
}

/// The `PapayaIndex` comparator's cell: arc-swap's, as the design it stands for uses.
pub(crate) type ArcSwap<T> = arc_swap::ArcSwap<T>;

/// The comparator's reads and writes, under the names of the engine cell's (on the model
/// side both are the model's cell).
pub(crate) mod comparator {
    use super::{Arc, ArcSwap};

    pub(crate) fn new_swap<T>(value: Arc<T>) -> ArcSwap<T> {
        ArcSwap::new(value)
    }
    pub(crate) fn load<T>(cell: &ArcSwap<T>) -> Arc<T> {
        cell.load_full()
    }
    pub(crate) fn peek<T, R>(cell: &ArcSwap<T>, f: impl FnOnce(&T) -> R) -> R {
        f(&cell.load())
    }
    pub(crate) fn store<T>(cell: &ArcSwap<T>, value: Arc<T>) {
        cell.store(value);
    }
    pub(crate) fn compare_and_swap<T>(cell: &ArcSwap<T>, current: &Arc<T>, new: Arc<T>) -> bool {
        Arc::ptr_eq(&cell.compare_and_swap(current, new), current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_outlives_its_replacement_while_a_reader_holds_it() {
        let cell = new_swap(Arc::new(String::from("first")));
        let held = load(&cell);
        store(&cell, Arc::new(String::from("second")));
        assert_eq!(*held, "first");
        assert_eq!(peek(&cell, String::clone), "second");
        drop(held);
        reclaim_retired();
    }

    #[test]
    fn compare_and_swap_replaces_only_what_the_caller_saw() {
        let cell = new_swap(Arc::new(1));
        let seen = load(&cell);
        assert!(compare_and_swap(&cell, &seen, Arc::new(2)));
        assert!(!compare_and_swap(&cell, &seen, Arc::new(3)));
        assert_eq!(*load(&cell), 2);
        let taken = swap(&cell, Arc::new(4));
        assert_eq!(*taken, 2);
        peek_arc(&cell, |lent| assert_eq!(**lent, 4));
        reclaim_retired();
    }

    #[test]
    fn readers_on_other_threads_see_whole_values_while_a_writer_replaces_them() {
        let cell = Arc::new(new_swap(Arc::new(vec![0u64; 64])));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, stop) = (Arc::clone(&cell), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) || reads < 100 {
                        peek(&cell, |values| {
                            assert!(values.iter().all(|&v| v == values[0]), "a torn value");
                        });
                        let held = load(&cell);
                        assert!(held.iter().all(|&v| v == held[0]), "a torn value");
                        reads += 1;
                    }
                })
            })
            .collect();
        let rounds = if cfg!(miri) { 50 } else { 20_000 };
        for round in 1..=rounds {
            store(&cell, Arc::new(vec![round; 64]));
            if round % 16 == 0 {
                reclaim_retired();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().expect("a reader panicked");
        }
        reclaim_retired();
    }
}
