//! Which chain versions a cached spine may be reused with.
//!
//! A spine built on one version of a chain holds that version's events. It may be reused
//! (a cache hit, or the base of an incremental build) with any *later* version of the same
//! chain, as long as no event it holds was replaced since: later versions only add events.
//! It must not be reused with a sibling (a clone of the same version that was changed in
//! another way), with an earlier version, or with a chain that merely has the same
//! execution id (an evicted and re-created execution).
//!
//! # The model
//!
//! Every chain carries a *line* (a shared counter, one allocation per line) and its own
//! *version* on that line. A chain starts a fresh line at version 0. Cloning a chain copies
//! both: the clone is the same version. Each change that only adds an event moves the chain
//! to the next version of its line by claiming that version with one compare-and-swap on
//! the line's counter. Exactly one change can claim a given version, so a line is a linear
//! history: every chain on line `L` at version `v` holds the same events, and every chain at
//! `w > v` on `L` holds all of them, unchanged. A change that loses the claim (a sibling
//! already moved past this version) and a change that replaces an event (a rewrite) start a
//! fresh line instead.
//!
//! A spine records the line and version of the chain it was built on
//! ([`Lineage::mark`]); [`Lineage::covers`] is then the whole reuse check: same line
//! (pointer equality of an allocation the mark keeps alive, so an address cannot be reused
//! while the mark exists) and a version at or after the mark's. It is O(1) and reads no
//! event.
//!
//! # Costs and limits
//!
//! One uncontended compare-and-swap per added event, and one 16-byte allocation per line
//! (per execution, plus one per rewrite or lost claim). The check is conservative: a spine
//! built on a version older than the one its sibling branched from is still valid content
//! for the sibling, but the sibling is on a fresh line and rebuilds it cold. A chain that
//! is never cloned and changed on two sides never loses a claim.

use crate::sync::{Arc, AtomicU64, Ordering};

/// A chain's place in its history (see the module documentation).
#[derive(Clone)]
pub(crate) struct Lineage {
    line: Arc<AtomicU64>,
    version: u64,
}

impl Default for Lineage {
    fn default() -> Self {
        Lineage::fresh()
    }
}

impl Lineage {
    /// Version 0 of a new line.
    pub(crate) fn fresh() -> Lineage {
        Lineage {
            line: Arc::new(AtomicU64::new(0)),
            version: 0,
        }
    }

    /// Moves to the next version after a change that only added events: the next version
    /// of this line if no sibling claimed it first, else a fresh line.
    pub(crate) fn advance(&mut self) {
        // Relaxed: the counter is a ticket, not a publication. The only property used is
        // that read-modify-writes of one location are totally ordered, so at most one
        // compare-and-swap from `version` succeeds; no other memory is read on the strength
        // of it (a spine's check compares the pointer and the plain `version` it holds).
        let claimed = if crate::mutation::on("lineage-claim-without-cas") {
            // The mutation: a check, then a store, which two siblings of one version can
            // both pass (`scripts/loom.sh` requires the model below to catch it).
            let free = self.line.load(Ordering::Relaxed) == self.version;
            if free {
                self.line.store(self.version + 1, Ordering::Relaxed);
            }
            free
        } else {
            self.line
                .compare_exchange(
                    self.version,
                    self.version + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        };
        if claimed {
            self.version += 1;
        } else {
            *self = Lineage::fresh();
        }
    }

    /// Starts a fresh line after a change that replaced an event.
    pub(crate) fn restart(&mut self) {
        *self = Lineage::fresh();
    }

    /// This version, for a spine built on it to record.
    pub(crate) fn mark(&self) -> Lineage {
        self.clone()
    }

    /// Whether a spine built on the version `built` may be reused with this one: the same
    /// line, at that version or a later one.
    pub(crate) fn covers(&self, built: &Lineage) -> bool {
        Arc::ptr_eq(&self.line, &built.line) && built.version <= self.version
    }
}

#[cfg(all(test, not(chain_fold_loom)))]
mod tests {
    use super::Lineage;

    #[test]
    fn a_later_version_covers_an_earlier_one_and_not_the_reverse() {
        let mut chain = Lineage::fresh();
        let first = chain.mark();
        chain.advance();
        assert!(chain.covers(&first));
        assert!(!first.covers(&chain.mark()));
    }

    #[test]
    fn siblings_do_not_cover_each_other() {
        let base = Lineage::fresh();
        let (mut left, mut right) = (base.clone(), base.clone());
        left.advance();
        right.advance();
        assert!(!right.covers(&left.mark()) && !left.covers(&right.mark()));
        // The one that claimed the version still covers the common base; the other one
        // started a fresh line (conservative: it rebuilds).
        assert!(left.covers(&base) && !right.covers(&base));
    }

    #[test]
    fn a_restart_or_a_new_chain_covers_nothing_before_it() {
        let mut chain = Lineage::fresh();
        let before = chain.mark();
        chain.restart();
        assert!(!chain.covers(&before));
        assert!(!Lineage::fresh().covers(&before));
    }
}

/// The claim under loom (`--cfg chain_fold_loom`, run by `scripts/loom.sh`): two siblings of
/// one version that both change can never both stay on the line, so a spine built on one is
/// never reused by the other.
#[cfg(chain_fold_loom)]
mod loom_models {
    use super::Lineage;
    use loom::thread;

    #[test]
    fn two_siblings_never_claim_the_same_version() {
        loom::model(|| {
            let base = Lineage::fresh();
            let mut left = base.clone();
            let racer = thread::spawn(move || {
                left.advance();
                left
            });
            let mut right = base.clone();
            right.advance();
            let left = racer.join().unwrap();
            assert!(
                !(left.covers(&right.mark()) && right.covers(&left.mark())),
                "two siblings claimed one version: each would reuse the other's spines"
            );
            assert!(!left.covers(&right.mark()) || !right.covers(&base));
            // Exactly one of them is still on the base's line.
            assert_eq!(
                usize::from(left.covers(&base)) + usize::from(right.covers(&base)),
                1
            );
        });
    }
}
