//! The one place the engine's synchronization primitives come from.
//!
//! Every atomic, `Arc`, lock, snapshot cell and wait list that a protocol of this crate
//! relies on is imported from here, so that building with `--cfg wal_index_loom` swaps
//! them all for [loom](https://docs.rs/loom)'s model-checked versions, and `--cfg
//! wal_index_shuttle` for [shuttle](https://docs.rs/shuttle)'s. The cfgs are namespaced
//! because a dependency already reacts to plain `cfg(loom)`. No file outside this folder
//! knows which side it runs on.
//!
//! | side | file | for |
//! |---|---|---|
//! | production | `std.rs`, `snapshot_cell.rs` | `std`, `parking_lot`, `papaya`, `event-listener` (and `arc-swap`, the `PapayaIndex` comparator's cell) |
//! | both | `reclaim.rs` | the snapshot cell's reclamation domain, on the side's atomics |
//! | model | `model.rs` | loom (exhaustive, small states) or shuttle (randomized, large states) |
//!
//! `Swap` is the snapshot cell in normal builds (`snapshot_cell.rs`: an atomic pointer to an
//! `Arc`, replaced values freed by writers through the reclamation domain of `reclaim.rs`;
//! why not arc-swap is there). On the model side it is an atomic pointer published with
//! release and loaded with acquire that keeps every replaced value until the cell drops:
//! the engine's models check *our* protocol around the publication (what is published
//! before what, which ordering pairs with which). The reclamation domain is written on the
//! side's atomics, so its own loom models (in `reclaim.rs`, each catching a mutation) check
//! it; the cell's `unsafe` code is checked by Miri (`scripts/miri.sh`).
//!
//! `ConcurrentMap` (the directory) is `papaya::HashMap` in normal builds, for the reasons in
//! its documentation, and a copy-on-write map behind the same modelled pointer as `Swap` on
//! the model side.
//!
//! `Notify` is a wait list (`event_listener::Event` in normal builds, and a model-visible
//! wait list on the model side, with the same register-then-check contract: a listener
//! created before the check is woken by any `notify` that comes after the check) behind a
//! flag that skips the notify until someone listened (see [`Notify`]), which keeps a slot
//! nobody ever waited on from allocating event-listener's list.
//!
//! `Clock` is the monotonic clock in normal builds and a model clock that moves only when a
//! model advances it.

#[cfg(not(any(wal_index_loom, wal_index_shuttle)))]
mod snapshot_cell;
#[cfg(not(any(wal_index_loom, wal_index_shuttle)))]
mod std;
#[cfg(not(any(wal_index_loom, wal_index_shuttle)))]
pub(crate) use self::std::*;

#[cfg(any(wal_index_loom, wal_index_shuttle))]
mod model;

// The model side's cell keeps every replaced value (see `model.rs`): only the std side's
// cell and the domain's own loom models use it there.
#[cfg_attr(any(wal_index_loom, wal_index_shuttle), allow(dead_code))]
mod reclaim;
#[cfg(any(wal_index_loom, wal_index_shuttle))]
pub(crate) use self::model::*;

/// A wait list that costs nothing until someone listens.
///
/// event-listener allocates an `Event`'s list (72 bytes on 64-bit Linux) on the first
/// `notify`, listener or not, so every slot the drain ever published to held one, although
/// most executions never have a drive waiting on them. This wrapper calls the list's
/// `notify` only once a `listen` has run, so a slot nobody waited on never allocates it.
/// The flag costs 8 bytes in a slot's layout (the wrapper is a pointer and a byte), so a
/// slot nobody waited on is 64 bytes smaller and one that was waited on 8 bytes larger.
///
/// # Why a skipped notify is never a lost wake-up
///
/// The contract is the list's: a listener registers, then checks its condition; a
/// notifier changes the condition, then notifies. The flag adds a store-fence-load on
/// each side, Dekker's pattern:
///
/// ```text
/// listen:  listened = true;  fence(SeqCst);  register;  check the condition
/// notify:  change the condition;  fence(SeqCst);  if listened { list.notify }
/// ```
///
/// The two fences are in one total order. If the listener's comes first, the notifier's
/// load after its own fence sees `listened` (stored before the listener's fence), and the
/// list's contract applies unchanged. If the notifier's comes first, the listener's check
/// after its fence sees the changed condition (stored before the notifier's fence), and it
/// does not wait. The flag is never cleared. The loom models of a drive against a publish
/// run through this code, and mutation `notify-unfenced` (both fences taken out) is one of
/// the mutations they must catch (`scripts/loom.sh`).
///
/// What it costs: one fence and one load per `notify`; with no listener ever, that is all
/// (no lock of the list), and with one the list's `notify` runs without the fence it would
/// start with (this one already orders the caller's change before it). One store and one
/// fence per `listen`: the store is unconditional (checking first would be as correct, but
/// loom's fence model would report a lost wake-up that the memory model rules out), and
/// listens are rare next to builds.
pub(crate) struct Notify {
    list: RawNotify,
    listened: AtomicBool,
}

