//! Arbitrary op sequences on `WalIndex`, `MutexIndex`, `ShardedMutexIndex` and the
//! sequential model of `sb_test_kit::differential`, which must agree after every op.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use sb_test_kit::differential::{EXECUTIONS, HEADS, Op, POOL, check_every_index};

fn exec(u: &mut Unstructured<'_>) -> Result<i64> {
    u.int_in_range(0..=EXECUTIONS - 1)
}

fn event(u: &mut Unstructured<'_>) -> Result<(i64, u8)> {
    Ok((exec(u)?, u.int_in_range(0..=POOL - 1)?))
}

fn events(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<(i64, u8)>> {
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| event(u)).collect()
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    let head = |u: &mut Unstructured<'_>| u.int_in_range(0..=HEADS.len() - 1);
    Ok(match u.int_in_range(0..=10u8)? {
        0 => Op::Apply(exec(u)?, u.int_in_range(0..=POOL - 1)?),
        1 => Op::Batch(events(u, 8)?),
        2 => Op::Build(exec(u)?, if u.arbitrary()? { Some(head(u)?) } else { None }),
        3 => Op::Drive(exec(u)?, head(u)?),
        4 => Op::Evict(exec(u)?),
        5 => Op::Sweep,
        6 => Op::Mark(exec(u)?),
        7 => Op::Release(exec(u)?),
        8 => Op::Confirm(exec(u)?),
        9 => Op::Rehydrate(exec(u)?, events(u, 6)?),
        _ => Op::SnapshotBuild(exec(u)?, head(u)?),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(sink_gate) = u.arbitrary::<bool>() else {
        return;
    };
    let Ok(by_id) = u.arbitrary::<bool>() else {
        return;
    };
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < 64 {
        match op(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    if let Err(disagreement) = check_every_index(&ops, sink_gate, by_id) {
        panic!("{disagreement}");
    }
});
