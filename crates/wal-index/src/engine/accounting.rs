//! The resident totals, changed in one place per transition and reported to the observer
//! under the same lock, so the three gauges can never describe two different states.

// `pub` so that `wal_index::model` can re-export these to the loom models under
// `cfg(wal_index_loom)`; the module itself stays private, so they are crate-internal in
// every other build.
#![allow(unreachable_pub)]

use crate::observe::IndexObserver;
use crate::report::IndexStats;
use crate::sync::Mutex;

/// The three resident totals behind one lock, reported to the observer on every change.
pub struct Accounting {
    totals: Mutex<IndexStats>,
    observer: std::sync::Arc<dyn IndexObserver>,
}

impl Accounting {
    /// Zero totals, reporting to `observer`.
    pub fn new(observer: std::sync::Arc<dyn IndexObserver>) -> Accounting {
        Accounting {
            totals: Mutex::new(IndexStats::default()),
            observer,
        }
    }

    /// Applies one transition to the totals and reports the result, atomically with
    /// respect to every other transition and to [`Accounting::get`].
    pub fn change(&self, transition: impl FnOnce(&mut IndexStats)) {
        let mut totals = self.totals.lock();
        transition(&mut totals);
        self.observer.residency(*totals);
    }

    /// The current totals.
    pub fn get(&self) -> IndexStats {
        *self.totals.lock()
    }

    /// The observer.
    pub fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }
}
