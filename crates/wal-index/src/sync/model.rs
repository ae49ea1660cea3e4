//! The shim's model side: every primitive is the model checker's, so the models explore the
//! engine's own code. One implementation serves both checkers: loom (`--cfg wal_index_loom`,
//! exhaustive up to a preemption bound, the `loom_models` modules) and shuttle (`--cfg
//! wal_index_shuttle`, randomized schedules over states loom cannot hold, `shuttle_models`).
//! Their `sync` APIs are the same for what is used here; only loom tracks cell accesses, so
//! only the loom build checks that each published value is read after its publication.

#[cfg(wal_index_loom)]
use ::loom as rt;
#[cfg(all(wal_index_shuttle, not(wal_index_loom)))]
use ::shuttle as rt;

pub(crate) use rt::sync::Arc;
pub(crate) use rt::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence,
};

/// What [`Mutex::lock`] returns.
pub(crate) type MutexGuard<'a, T> = rt::sync::MutexGuard<'a, T>;

/// loom's mutex behind the `parking_lot`-style `lock()` the engine uses.
pub(crate) struct Mutex<T>(rt::sync::Mutex<T>);

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(rt::sync::Mutex::new(value))
    }
    pub(crate) fn lock(&self) -> rt::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The lock if it is free now, as `parking_lot`'s `try_lock`.
    #[allow(dead_code)] // only the reclamation domain's models lock this way
    pub(crate) fn try_lock(&self) -> Option<rt::sync::MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}

/// Whether the mutation `relaxed-publish` is on: it downgrades the model to relaxed, to
/// show that the loom models catch a publication that does not pair with the reader's
/// acquire.
fn weakened() -> bool {
    chain_fold::mutation::on("relaxed-publish")
}

/// The ordering a snapshot is published with. The snapshot cell (and arc-swap, the
/// comparator's) publishes with (at least) release semantics; relaxed under [`weakened`].
fn publish() -> Ordering {
    if weakened() {
        Ordering::Relaxed
    } else {
        Ordering::AcqRel
    }
}

/// One published value, with a loom-tracked cell written when it is created and read
/// on every load, so loom checks that each load happens after the publication.
struct Tracked<T> {
    #[cfg(wal_index_loom)]
    written: loom::cell::UnsafeCell<u8>,
    value: Arc<T>,
}

impl<T> Tracked<T> {
    fn publishable(value: Arc<T>) -> *mut Tracked<T> {
        let tracked = Box::new(Tracked {
            #[cfg(wal_index_loom)]
            written: loom::cell::UnsafeCell::new(0),
            value,
        });
        // SAFETY: the box is not shared yet; this is the only access.
        #[cfg(wal_index_loom)]
        tracked.written.with_mut(|byte| unsafe { *byte = 1 });
        Box::into_raw(tracked)
    }
}

/// The comparators' async mutex on the model side: a model mutex, so a checker can switch
/// threads while it is held (a real lock would stall the checker's single OS thread). The
/// models drive the comparators with blocking calls; `lock` exists so the async paths build.
#[cfg(feature = "baselines")]
pub(crate) struct AsyncMutex<T>(Mutex<T>);

#[cfg(feature = "baselines")]
impl<T> AsyncMutex<T> {
    pub(crate) fn new(value: T) -> Self {
        AsyncMutex(Mutex::new(value))
    }
    pub(crate) fn lock_blocking(&self) -> rt::sync::MutexGuard<'_, T> {
        self.0.lock()
    }
    pub(crate) async fn lock(&self) -> rt::sync::MutexGuard<'_, T> {
        self.0.lock()
    }
}

/// An operation written as async code, run to completion: the model's locks and a
/// [`Waiting::Park`](super::Waiting) wait never return `Pending`, so the first poll finishes
/// it.
pub(crate) fn run_to_completion<F: std::future::Future>(operation: F) -> F::Output {
    futures_lite::future::block_on(operation)
}

