//! Reclamation the writers own: replaced snapshots wait in one list, and only writers free
//! them, once no reader that could still hold one is reading.
//!
//! # The model
//!
//! Readers announce themselves on two-phase counters. The domain keeps a generation; a
//! reader reads it, adds itself to its stripe's counter for the generation's parity, and
//! reads the generation again: if it moved meanwhile, the reader takes itself back off and
//! retries, so a reader that proceeds is counted under the parity of a generation that was
//! current while its count was visible. It then reads, and takes itself off when done.
//!
//! A writer that replaced a value pushes it onto the domain's list of retired values (a
//! lock-free stack) and never frees it itself. A reclaim, which only writers run (the
//! drain after a batch, evictors after evicting), and only one at a time (the others skip
//! it):
//!
//! 1. checks that no reader is counted under the parity *before* the current generation;
//!    if one is, it stops there (the next reclaim tries again);
//! 2. frees what the previous reclaim took;
//! 3. takes the list;
//! 4. advances the generation.
//!
//! # Why it is safe
//!
//! Three SeqCst fences carry the argument, and fences are in one total order `S`: the
//! reader's, between counting itself and reading the generation again (then the cell); the
//! writer's, between replacing a value in its cell and pushing it; and the reclaim's, one
//! before it reads the counters and one after it advances the generation. For two fences
//! `X` before `Y` in `S`, a load sequenced after `Y` sees every store sequenced before `X`.
//!
//! Take a reader that holds value `V` and the reclaim `R` that took `V` (step 3); the one
//! that frees it is the next, `R'`, which checks the parity of the generation `R` advanced
//! from, call it `G`. The reader read `V` from the cell, so it did not see the replacement:
//! its fence precedes the writer's, which precedes `R`'s take (the push it took followed
//! that fence), so it precedes both of `R`'s fences. The reader's count therefore precedes
//! `R'`'s reads of the counters, through its own fence and `R'`'s first one. What remains
//! is that the reader counted itself under `G`'s parity. Reclaims run one at a time under
//! the domain's lock, whose release and acquire order one reclaim's trailing fence before
//! the next one's leading fence. The reader proceeded under the generation `g` it read
//! twice, around its fence. Every advance up to `G` happened before `R`'s second fence.
//! If an advance from `g` had happened with its trailing fence before the reader's, the
//! reader's second read would have seen it and it would have retried; so
//! that fence comes after the reader's, and the reclaim after it (the one advancing from
//! `g + 1`, if `g + 1 <= G`) would have read the reader's count under the parity of `g` and
//! stopped, so the generation could never have reached `G` with `g < G` while the reader
//! was inside. So `g = G`, and `R'` sees the count and frees nothing until the reader
//! leaves.
//!
//! A reader whose fence follows the writer's sees the replacement: it cannot hold `V`.
//!
//! # Costs
//!
//! - A read: two read-modify-writes of the reader's stripe (one cache line per stripe,
//!   handed to threads in turn, so shared by threads once 64 have read), a fence, and two
//!   loads of the generation, which only a reclaim writes. Lock-free: a read retries when
//!   a reclaim advanced the generation between its two loads.
//! - A retirement: one small allocation (the list's node, 24 bytes; a writer retires its
//!   whole batch as one) and one compare-and-swap on the list's head.
//! - A reclaim: nothing if nothing is retired or waiting; else one pass over every stripe,
//!   and the frees. It runs on the writer's
//!   thread, so no reader ever frees a replaced snapshot; a reader that kept its own count
//!   of one still frees it if it is the last, as with any `Arc`.
//! - A reader inside for long (a cold build of a long chain) holds back every free meanwhile:
//!   the values wait, nothing blocks.

use std::ptr;

use super::{AtomicPtr, AtomicUsize, CachePadded, Mutex, Ordering, fence};

/// How many reader stripes a domain keeps. Threads are given stripes in turn; past this
/// many, threads share them, which is correct but makes them share a cache line.
#[cfg(not(any(wal_index_loom, wal_index_shuttle)))]
pub(crate) const STRIPES: usize = 64;
/// Under a model: two, so that two readers can share one or use two.
#[cfg(any(wal_index_loom, wal_index_shuttle))]
pub(crate) const STRIPES: usize = 2;

/// A value to free, and what frees it.
pub(crate) type Freeable = (*const (), unsafe fn(*const ()));

/// One retired value (a build's spine, or a writer's whole batch as one value that frees
/// the rest, see [`Reclaimer::retire`]) and the next in the list: 24 bytes, so what waits
/// for a reclaim after a build costs a small allocation.
struct Retired {
    value: *const (),
    free: unsafe fn(*const ()),
    next: *mut Retired,
}

