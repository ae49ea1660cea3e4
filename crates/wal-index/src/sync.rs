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

    /// A model of an atomic `Arc` cell: every load and store is one atomic step.
    pub(crate) struct Swap<T>(loom::sync::RwLock<Arc<T>>);

    pub(crate) fn new_swap<T>(value: Arc<T>) -> Swap<T> {
        Swap(loom::sync::RwLock::new(value))
    }

    pub(crate) fn load<T>(swap: &Swap<T>) -> Arc<T> {
        Arc::clone(&swap.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn peek<T, R>(swap: &Swap<T>, f: impl FnOnce(&T) -> R) -> R {
        f(&swap.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn store<T>(swap: &Swap<T>, value: Arc<T>) {
        *swap.0.write().unwrap_or_else(|e| e.into_inner()) = value;
    }

    pub(crate) fn compare_and_swap<T>(swap: &Swap<T>, current: &Arc<T>, new: Arc<T>) -> bool {
        let mut slot = swap.0.write().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&slot, current) {
            *slot = new;
            true
        } else {
            false
        }
    }

    /// A wait list with event-listener's contract, built from loom primitives: a listener
    /// records the notification count when it registers and is ready once the count moved.
    pub(crate) struct Notify {
        notified: loom::sync::Mutex<u64>,
        changed: loom::sync::Condvar,
    }

    pub(crate) struct Listener<'a> {
        notify: &'a Notify,
        seen: u64,
    }

    pub(crate) fn new_notify() -> Notify {
        Notify {
            notified: loom::sync::Mutex::new(0),
            changed: loom::sync::Condvar::new(),
        }
    }

    impl Notify {
        pub(crate) fn listen(&self) -> Listener<'_> {
            let seen = *self.notified.lock().unwrap_or_else(|e| e.into_inner());
            Listener { notify: self, seen }
        }
        pub(crate) fn notify(&self, _n: usize) {
            *self.notified.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            self.changed.notify_all();
        }
    }

    impl Listener<'_> {
        /// Blocks until a notification newer than the registration (loom has no clock, so
        /// there is no timeout under the model).
        pub(crate) fn wait(self) {
            let mut count = self
                .notify
                .notified
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            while *count == self.seen {
                count = self
                    .notify
                    .changed
                    .wait(count)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

pub(crate) use imp::*;