/// A model of the snapshot cell (and of arc-swap's `ArcSwap`, the comparator's): an atomic
/// pointer, published with [`publish`] and loaded with acquire. Replaced values are kept
/// until the cell drops (a model needs no reclamation scheme, and keeping them makes every
/// loaded pointer valid); the reclamation domain has loom models of its own
/// (`reclaim.rs`).
pub(crate) struct Swap<T> {
    current: rt::sync::atomic::AtomicPtr<Tracked<T>>,
    retired: rt::sync::Mutex<Vec<*mut Tracked<T>>>,
}

// SAFETY: the cell only hands out clones of `Arc<T>` and owns its `Tracked<T>` boxes,
// so it is as thread-safe as `Arc<T>`.
unsafe impl<T: Send + Sync> Send for Swap<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Swap<T> {}

impl<T> Drop for Swap<T> {
    fn drop(&mut self) {
        // A model that failed unwinds through here after loom's execution has ended, when
        // loom's primitives can no longer be touched: leak instead of aborting the process,
        // so the failure loom found is what the run reports.
        if std::thread::panicking() {
            return;
        }
        let retired = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        let current = self.current.load(Ordering::Acquire);
        for ptr in retired.into_iter().chain(std::iter::once(current)) {
            // SAFETY: every pointer came from `Box::into_raw` in `Tracked::publishable`,
            // is either current or retired (never both), and is freed only here, once.
            drop(unsafe { Box::from_raw(ptr) });
        }
    }
}

/// The directory's map, modelled as a copy-on-write `HashMap` behind [`Swap`]'s model: a
/// write clones the map, changes the copy and publishes it with [`publish`]; a read loads it
/// with acquire. That is the contract the directory relies on from papaya (a read that sees
/// a write happens-after it, a read that happens-after a write sees it or a later one), as
/// checkable atomics; papaya's own algorithm is trusted as the well-tested dependency it is.
///
/// A walk is as weak as papaya's: each entry has a position (a new key's is after every
/// other's, as a re-inserted key lands further along papaya's probe sequence than the
/// tombstone of its removal), and the walk loads the map afresh at each step and goes on
/// from its last position. So a walk that races writers can yield a removed entry and its
/// key's successor, and a model can catch a caller that trusts a walk to be a snapshot.
///
/// Each write is atomic under a lock of the model's own (papaya's writes are atomic per key).
/// The map hashes under a fixed seed: a checker replays each execution from its start and
/// needs every run of the same schedule to walk the map in the same order.
pub(crate) struct ConcurrentMap<K, V> {
    current: Swap<ModelMap<K, (u64, V)>>,
    /// The next position to hand out.
    writer: Mutex<u64>,
}

type ModelMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

