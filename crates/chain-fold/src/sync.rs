//! The one place chain-fold's reference counts and atomics come from, so that loom can
//! replace them (`--cfg chain_fold_loom`, `scripts/loom.sh`).
//!
//! The crate's concurrency protocols are two claims and a count: the append-only log's
//! claim of a cell ([`crate::append_log`]), a chain's claim of its next version
//! ([`crate::lineage`]) and the reference count of an event's allocation
//! (`event/allocation.rs`); everything else shares immutable values. Under the loom cfg
//! only the loom models in those three files run: every other test builds its values
//! outside a loom model, which loom's types do not allow.
//!
//! Not shimmed: the thread-safe cells of the log's buffer, which stay
//! `std::cell::UnsafeCell` because a reader borrows a whole prefix of them as one `&[T]`
//! (loom's cell has no such view), and an event's header and bytes, plain memory written
//! before its first handle exists. Miri's data-race detector checks those accesses instead
//! (`scripts/miri.sh`, and CI's Miri stage).

#[cfg(not(chain_fold_loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(chain_fold_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(chain_fold_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(chain_fold_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// The value of an atomic nobody else can reach (`&mut`): a plain read.
pub(crate) fn exclusive_load(atomic: &mut AtomicUsize) -> usize {
    #[cfg(not(chain_fold_loom))]
    return *atomic.get_mut();
    #[cfg(chain_fold_loom)]
    return atomic.with_mut(|value| *value);
}

/// `Arc::make_mut`: the value itself when this is its only reference, else a clone of it
/// (replacing `this`).
#[cfg(not(chain_fold_loom))]
pub(crate) fn make_mut<T: Clone>(this: &mut Arc<T>) -> &mut T {
    Arc::make_mut(this)
}

/// `Arc::make_mut`, which loom's `Arc` lacks, from the `get_mut` it has.
#[cfg(chain_fold_loom)]
pub(crate) fn make_mut<T: Clone>(this: &mut Arc<T>) -> &mut T {
    if Arc::get_mut(this).is_none() {
        *this = Arc::new(T::clone(&**this));
    }
    Arc::get_mut(this).expect("a freshly made Arc has one reference")
}