/// Frees a writer's batch retired as one value: every value in it, then the batch.
///
/// # Safety
///
/// `batch` came from `Box::into_raw` of a `Box<Vec<Freeable>>` in [`Reclaimer::retire`],
/// whose values meet `retire`'s contract and are not held by any reader.
unsafe fn free_batch(batch: *const ()) {
    // SAFETY: the caller's contract.
    let batch = unsafe { Box::from_raw(batch.cast::<Vec<Freeable>>().cast_mut()) };
    for &(value, free) in batch.iter() {
        // SAFETY: the caller's contract.
        unsafe { free(value) };
    }
}

/// A reclamation domain (see the module documentation).
pub(crate) struct Reclaimer {
    generation: CachePadded<AtomicUsize>,
    /// Per stripe, readers inside under each parity.
    readers: [CachePadded<[AtomicUsize; 2]>; STRIPES],
    /// How many stripes have been handed out, to give the next reading thread the next one.
    stripes_handed: AtomicUsize,
    /// Values retired since the last reclaim took the list.
    retired: CachePadded<AtomicPtr<Retired>>,
    /// How many values were retired since a reclaim last took the list (approximate: a
    /// hint for when a retiring thread should reclaim, see [`Reclaimer::backlog`]).
    pending: CachePadded<AtomicUsize>,
    /// What the last reclaim took: freed by the next one that finds no reader of the parity
    /// before the current generation. Its lock is what makes reclaims run one at a time.
    taken: Mutex<TakenList>,
}

/// The list a reclaim took, owned by the reclaim lock.
struct TakenList(*mut Retired);

// SAFETY: the list's nodes and values are only touched by whoever holds the reclaim lock,
// and every value it holds is `Send + Sync` (see `Reclaimer::retire`).
unsafe impl Send for TakenList {}

/// A reader inside the domain, counted under one stripe and parity until dropped.
pub(crate) struct ReadGuard<'d> {
    counter: &'d AtomicUsize,
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        // Release: the reader's reads of the value happen before a reclaim that sees the
        // count drop (its SeqCst load) frees it.
        self.counter.fetch_sub(1, Ordering::Release);
    }
}

impl Reclaimer {
    /// An empty domain.
    pub(crate) fn new() -> Reclaimer {
        Reclaimer {
            generation: CachePadded::new(AtomicUsize::new(0)),
            readers: std::array::from_fn(|_| {
                CachePadded::new([AtomicUsize::new(0), AtomicUsize::new(0)])
            }),
            stripes_handed: AtomicUsize::new(0),
            retired: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            pending: CachePadded::new(AtomicUsize::new(0)),
            taken: Mutex::new(TakenList(ptr::null_mut())),
        }
    }

