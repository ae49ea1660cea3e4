//! The one place the engine's synchronization primitives come from.
//!
//! Every atomic, `Arc`, lock, snapshot cell and wait list that a protocol of this crate
//! relies on is imported from here, so that building with `--cfg wal_index_loom` swaps
//! them all for [loom](https://docs.rs/loom)'s model-checked versions. The cfg is
//! namespaced because a dependency already reacts to plain `cfg(loom)`.
//!
//! [`Swap`] is `arc_swap::ArcSwap` in normal builds. arc-swap has no loom support, so under
//! loom it is a lock around an `Arc`: the model then checks *our* protocol around the
//! publication (what is published before what, which ordering pairs with which), while
//! arc-swap's own algorithm is trusted as the well-tested dependency it is.
//!
//! [`Notify`] is `event_listener::Event` in normal builds, and a loom-visible wait list
//! under loom, with the same register-then-check contract: a listener created before the
//! check is woken by any `notify` that comes after the check.

#[cfg(not(wal_index_loom))]
mod imp {
    pub(crate) use std::sync::Arc;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// A mutual-exclusion lock without poisoning (writers never panic while holding it;
    /// if one did, its chain snapshot was never published, so there is nothing to repair).
    pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

    /// An atomically replaceable `Arc<T>`: wait-free loads in the common case.
    pub(crate) type Swap<T> = arc_swap::ArcSwap<T>;

    /// A wait list: `listen()` registers, `notify(n)` wakes up to `n` registered listeners.
    pub(crate) type Notify = event_listener::Event;
    pub(crate) type Listener = event_listener::EventListener;

    pub(crate) fn new_notify() -> Notify {
        event_listener::Event::new()
    }

    pub(crate) fn new_swap<T>(value: Arc<T>) -> Swap<T> {
        arc_swap::ArcSwap::new(value)
    }

    /// Loads the current value as an owned `Arc`.
    pub(crate) fn load<T>(swap: &Swap<T>) -> Arc<T> {
        swap.load_full()
    }

    /// Runs `f` on the current value without touching its reference count (arc-swap's
    /// debt-list `load`), so concurrent readers of one hot cell do not contend on it. Keep
    /// `f` short: the guard occupies one of the thread's few debt slots while it runs.
    pub(crate) fn peek<T, R>(swap: &Swap<T>, f: impl FnOnce(&T) -> R) -> R {
        f(&swap.load())
    }

    /// Publishes `value` (a release store; pairs with the acquire in [`load`]).
    pub(crate) fn store<T>(swap: &Swap<T>, value: Arc<T>) {
        swap.store(value);
    }

    /// Replaces `current` with `new` only if `current` is still published; returns whether
    /// it did. Pointer identity, as arc-swap compares.
    pub(crate) fn compare_and_swap<T>(swap: &Swap<T>, current: &Arc<T>, new: Arc<T>) -> bool {
        let previous = swap.compare_and_swap(current, new);
        Arc::ptr_eq(&previous, current)
    }
}

#[cfg(wal_index_loom)]
mod imp {
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// loom's mutex behind the `parking_lot`-style `lock()` the engine uses.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    /// The ordering a snapshot is published with. arc-swap publishes with (at least)
    /// release semantics; the `loom-weaken-publish` feature downgrades the model to relaxed,
    /// to show that the loom models catch a publication that does not pair with the
    /// reader's acquire.
    #[cfg(not(feature = "loom-weaken-publish"))]
    const PUBLISH: Ordering = Ordering::AcqRel;
    #[cfg(feature = "loom-weaken-publish")]
    const PUBLISH: Ordering = Ordering::Relaxed;

    /// One published value, with a loom-tracked cell written when it is created and read
    /// on every load, so loom checks that each load happens after the publication.
    struct Tracked<T> {
        written: loom::cell::UnsafeCell<u8>,
        value: Arc<T>,
    }

    impl<T> Tracked<T> {
        fn publishable(value: Arc<T>) -> *mut Tracked<T> {
            let tracked = Box::new(Tracked {
                written: loom::cell::UnsafeCell::new(0),
                value,
            });
            // SAFETY: the box is not shared yet; this is the only access.
            tracked.written.with_mut(|byte| unsafe { *byte = 1 });
            Box::into_raw(tracked)
        }
    }

    /// A model of arc-swap's `ArcSwap`: an atomic pointer, published with [`PUBLISH`] and
    /// loaded with acquire. Replaced values are kept until the cell drops (a model needs no
    /// reclamation scheme, and keeping them makes every loaded pointer valid).
    pub(crate) struct Swap<T> {
        current: loom::sync::atomic::AtomicPtr<Tracked<T>>,
        retired: loom::sync::Mutex<Vec<*mut Tracked<T>>>,
    }

