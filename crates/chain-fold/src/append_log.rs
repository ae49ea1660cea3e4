//! An append-only list whose versions share one buffer: version `k` is the first `k`
//! items, and appending to the newest version writes in place.
//!
//! This is what lets a chain (and a spine) publish a batch in O(batch): the version a
//! reader holds is a prefix that never changes, so the next version writes past it without
//! copying anything. Only two things copy, both O(len): outgrowing the buffer (capacity
//! grows by half, so appends stay amortized O(1)), and appending to a version that is not
//! the buffer's newest (a fork: someone else already appended past it).
//!
//! # The ownership protocol
//!
//! Cells below the buffer's `claimed` mark belong to some version and are never written
//! again. A writer appends in place only after winning a compare-and-swap of `claimed`
//! from *its own* length to its length plus one; any other version (an older one, or a
//! concurrent append to the same one) loses that race and copies into a fresh buffer
//! instead. The winner then writes the one cell it claimed, with nothing between the
//! claim and the write that can panic, so every cell below `claimed` is initialized by the
//! time the claimer returns the new version.

use crate::sync::{Arc, AtomicUsize, Ordering};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

/// The smallest buffer allocated.
const MIN_CAPACITY: usize = 4;

struct Buffer<T> {
    /// Cells `[0, claimed)` are initialized; the rest are not.
    cells: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// Cells `[0, claimed)` belong to some version; cells past it belong to nobody yet.
    claimed: AtomicUsize,
}

// SAFETY: the only shared mutation is the write of a cell at `claimed`, by the one thread
// whose compare-and-swap moved `claimed` past it; readers read only cells below the length
// of a version they were handed, which were written before that version existed and are
// never written again. Items are read from any thread (so `T: Sync`) and dropped by the
// thread that drops the buffer last (so `T: Send`).
unsafe impl<T: Send + Sync> Sync for Buffer<T> {}
// SAFETY: as above: moving the buffer moves its items to another thread.
unsafe impl<T: Send + Sync> Send for Buffer<T> {}

impl<T> Buffer<T> {
    fn with_capacity(capacity: usize) -> Buffer<T> {
        Buffer {
            cells: (0..capacity)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            claimed: AtomicUsize::new(0),
        }
    }

    /// The initialized prefix `[0, len)`.
    fn prefix(&self, len: usize) -> &[T] {
        assert!(
            len <= self.cells.len(),
            "a version cannot end past its buffer"
        );
        // SAFETY: `len` is the length of a version whose cells were all written before the
        // caller could hold it, and cells below any version's length are never written
        // again (the module's ownership protocol), so no `&mut` aliases them.
        // `UnsafeCell<MaybeUninit<T>>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.cells.as_ptr().cast::<T>(), len) }
    }

    /// Writes `item` into cell `at`, which the caller owns: it claimed it, or the buffer is
    /// still its own (not yet shared).
    fn write_claimed(&self, at: usize, item: T) {
        // SAFETY: the caller's compare-and-swap moved `claimed` from `at` to `at + 1` (or the
        // buffer is not shared yet), so this thread is the only one that will ever write this
        // cell, and no version that covers it exists before this write returns.
        unsafe { (*self.cells[at].get()).write(item) };
    }
}

impl<T> Drop for Buffer<T> {
    fn drop(&mut self) {
        let initialized = crate::sync::exclusive_load(&mut self.claimed);
        for cell in &mut self.cells[..initialized] {
            // SAFETY: every cell below `claimed` was written by its claimer (the claim and
            // the write have no panic between them), and the buffer is dropped once.
            unsafe { cell.get_mut().assume_init_drop() };
        }
    }
}

/// One version of an append-only list: the first `len` items of a shared buffer.
/// Cloning is one reference-count increment.
pub(crate) struct AppendLog<T> {
    buffer: Arc<Buffer<T>>,
    len: usize,
}

impl<T> Clone for AppendLog<T> {
    fn clone(&self) -> Self {
        AppendLog {
            buffer: Arc::clone(&self.buffer),
            len: self.len,
        }
    }
}

