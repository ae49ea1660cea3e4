//! One build's decision procedure: cache hit, incremental, cold rebuild or incomplete.

use crate::chain::{Chain, Incomplete};
use crate::event::{Event, EventId};
use crate::spine::{Spine, SpineOrder};

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
    /// Whether `spine` should replace the cached one. False for an ancestor of the cached
    /// head, served as a prefix of it: the longer spine stays cached, so the drives that
    /// finish after this out-of-order one extend it instead of walking back up to it.
    pub replaces_cache: bool,
    /// Steps the build took: chain lookups of its walk, plus events of the cached spine it
    /// scanned looking for an ancestor. Zero for a cache hit.
    pub hops: usize,
}

/// The decision procedure of one build, as a pure function of the chain, the cached spine
/// and the target, in the order of the domain (docs/domain.md):
///
/// 1. `target` not indexed: `Incomplete(TipMissing)`.
/// 2. the cached spine's head is `target`: `CacheHit`.
/// 3. walking back from `target` reaches the cached head by links: `Incremental(n)`.
/// 4. otherwise a cold walk from `target`: `ColdRebuild(len)`, or `Incomplete(why)`.
///
/// A target that is an *ancestor* of the cached head (drives of one execution finishing
/// out of order) is, as today, a `ColdRebuild` of the shorter spine, but it is not walked:
/// its spine is a prefix of the cached one. Step 3's walk runs in lockstep with a scan back
/// along the cached spine, and whichever meets the other's end first decides, so an
/// ancestor `d` events behind the cached head costs O(d) (plus an O(log n) slice), and a
/// descendant `d` events ahead costs at most twice its incremental walk. The ancestor's
/// spine does not replace the cache ([`Advance::replaces_cache`]).
///
/// An ancestor's prefix is served only if it passes a genesis event: a chain can start with
/// a root that is not `playbook_started` and meet genesis later, and then a tip below the
/// genesis is `Incomplete(NoGenesis)`, exactly as its walk reports.
///
/// A cached spine is reused only with the chain version it was built on or a later version
/// of the same chain with no rewrite between them, an O(1) check of the chain's lineage:
/// a conflicting redelivery ([`Chain::rewrites`] moved), a sibling clone changed another
/// way, an older snapshot or a re-created execution makes the build a cold rebuild (or
/// incomplete), so a cached spine can never serve a payload or link the chain does not
/// hold.
///
/// Engines that share one cache between threads call this and publish `spine` with a
/// compare-and-swap; single-threaded callers use [`SpineCache`].
pub fn advance(chain: &Chain, cached: Option<&Spine>, target: EventId) -> Advance {
    advance_with(chain, cached, target, Ancestors::Prefix)
}

/// How a build treats a target that is an ancestor of the cached head.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ancestors {
    /// Serve it as a prefix of the cached spine, found in lockstep with step 3's walk.
    Prefix,
    /// Walk it from genesis, as today.
    Walk,
}

fn advance_with(
    chain: &Chain,
    cached: Option<&Spine>,
    target: EventId,
    ancestors: Ancestors,
) -> Advance {
    let incomplete = |why| Advance {
        outcome: AdvanceOutcome::Incomplete(why),
        spine: None,
        appended: false,
        replaces_cache: false,
        hops: 0,
    };
    if !chain.contains(target) {
        return incomplete(Incomplete::TipMissing(target));
    }
    // A cached spine is reused only by the chain version it was built on or a later one of
    // the same chain with no rewrite between them (see `crate::lineage`): never by a sibling
    // clone changed another way, an older version, or a re-created execution's chain.
    let cached =
        cached.filter(|s| chain.lineage().covers(s.built_on()) && s.order() == chain.order());
    if let Some(spine) = cached.filter(|s| s.head() == target) {
        return Advance {
            outcome: AdvanceOutcome::CacheHit,
            spine: Some(spine.clone()),
            appended: false,
            replaces_cache: false,
            hops: 0,
        };
    }
    let mut walker = match crate::chain::Walker::start(chain, target, cached.map(Spine::head)) {
        Ok(walker) => walker,
        Err(why) => return incomplete(why),
    };
    // The scan back along the cached spine, looking for the target (causal order only).
    let mut behind = cached
        .filter(|s| ancestors == Ancestors::Prefix && s.order() == SpineOrder::Causal)
        .map(|s| (s, s.events().rev().skip(1), 0usize, 0usize));
    let mut hops = 0;
    let walk = loop {
        hops += 1;
        if let Some(done) = walker.step() {
            match done {
                Ok(walk) => break walk,
                Err(why) => {
                    return Advance {
                        hops,
                        ..incomplete(why)
                    };
                }
            }
        }
        if let Some((base, scan, dropped, dropped_bytes)) = &mut behind {
            let Some(event) = scan.next() else {
                behind = None;
                continue;
            };
            hops += 1;
            let head_payload = base
                .get(base.len() - 1 - *dropped)
                .map_or(0, |e| e.payload().len());
            *dropped += 1;
            *dropped_bytes += head_payload;
            if event.id() == target {
                // The walk from an ancestor is exactly the prefix, so the prefix is served
                // only if it passes genesis, as the walk's rule requires.
                let Some(spine) = base.ancestor(target, *dropped, *dropped_bytes) else {
                    return Advance {
                        hops,
                        ..incomplete(Incomplete::NoGenesis)
                    };
                };
                return Advance {
                    outcome: AdvanceOutcome::ColdRebuild(spine.len()),
                    spine: Some(spine),
                    appended: false,
                    replaces_cache: false,
                    hops,
                };
            }
        }
    };
    after_walk(chain, cached, target, ancestors, walk, hops)
}

/// Steps 3 and 4 once the walk from `target` ended at the cached head (`Incremental`) or at
/// genesis (`ColdRebuild`), having taken `hops` steps with the scan.
fn after_walk(
    chain: &Chain,
    cached: Option<&Spine>,
    target: EventId,
    ancestors: Ancestors,
    walk: crate::chain::Walk,
    hops: usize,
) -> Advance {
    match cached {
        Some(base) if walk.reached_stop => {
            let added = walk.events.len();
            let mut tail = walk.events;
            tail.reverse();
            let (spine, appended) = base.grow(target, tail, chain.lineage().mark());
            Advance {
                outcome: AdvanceOutcome::Incremental(added),
                spine: Some(spine),
                appended,
                replaces_cache: true,
                hops,
            }
        }
        _ => {
            let spine = chain.spine_of(target, walk.events);
            // The walk reached genesis before the scan met the target: the target may still
            // be an ancestor in the first half of the cached spine. Its spine is then the
            // cached one's first `len` events, which one O(log n) lookup confirms; the
            // longer spine stays cached, as for any ancestor.
            let ancestor = ancestors == Ancestors::Prefix
                && cached.is_some_and(|base| {
                    base.order() == SpineOrder::Causal
                        && base.get(spine.len() - 1).map(Event::id) == Some(target)
                });
            Advance {
                outcome: AdvanceOutcome::ColdRebuild(spine.len()),
                spine: Some(spine),
                appended: false,
                replaces_cache: !ancestor,
                hops,
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
    /// Runs today's build procedure against the cached spine and keeps the result (a failed
    /// build keeps the old spine). Unlike [`advance`], a target that is an ancestor of the
    /// cached head is walked from genesis and replaces the cache, exactly as today's index
    /// does (the lock-based comparators build with this, to keep today's costs).
    pub fn advance_to(&mut self, chain: &Chain, target: EventId) -> AdvanceOutcome {
        let result = advance_with(chain, self.spine.as_ref(), target, Ancestors::Walk);
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
