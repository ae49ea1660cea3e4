//! Every scenario of docs/domain.md ("Chains and the cached spine"), by name.

use chain_fold::fold::{Fold, FoldCache, fold_all};
use chain_fold::{AdvanceOutcome, Chain, Event, Incomplete, SpineCache, SpineOrder};

fn ev(id: i64, prev: Option<i64>) -> Event {
    let ty = if prev.is_none() {
        "playbook_started"
    } else {
        "step"
    };
    Event::minimal(id, 1, prev, ty)
}

fn chain_of(order: SpineOrder, events: &[(i64, Option<i64>)]) -> Chain {
    let mut chain = Chain::new(order);
    for &(id, prev) in events {
        chain.apply(ev(id, prev));
    }
    chain
}

/// `1 playbook_started <- 2 <- 3 <- 100 <- 50`, 50 arrived last.
const INVERSION: [(i64, Option<i64>); 5] = [
    (1, None),
    (2, Some(1)),
    (3, Some(2)),
    (100, Some(3)),
    (50, Some(100)),
];

#[test]
fn inversion_walk_from_tip_keeps_the_low_id_tip() {
    let chain = chain_of(SpineOrder::Causal, &INVERSION);
    assert_eq!(chain.walk_from(50).unwrap().ids(), vec![1, 2, 3, 100, 50]);
}

#[test]
fn inversion_walk_from_max_id_drops_the_tip() {
    let chain = chain_of(SpineOrder::Causal, &INVERSION);
    assert_eq!(chain.max_id(), Some(100));
    assert_eq!(chain.walk_from(100).unwrap().ids(), vec![1, 2, 3, 100]);
}

#[test]
fn inversion_in_event_id_order_sorts_by_id() {
    let chain = chain_of(SpineOrder::EventId, &INVERSION);
    let spine = chain.walk_from(50).unwrap();
    assert_eq!(spine.ids(), vec![1, 2, 3, 50, 100]);
    assert_eq!(spine.head(), 50);
}

#[test]
fn inversion_advance_before_the_tip_is_indexed_is_incomplete() {
    let chain = chain_of(SpineOrder::Causal, &INVERSION[..4]);
    let mut cache = SpineCache::default();
    assert_eq!(
        cache.advance_to(&chain, 100),
        AdvanceOutcome::ColdRebuild(4)
    );
    assert_eq!(
        cache.advance_to(&chain, 50),
        AdvanceOutcome::Incomplete(Incomplete::TipMissing(50))
    );
    assert_eq!(cache.spine().unwrap().head(), 100, "the cache is untouched");
}

#[test]
fn inversion_incremental_from_100_to_50_equals_cold_rebuild() {
    for order in [SpineOrder::Causal, SpineOrder::EventId] {
        let chain = chain_of(order, &INVERSION);
        let mut warm = SpineCache::default();
        assert_eq!(warm.advance_to(&chain, 100), AdvanceOutcome::ColdRebuild(4));
        assert_eq!(warm.advance_to(&chain, 50), AdvanceOutcome::Incremental(1));
        let mut cold = SpineCache::default();
        assert_eq!(cold.advance_to(&chain, 50), AdvanceOutcome::ColdRebuild(5));
        assert_eq!(warm.spine(), cold.spine(), "{order:?}");
        assert_eq!(
            warm.spine().unwrap().json_array().to_bytes(),
            cold.spine().unwrap().json_array().to_bytes()
        );
    }
}

#[test]
fn arrival_order_does_not_matter() {
    let forward = chain_of(SpineOrder::Causal, &INVERSION);
    let mut reversed_events = INVERSION;
    reversed_events.reverse();
    let backward = chain_of(SpineOrder::Causal, &reversed_events);
    assert_eq!(forward.walk_from(50), backward.walk_from(50));
    // The same events; which of them are "late" (and so how the ledger's share for the
    // structure holding them comes out) depends on the arrival order.
    assert!(forward.iter().eq(backward.iter()));
    assert_eq!(backward.late_len(), 3); // 50 and 100 arrive ascending; 3, 2, 1 below them
}

