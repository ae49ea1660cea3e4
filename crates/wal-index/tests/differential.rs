//! Differential test: random single-threaded op sequences give identical observable
//! results on `WalIndex`, `MutexIndex`, `ShardedMutexIndex`, `PapayaIndex` and a plain sequential model
//! (`sb_test_kit::differential`, shared with the cargo-fuzz target).

use proptest::prelude::*;
use sb_test_kit::differential::{EXECUTIONS, HEADS, Op, POOL, check_every_index};

fn op() -> impl Strategy<Value = Op> {
    let exec = 0..EXECUTIONS;
    let event = (0..EXECUTIONS, 0..POOL);
    prop_oneof![
        6 => (exec.clone(), 0..POOL).prop_map(|(e, k)| Op::Apply(e, k)),
        3 => proptest::collection::vec(event.clone(), 0..8).prop_map(Op::Batch),
        6 => (exec.clone(), proptest::option::of(0..HEADS.len())).prop_map(|(e, h)| Op::Build(e, h)),
        1 => (exec.clone(), 0..HEADS.len()).prop_map(|(e, h)| Op::Drive(e, h)),
        1 => exec.clone().prop_map(Op::Evict),
        1 => Just(Op::Sweep),
        1 => exec.clone().prop_map(Op::Mark),
        1 => exec.clone().prop_map(Op::Release),
        1 => exec.clone().prop_map(Op::Confirm),
        1 => (exec.clone(), proptest::collection::vec(event, 0..6)).prop_map(|(e, v)| Op::Rehydrate(e, v)),
        2 => (exec.clone(), 0..HEADS.len()).prop_map(|(e, h)| Op::SnapshotBuild(e, h)),
        // Whole chains at once, so builds meet long spines: the main one (genesis first)
        // and the odd one (a root that is not genesis, genesis in the middle).
        1 => exec.clone().prop_map(|e| Op::Batch((0..5).map(|k| (e, k)).collect())),
        1 => exec.prop_map(|e| Op::Batch((10..14).map(|k| (e, k)).collect())),
    ]
}

/// `DIFFERENTIAL_CASES` sets the case count (default 1,000, a few seconds; `scripts/differential-long.sh`
/// runs it for as long as it is given).
fn cases() -> u32 {
    std::env::var("DIFFERENTIAL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn engines_and_model_agree_after_every_op(
        ops in proptest::collection::vec(op(), 1..60),
        sink_gate in any::<bool>(),
        by_id in any::<bool>(),
    ) {
        let result = check_every_index(&ops, sink_gate, by_id);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// Builds at a descendant, then an ancestor, then the descendant again: today's cache
/// follows the ancestor (so the last build is incremental); the engine serves the ancestor
/// as a prefix and keeps the longer spine (so the last build is a cache hit). Every engine
/// must agree with the model of its own policy, spines and JSON included.
#[test]
fn an_ancestor_build_keeps_the_engines_longer_cache() {
    let chain: Vec<(i64, u8)> = (0..6).map(|k| (0, k)).collect();
    // HEADS: 8 is index 5, 3 is index 2.
    let ops = [
        Op::Batch(chain[..5].to_vec()),
        Op::Apply(0, 5),
        Op::Build(0, Some(5)),
        Op::Build(0, Some(2)),
        Op::Build(0, Some(5)),
        Op::Build(0, Some(1)),
        Op::Build(0, Some(2)),
    ];
    agree_in_both_orders(&ops);
}

/// A chain whose root is not genesis (`60 step <- 61 <- 62 playbook_started <- 63`): with
/// the spine of 63 or 62 cached, the tips below the genesis still have no spine, and every
/// index says so with the reference walk's reason.
#[test]
fn tips_below_a_late_genesis_are_incomplete_whatever_is_cached() {
    // HEADS: 60, 61, 62, 63 are indexes 9, 10, 11, 12.
    let odd: Vec<(i64, u8)> = (10..14).map(|k| (0, k)).collect();
    // The cached head one event above the tip (62, then 61) is where a scan back along the
    // cached spine meets the tip before the walk reaches the root.
    let ops = [
        Op::Batch(odd),
        Op::Build(0, Some(11)),
        Op::Build(0, Some(10)),
        Op::Build(0, Some(9)),
        Op::Build(0, Some(12)),
        Op::Build(0, Some(10)),
        Op::Build(0, Some(9)),
        Op::SnapshotBuild(0, 12),
        Op::SnapshotBuild(0, 10),
    ];
    agree_in_both_orders(&ops);
}

/// A redelivery that moves `prev_event_id` (3 from 2 to 1) is a rewrite: the spine of 4
/// skips 2 from then on, on every index, and no spine built before it is served.
#[test]
fn a_redelivery_that_moves_a_link_rebuilds_every_spine() {
    let chain: Vec<(i64, u8)> = (0..5).map(|k| (0, k)).collect();
    let ops = [
        Op::Batch(chain),
        Op::Build(0, Some(4)),
        Op::SnapshotBuild(0, 4),
        Op::Apply(0, 14),
        Op::Build(0, Some(4)),
        Op::Build(0, Some(1)),
        Op::SnapshotBuild(0, 4),
        // The same event 4 in another key order: an identical redelivery.
        Op::Apply(0, 15),
        Op::Build(0, Some(4)),
    ];
    agree_in_both_orders(&ops);
}

/// Runs `ops` on every index and the model, in causal and in event-id order.
fn agree_in_both_orders(ops: &[Op]) {
    for by_id in [false, true] {
        let result = check_every_index(ops, false, by_id);
        assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