pub(crate) fn new_notify() -> Notify {
    Notify {
        list: new_raw_notify(),
        listened: AtomicBool::new(false),
    }
}

impl Notify {
    /// Registers a listener (see the list's contract above).
    pub(crate) fn listen(&self) -> Listener {
        // Relaxed: the fence below orders it (see the type's documentation).
        self.listened.store(true, Ordering::Relaxed);
        if !chain_fold::mutation::on("notify-unfenced") {
            // Pairs with the fence in `notify`.
            fence(Ordering::SeqCst);
        }
        self.list.listen()
    }

    /// Wakes up to `n` listeners, after the caller changed their condition.
    pub(crate) fn notify(&self, n: usize) {
        if !chain_fold::mutation::on("notify-unfenced") {
            // Pairs with the fence in `listen`.
            fence(Ordering::SeqCst);
        }
        // Relaxed: the fences order it.
        if self.listened.load(Ordering::Relaxed) {
            // Without the list's own leading fence: the one above orders the change.
            self.list.notify_after_fence(n);
        }
    }
}

impl ::std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
        f.debug_struct("Notify")
            .field("listened", &self.listened.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Times one build, on the OS monotonic clock on both sides: recency is on that clock too
/// (one clock for both, so an event applied after an instant is never recorded as used
/// before it), and a model does not read durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch(::std::time::Instant);

impl Stopwatch {
    pub(crate) fn start() -> Stopwatch {
        Stopwatch(::std::time::Instant::now())
    }

    pub(crate) fn elapsed(&self) -> ::std::time::Duration {
        self.0.elapsed()
    }

    #[cfg_attr(any(wal_index_loom, wal_index_shuttle), allow(dead_code))]
    pub(crate) fn started_at(&self) -> ::std::time::Instant {
        self.0
    }
}

/// How an operation written once as `async` code waits: the blocking forms run it to
/// completion on the calling thread ([`run_to_completion`]) and park that thread; the async
/// forms await a timer, so any executor (tokio, smol, a plain `block_on`) can run them. Only
/// waits differ between the two: builds, applies and pulls are the same calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Parks the calling thread (a model's wait list under loom and shuttle).
    Park,
    /// Awaits a `futures-timer` delay: never blocks the executor's thread.
    Timer,
}

impl Waiting {
    /// Waits for `listener` or `cap`, whichever comes first; true if woken.
    pub(crate) async fn wait(self, listener: Listener, cap: ::std::time::Duration) -> bool {
        match self {
            Waiting::Park => wait_timeout(listener, cap),
            // Under a model, whose clock has no timers, a wait ends only by a wake-up (as
            // `wait_timeout`'s does there): a lost one is a deadlock the model reports.
            #[cfg(any(wal_index_loom, wal_index_shuttle))]
            Waiting::Timer => {
                let _ = cap;
                listener.await;
                true
            }
            #[cfg(not(any(wal_index_loom, wal_index_shuttle)))]
            Waiting::Timer => {
                futures_lite::future::or(
                    async {
                        listener.await;
                        true
                    },
                    async {
                        futures_timer::Delay::new(cap).await;
                        false
                    },
                )
                .await
            }
        }
    }

    /// Awaits `operation` for at most `cap`; `None` if the cap passed first (the operation
    /// is dropped). Under a model, whose clock has no timers, it awaits the operation.
    pub(crate) async fn within<F: ::std::future::Future>(
        self,
        operation: F,
        cap: ::std::time::Duration,
    ) -> Option<F::Output> {
        #[cfg(any(wal_index_loom, wal_index_shuttle))]
        {
            let _ = cap;
            Some(operation.await)
        }
        #[cfg(not(any(wal_index_loom, wal_index_shuttle)))]
        {
            // Both sides time out on a timer: a parked thread polls it like any executor.
            futures_lite::future::or(async { Some(operation.await) }, async {
                futures_timer::Delay::new(cap).await;
                None
            })
            .await
        }
    }

    /// Lets `pause` pass.
    pub(crate) async fn sleep(self, pause: ::std::time::Duration) {
        match self {
            Waiting::Park => ::std::thread::sleep(pause),
            Waiting::Timer => futures_timer::Delay::new(pause).await,
        }
    }
}

/// Layout only, the same on both sides: a field on cache lines of its own, so writes to it
/// do not evict the lines around it from other cores' caches.
pub(crate) use crossbeam_utils::CachePadded;
