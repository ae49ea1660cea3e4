//! The concurrency cap on rehydrate-on-miss replays.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Caps how many executions are replayed from the retained WAL at once (today's default is
/// 2): a replay reads and applies a whole execution, and a burst of misses after a restart
/// must not turn into a burst of full replays.
#[derive(Debug)]
pub struct RehydrateGate {
    in_flight: AtomicUsize,
    max: usize,
}

impl Default for RehydrateGate {
    /// Two concurrent replays.
    fn default() -> Self {
        RehydrateGate::new(2)
    }
}

impl RehydrateGate {
    /// A gate admitting `max` concurrent replays.
    pub fn new(max: usize) -> Self {
        RehydrateGate {
            in_flight: AtomicUsize::new(0),
            max,
        }
    }

    /// The cap.
    pub fn max_concurrent(&self) -> usize {
        self.max
    }

    /// A permit, or `None` if `max` replays are already running. Never blocks.
    pub fn try_enter(&self) -> Option<RehydratePermit<'_>> {
        // Relaxed: the counter only bounds concurrency; it publishes no data.
        self.in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| RehydratePermit { gate: self })
    }
}

/// One admitted replay; dropping it frees the place.
#[derive(Debug)]
pub struct RehydratePermit<'a> {
    gate: &'a RehydrateGate,
}

impl Drop for RehydratePermit<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_cap_and_frees_on_drop() {
        let gate = RehydrateGate::new(2);
        let a = gate.try_enter().unwrap();
        let _b = gate.try_enter().unwrap();
        assert!(gate.try_enter().is_none());
        drop(a);
        assert!(gate.try_enter().is_some());
    }
}
