//! The shim's production side: `std`, `parking_lot`, `arc-swap`, `crossbeam-epoch` and
//! `event-listener`.

pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// A mutual-exclusion lock without poisoning (writers never panic while holding it;
/// if one did, its chain snapshot was never published, so there is nothing to repair).
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

/// What [`Mutex::lock`] returns.
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// An atomically replaceable `Arc<T>`: wait-free loads in the common case.
pub(crate) type Swap<T> = arc_swap::ArcSwap<T>;

/// A published `Arc<T>` read on every build and replaced rarely (the directory): readers pin
/// a crossbeam-epoch guard and read one pointer, and a replaced value is dropped once every
/// reader pinned before the swap has unpinned.
///
/// Why not [`Swap`] (arc-swap) here: an arc-swap load claims one of the reader thread's
/// debt slots, and every store walks all threads' debt slots to pay them, so a drain that
/// publishes the directory at every slot creation and terminal eviction keeps pulling the
/// readers' debt slots across cores: a third of an incomplete build under a busy drain was
/// that. Pinning touches only the reader's own epoch record (a writer reads it only when it
/// tries to advance the global epoch, every so many pins), so a read costs the same however
/// often the directory is replaced.
///
/// Reclamation stays on the writer's side: crossbeam-epoch runs deferred destructors on
/// whichever thread happens to collect, often a reader, so the writer keeps its own
/// reference to each of the last [`WRITER_HELD`] values it replaced. The deferred destructor
/// then only drops one reference count, and the value's memory is normally freed when the
/// writer lets go of it (by whichever drop is last, so it is never freed early).
pub(crate) struct Published<T> {
    /// On a cache line of its own: the index's other fields (the accounting lock, above
    /// all) are written on every apply, and a reader's load must miss only when the
    /// directory itself was replaced.
    current: crossbeam_utils::CachePadded<crossbeam_epoch::Atomic<Arc<T>>>,
    /// The writer's references to the values it replaced most recently (writers are
    /// serialized by the caller's lock; this one is never contended).
    replaced: Mutex<std::collections::VecDeque<Arc<T>>>,
}

/// How many replaced values the writer keeps a reference to (see [`Published`]).
const WRITER_HELD: usize = 16;

// `Send + Sync + 'static`: a replaced value's last reference may be dropped by a deferred
// destructor on whichever thread collects, at any later time.
impl<T: Send + Sync + 'static> Published<T> {
    pub(crate) fn new(value: Arc<T>) -> Published<T> {
        Published {
            current: crossbeam_utils::CachePadded::new(crossbeam_epoch::Atomic::new(value)),
            replaced: Mutex::new(std::collections::VecDeque::with_capacity(WRITER_HELD + 1)),
        }
    }

    /// Runs `f` on the current value without touching its reference count.
    pub(crate) fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.with_current(|current| f(current))
    }

    /// The current value as an owned `Arc`.
    pub(crate) fn load(&self) -> Arc<T> {
        self.with_current(Arc::clone)
    }

    fn with_current<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        let guard = crossbeam_epoch::pin();
        // Acquire pairs with the AcqRel swap in `store`: the value was fully built first.
        let current = self.current.load(Ordering::Acquire, &guard);
        // SAFETY: the cell is never null (created with a value, and `store` swaps in
        // another), and the value it pointed at when loaded is destroyed only after every
        // guard pinned before its replacement is dropped, so `guard` keeps it alive for `f`.
        f(unsafe { current.deref() })
    }

    /// Publishes `value`; the replaced one is dropped once no reader can still see it.
    pub(crate) fn store(&self, value: Arc<T>) {
        let mut replaced = self.replaced.lock();
        let guard = crossbeam_epoch::pin();
        // AcqRel: the release half publishes `value` to readers' acquire loads; the acquire
        // half orders this thread's later use of the old value after its publication.
        let old = self
            .current
            .swap(crossbeam_epoch::Owned::new(value), Ordering::AcqRel, &guard);
        // SAFETY: `old` was installed, so it is not yet destroyed (only this swap unlinks
        // it, and it is destroyed below, deferred); `guard` keeps it alive here.
        replaced.push_back(Arc::clone(unsafe { old.deref() }));
        // SAFETY: `old` is no longer reachable from the cell, so only readers pinned before
        // this swap can hold it, and `defer_destroy` waits for all of them to unpin.
        unsafe { guard.defer_destroy(old) };
        // Hand the deferred destructor to the global queue now, not after 64 more: it then
        // runs (on whichever thread collects) while the writer still holds the value.
        guard.flush();
        drop(guard);
        if replaced.len() > WRITER_HELD {
            // Usually the last reference by now: the memory is freed here, by the writer.
            drop(replaced.pop_front());
        }
    }
}

impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader can be pinned on this cell any more, so its
        // current value has no other user.
        unsafe {
            let current = self
                .current
                .load(Ordering::Relaxed, crossbeam_epoch::unprotected());
            drop(current.into_owned());
        }
    }
}

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
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }

    /// When `stopwatch` started, in nanoseconds since the epoch.
    pub(crate) fn started(&self, stopwatch: super::Stopwatch) -> u64 {
        self.at(stopwatch.started_at())
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
        run_to_completion(self.0.lock())
    }
}

/// Runs an operation written as async code to completion on the calling thread: its
/// blocking form (the drive, the drain step, a comparator's lock), one body for both.
///
/// With the comparators built in, unconstrained by Tokio's cooperative budget: called from
/// inside a Tokio task, each acquisition of Tokio's mutex spends that task's budget, and
/// once it is spent the lock answers `Pending` and wakes itself at once, forever, since a
/// blocking call never yields back to the scheduler that would refill it. Outside a runtime
/// the wrapper changes nothing.
pub(crate) fn run_to_completion<F: std::future::Future>(operation: F) -> F::Output {
    #[cfg(feature = "baselines")]
    let operation = tokio::task::unconstrained(operation);
    futures_lite::future::block_on(operation)
}

/// Lets another thread run (a spin-wait's back-off).
#[cfg(feature = "baselines")]
pub(crate) fn yield_now() {
    std::thread::yield_now();
}