impl<T> Default for AppendLog<T> {
    fn default() -> Self {
        AppendLog {
            buffer: Arc::new(Buffer::with_capacity(0)),
            len: 0,
        }
    }
}

impl<T> AppendLog<T> {
    /// An empty list with room for `capacity` items before its first copy.
    pub(crate) fn with_capacity(capacity: usize) -> AppendLog<T> {
        AppendLog {
            buffer: Arc::new(Buffer::with_capacity(capacity)),
            len: 0,
        }
    }
}

impl<T: Clone> AppendLog<T> {
    /// This version with `item` appended: in place when this version is the buffer's
    /// newest and there is room, else copied into a fresh buffer half again as large as
    /// needed.
    pub(crate) fn push(&mut self, item: T) {
        let end = self.len + 1;
        // Relaxed: the compare-and-swap only decides who owns the cell at `self.len`; the
        // item reaches other threads through whatever publishes the new version (an
        // arc-swap store or a channel), which pairs with that reader's acquire.
        if end <= self.buffer.cells.len() && self.claim(end) {
            self.buffer.write_claimed(self.len, item);
            self.len = end;
            return;
        }
        self.copy_with(item, end);
    }

    /// Claims the cell at this version's length for this version, if nobody has: moves the
    /// buffer's `claimed` mark from this version's length to `end`.
    fn claim(&self, end: usize) -> bool {
        // The mutation: a check, then a store, which two appends to one version can both
        // pass (the loom model `two_appends_to_one_version_each_keep_their_own` fails).
        if crate::mutation::on("claim-without-cas") {
            return self.buffer.claimed.load(Ordering::Relaxed) == self.len && {
                self.buffer.claimed.store(end, Ordering::Relaxed);
                true
            };
        }
        self.buffer
            .claimed
            .compare_exchange(self.len, end, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The slow path of `push` (a fork or a full buffer): this version and `item`, copied
    /// into a fresh buffer half again as large as needed.
    fn copy_with(&mut self, item: T, needed: usize) {
        let capacity = MIN_CAPACITY.max(needed.saturating_add(needed / 2));
        let items = self.as_slice().iter().cloned().chain(std::iter::once(item));
        *self = AppendLog::filled(capacity, items);
    }

    /// This version's items copied into a fresh buffer of their own, with room for `room`
    /// more: appending to the copy never claims a cell of this version's buffer.
    pub(crate) fn detached(&self, room: usize) -> AppendLog<T> {
        let capacity = MIN_CAPACITY.max(self.len.saturating_add(room));
        AppendLog::filled(capacity, self.as_slice().iter().cloned())
    }

    /// This version with the item at `index` replaced: a copy (O(len)) into a buffer of
    /// the same capacity, so the next appends still write in place.
    pub(crate) fn replaced(&self, index: usize, item: T) -> AppendLog<T> {
        let items = self.as_slice().iter().enumerate().map(|(at, old)| {
            if at == index {
                item.clone()
            } else {
                old.clone()
            }
        });
        AppendLog::filled(self.buffer.cells.len(), items)
    }
}

impl<T> AppendLog<T> {
    /// A fresh buffer of `capacity` cells holding `items` (at most `capacity` of them).
    fn filled(capacity: usize, items: impl Iterator<Item = T>) -> AppendLog<T> {
        let fresh = Buffer::with_capacity(capacity);
        let mut len = 0;
        for item in items {
            // Nothing else sees `fresh` yet: the cell is written, then counted as
            // initialized, so a panic in between (an index past the capacity, a panicking
            // `Clone` in `items`) leaves `claimed` covering initialized cells only.
            fresh.write_claimed(len, item);
            len += 1;
            fresh.claimed.store(len, Ordering::Relaxed);
        }
        AppendLog {
            buffer: Arc::new(fresh),
            len,
        }
    }
}

impl<T> AppendLog<T> {
    /// The items of this version, in the order they were appended.
    pub(crate) fn as_slice(&self) -> &[T] {
        self.buffer.prefix(self.len)
    }

    /// Number of items in this version.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// This version's first `len` items (`len` at most [`AppendLog::len`]), sharing the
    /// buffer. Appending to the shorter version later loses the claim and copies.
    pub(crate) fn truncated(&self, len: usize) -> AppendLog<T> {
        AppendLog {
            buffer: Arc::clone(&self.buffer),
            len: len.min(self.len),
        }
    }

    /// The heap this version keeps alive: its buffer's two allocations (shared with every
    /// other version of the same buffer). Zero for a list that never held an item: its
    /// empty buffer is part of whatever fixed cost its owner charges.
    pub(crate) fn heap_bytes(&self) -> usize {
        if self.buffer.cells.is_empty() {
            return 0;
        }
        Self::BUFFER_HEADER_BYTES + self.buffer.cells.len() * std::mem::size_of::<T>()
    }

    /// The shared buffer's header allocation: reference counts, the cells' pointer and
    /// length, and `claimed`.
    const BUFFER_HEADER_BYTES: usize =
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<Buffer<T>>();

    /// True when both versions share one buffer.
    #[cfg(test)]
    pub(crate) fn shares_buffer_with(&self, other: &AppendLog<T>) -> bool {
        Arc::ptr_eq(&self.buffer, &other.buffer)
    }
}

#[cfg(all(test, not(chain_fold_loom)))]
mod tests {
    use super::*;

    fn log_of(items: impl IntoIterator<Item = u32>) -> AppendLog<u32> {
        let mut log = AppendLog::default();
        for item in items {
            log.push(item);
        }
        log
    }

    #[test]
    fn appending_to_the_newest_version_writes_in_place() {
        let mut log = log_of([1, 2, 3, 4, 5]);
        let before = log.clone();
        log.push(6);
        assert!(log.shares_buffer_with(&before));
        assert_eq!(log.as_slice(), &[1, 2, 3, 4, 5, 6]);
        assert_eq!(before.as_slice(), &[1, 2, 3, 4, 5]);
    }

    #[test]
    fn appending_to_an_older_version_copies_and_leaves_both_intact() {
        let base = log_of([1, 2]);
        let mut left = base.clone();
        left.push(3);
        let mut right = base.clone();
        right.push(30);
        assert!(!right.shares_buffer_with(&left));
        assert_eq!(left.as_slice(), &[1, 2, 3]);
        assert_eq!(right.as_slice(), &[1, 2, 30]);
        assert_eq!(base.as_slice(), &[1, 2]);
    }

    #[test]
    fn a_truncated_version_copies_on_append() {
        let full = log_of([1, 2, 3]);
        let mut short = full.truncated(1);
        short.push(9);
        assert_eq!(short.as_slice(), &[1, 9]);
        assert_eq!(full.as_slice(), &[1, 2, 3]);
    }

    #[test]
    fn replacing_copies_and_keeps_the_original() {
        let log = log_of([1, 2, 3]);
        let replaced = log.replaced(1, 20);
        assert_eq!(replaced.as_slice(), &[1, 20, 3]);
        assert_eq!(log.as_slice(), &[1, 2, 3]);
    }

    #[test]
    fn items_are_dropped_exactly_once() {
        let item = Arc::new(());
        {
            let mut log = AppendLog::default();
            for _ in 0..10 {
                log.push(Arc::clone(&item));
            }
            let mut fork = log.truncated(3);
            fork.push(Arc::clone(&item));
            assert_eq!(Arc::strong_count(&item), 1 + 10 + 4);
        }
        assert_eq!(Arc::strong_count(&item), 1);
    }

    #[test]
    fn capacity_grows_by_half() {
        let log = log_of(0..27);
        assert_eq!(
            log.heap_bytes(),
            // 4, 7, 12, 19, 30: each copy makes room for half again what it needed.
            AppendLog::<u32>::BUFFER_HEADER_BYTES + 30 * std::mem::size_of::<u32>()
        );
    }

    #[test]
    fn concurrent_appends_to_one_version_never_corrupt_each_other() {
        let base = log_of([0, 1, 2]);
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let base = base.clone();
                std::thread::spawn(move || {
                    let mut mine = base.clone();
                    mine.push(100 + t);
                    mine.push(200 + t);
                    (t, mine)
                })
            })
            .collect();
        for thread in threads {
            let (t, log) = thread.join().unwrap();
            assert_eq!(log.as_slice(), &[0, 1, 2, 100 + t, 200 + t]);
        }
        assert_eq!(base.as_slice(), &[0, 1, 2]);
    }
}

