//! An event's one allocation behind one thin pointer: a 4-byte reference count, the 4-byte
//! length of its bytes, the 24-byte [`Header`], then the bytes.
//!
//! It is `triomphe::ThinArc<Header, u8>` with both counters narrowed to 32 bits: triomphe
//! keeps a `usize` count and a `usize` length, 40 bytes before the payload, where this keeps
//! 32. At production's volume that is 8 bytes of every resident event, 12% of what an event
//! costs beyond its payload.
//!
//! # Limits
//!
//! - **The bytes are at most `u32::MAX` long.** [`Allocation::new`] returns `None` past
//!   that; the decoders turn it into [`EventError::TooLarge`](super::EventError::TooLarge).
//! - **At most 2^31 handles to one event at once.** Each handle is 8 bytes, so that is 16
//!   GiB of handles to a single event; like `std::sync::Arc` at `isize::MAX`, a clone past
//!   the limit aborts the process rather than let the count wrap.
//!
//! # The protocol
//!
//! The header and the bytes are written once, before the first handle exists, and never
//! again; only the count changes. A clone increments it (`Relaxed`: the handle it is made
//! from keeps the allocation alive, and nothing is published through it). A drop decrements
//! it with `Release`, so every read a handle made happens before its decrement; the drop
//! that takes the count to zero then issues an `Acquire` fence, which pairs with those
//! `Release` decrements, so every read by every other handle happens before the memory is
//! freed. This is `std::sync::Arc`'s protocol. The count goes through the crate's sync
//! shim: a loom model below explores two handles dropped on two threads, and Miri's data
//! race detector checks the reads against the free (`scripts/miri.sh`).

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr::NonNull;

use super::Header;
use crate::sync::{AtomicU32, Ordering, fence};

/// What precedes the bytes.
#[repr(C)]
struct Prefix {
    count: AtomicU32,
    len: u32,
    header: Header,
}

/// The count past which a clone aborts: half the range, so concurrent clones that all pass
/// the check before any aborts still cannot wrap it.
const MAX_COUNT: u32 = u32::MAX / 2;

/// One event's allocation (see the module documentation).
pub(super) struct Allocation {
    ptr: NonNull<Prefix>,
}

