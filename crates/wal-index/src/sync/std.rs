//! The shim's production side: `std`, `parking_lot`, `arc-swap` and `event-listener`.

pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

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

/// Publishes `value` and returns what it replaced (SeqCst, as arc-swap's swap is).
pub(crate) fn swap<T>(swap: &Swap<T>, value: Arc<T>) -> Arc<T> {
    swap.swap(value)
}

/// Replaces `current` with `new` only if `current` is still published; returns whether
/// it did. Pointer identity, as arc-swap compares.
pub(crate) fn compare_and_swap<T>(swap: &Swap<T>, current: &Arc<T>, new: Arc<T>) -> bool {
    let previous = swap.compare_and_swap(current, new);
    Arc::ptr_eq(&previous, current)
}

/// Parks until `listener` is notified or `cap` passes; true if it was notified.
pub(crate) fn wait_timeout(listener: Listener, cap: std::time::Duration) -> bool {
    use event_listener::Listener as _;
    listener.wait_timeout(cap).is_some()
}

/// The index's clock: nanoseconds since the index was created, from the monotonic clock.
/// Under loom it is a model-controlled counter instead, so a model decides when time passes.
#[derive(Debug)]
// `pub` because the sealed `DriveHooks` names it; unnameable outside the crate.
#[allow(unreachable_pub)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }

    /// The instant time 0 stands for.
    pub(crate) fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// Now, in nanoseconds since the epoch.
    pub(crate) fn now(&self) -> u64 {
        self.at(std::time::Instant::now())
    }

    /// `at`, in nanoseconds since the epoch (0 before it, saturating after ~584 years).
    pub(crate) fn at(&self, at: std::time::Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The async mutex of the lock-based comparators (`baseline`): Tokio's, as today's index
/// uses, so it is fair (first come, first served: a build waiting for the lock is never
/// overtaken by a later request of the drain). Awaited by async paths; `lock_blocking`
/// parks the calling thread on the same queue.
#[cfg(feature = "baselines")]
pub(crate) struct AsyncMutex<T>(tokio::sync::Mutex<T>);

#[cfg(feature = "baselines")]
impl<T> AsyncMutex<T> {
    pub(crate) fn new(value: T) -> Self {
        AsyncMutex(tokio::sync::Mutex::new(value))
    }

    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, T> {
        self.0.lock().await
    }

    /// Takes a place in the same FIFO queue as `lock` and parks the calling thread until
    /// served. For plain threads only (the blocking drive, the drain on its own thread, the
    /// benches): on an executor thread it can wait for a task that the fair queue handed
    /// the lock to and that is queued behind that very thread, so every async path of the
    /// comparators awaits `lock` instead.
    pub(crate) fn lock_blocking(&self) -> tokio::sync::MutexGuard<'_, T> {
        futures_lite::future::block_on(self.0.lock())
    }
}

/// Lets another thread run (a spin-wait's back-off).
#[cfg(feature = "baselines")]
pub(crate) fn yield_now() {
    std::thread::yield_now();
}
