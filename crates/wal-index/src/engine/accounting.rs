//! The resident totals, changed in one place per transition and reported to the observer
//! under the same lock, so the three gauges can never describe two different states.

use crate::observe::IndexObserver;
use crate::report::IndexStats;
use crate::sync::{AtomicI64, CachePadded, Mutex, Ordering};

/// The three resident totals behind one lock, reported to the observer on every change,
/// plus the cached spines' bytes, which builds change without any lock.
pub(crate) struct Accounting {
    /// Padded: the drain locks it for every execution of a batch.
    totals: CachePadded<Mutex<IndexStats>>,
    /// The heap of every slot's cached spine. Builds add to it when their compare-and-swap
    /// publishes a spine and evictors subtract what they take out, so it is a sum of
    /// commuting deltas: it may be momentarily negative between a build's publish and its
    /// add, never once both are done.
    cached_spines: CachePadded<AtomicI64>,
    observer: std::sync::Arc<dyn IndexObserver>,
}

impl Accounting {
    /// Zero totals, reporting to `observer`.
    pub(crate) fn new(observer: std::sync::Arc<dyn IndexObserver>) -> Accounting {
        Accounting {
            totals: CachePadded::new(Mutex::new(IndexStats::default())),
            cached_spines: CachePadded::new(AtomicI64::new(0)),
            observer,
        }
    }

    /// Applies one transition to the totals and reports the result, atomically with
    /// respect to every other transition and to [`Accounting::get`].
    pub(crate) fn change(&self, transition: impl FnOnce(&mut IndexStats)) {
        let mut totals = self.totals.lock();
        transition(&mut totals);
        self.observer.residency(self.with_spines(*totals));
    }

    /// A cached spine's heap changed by `delta` bytes (a build published one, an evictor or
    /// applier took one out).
    pub(crate) fn cached_spines_changed(&self, delta: i64) {
        // Relaxed: a sum of commuting deltas; no other data is published through it.
        self.cached_spines.fetch_add(delta, Ordering::Relaxed);
    }

    /// The cached spines' bytes, not clamped at zero (see [`Accounting::get`]).
    #[cfg(all(test, wal_index_loom))]
    pub(crate) fn cached_spines_unclamped(&self) -> i64 {
        // Relaxed: see `cached_spines_changed`; the models read it after joining every
        // thread that changed it.
        self.cached_spines.load(Ordering::Relaxed)
    }

    fn with_spines(&self, mut totals: IndexStats) -> IndexStats {
        // Relaxed: see `cached_spines_changed`.
        let spines = self.cached_spines.load(Ordering::Relaxed).max(0);
        totals.bytes += usize::try_from(spines).unwrap_or(0);
        totals
    }

    /// The current totals, the cached spines' bytes included. Also reports them, so the
    /// gauges never lag what `stats()` says (builds change the spines' bytes without the
    /// lock, and so without reporting).
    pub(crate) fn get(&self) -> IndexStats {
        let totals = self.totals.lock();
        let current = self.with_spines(*totals);
        self.observer.residency(current);
        drop(totals);
        current
    }

    /// The observer.
    pub(crate) fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }
}