    /// Enters the domain on stripe `stripe` (see the module documentation).
    pub(crate) fn enter_on(&self, stripe: usize) -> ReadGuard<'_> {
        let readers = &self.readers[stripe % STRIPES];
        loop {
            // SeqCst, all three: they are in the total order the safety argument uses.
            let generation = self.generation.load(Ordering::SeqCst);
            let counter = &readers[generation & 1];
            counter.fetch_add(1, Ordering::SeqCst);
            // Pairs with the fences in `retire` and `reclaim` (see the module
            // documentation): either a reclaim sees this count, or this reader sees the
            // replacement and the advance that preceded that reclaim's fence. The mutation
            // leaves it out.
            if !chain_fold::mutation::on("reader-unfenced") {
                fence(Ordering::SeqCst);
            }
            // The mutation proceeds without checking that the generation held still: a
            // reader counted under a parity that reclaims have already moved past.
            if chain_fold::mutation::on("reader-skips-generation-check")
                || self.generation.load(Ordering::SeqCst) == generation
            {
                return ReadGuard { counter };
            }
            counter.fetch_sub(1, Ordering::Release);
        }
    }

    /// A stripe for a new reading thread: the next one, in turn.
    pub(crate) fn new_stripe(&self) -> usize {
        // Relaxed: which stripe a thread uses decides only which readers share a cache
        // line; a reclaim checks every stripe, handed out or not.
        self.stripes_handed.fetch_add(1, Ordering::Relaxed) % STRIPES
    }

    /// Retires `values`: each `free(value)` runs in a later reclaim, once no reader that
    /// could hold the value is inside.
    ///
    /// # Safety
    ///
    /// Each value stands for something a cell held and no longer does (the cell's count
    /// on it: the caller replaced it in the cell before this call, so a reader entering
    /// from now on cannot reach it *through that cell*), each `free(value)` must be sound
    /// to run once on any thread, and nothing else may release what it stands for.
    pub(crate) unsafe fn retire(&self, values: Vec<Freeable>) {
        let count = values.len();
        let (value, free) = match count {
            0 => return,
            1 => values[0],
            _ => (
                Box::into_raw(Box::new(values)).cast_const().cast(),
                free_batch as unsafe fn(*const ()),
            ),
        };
        let node = Box::into_raw(Box::new(Retired {
            value,
            free,
            next: ptr::null_mut(),
        }));
        // Pairs with the reader's fence after it counts itself: the replacements the
        // caller made before this call are ordered before the push a reclaim takes.
        fence(Ordering::SeqCst);
        // Relaxed first read: the compare-and-swap below checks it.
        let mut head = self.retired.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is this call's own until the compare-and-swap publishes it.
            unsafe { (*node).next = head };
            // SeqCst: in the total order of the safety argument (the push follows the
            // replacement, the take follows the push).
            match self.retired.compare_exchange_weak(
                head,
                node,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => head = seen,
            }
        }
        // Relaxed: a hint, read by `backlog`; no value is published through it.
        self.pending.fetch_add(count, Ordering::Relaxed);
    }

    /// About how many values were retired since a reclaim last took the list.
    pub(crate) fn backlog(&self) -> usize {
        // Relaxed: see `retire`.
        self.pending.load(Ordering::Relaxed)
    }

    /// One reclaim (see the module documentation). Returns without doing anything if
    /// another reclaim is running, or if a reader is still counted under the parity before
    /// the current generation. Called from inside a [`ReadGuard`], it can still advance
    /// once but then finds the caller itself and stops: call it outside one.
    pub(crate) fn reclaim(&self) {
        let Some(mut taken) = self.taken.try_lock() else {
            return;
        };
        // Nothing retired and nothing waiting: no reason to move the generation (which would
        // only make readers entering right now retry). SeqCst, as the take below.
        if taken.0.is_null() && self.retired.load(Ordering::SeqCst).is_null() {
            return;
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let previous_parity = (generation & 1) ^ 1;
        // Pairs with the reader's fence after it counts itself (see the module
        // documentation).
        fence(Ordering::SeqCst);
        // SeqCst loads of the counters: see the module documentation. Every stripe, so a
        // reader on a stripe handed out a moment ago is not missed (a stripe nobody reads
        // stays in this thread's cache).
        let inside: usize = self
            .readers
            .iter()
            .map(|stripe| stripe[previous_parity].load(Ordering::SeqCst))
            .sum();
        // The mutation frees what the last reclaim took without checking for readers.
        if inside != 0 && !chain_fold::mutation::on("reclaim-ignores-readers") {
            return;
        }
        let ready = std::mem::replace(&mut taken.0, ptr::null_mut());
        // SAFETY: `ready` was taken by the previous reclaim, under the generation before
        // this one, and no reader of that generation's parity is inside (checked above): by
        // the module documentation's argument no reader can hold any of its values.
        unsafe { free_list(ready) };
        taken.0 = self.retired.swap(ptr::null_mut(), Ordering::SeqCst);
        // Relaxed: see `retire`.
        self.pending.store(0, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::SeqCst);
        // Pairs with the reader's fence: a reader whose fence follows this one reads the new
        // generation in its check; one whose fence precedes it is seen by the next reclaim.
        fence(Ordering::SeqCst);
    }
}

/// Frees every value of `list`, and its nodes.
///
/// # Safety
///
/// No reader may hold any of the list's values, and the list must be owned by the caller.
unsafe fn free_list(mut list: *mut Retired) {
    while !list.is_null() {
        // SAFETY: the caller owns the list; each node came from `Box::into_raw` in `retire`.
        let node = unsafe { Box::from_raw(list) };
        list = node.next;
        // SAFETY: `retire`'s contract, and no reader holds the value (the caller's).
        unsafe { (node.free)(node.value) };
    }
}

impl Drop for Reclaimer {
    fn drop(&mut self) {
        let taken = std::mem::replace(&mut self.taken.lock().0, ptr::null_mut());
        let retired = self.retired.swap(ptr::null_mut(), Ordering::SeqCst);
        // SAFETY: `&mut self`: no reader is inside and no writer is retiring.
        unsafe {
            free_list(taken);
            free_list(retired);
        }
    }
}

#[cfg(all(test, wal_index_loom))]
mod loom_models {
    //! A reader that loaded a value against a writer that replaces, retires and reclaims it:
    //! the value is freed only after the reader has read it. loom tracks the value's cell:
    //! the free writes it, so a free not ordered after the read is reported.

    use super::Reclaimer;
    use crate::sync::{Arc, AtomicPtr, Ordering};
    use loom::cell::UnsafeCell;

    struct Value(UnsafeCell<u64>);

