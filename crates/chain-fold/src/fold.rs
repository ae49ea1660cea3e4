//! Incremental folds over a spine: the state at the cached head, advanced by the new tail.
//!
//! A worker's state builder folds the spine a drive is served; the index itself never
//! folds. This module shows that a [`SpineCache`]'s incremental advance keeps a fold's state
//! equal to folding the whole spine, and the crate's tests hold it to that.

use crate::advance::{AdvanceOutcome, SpineCache};
use crate::chain::Chain;
use crate::event::{Event, EventId};
use crate::spine::Spine;

/// A left fold over a spine's events, in spine order.
pub trait Fold {
    /// The folded state.
    type State;
    /// The state before any event.
    fn init(&self) -> Self::State;
    /// Folds one more event into the state.
    fn step(&self, state: &mut Self::State, event: &Event);
}

/// A [`SpineCache`] that also keeps `F`'s state at the cached head.
///
/// An incremental advance folds only the new events; a cold rebuild (or an event-id-ordered
/// spine that had to place a new event before an old one) refolds from genesis. The state
/// always equals folding the current spine from scratch.
///
/// ```
/// use chain_fold::fold::{Fold, FoldCache};
/// use chain_fold::{Chain, Event, SpineOrder};
///
/// struct CountSteps;
/// impl Fold for CountSteps {
///     type State = usize;
///     fn init(&self) -> usize { 0 }
///     fn step(&self, n: &mut usize, _: &Event) { *n += 1 }
/// }
///
/// let mut chain = Chain::new(SpineOrder::Causal);
/// chain.apply(Event::minimal(1, 1, None, "playbook_started"));
/// let mut folds = FoldCache::new(CountSteps);
/// folds.advance_to(&chain, 1);
/// chain.apply(Event::minimal(2, 1, Some(1), "step"));
/// folds.advance_to(&chain, 2); // folds one event, not two
/// assert_eq!(folds.state(), Some(&2));
/// ```
pub struct FoldCache<F: Fold> {
    fold: F,
    cache: SpineCache,
    state: Option<F::State>,
}

impl<F: Fold> FoldCache<F> {
    /// An empty cache for `fold`.
    pub fn new(fold: F) -> Self {
        FoldCache {
            fold,
            cache: SpineCache::default(),
            state: None,
        }
    }

    /// Advances the spine to `target` and brings the state along.
    pub fn advance_to(&mut self, chain: &Chain, target: EventId) -> AdvanceOutcome {
        let outcome = self.cache.advance_to(chain, target);
        let Some(spine) = self.cache.spine() else {
            return outcome;
        };
        match (&outcome, self.state.as_mut()) {
            (AdvanceOutcome::CacheHit | AdvanceOutcome::Incomplete(_), Some(_)) => {}
            (AdvanceOutcome::Incremental(n), Some(state)) if self.cache.last_appended() => {
                for event in spine.events().skip(spine.len() - n) {
                    self.fold.step(state, event);
                }
            }
            _ => self.state = Some(fold_all(&self.fold, spine)),
        }
        outcome
    }

    /// The state at the cached head.
    pub fn state(&self) -> Option<&F::State> {
        self.state.as_ref()
    }

    /// The cached spine.
    pub fn spine(&self) -> Option<&Spine> {
        self.cache.spine()
    }
}

/// Folds a whole spine from `init`.
pub fn fold_all<F: Fold>(fold: &F, spine: &Spine) -> F::State {
    let mut state = fold.init();
    for event in spine.events() {
        fold.step(&mut state, event);
    }
    state
}

impl<F: Fold> std::fmt::Debug for FoldCache<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoldCache")
            .field("folded", &self.state.is_some())
            .finish_non_exhaustive()
    }
}