/// Loom models of the claim, over the log's own code (`--cfg chain_fold_loom`,
/// `scripts/loom.sh`). Loom explores every interleaving of the claims and the reference
/// counts; the items count their clones and drops, so a cell written twice (one item lost)
/// or a cell dropped twice shows as a count that does not balance.
#[cfg(all(test, chain_fold_loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicIsize;
    use loom::thread;

    /// An item that knows its value and keeps a count of live items.
    struct Item {
        value: u32,
        live: Arc<AtomicIsize>,
    }

    impl Item {
        fn new(value: u32, live: &Arc<AtomicIsize>) -> Item {
            live.fetch_add(1, Ordering::Relaxed);
            Item {
                value,
                live: Arc::clone(live),
            }
        }
    }

    impl Clone for Item {
        fn clone(&self) -> Item {
            Item::new(self.value, &self.live)
        }
    }

    impl Drop for Item {
        fn drop(&mut self) {
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Every item made was dropped once: none lost to a doubly written cell, none dropped
    /// twice.
    fn assert_balanced(live: &AtomicIsize) {
        let live = live.load(Ordering::Relaxed);
        assert_eq!(live, 0, "an item was lost or dropped twice");
    }

    fn values(log: &AppendLog<Item>) -> Vec<u32> {
        log.as_slice().iter().map(|item| item.value).collect()
    }

    fn base(live: &Arc<AtomicIsize>, capacity: usize) -> AppendLog<Item> {
        let mut log = AppendLog::with_capacity(capacity);
        log.push(Item::new(0, live));
        log
    }

    /// Two threads append to the same version at once: at most one writes in place, the
    /// other copies, each ends with its own item after the shared one, the version they
    /// started from is unchanged, and every item is dropped exactly once.
    #[test]
    fn two_appends_to_one_version_each_keep_their_own() {
        loom::model(|| {
            let live = Arc::new(AtomicIsize::new(0));
            let start = base(&live, 4);
            let appends: Vec<_> = [1, 2]
                .map(|value| {
                    let (mut mine, live) = (start.clone(), Arc::clone(&live));
                    thread::spawn(move || {
                        mine.push(Item::new(value, &live));
                        mine
                    })
                })
                .into_iter()
                .collect();
            let ended: Vec<_> = appends.into_iter().map(|t| t.join().unwrap()).collect();
            assert_eq!(values(&ended[0]), [0, 1]);
            assert_eq!(values(&ended[1]), [0, 2]);
            assert_eq!(values(&start), [0]);
            let in_place = ended
                .iter()
                .filter(|v| v.shares_buffer_with(&start))
                .count();
            assert!(in_place <= 1, "two versions wrote into one buffer");
            drop((start, ended));
            assert_balanced(&live);
        });
    }

    /// One thread appends in place twice (its version is the newest) while another reads
    /// the version it started from and then appends to it (a fork): the reader's prefix
    /// never changes, the fork copies, and the counts balance.
    #[test]
    fn an_append_in_place_vs_a_reader_and_a_fork_of_its_start() {
        loom::model(|| {
            let live = Arc::new(AtomicIsize::new(0));
            let start = base(&live, 3);
            let (mut ahead, writer_live) = (start.clone(), Arc::clone(&live));
            let writer = thread::spawn(move || {
                ahead.push(Item::new(1, &writer_live));
                ahead.push(Item::new(2, &writer_live));
                ahead
            });
            let mut fork = start.clone();
            assert_eq!(values(&fork), [0]);
            fork.push(Item::new(9, &live));
            let ahead = writer.join().unwrap();
            assert_eq!(values(&fork), [0, 9]);
            assert_eq!(values(&ahead), [0, 1, 2]);
            assert_eq!(values(&start), [0]);
            drop((start, fork, ahead));
            assert_balanced(&live);
        });
    }
}