impl<K: std::hash::Hash + Eq + Clone, V: Clone> ConcurrentMap<K, V> {
    pub(crate) fn new() -> ConcurrentMap<K, V> {
        ConcurrentMap {
            current: new_swap(Arc::new(ModelMap::default())),
            writer: Mutex::new(0),
        }
    }
    pub(crate) fn peek<R>(&self, key: &K, f: impl FnOnce(Option<&V>) -> R) -> R {
        peek(&self.current, |map| f(map.get(key).map(|(_, value)| value)))
    }
    /// Copies the map, lets `change` edit the copy (true: publish it), under the lock.
    fn write<R>(
        &self,
        change: impl FnOnce(&mut ModelMap<K, (u64, V)>, &mut u64) -> (R, bool),
    ) -> R {
        let mut next_position = self.writer.lock();
        let mut next = ModelMap::clone(&load(&self.current));
        let (result, changed) = change(&mut next, &mut next_position);
        if changed {
            store(&self.current, Arc::new(next));
        }
        result
    }
    fn put(map: &mut ModelMap<K, (u64, V)>, next: &mut u64, key: K, value: V) {
        let position = map.get(&key).map_or(*next, |(position, _)| *position);
        *next += 1;
        map.insert(key, (position, value));
    }
    pub(crate) fn insert(&self, key: K, value: V) {
        self.write(|map, next| (Self::put(map, next, key, value), true));
    }
    pub(crate) fn remove(&self, key: &K) {
        self.write(|map, _| (map.remove(key), true));
    }
    #[cfg(feature = "baselines")]
    pub(crate) fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> V {
        self.write(|map, next| match map.get(&key) {
            Some((_, value)) => (value.clone(), false),
            None => {
                let value = make();
                Self::put(map, next, key, value.clone());
                (value, true)
            }
        })
    }
    #[cfg(feature = "baselines")]
    pub(crate) fn remove_if(&self, key: &K, mut should_remove: impl FnMut(&V) -> bool) {
        self.write(|map, _| {
            let remove = map.get(key).is_some_and(|(_, value)| should_remove(value));
            if remove {
                map.remove(key);
            }
            ((), remove)
        });
    }
    pub(crate) fn len(&self) -> usize {
        peek(&self.current, |map| map.len())
    }
    /// One step per entry, each on the map as it is then (see the type's documentation).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        let mut after: Option<u64> = None;
        loop {
            let step = peek(&self.current, |map| {
                map.iter()
                    .filter(|(_, (position, _))| after.is_none_or(|after| *position > after))
                    .min_by_key(|(_, (position, _))| *position)
                    .map(|(key, (position, value))| (key.clone(), *position, value.clone()))
            });
            let Some((key, position, value)) = step else {
                return;
            };
            f(&key, &value);
            after = Some(position);
        }
    }
}

pub(crate) fn new_swap<T>(value: Arc<T>) -> Swap<T> {
    Swap {
        current: rt::sync::atomic::AtomicPtr::new(Tracked::publishable(value)),
        retired: rt::sync::Mutex::new(Vec::new()),
    }
}

fn load_tracked<T>(swap: &Swap<T>) -> &Tracked<T> {
    // Acquire pairs with the `publish()` swap or compare-exchange that installed it.
    let ptr = swap.current.load(Ordering::Acquire);
    // SAFETY: installed pointers are freed only when the cell drops, and the borrow of
    // `swap` outlives the returned reference.
    let tracked = unsafe { &*ptr };
    // SAFETY: the publisher wrote this byte before installing the pointer; loom checks
    // that the write happens before this read.
    #[cfg(wal_index_loom)]
    let _ = tracked.written.with(|byte| unsafe { *byte });
    tracked
}

pub(crate) fn load<T>(swap: &Swap<T>) -> Arc<T> {
    Arc::clone(&load_tracked(swap).value)
}

pub(crate) fn peek<T, R>(swap: &Swap<T>, f: impl FnOnce(&T) -> R) -> R {
    f(&load_tracked(swap).value)
}

pub(crate) fn peek_arc<T, R>(swap: &Swap<T>, f: impl FnOnce(&Arc<T>) -> R) -> R {
    f(&load_tracked(swap).value)
}

pub(crate) fn store<T>(swap: &Swap<T>, value: Arc<T>) {
    let fresh = Tracked::publishable(value);
    // The weakened model publishes with a plain relaxed store (stores are serialized by
    // the slot's writer lock, so reading the old pointer first loses nothing).
    let old = if weakened() {
        let old = swap.current.load(Ordering::Relaxed);
        swap.current.store(fresh, publish());
        old
    } else {
        swap.current.swap(fresh, publish())
    };
    swap.retired
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(old);
}

pub(crate) fn swap<T>(swap: &Swap<T>, value: Arc<T>) -> Arc<T> {
    let fresh = Tracked::publishable(value);
    let old = swap.current.swap(fresh, publish());
    // SAFETY: `old` was installed, so it is freed only when the cell drops (it is retired
    // here, not freed).
    let previous = Arc::clone(unsafe { &(*old).value });
    swap.retired
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(old);
    previous
}

/// The model frees nothing early (see [`Swap`]), so there is nothing to reclaim.
pub(crate) fn reclaim_retired() {}

/// The `PapayaIndex` comparator's cell: on the model side the same model as the engine's.
#[cfg(feature = "baselines")]
pub(crate) type ArcSwap<T> = Swap<T>;