#[test]
fn genesis_is_required() {
    let mut chain = Chain::new(SpineOrder::Causal);
    chain.apply(Event::minimal(1, 1, None, "not_genesis"));
    chain.apply(Event::minimal(2, 1, Some(1), "step"));
    assert_eq!(chain.walk_from(2).unwrap_err(), Incomplete::NoGenesis);
}

#[test]
fn genesis_in_the_middle_of_the_walk_counts() {
    let mut chain = Chain::new(SpineOrder::Causal);
    chain.apply(Event::minimal(1, 1, None, "pre"));
    chain.apply(Event::minimal(2, 1, Some(1), "playbook_started"));
    chain.apply(Event::minimal(3, 1, Some(2), "step"));
    assert_eq!(chain.walk_from(3).unwrap().ids(), vec![1, 2, 3]);
}

#[test]
fn missing_hop_then_repaired() {
    let mut chain = chain_of(SpineOrder::Causal, &[(1, None), (3, Some(2))]);
    let mut cache = SpineCache::default();
    assert_eq!(
        cache.advance_to(&chain, 3),
        AdvanceOutcome::Incomplete(Incomplete::MissingHop(2))
    );
    assert!(cache.spine().is_none());
    chain.apply(ev(2, Some(1)));
    assert_eq!(cache.advance_to(&chain, 3), AdvanceOutcome::ColdRebuild(3));
    assert_eq!(cache.spine().unwrap().ids(), vec![1, 2, 3]);
}

#[test]
fn failed_rebuild_keeps_the_old_cache() {
    let mut chain = chain_of(SpineOrder::Causal, &[(1, None), (2, Some(1))]);
    let mut cache = SpineCache::default();
    cache.advance_to(&chain, 2);
    chain.apply(ev(9, Some(8)));
    assert_eq!(
        cache.advance_to(&chain, 9),
        AdvanceOutcome::Incomplete(Incomplete::MissingHop(8))
    );
    assert_eq!(cache.spine().unwrap().ids(), vec![1, 2]);
    assert_eq!(cache.advance_to(&chain, 2), AdvanceOutcome::CacheHit);
}

#[test]
fn incremental_equals_cold_rebuild() {
    let mut chain = chain_of(SpineOrder::Causal, &[(1, None), (2, Some(1)), (3, Some(2))]);
    let mut warm = SpineCache::default();
    warm.advance_to(&chain, 3);
    for (id, prev) in [(4, 3), (5, 4), (6, 5)] {
        chain.apply(ev(id, Some(prev)));
    }
    assert_eq!(warm.advance_to(&chain, 6), AdvanceOutcome::Incremental(3));
    let cold = chain.walk_from(6).unwrap();
    assert_eq!(warm.spine().unwrap(), &cold);
    assert!(warm.spine().unwrap().json_array() == *cold.json_array().to_bytes());
}

#[test]
fn incremental_is_decided_by_links_not_ids() {
    // The cached head 5 has a larger id than every new event; only the links say 2 <- 5.
    let chain = chain_of(
        SpineOrder::Causal,
        &[(1, None), (5, Some(1)), (3, Some(5)), (2, Some(3))],
    );
    let mut cache = SpineCache::default();
    cache.advance_to(&chain, 5);
    assert_eq!(cache.advance_to(&chain, 2), AdvanceOutcome::Incremental(2));
    assert_eq!(cache.spine().unwrap().ids(), vec![1, 5, 3, 2]);
}

#[test]
fn a_fork_from_the_cached_head_is_a_cold_rebuild() {
    // Two events claim prev 2; the cached head 3 is on the other branch.
    let chain = chain_of(
        SpineOrder::Causal,
        &[(1, None), (2, Some(1)), (3, Some(2)), (4, Some(2))],
    );
    let mut cache = SpineCache::default();
    cache.advance_to(&chain, 3);
    assert_eq!(cache.advance_to(&chain, 4), AdvanceOutcome::ColdRebuild(3));
    assert_eq!(cache.spine().unwrap().ids(), vec![1, 2, 4]);
}

