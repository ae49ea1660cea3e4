//! The shim's production side: `std`, `parking_lot`, the snapshot cell
//! (`snapshot_cell.rs`, on the reclamation domain of `reclaim.rs`), `papaya`,
//! `event-listener`, and `arc-swap` for the `PapayaIndex` comparator's cells.

pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence,
};

/// A mutual-exclusion lock without poisoning (writers never panic while holding it;
/// if one did, its chain snapshot was never published, so there is nothing to repair).
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

/// What [`Mutex::lock`] returns.
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// A concurrent map read on every build and written at every slot creation and removal
/// (the directory): `papaya::HashMap`, hashed with foldhash under a fixed seed.
///
/// A read pins the map's reclamation guard (seize: a store to the reader's own record) and
/// probes one table; an insert or a removal is one compare-and-swap on the key's entry, with
/// no copy of anything else, and a resize moves entries a few at a time on later writes
/// instead of all at once. papaya's consistency rule is what the directory's protocol needs
/// from a publication: a read that sees a write happens-after it (release on the write,
/// acquire on the read), and a read that happens-after a write sees it or a later one.
///
/// Why papaya and not a copy-on-write map published by pointer: copying the changed path of
/// a persistent map costs every creation and removal a few hundred nanoseconds to several
/// microseconds (the path's nodes, each with its entries' reference counts), which made the
/// drain's creations and terminal evictions its most expensive part. Why not `dashmap`: its
/// reads take a shard's read lock, whose cache line every reader and writer of the shard
/// writes.
///
/// The directory serializes its writers (its writers' lock), so its
/// [`ConcurrentMap::insert`] and [`ConcurrentMap::remove`] never race each other; reads race
/// them freely. [`ConcurrentMap::get_or_insert_with`] and [`ConcurrentMap::remove_if`] are
/// atomic on their own (the `PapayaIndex` comparator writes without a lock). A removed value is dropped once its thread has
/// collected a batch of removals ([`RECLAIM_BATCH`]) and no reader pinned before the batch
/// was handed off is still reading (seize's deferred reclamation, on whichever thread
/// finishes the batch).
pub(crate) struct ConcurrentMap<K, V>(papaya::HashMap<K, V, foldhash::fast::FixedState>);

/// How many removed entries a thread collects before it hands them to reclamation.
///
/// Each hand-off begins with seize's heavy barrier, a `membarrier` system call that
/// interrupts every other core running one of the process's threads and waits for it. With
/// seize's default of 32 on two cores, the drain's terminal evictions with two readers
/// pinned on the other core spent about 8% of the drain thread's samples in that barrier
/// (docs/benchmarks.md §14); 64 halves how often it runs. The cost is memory that outlives
/// its removal a little longer: a removed entry holds an evicted slot, which the eviction
/// has already emptied (about 110 B with papaya's entry, 70 B more if a drive listened on
/// it), so each thread that removes keeps at most 63 of them, about 7 KB, plus a 2 KiB
/// batch, until it removes more or the map is dropped, and a table a resize replaced lives
/// until the batch it joined is handed off. 128 and 512 were faster still with readers, but
/// the held slots put the memory bench's half-evicted rows at or above 64 B per event.
const RECLAIM_BATCH: usize = 64;

impl<K: std::hash::Hash + Eq + Send + Sync, V: Send + Sync> ConcurrentMap<K, V> {
    pub(crate) fn new() -> ConcurrentMap<K, V> {
        ConcurrentMap(
            papaya::HashMap::builder()
                .hasher(foldhash::fast::FixedState::default())
                .collector(seize::Collector::new().batch_size(RECLAIM_BATCH))
                .build(),
        )
    }

    /// Runs `f` on `key`'s value, borrowed under the read guard: no reference count is
    /// touched.
    pub(crate) fn peek<R>(&self, key: &K, f: impl FnOnce(Option<&V>) -> R) -> R {
        let guard = self.0.guard();
        f(self.0.get(key, &guard))
    }

    /// Publishes `value` under `key`. The caller serializes writers.
    pub(crate) fn insert(&self, key: K, value: V) {
        let guard = self.0.guard();
        self.0.insert(key, value, &guard);
    }

    /// Unpublishes `key`. The caller serializes writers.
    pub(crate) fn remove(&self, key: &K) {
        let guard = self.0.guard();
        self.0.remove(key, &guard);
    }

    /// How many keys are published.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// `key`'s value, or `make()` published under it if it has none, atomically: of two
    /// racing callers one publishes and both return its value.
    #[cfg(feature = "baselines")]
    pub(crate) fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> V
    where
        V: Clone,
    {
        let guard = self.0.guard();
        self.0.get_or_insert_with(key, make, &guard).clone()
    }

    /// Unpublishes `key` if its value satisfies `should_remove`, atomically.
    #[cfg(feature = "baselines")]
    pub(crate) fn remove_if(&self, key: &K, mut should_remove: impl FnMut(&V) -> bool) {
        let guard = self.0.guard();
        let _ = self
            .0
            .remove_if(key, |_, value| should_remove(value), &guard);
    }

    /// Runs `f` on each entry of a weak snapshot: the map as it was when the walk started or
    /// at some point after it (papaya's consistency rule); an entry inserted or removed
    /// during the walk may or may not be seen. An in-progress resize is finished first.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        let guard = self.0.guard();
        for (key, value) in self.0.iter(&guard) {
            f(key, value);
        }
    }
}

/// A wait list: `listen()` registers, `notify(n)` wakes up to `n` registered listeners.
/// What the engine uses is [`super::Notify`], which calls it only once someone listened.
pub(crate) type RawNotify = event_listener::Event;
pub(crate) type Listener = event_listener::EventListener;

pub(crate) fn new_raw_notify() -> RawNotify {
    event_listener::Event::new()
}

/// `notify` for a caller that has just issued a SeqCst fence (see [`super::Notify`]).
pub(crate) trait NotifyAfterFence {
    fn notify_after_fence(&self, n: usize);
}

impl NotifyAfterFence for RawNotify {
    fn notify_after_fence(&self, n: usize) {
        use event_listener::IntoNotification;
        self.notify(n.relaxed());
    }
}

pub(crate) use super::snapshot_cell::{
    ArcSwap, Swap, comparator, compare_and_swap, load, new_swap, peek, peek_arc, reclaim_retired,
    store, swap,
};

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