    // SAFETY: the cell only hands out clones of `Arc<T>` and owns its `Tracked<T>` boxes,
    // so it is as thread-safe as `Arc<T>`.
    unsafe impl<T: Send + Sync> Send for Swap<T> {}
    // SAFETY: as above.
    unsafe impl<T: Send + Sync> Sync for Swap<T> {}

    impl<T> Drop for Swap<T> {
        fn drop(&mut self) {
            let retired =
                std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
            let current = self.current.load(Ordering::Acquire);
            for ptr in retired.into_iter().chain(std::iter::once(current)) {
                // SAFETY: every pointer came from `Box::into_raw` in `Tracked::publishable`,
                // is either current or retired (never both), and is freed only here, once.
                drop(unsafe { Box::from_raw(ptr) });
            }
        }
    }

    pub(crate) fn new_swap<T>(value: Arc<T>) -> Swap<T> {
        Swap {
            current: loom::sync::atomic::AtomicPtr::new(Tracked::publishable(value)),
            retired: loom::sync::Mutex::new(Vec::new()),
        }
    }

    fn load_tracked<T>(swap: &Swap<T>) -> &Tracked<T> {
        // Acquire pairs with the `PUBLISH` swap or compare-exchange that installed it.
        let ptr = swap.current.load(Ordering::Acquire);
        // SAFETY: installed pointers are freed only when the cell drops, and the borrow of
        // `swap` outlives the returned reference.
        let tracked = unsafe { &*ptr };
        // SAFETY: the publisher wrote this byte before installing the pointer; loom checks
        // that the write happens before this read.
        let _ = tracked.written.with(|byte| unsafe { *byte });
        tracked
    }

    pub(crate) fn load<T>(swap: &Swap<T>) -> Arc<T> {
        Arc::clone(&load_tracked(swap).value)
    }

    pub(crate) fn peek<T, R>(swap: &Swap<T>, f: impl FnOnce(&T) -> R) -> R {
        f(&load_tracked(swap).value)
    }

    pub(crate) fn store<T>(swap: &Swap<T>, value: Arc<T>) {
        let fresh = Tracked::publishable(value);
        #[cfg(not(feature = "loom-weaken-publish"))]
        let old = swap.current.swap(fresh, PUBLISH);
        // The weakened model publishes with a plain relaxed store (stores are serialized by
        // the slot's writer lock, so reading the old pointer first loses nothing).
        #[cfg(feature = "loom-weaken-publish")]
        let old = {
            let old = swap.current.load(Ordering::Relaxed);
            swap.current.store(fresh, PUBLISH);
            old
        };
        swap.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(old);
    }

    pub(crate) fn compare_and_swap<T>(swap: &Swap<T>, current: &Arc<T>, new: Arc<T>) -> bool {
        let seen = swap.current.load(Ordering::Acquire);
        // SAFETY: as in `load_tracked`.
        if !Arc::ptr_eq(unsafe { &(*seen).value }, current) {
            return false;
        }
        let fresh = Tracked::publishable(new);
        match swap
            .current
            .compare_exchange(seen, fresh, PUBLISH, Ordering::Acquire)
        {
            Ok(old) => {
                swap.retired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(old);
                true
            }
            Err(_) => {
                // SAFETY: `fresh` was never installed, so this is its only owner.
                drop(unsafe { Box::from_raw(fresh) });
                false
            }
        }
    }

    /// A wait list with event-listener's contract, built from loom primitives: a listener
    /// records the notification count when it registers and is ready once the count moved.
    pub(crate) struct Notify(Arc<(loom::sync::Mutex<u64>, loom::sync::Condvar)>);

    /// A registered waiter.
    pub struct Listener {
        notify: Arc<(loom::sync::Mutex<u64>, loom::sync::Condvar)>,
        seen: u64,
    }

    pub(crate) fn new_notify() -> Notify {
        Notify(Arc::new((
            loom::sync::Mutex::new(0),
            loom::sync::Condvar::new(),
        )))
    }

    impl Notify {
        pub(crate) fn listen(&self) -> Listener {
            let seen = *self.0.0.lock().unwrap_or_else(|e| e.into_inner());
            Listener {
                notify: Arc::clone(&self.0),
                seen,
            }
        }
        pub(crate) fn notify(&self, _n: usize) {
            *self.0.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            self.0.1.notify_all();
        }
    }

    impl Listener {
        /// Blocks until a notification newer than the registration (loom has no clock, so
        /// there is no timeout under the model).
        pub fn wait(self) {
            let (count, changed) = &*self.notify;
            let mut count = count.lock().unwrap_or_else(|e| e.into_inner());
            while *count == self.seen {
                count = changed.wait(count).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

#[cfg(wal_index_loom)]
pub use imp::Listener;
pub(crate) use imp::*;