// SAFETY: the header and the bytes are immutable once `new` returns and the count is
// atomic, so handles on any threads only read shared memory and change the count
// atomically; the last drop frees the memory after an acquire fence that orders every other
// handle's reads before it.
unsafe impl Send for Allocation {}
// SAFETY: as above: `&Allocation` gives only reads of immutable data.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// What an allocation holds before its bytes.
    pub(super) const PREFIX_BYTES: usize = std::mem::size_of::<Prefix>();

    /// A fresh allocation of `header` and the concatenation of `parts`, with a count of one;
    /// `None` when the parts' total is longer than `u32::MAX` bytes.
    ///
    /// `parts` is walked twice, once for the length and once to copy: a clone that yields
    /// other parts the second time (a bug in the caller) gets its bytes cut at the length,
    /// or zeros after its last one, never a write past the allocation or an unwritten byte.
    pub(super) fn new<'p, I>(header: Header, parts: I) -> Option<Allocation>
    where
        I: IntoIterator<Item = &'p [u8]>,
        I::IntoIter: Clone,
    {
        let parts = parts.into_iter();
        let len = parts
            .clone()
            .try_fold(0usize, |total, part| total.checked_add(part.len()))?;
        let len_field = u32::try_from(len).ok()?;
        let layout = Self::layout(len)?;
        // SAFETY: `layout` has a non-zero size: it holds a `Prefix`.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Prefix>()) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `ptr` is a fresh allocation of `layout`: aligned for a `Prefix`, with room
        // for one followed by `len` bytes, and nothing else refers to it yet. `written`
        // never passes `len`: each copy takes at most the room left, so the copies stay
        // inside the allocation, and they never overlap the parts, which live elsewhere.
        // The bytes from `written` to `len` are zeroed, so all `len` are initialized.
        unsafe {
            ptr.as_ptr().write(Prefix {
                count: AtomicU32::new(1),
                len: len_field,
                header,
            });
            let bytes = raw.add(Self::PREFIX_BYTES);
            let mut written = 0;
            for part in parts {
                let take = part.len().min(len - written);
                std::ptr::copy_nonoverlapping(part.as_ptr(), bytes.add(written), take);
                written += take;
            }
            bytes.add(written).write_bytes(0, len - written);
        }
        Some(Allocation { ptr })
    }

    /// The layout of an allocation of `len` bytes (`None` past `isize::MAX`).
    fn layout(len: usize) -> Option<Layout> {
        let (layout, _) = Layout::new::<Prefix>()
            .extend(Layout::array::<u8>(len).ok()?)
            .ok()?;
        Some(layout.pad_to_align())
    }

    /// The allocation's size for `len` bytes: what the byte ledger charges.
    pub(super) fn size_for(len: usize) -> usize {
        (Self::PREFIX_BYTES + len).next_multiple_of(std::mem::align_of::<Prefix>())
    }

    fn prefix(&self) -> &Prefix {
        // SAFETY: this handle keeps the allocation alive (the count is at least one while it
        // exists), and the prefix was fully written before the first handle existed.
        unsafe { self.ptr.as_ref() }
    }

    /// The header.
    pub(super) fn header(&self) -> &Header {
        &self.prefix().header
    }

    /// The bytes after the header.
    pub(super) fn bytes(&self) -> &[u8] {
        let len = self.prefix().len as usize;
        // SAFETY: `new` wrote exactly `len` bytes right after the prefix, inside the
        // allocation, and nothing writes them again; this handle keeps them alive for the
        // borrow of `self`.
        unsafe {
            let start = self.ptr.as_ptr().cast::<u8>().add(Self::PREFIX_BYTES);
            std::slice::from_raw_parts(start, len)
        }
    }

    /// True when both handles point at the same allocation.
    pub(super) fn ptr_eq(&self, other: &Allocation) -> bool {
        self.ptr == other.ptr
    }

    /// Takes this handle's count out; true when it was the last one.
    fn release(&self) -> bool {
        let count = &self.prefix().count;
        if crate::mutation::on("event-count-without-rmw") {
            // The mutation: a load and a store, which two drops of the last two handles can
            // both pass reading 2, so neither frees the allocation; the loom model below
            // must catch it (`scripts/loom.sh`).
            let seen = count.load(Ordering::Acquire);
            count.store(seen - 1, Ordering::Release);
            return seen == 1;
        }
        // Release: this handle's reads of the header and the bytes happen before its
        // decrement; pairs with the acquire fence in `drop`.
        count.fetch_sub(1, Ordering::Release) == 1
    }
}

impl Clone for Allocation {
    fn clone(&self) -> Allocation {
        // Relaxed: the handle cloned from keeps the allocation alive, and the new handle
        // publishes nothing (it pairs with no load; `std::sync::Arc::clone` is the same).
        let before = self.prefix().count.fetch_add(1, Ordering::Relaxed);
        if before > MAX_COUNT {
            std::process::abort();
        }
        Allocation { ptr: self.ptr }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if !self.release() {
            return;
        }
        // Acquire: pairs with every other handle's release decrement, so their reads
        // happen before the free below.
        fence(Ordering::Acquire);
        let len = self.prefix().len as usize;
        let layout = Self::layout(len).expect("the layout `new` allocated with");
        #[cfg(all(test, chain_fold_loom))]
        loom_models::FREED.with(|freed| freed.set(freed.get() + 1));
        // SAFETY: the count went from one to zero here, so this was the last handle and no
        // other exists or can be made; the fence above ordered every other handle's use
        // before this point. The allocation was made by `new` with this same layout.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            dealloc(self.ptr.as_ptr().cast::<u8>(), layout);
        }
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("len", &self.prefix().len)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(chain_fold_loom)))]
mod tests {
    use super::*;