/// The comparator's reads and writes: the model's.
#[cfg(feature = "baselines")]
pub(crate) mod comparator {
    pub(crate) use super::{compare_and_swap, load, new_swap, peek, store};
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
        .compare_exchange(seen, fresh, publish(), Ordering::Acquire)
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
pub(crate) struct RawNotify(Arc<WaitList>);

struct WaitList {
    state: rt::sync::Mutex<WaitState>,
    changed: rt::sync::Condvar,
}

struct WaitState {
    notified: u64,
    wakers: Vec<std::task::Waker>,
}

/// A registered waiter: blocks in [`wait_timeout`], or is awaited as a future.
pub(crate) struct Listener {
    list: Arc<WaitList>,
    seen: u64,
}

pub(crate) fn new_raw_notify() -> RawNotify {
    RawNotify(Arc::new(WaitList {
        state: rt::sync::Mutex::new(WaitState {
            notified: 0,
            wakers: Vec::new(),
        }),
        changed: rt::sync::Condvar::new(),
    }))
}

impl RawNotify {
    pub(crate) fn listen(&self) -> Listener {
        let seen = self
            .0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .notified;
        Listener {
            list: Arc::clone(&self.0),
            seen,
        }
    }

    /// `notify` (see [`super::Notify`]); the model list takes its mutex either way, so
    /// there is no leading fence to leave out.
    pub(crate) fn notify_after_fence(&self, _n: usize) {
        let wakers = {
            let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            state.notified += 1;
            std::mem::take(&mut state.wakers)
        };
        self.0.changed.notify_all();
        wakers.into_iter().for_each(std::task::Waker::wake);
    }
}

/// Blocks until a notification newer than the registration. loom has no clock, so the cap
/// is ignored: a model whose waiter is never notified deadlocks, and loom reports it, which
/// is exactly how a lost wake-up shows.
pub(crate) fn wait_timeout(listener: Listener, _cap: std::time::Duration) -> bool {
    let list = &*listener.list;
    let mut state = list.state.lock().unwrap_or_else(|e| e.into_inner());
    while state.notified == listener.seen {
        state = list.changed.wait(state).unwrap_or_else(|e| e.into_inner());
    }
    true
}

impl Listener {
    /// Blocks until notified (for models that drive a listener by hand).
    #[cfg(all(test, wal_index_loom))]
    pub(crate) fn wait(self) {
        wait_timeout(self, std::time::Duration::MAX);
    }
}

impl std::future::Future for Listener {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let mut state = self.list.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.notified != self.seen {
            return std::task::Poll::Ready(());
        }
        state.wakers.push(cx.waker().clone());
        std::task::Poll::Pending
    }
}

/// A model clock: time moves only when a model calls [`Clock::advance`], so TTL and LRU
/// decisions are part of the explored state rather than of the machine's timing.
#[derive(Debug)]
pub struct Clock {
    now: rt::sync::atomic::AtomicU64,
    /// What model time 0 is reported as in `Victim::last_used`.
    epoch: std::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            now: rt::sync::atomic::AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        }
    }

    pub(crate) fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    pub(crate) fn now(&self) -> u64 {
        // SeqCst: model time is a single total order that every thread agrees on.
        self.now.load(Ordering::SeqCst)
    }

    /// The model's now: a model passes `Instant::now()` where production passes a real
    /// instant, and the model clock decides.
    pub(crate) fn at(&self, _at: std::time::Instant) -> u64 {
        self.now()
    }

    /// The model's now, whatever the stopwatch says (model time moves only when a model
    /// advances it).
    pub(crate) fn started(&self, _stopwatch: super::Stopwatch) -> u64 {
        self.now()
    }

    pub fn advance(&self, by: std::time::Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Saturating, as the real clock is.
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }
}

/// Lets another thread run: a scheduling point of the checker (`std`'s would not be one).
#[cfg(feature = "baselines")]
pub(crate) fn yield_now() {
    rt::thread::yield_now();
}