#[test]
fn target_moving_back_to_an_ancestor_is_a_cold_rebuild_of_the_shorter_spine() {
    let chain = chain_of(SpineOrder::Causal, &[(1, None), (2, Some(1)), (3, Some(2))]);
    let mut cache = SpineCache::default();
    cache.advance_to(&chain, 3);
    assert_eq!(cache.advance_to(&chain, 2), AdvanceOutcome::ColdRebuild(2));
    assert_eq!(cache.spine().unwrap().ids(), vec![1, 2]);
}

#[test]
fn redelivery_changes_nothing() {
    let mut chain = chain_of(SpineOrder::Causal, &INVERSION);
    let before = (chain.len(), chain.bytes(), chain.walk_from(50).unwrap());
    let mut cache = SpineCache::default();
    cache.advance_to(&chain, 50);
    assert!(!chain.apply(ev(3, Some(2))), "a redelivery is not new");
    assert_eq!(
        (chain.len(), chain.bytes(), chain.walk_from(50).unwrap()),
        before
    );
    assert_eq!(chain.rewrites(), 0);
    assert_eq!(cache.advance_to(&chain, 50), AdvanceOutcome::CacheHit);
}

#[test]
fn conflicting_redelivery_overwrites_and_invalidates_the_cache() {
    let mut chain = chain_of(SpineOrder::Causal, &[(1, None), (2, Some(1)), (3, Some(2))]);
    let mut cache = SpineCache::default();
    cache.advance_to(&chain, 3);
    let rewritten = Event::from_json(
        br#"{"event_id":2,"execution_id":1,"prev_event_id":1,"event_type":"step","x":1}"#,
    )
    .unwrap();
    let bytes_before = chain.bytes();
    chain.apply(rewritten.clone());
    assert_eq!(chain.rewrites(), 1);
    assert_eq!(
        chain.bytes(),
        bytes_before - ev(2, Some(1)).resident_bytes() + rewritten.resident_bytes()
    );
    assert_eq!(cache.advance_to(&chain, 3), AdvanceOutcome::ColdRebuild(3));
    assert_eq!(cache.spine().unwrap().get(1), Some(&rewritten));
}

#[test]
fn self_loop_is_a_cycle() {
    let mut chain = Chain::new(SpineOrder::Causal);
    chain.apply(Event::minimal(7, 1, Some(7), "step"));
    assert_eq!(chain.walk_from(7).unwrap_err(), Incomplete::Cycle(7));
}

#[test]
fn longer_cycle_is_detected_in_len_hops() {
    let mut chain = Chain::new(SpineOrder::Causal);
    for id in 0..1000 {
        chain.apply(Event::minimal(id, 1, Some((id + 1) % 1000), "step"));
    }
    assert!(matches!(chain.walk_from(0), Err(Incomplete::Cycle(_))));
}

