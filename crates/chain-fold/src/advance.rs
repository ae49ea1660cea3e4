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
            let added = walk.len;
            // The cached spine is the log's first `base.len()` events (its line has had no
            // rewrite since: `covers` held), and the walk visited the log's next events one
            // after the other: the new spine is a longer prefix of the same log.
            let continued_log = walk
                .log_run
                .as_ref()
                .filter(|run| base.shares_chain_log() && run.start == base.len());
            let (spine, appended) = if let Some(run) = continued_log {
                let prefix = chain.log_prefix(run.end);
                let spine = base.extended_over_log(
                    target,
                    chain.lineage().mark(),
                    prefix,
                    walk.payload_bytes,
                );
                (spine, true)
            } else {
                let mut tail = walk.into_tip_first(chain);
                tail.reverse();
                base.grow(target, tail, chain.lineage().mark())
            };
            Advance {
                outcome: AdvanceOutcome::Incremental(added),
                spine: Some(spine),
                appended,
                replaces_cache: true,
                hops,
            }
        }
        _ => {
            let spine = chain.spine_of(target, walk);
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

#[cfg(all(test, not(chain_fold_loom)))]
mod shared_log_tests {
    use super::*;

    fn linear(chain: &mut Chain, ids: std::ops::RangeInclusive<EventId>) {
        for id in ids {
            let (prev, ty) = if id == 1 {
                (None, "playbook_started")
            } else {
                (Some(id - 1), "step")
            };
            chain.apply(Event::minimal(id, 1, prev, ty));
        }
    }

    fn spine_at(chain: &Chain, cached: Option<&Spine>, target: EventId) -> Spine {
        advance(chain, cached, target).spine.expect("a spine")
    }

    /// The spine's list is the chain's log, and the spine equals a cold walk's.
    fn assert_shares(chain: &Chain, spine: &Spine) {
        assert!(spine.shares_chain_log());
        assert!(chain.log_prefix(0).shares_buffer_with(spine.log()));
        // Charged its list although the chain charges it too (see `Spine::heap_bytes`).
        assert_eq!(
            spine.heap_bytes(),
            crate::spine::SPINE_HEADER_BYTES + chain.log_prefix(0).heap_bytes()
        );
        let cold = chain
            .walk_back(spine.head(), None)
            .unwrap()
            .into_tip_first(chain);
        let ids: Vec<_> = cold.iter().rev().map(Event::id).collect();
        assert_eq!(spine.ids(), ids);
        let bytes: usize = cold.iter().map(|e| e.payload().len()).sum();
        assert_eq!(spine.payload_bytes(), bytes);
    }

    #[test]
    fn a_chain_in_causal_order_serves_spines_that_are_its_own_log() {
        for order in [SpineOrder::Causal, SpineOrder::EventId] {
            let mut chain = Chain::new(order);
            linear(&mut chain, 1..=3);
            let cold = spine_at(&chain, None, 3);
            assert_shares(&chain, &cold);
            // Extended past the log's buffer (4 cells, then 7, then 12): each extension is
            // the new log's prefix, however often the chain's buffer moved.
            let mut cached = cold;
            for tip in [4, 9, 20] {
                linear(&mut chain, cached.head() + 1..=tip);
                let next = advance(&chain, Some(&cached), tip);
                assert_eq!(
                    next.outcome,
                    AdvanceOutcome::Incremental((tip - cached.head()) as usize)
                );
                assert!(next.appended);
                cached = next.spine.unwrap();
                assert_shares(&chain, &cached);
            }
            // An ancestor served from it is a prefix of the same log.
            if order == SpineOrder::Causal {
                let ancestor = spine_at(&chain, Some(&cached), 15);
                assert_shares(&chain, &ancestor);
            }
        }
    }

    #[test]
    fn a_branch_or_a_late_event_gets_a_list_of_its_own_and_the_chain_keeps_its_log() {
        let mut chain = Chain::new(SpineOrder::Causal);
        // Five events: the log's buffer has 7 cells, so the appends below write in place.
        linear(&mut chain, 1..=5);
        let shared = spine_at(&chain, None, 5);
        // 7 branches off 5, then 6 (late, below 7) continues from 5 too.
        chain.apply(Event::minimal(7, 1, Some(5), "step"));
        chain.apply(Event::minimal(6, 1, Some(5), "step"));
        let log_before = chain.log_prefix(0);
        let branch = spine_at(&chain, Some(&shared), 6);
        assert!(!branch.shares_chain_log());
        assert_eq!(branch.ids(), vec![1, 2, 3, 4, 5, 6]);
        // The chain still appends in place: the branch's list claimed no cell of its log.
        chain.apply(Event::minimal(8, 1, Some(7), "step"));
        assert!(chain.log_prefix(0).shares_buffer_with(&log_before));
        // 8's walk passes 7 and 5, not 6: the log's positions 6 down to 0, one run, so its
        // spine is the log again (walked cold: the cached branch is not its ancestor).
        let eight = advance(&chain, Some(&branch), 8);
        assert_eq!(eight.outcome, AdvanceOutcome::ColdRebuild(7));
        let eight = eight.spine.unwrap();
        assert_eq!(eight.ids(), vec![1, 2, 3, 4, 5, 7, 8]);
        assert_shares(&chain, &eight);
    }

    #[test]
    fn a_rewrite_rebuilds_on_the_rewritten_log() {
        let mut chain = Chain::new(SpineOrder::Causal);
        linear(&mut chain, 1..=4);
        let before = spine_at(&chain, None, 4);
        chain.apply(Event::minimal(3, 1, Some(2), "other"));
        linear(&mut chain, 5..=5);
        let after = advance(&chain, Some(&before), 5);
        assert_eq!(after.outcome, AdvanceOutcome::ColdRebuild(5));
        let after = after.spine.unwrap();
        assert_shares(&chain, &after);
        assert_eq!(after.get(2).unwrap().event_type(), "other");
    }
}