    /// What a reclaim runs for a retired `Value`: a write of its cell, then the free.
    unsafe fn free_value(value: *const ()) {
        // SAFETY: `value` came from `Box::into_raw` of a `Value`, owned by the reclaim.
        let value = unsafe { Box::from_raw(value.cast::<Value>().cast_mut()) };
        // SAFETY: loom checks that no read of the cell races with this write.
        value.0.with_mut(|v| unsafe { *v = 0 });
    }

    /// A reader that enters, loads the cell's value and reads it (1 or 2; anything else
    /// was freed), then leaves.
    fn spawn_reader(
        domain: &Arc<Reclaimer>,
        cell: &Arc<AtomicPtr<Value>>,
    ) -> loom::thread::JoinHandle<()> {
        let (domain, cell) = (Arc::clone(domain), Arc::clone(cell));
        loom::thread::spawn(move || {
            let stripe = domain.new_stripe();
            let _inside = domain.enter_on(stripe);
            let value = cell.load(Ordering::SeqCst);
            // SAFETY: the protocol under test: a value loaded inside is not freed until
            // the reader leaves.
            let read = unsafe { (*value).0.with(|v| *v) };
            assert!(read == 1 || read == 2, "read a freed value");
        })
    }

    /// The writer's part: replaces the cell's value with 2 and retires the old one.
    fn replace_and_retire(domain: &Reclaimer, cell: &AtomicPtr<Value>) {
        let second = Box::into_raw(Box::new(Value(UnsafeCell::new(2))));
        let old = cell.swap(second, Ordering::SeqCst);
        // SAFETY: `old` is no longer reachable from the cell, and only the domain frees it.
        unsafe {
            domain.retire(vec![(
                old.cast_const().cast(),
                free_value as unsafe fn(*const ()),
            )])
        };
    }

    fn reader_and_writer(reclaims: usize) {
        loom::model(move || {
            let domain = Arc::new(Reclaimer::new());
            let first = Box::into_raw(Box::new(Value(UnsafeCell::new(1))));
            let cell = Arc::new(AtomicPtr::new(first));
            let reader = spawn_reader(&domain, &cell);
            replace_and_retire(&domain, &cell);
            for _ in 0..reclaims {
                domain.reclaim();
            }
            reader.join().expect("the reader panicked");
            // SAFETY: `second` is still the cell's, never retired: freed here, once.
            unsafe { free_value(cell.load(Ordering::SeqCst).cast()) };
        });
    }

    #[test]
    fn a_replaced_value_is_freed_only_after_its_reader_left() {
        reader_and_writer(2);
    }

    #[test]
    fn a_reader_that_read_a_stale_generation_is_still_seen() {
        // The reclaims run on a thread of their own, so one can advance the generation
        // between a reader's two reads of it while the writer replaces the value.
        loom::model(|| {
            let domain = Arc::new(Reclaimer::new());
            // Something retired already, so the reclaimer's first reclaim advances the
            // generation: a reader can then read it once before and once after.
            let earlier = Box::into_raw(Box::new(Value(UnsafeCell::new(0))));
            // SAFETY: never published; only the domain frees it.
            unsafe {
                domain.retire(vec![(
                    earlier.cast_const().cast(),
                    free_value as unsafe fn(*const ()),
                )])
            };
            let first = Box::into_raw(Box::new(Value(UnsafeCell::new(1))));
            let cell = Arc::new(AtomicPtr::new(first));
            let reader = spawn_reader(&domain, &cell);
            let reclaimer = {
                let domain = Arc::clone(&domain);
                loom::thread::spawn(move || {
                    for _ in 0..3 {
                        domain.reclaim();
                    }
                })
            };
            replace_and_retire(&domain, &cell);
            reader.join().expect("the reader panicked");
            reclaimer.join().expect("the reclaimer panicked");
            // SAFETY: as above.
            unsafe { free_value(cell.load(Ordering::SeqCst).cast()) };
        });
    }

    #[test]
    fn a_retired_value_is_freed_by_a_later_reclaim() {
        // No reader: the second reclaim frees what the first took.
        loom::model(|| {
            let domain = Reclaimer::new();
            let value = Box::into_raw(Box::new(Value(UnsafeCell::new(7))));
            // SAFETY: never published; only the domain frees it.
            unsafe {
                domain.retire(vec![(
                    value.cast_const().cast(),
                    free_value as unsafe fn(*const ()),
                )])
            };
            domain.reclaim();
            domain.reclaim();
            let taken = domain.taken.lock();
            assert!(
                taken.0.is_null(),
                "a retired value outlived two quiet reclaims"
            );
            assert!(domain.retired.load(Ordering::SeqCst).is_null());
        });
    }
}
