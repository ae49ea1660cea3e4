//! The resident totals, changed in one place per transition and reported to the observer
//! under the same lock, so the three gauges can never describe two different states.

use crate::observe::IndexObserver;
use crate::report::IndexStats;
use crate::sync::Mutex;

pub(crate) struct Accounting {
    totals: Mutex<IndexStats>,
    observer: std::sync::Arc<dyn IndexObserver>,
}

impl Accounting {
    pub(crate) fn new(observer: std::sync::Arc<dyn IndexObserver>) -> Accounting {
        Accounting {
            totals: Mutex::new(IndexStats::default()),
            observer,
        }
    }

    /// Applies one transition to the totals and reports the result, atomically with
    /// respect to every other transition and to [`Accounting::get`].
    pub(crate) fn change(&self, transition: impl FnOnce(&mut IndexStats)) {
        let mut totals = self.totals.lock();
        transition(&mut totals);
        self.observer.residency(*totals);
    }

    pub(crate) fn get(&self) -> IndexStats {
        *self.totals.lock()
    }

    pub(crate) fn observer(&self) -> &dyn IndexObserver {
        &*self.observer
    }
}
