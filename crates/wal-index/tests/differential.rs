//! Differential test: random single-threaded op sequences give identical observable
//! results on `WalIndex`, `MutexIndex`, `ShardedMutexIndex` and a plain sequential model
//! (`common/model.rs`, shared with the cargo-fuzz target).

#[path = "common/model.rs"]
mod model;

use model::{EXECUTIONS, HEADS, Op, check_every_index};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let exec = 0..EXECUTIONS;
    let event = (0..EXECUTIONS, 0u8..10);
    prop_oneof![
        6 => (exec.clone(), 0u8..10).prop_map(|(e, k)| Op::Apply(e, k)),
        3 => proptest::collection::vec(event.clone(), 0..8).prop_map(Op::Batch),
        6 => (exec.clone(), proptest::option::of(0..HEADS.len())).prop_map(|(e, h)| Op::Build(e, h)),
        1 => (exec.clone(), 0..HEADS.len()).prop_map(|(e, h)| Op::Drive(e, h)),
        1 => exec.clone().prop_map(Op::Evict),
        1 => Just(Op::Sweep),
        1 => exec.clone().prop_map(Op::Mark),
        1 => exec.clone().prop_map(Op::Release),
        1 => exec.clone().prop_map(Op::Confirm),
        1 => (exec, proptest::collection::vec(event, 0..6)).prop_map(|(e, v)| Op::Rehydrate(e, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

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
    for by_id in [false, true] {
        let result = check_every_index(&ops, false, by_id);
        assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