    fn header(id: i64) -> Header {
        Header {
            id,
            execution_id: 7,
            prev_back: 1,
            type_start: 0,
            type_len: 0,
            flags: 0,
        }
    }

    #[test]
    fn the_prefix_is_32_bytes() {
        assert_eq!(Allocation::PREFIX_BYTES, 32);
        assert_eq!(Allocation::size_for(0), 32);
        assert_eq!(Allocation::size_for(1), 40);
        assert_eq!(Allocation::size_for(8), 40);
    }

    #[test]
    fn parts_are_laid_out_one_after_the_other() {
        let one = Allocation::new(header(3), [&b"abc"[..], b"", b"de"]).unwrap();
        assert_eq!(one.bytes(), b"abcde");
        assert_eq!(one.header().id, 3);
        let empty = Allocation::new(header(4), []).unwrap();
        assert_eq!(empty.bytes(), b"");
        let twin = one.clone();
        assert!(twin.ptr_eq(&one) && !twin.ptr_eq(&empty));
    }

    #[test]
    fn a_second_walk_of_the_parts_never_writes_past_or_leaves_a_byte_unwritten() {
        // A clone that yields other parts than the walk that measured them: shorter ones
        // leave zeros, longer ones are cut at the measured length.
        let walks = std::cell::Cell::new(0);
        let parts = |long: &'static [u8], short: &'static [u8]| {
            (0..1).map(move |_| long).map({
                let walks = &walks;
                move |long| {
                    walks.set(walks.get() + 1);
                    if walks.get() == 1 { long } else { short }
                }
            })
        };
        let fewer = Allocation::new(header(5), parts(b"abcd", b"ab")).unwrap();
        assert_eq!(fewer.bytes(), b"ab\0\0");
        walks.set(0);
        let more = Allocation::new(header(6), parts(b"ab", b"abcdef")).unwrap();
        assert_eq!(more.bytes(), b"ab");
    }

    #[test]
    fn bytes_past_u32_are_refused_before_anything_is_allocated() {
        // 4,097 parts of one MiB: 4 GiB and one MiB in all, past `u32::MAX`, from one buffer.
        let mib = vec![0u8; 1 << 20];
        let parts = vec![mib.as_slice(); 4097];
        assert!(Allocation::new(header(1), parts.iter().copied()).is_none());
    }

    #[test]
    fn handles_dropped_on_many_threads_free_it_once() {
        let first = Allocation::new(header(9), [&b"payload"[..]]).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let mine = first.clone();
                std::thread::spawn(move || {
                    let copies: Vec<_> = (0..8).map(|_| mine.clone()).collect();
                    assert!(copies.iter().all(|c| c.bytes() == b"payload"));
                })
            })
            .collect();
        drop(first);
        for thread in threads {
            thread.join().unwrap();
        }
    }
}

/// A loom model of the count (`--cfg chain_fold_loom`, `scripts/loom.sh`): two handles read
/// the bytes and are dropped on two threads, and the allocation is freed exactly once.
#[cfg(all(test, chain_fold_loom))]
mod loom_models {
    use super::*;
    use std::cell::Cell;

    std::thread_local! {
        /// Frees counted by `drop` (loom runs a model's threads on one thread).
        pub(super) static FREED: Cell<usize> = const { Cell::new(0) };
    }

    #[test]
    fn two_handles_dropped_on_two_threads_free_it_once() {
        loom::model(|| {
            FREED.with(|freed| freed.set(0));
            let header = Header {
                id: 1,
                execution_id: 1,
                prev_back: 0,
                type_start: 0,
                type_len: 0,
                flags: 0,
            };
            let first = Allocation::new(header, [&b"bytes"[..]]).unwrap();
            let second = first.clone();
            let other = loom::thread::spawn(move || {
                assert_eq!(second.bytes(), b"bytes");
            });
            assert_eq!(first.bytes(), b"bytes");
            drop(first);
            other.join().unwrap();
            assert_eq!(FREED.with(Cell::get), 1, "freed other than once");
        });
    }
}
