//! One build's decision procedure: cache hit, incremental, cold rebuild or incomplete.

use crate::chain::{Chain, Incomplete};
use crate::event::EventId;
use crate::spine::Spine;

/// What one [`SpineCache::advance_to`] did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AdvanceOutcome {
    /// The cached spine's head is the target: nothing was walked.
    CacheHit,
    /// The walk back from the target reached the cached head by links; this many new events
    /// were appended.
    Incremental(usize),
    /// The spine was rebuilt from the target back to genesis; it has this many events.
    ColdRebuild(usize),
    /// No spine for this target; any cached spine is kept.
    Incomplete(Incomplete),
}

impl AdvanceOutcome {
    /// The position of this outcome's label in [`AdvanceOutcome::LABELS`], so a metrics
    /// layer indexes an array of series directly instead of matching strings.
    pub fn index(&self) -> usize {
        match self {
            AdvanceOutcome::CacheHit => 0,
            AdvanceOutcome::Incremental(_) => 1,
            AdvanceOutcome::ColdRebuild(_) => 2,
            AdvanceOutcome::Incomplete(_) => 3,
        }
    }

    /// The metrics label: `cache_hit`, `incremental`, `cold_rebuild` or `incomplete`.
    pub fn label(&self) -> &'static str {
        Self::LABELS[self.index()]
    }

    /// Every label, in the order metrics pre-register them.
    pub const LABELS: [&'static str; 4] =
        ["cache_hit", "incremental", "cold_rebuild", "incomplete"];
}

/// The result of [`advance`]: the outcome, and the spine to cache from now on.
#[derive(Debug, Clone)]
pub struct Advance {
    /// What happened.
    pub outcome: AdvanceOutcome,
    /// The spine for the target (`None` exactly when the outcome is `Incomplete`).
    pub spine: Option<Spine>,
    /// True when `spine` is the previously cached spine with the new events appended at the
    /// end (always the case for `Incremental` in causal order).
    pub appended: bool,
}

/// The decision procedure of one build, as a pure function of the chain, the cached spine
/// and the target, in the order of the domain (docs/domain.md):
///
/// 1. `target` not indexed: `Incomplete(TipMissing)`.
/// 2. the cached spine's head is `target`: `CacheHit`.
/// 3. walking back from `target` reaches the cached head by links: `Incremental(n)`.
/// 4. otherwise a cold walk from `target`: `ColdRebuild(len)`, or `Incomplete(why)`.
///
/// A cached spine built before a conflicting redelivery rewrote the chain
/// ([`Chain::rewrites`] moved) is not reused: the build is a cold rebuild (or incomplete),
/// so a cached spine can never serve a payload or link the chain no longer holds.
///
/// Engines that share one cache between threads call this and publish `spine` with a
/// compare-and-swap; single-threaded callers use [`SpineCache`].
pub fn advance(chain: &Chain, cached: Option<&Spine>, target: EventId) -> Advance {
    let incomplete = |why| Advance {
        outcome: AdvanceOutcome::Incomplete(why),
        spine: None,
        appended: false,
    };
    if !chain.contains(target) {
        return incomplete(Incomplete::TipMissing(target));
    }
    let cached =
        cached.filter(|s| s.generation() == chain.rewrites() && s.order() == chain.order());
    if let Some(spine) = cached.filter(|s| s.head() == target) {
        return Advance {
            outcome: AdvanceOutcome::CacheHit,
            spine: Some(spine.clone()),
            appended: false,
        };
    }
    let walk = match chain.walk_back(target, cached.map(Spine::head)) {
        Ok(walk) => walk,
        Err(why) => return incomplete(why),
    };
    match cached {
        Some(base) if walk.reached_stop => {
            let added = walk.events.len();
            let mut tail = walk.events;
            tail.reverse();
            let (spine, appended) = base.grow(target, tail);
            Advance {
                outcome: AdvanceOutcome::Incremental(added),
                spine: Some(spine),
                appended,
            }
        }
        _ => {
            let spine = chain.spine_of(target, walk.events);
            Advance {
                outcome: AdvanceOutcome::ColdRebuild(spine.len()),
                spine: Some(spine),
                appended: false,
            }
        }
    }
}

/// A single-owner cache of one execution's spine.
///
/// ```
/// use chain_fold::{AdvanceOutcome, Chain, Event, SpineCache, SpineOrder};
///
/// let mut chain = Chain::new(SpineOrder::Causal);
/// for (id, prev, ty) in [(1, None, "playbook_started"), (2, Some(1), "a"), (3, Some(2), "b")] {
///     chain.apply(Event::minimal(id, 1, prev, ty));
/// }
/// let mut cache = SpineCache::default();
/// assert_eq!(cache.advance_to(&chain, 2), AdvanceOutcome::ColdRebuild(2));
/// assert_eq!(cache.advance_to(&chain, 2), AdvanceOutcome::CacheHit);
/// assert_eq!(cache.advance_to(&chain, 3), AdvanceOutcome::Incremental(1));
/// assert_eq!(cache.spine().unwrap().ids(), vec![1, 2, 3]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct SpineCache {
    spine: Option<Spine>,
    last_appended: bool,
}

impl SpineCache {
    /// Runs [`advance`] against the cached spine and keeps the result (a failed build keeps
    /// the old spine).
    pub fn advance_to(&mut self, chain: &Chain, target: EventId) -> AdvanceOutcome {
        let result = advance(chain, self.spine.as_ref(), target);
        self.last_appended = result.appended;
        if let Some(spine) = result.spine {
            self.spine = Some(spine);
        }
        result.outcome
    }

    /// The cached spine, if any build succeeded.
    pub fn spine(&self) -> Option<&Spine> {
        self.spine.as_ref()
    }

    /// Whether the last advance only appended to the previous spine.
    pub(crate) fn last_appended(&self) -> bool {
        self.last_appended
    }

    /// Drops the cached spine.
    pub fn clear(&mut self) {
        self.spine = None;
    }
}