#[test]
fn cycle_behind_a_tail_names_an_event_on_the_cycle() {
    let mut chain = Chain::new(SpineOrder::Causal);
    chain.apply(Event::minimal(10, 1, Some(11), "step"));
    chain.apply(Event::minimal(11, 1, Some(12), "step"));
    chain.apply(Event::minimal(12, 1, Some(11), "step"));
    match chain.walk_from(10) {
        Err(Incomplete::Cycle(id)) => assert!(id == 11 || id == 12, "{id}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn chain_longer_than_the_walk_limit_is_walk_limit() {
    let mut chain = Chain::new(SpineOrder::Causal).with_walk_limit(10);
    chain.apply(ev(0, None));
    for id in 1..20 {
        chain.apply(ev(id, Some(id - 1)));
    }
    assert_eq!(chain.walk_from(19).unwrap_err(), Incomplete::WalkLimit);
    assert_eq!(chain.walk_from(5).unwrap().len(), 6);
}

#[test]
fn several_roots_each_walk_to_their_own() {
    let chain = chain_of(
        SpineOrder::Causal,
        &[(1, None), (2, Some(1)), (10, None), (11, Some(10))],
    );
    assert_eq!(chain.walk_from(2).unwrap().ids(), vec![1, 2]);
    assert_eq!(chain.walk_from(11).unwrap().ids(), vec![10, 11]);
}

#[test]
fn spine_shares_payloads_with_the_chain() {
    let chain = chain_of(SpineOrder::Causal, &[(1, None), (2, Some(1))]);
    let spine = chain.walk_from(2).unwrap();
    assert!(spine.get(1).unwrap().ptr_eq(chain.get(2).unwrap()));
}

#[test]
fn json_array_is_the_payloads_in_spine_order() {
    let chain = chain_of(SpineOrder::Causal, &INVERSION);
    let spine = chain.walk_from(50).unwrap();
    let parsed: Vec<serde_json::Value> =
        serde_json::from_slice(&spine.json_array().to_bytes()).unwrap();
    let ids: Vec<i64> = parsed
        .iter()
        .map(|v| v["event_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 100, 50]);
}

struct Ids;
impl Fold for Ids {
    type State = Vec<i64>;
    fn init(&self) -> Vec<i64> {
        Vec::new()
    }
    fn step(&self, state: &mut Vec<i64>, event: &Event) {
        state.push(event.id());
    }
}

#[test]
fn fold_cache_folds_only_the_tail_and_refolds_on_rebuild() {
    let mut chain = chain_of(SpineOrder::EventId, &INVERSION[..4]);
    let mut folds = FoldCache::new(Ids);
    folds.advance_to(&chain, 100);
    assert_eq!(folds.state().unwrap(), &vec![1, 2, 3, 100]);
    chain.apply(ev(50, Some(100)));
    assert_eq!(folds.advance_to(&chain, 50), AdvanceOutcome::Incremental(1));
    // Event-id order placed 50 before 100: the fold was redone, not appended to.
    assert_eq!(folds.state().unwrap(), &vec![1, 2, 3, 50, 100]);
    assert_eq!(folds.advance_to(&chain, 3), AdvanceOutcome::ColdRebuild(3));
    assert_eq!(
        folds.state().unwrap(),
        &fold_all(&Ids, folds.spine().unwrap())
    );
}

/// An ancestor of the cached head (drives of one execution finishing out of order) is, as
/// today, a cold rebuild of the shorter spine, but `advance` serves it as a prefix of the
/// cached spine found a few steps back, keeps the longer spine cached, and serves the same
/// events and JSON as a walk from genesis.
#[test]
fn an_ancestor_of_the_cached_head_is_served_as_a_prefix_without_a_walk() {
    let links: Vec<(i64, Option<i64>)> =
        (1..=200).map(|id| (id, (id > 1).then(|| id - 1))).collect();
    let chain = chain_of(SpineOrder::Causal, &links);
    let cached = chain.walk_from(200).unwrap();
    let result = chain_fold::advance(&chain, Some(&cached), 195);
    assert_eq!(result.outcome, AdvanceOutcome::ColdRebuild(195));
    assert!(!result.replaces_cache, "the longer spine stays cached");
    assert!(
        result.hops <= 12,
        "5 events back, not 195 hops: {}",
        result.hops
    );
    let spine = result.spine.unwrap();
    let walked = chain.walk_from(195).unwrap();
    assert_eq!(spine, walked);
    assert_eq!(
        spine.json_array().to_bytes(),
        walked.json_array().to_bytes()
    );

    // Through an inversion: 100 is an ancestor of 50.
    let chain = chain_of(SpineOrder::Causal, &INVERSION);
    let cached = chain.walk_from(50).unwrap();
    let result = chain_fold::advance(&chain, Some(&cached), 100);
    let spine = result.spine.unwrap();
    assert_eq!(spine.ids(), vec![1, 2, 3, 100]);
    assert_eq!(
        spine.json_array().to_bytes(),
        chain.walk_from(100).unwrap().json_array().to_bytes()
    );
    // The prefix can itself be extended: a later build grows it in a fresh arena.
    let grown = chain_fold::advance(&chain, Some(&spine), 50).spine.unwrap();
    assert_eq!(
        grown.json_array().to_bytes(),
        cached.json_array().to_bytes()
    );
    // The genesis itself is an ancestor too.
    let first = chain_fold::advance(&chain, Some(&cached), 1).spine.unwrap();
    assert_eq!(
        first.json_array().to_bytes(),
        chain.walk_from(1).unwrap().json_array().to_bytes()
    );
}

/// Replaying one long linear chain whose drives finish out of order (each block of eight
/// built newest first) costs steps linear in the chain, not quadratic: before ancestors
/// were served as prefixes, every out-of-order build walked to genesis.
#[test]
fn replaying_a_long_chain_with_out_of_order_drives_is_linear() {
    const HOPS: i64 = 100_000;
    let mut chain = Chain::new(SpineOrder::Causal);
    let mut cached: Option<chain_fold::Spine> = None;
    let mut steps = 0usize;
    for block in 0..HOPS / 8 {
        let first = block * 8 + 1;
        for id in first..first + 8 {
            chain.apply(ev(id, (id > 1).then(|| id - 1)));
        }
        for target in (first..first + 8).rev() {
            let result = chain_fold::advance(&chain, cached.as_ref(), target);
            steps += result.hops;
            let spine = result.spine.expect("complete");
            assert_eq!((spine.len(), spine.head()), (target as usize, target));
            if result.replaces_cache {
                cached = Some(spine);
            }
        }
    }
    // Per block of eight: the newest build walks 8 hops to the cached head (and scans as
    // many in lockstep), the k-th older one finds its ancestor k back (2k steps): 72 steps
    // per 8 builds, whatever the chain's length. Walking each ancestor from genesis instead
    // would take about 7/16 of HOPS² (4.4 billion here).
    assert!(
        steps <= 10 * HOPS as usize,
        "{steps} steps for {HOPS} builds of a {HOPS}-hop chain"
    );
}

/// An event with an explicit type and a payload marker, for chains whose root is not
/// genesis and for two incarnations of one id.
fn typed(id: i64, prev: Option<i64>, ty: &str, marker: &str) -> Event {
    let payload = format!(
        r#"{{"event_id":{id},"execution_id":1,"prev_event_id":{},"event_type":"{ty}","marker":"{marker}"}}"#,
        prev.map_or("null".to_string(), |p| p.to_string())
    );
    Event::from_json(payload.as_bytes()).unwrap()
}

fn markers(spine: &chain_fold::Spine) -> Vec<String> {
    spine
        .events()
        .map(|e| {
            let value: serde_json::Value = serde_json::from_slice(e.payload()).unwrap();
            value["marker"].as_str().unwrap_or("").to_string()
        })
        .collect()
}

/// `1 <- 2 <- ... <- len`, 1 a root, every event a step but `genesis`, `playbook_started`.
fn linear_with_genesis_at(len: i64, genesis: i64) -> Chain {
    let mut chain = Chain::new(SpineOrder::Causal);
    for id in 1..=len {
        let ty = if id == genesis {
            "playbook_started"
        } else {
            "step"
        };
        chain.apply(typed(id, (id > 1).then(|| id - 1), ty, "a"));
    }
    chain
}

#[test]
fn an_ancestor_below_a_late_genesis_is_no_genesis_whatever_is_cached() {
    // 1 step (a root) <- 2 step <- 3 playbook_started: the walk from 2 reaches root 1
    // without passing a genesis, so 2 has no spine, whichever spine is cached.
    let chain = linear_with_genesis_at(3, 3);
    let cached = chain_fold::advance(&chain, None, 3).spine.unwrap();
    assert_eq!(cached.ids(), vec![1, 2, 3]);
    assert_eq!(
        chain_fold::advance(&chain, Some(&cached), 2).outcome,
        AdvanceOutcome::Incomplete(Incomplete::NoGenesis)
    );
    // Five events with the genesis last: every tip below it is NoGenesis, whether the scan
    // of the cached spine or the walk reaches it first.
    let chain = linear_with_genesis_at(5, 5);
    let cached = chain_fold::advance(&chain, None, 5).spine.unwrap();
    for tip in 1..=4 {
        assert_eq!(
            chain_fold::advance(&chain, Some(&cached), tip).outcome,
            AdvanceOutcome::Incomplete(Incomplete::NoGenesis),
            "tip {tip}"
        );
        assert_eq!(chain.walk_from(tip).unwrap_err(), Incomplete::NoGenesis);
    }
    // A genesis in the middle: tips at or above it are served as prefixes.
    let chain = linear_with_genesis_at(5, 3);
    let cached = chain_fold::advance(&chain, None, 5).spine.unwrap();
    for tip in 1..=4 {
        let served = chain_fold::advance(&chain, Some(&cached), tip);
        match chain.walk_from(tip) {
            Ok(walked) => assert_eq!(served.spine.unwrap().ids(), walked.ids(), "tip {tip}"),
            Err(why) => assert_eq!(served.outcome, AdvanceOutcome::Incomplete(why), "tip {tip}"),
        }
    }
}

#[test]
fn a_spine_of_an_evicted_incarnation_is_not_served_to_its_successor() {
    let incarnation = |marker: &str| {
        let mut chain = Chain::new(SpineOrder::Causal);
        chain.apply(typed(1, None, "playbook_started", marker));
        chain.apply(typed(2, Some(1), "step", marker));
        chain
    };
    let mut cache = SpineCache::default();
    assert_eq!(
        cache.advance_to(&incarnation("old"), 2),
        AdvanceOutcome::ColdRebuild(2)
    );
    // The execution is evicted and re-created under the same id with other events.
    let outcome = cache.advance_to(&incarnation("new"), 2);
    assert_eq!(outcome, AdvanceOutcome::ColdRebuild(2));
    assert_eq!(markers(cache.spine().unwrap()), vec!["new", "new"]);
}

#[test]
fn a_spine_built_on_one_sibling_snapshot_is_not_served_to_the_other() {
    let mut base = Chain::new(SpineOrder::Causal);
    base.apply(typed(1, None, "playbook_started", "base"));
    base.apply(typed(2, Some(1), "step", "base"));
    let (mut left, mut right) = (base.clone(), base.clone());
    left.apply(typed(3, Some(2), "step", "left"));
    right.apply(typed(3, Some(2), "step", "right"));
    let mut cache = SpineCache::default();
    cache.advance_to(&left, 3);
    assert_eq!(cache.advance_to(&right, 3), AdvanceOutcome::ColdRebuild(3));
    assert_eq!(
        markers(cache.spine().unwrap()),
        vec!["base", "base", "right"]
    );
    // Two siblings with one rewrite each (equal rewrite counts), sharing the tip's
    // allocation: still no reuse across them.
    let tip = typed(3, Some(2), "step", "shared");
    let (mut x, mut y) = (base.clone(), base.clone());
    x.apply(typed(2, Some(1), "step", "x"));
    y.apply(typed(1, None, "playbook_started", "y"));
    x.apply(tip.clone());
    y.apply(tip);
    assert_eq!((x.rewrites(), y.rewrites()), (1, 1));
    let mut cache = SpineCache::default();
    cache.advance_to(&x, 3);
    assert_eq!(cache.advance_to(&y, 3), AdvanceOutcome::ColdRebuild(3));
    assert_eq!(markers(cache.spine().unwrap()), vec!["y", "base", "shared"]);
}

#[test]
fn a_spine_of_a_later_snapshot_is_not_served_to_an_earlier_one() {
    // The earlier snapshot lacks hop 2 (it arrived late); the later one has it.
    let mut earlier = Chain::new(SpineOrder::Causal);
    earlier.apply(typed(1, None, "playbook_started", "a"));
    earlier.apply(typed(3, Some(2), "step", "a"));
    let mut later = earlier.clone();
    later.apply(typed(2, Some(1), "step", "a"));
    let spine = chain_fold::advance(&later, None, 3).spine.unwrap();
    assert_eq!(spine.ids(), vec![1, 2, 3]);
    assert_eq!(
        chain_fold::advance(&earlier, Some(&spine), 3).outcome,
        AdvanceOutcome::Incomplete(Incomplete::MissingHop(2))
    );
    // ...while the later snapshot (and any later one) reuses it.
    assert_eq!(
        chain_fold::advance(&later, Some(&spine), 3).outcome,
        AdvanceOutcome::CacheHit
    );
    later.apply(typed(4, Some(3), "step", "a"));
    assert_eq!(
        chain_fold::advance(&later, Some(&spine), 4).outcome,
        AdvanceOutcome::Incremental(1)
    );
}
