//! chain-fold's scenario list, and the index-level behaviour of docs/domain.md,
//! through the index API, for every engine.

mod common;

use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Event, Incomplete};
use common::{end, ev, linear};
use wal_index::config::EvictionPolicy;
use wal_index::report::IndexStats;
use wal_index::{DriveBudget, DriveFlow, DriveOutcome, IndexConfig, StateIndex};

fn ids<I: StateIndex>(index: &I, exec: i64, head: Option<i64>) -> Vec<i64> {
    index.build(exec, head).spine.expect("served").ids()
}

fn inversion<I: StateIndex>(index: &I) {
    for (id, prev) in [
        (1, None),
        (2, Some(1)),
        (3, Some(2)),
        (100, Some(3)),
        (50, Some(100)),
    ] {
        index.apply(ev(9, id, prev));
    }
}

fn inversion_is_walked_from_the_named_tip<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    inversion(&index);
    assert_eq!(ids(&index, 9, Some(50)), vec![1, 2, 3, 100, 50]);
    assert_eq!(ids(&index, 9, Some(100)), vec![1, 2, 3, 100]);
    assert_eq!(
        ids(&index, 9, None),
        vec![1, 2, 3, 100],
        "None is the legacy max-id head"
    );
}

fn inversion_in_event_id_order<I: StateIndex>() {
    let index = I::with_config(IndexConfig {
        order: chain_fold::SpineOrder::EventId,
        ..IndexConfig::default()
    });
    inversion(&index);
    assert_eq!(ids(&index, 9, Some(50)), vec![1, 2, 3, 50, 100]);
}

fn tip_not_indexed_is_incomplete_then_incremental_equals_cold<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    for (id, prev) in [(1, None), (2, Some(1)), (3, Some(2)), (100, Some(3))] {
        index.apply(ev(9, id, prev));
    }
    assert_eq!(
        index.build(9, Some(100)).outcome,
        AdvanceOutcome::ColdRebuild(4)
    );
    assert_eq!(
        index.build(9, Some(50)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::TipMissing(50))
    );
    index.apply(ev(9, 50, Some(100)));
    let warm = index.build(9, Some(50));
    assert_eq!(warm.outcome, AdvanceOutcome::Incremental(1));
    assert_eq!(index.build(9, Some(50)).outcome, AdvanceOutcome::CacheHit);
    let cold = index.chain(9).unwrap().walk_from(50).unwrap();
    assert_eq!(warm.spine.as_ref(), Some(&cold));
    assert_eq!(
        warm.spine.unwrap().json_array().to_bytes(),
        cold.json_array().to_bytes()
    );
}

fn unknown_execution_is_incomplete<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    assert_eq!(
        index.build(1, Some(5)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::TipMissing(5))
    );
    assert_eq!(
        index.build(1, None).outcome,
        AdvanceOutcome::Incomplete(Incomplete::NoEvents)
    );
}

fn genesis_missing_hop_cycle_and_repair<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply(Event::minimal(1, 1, None, "not_genesis"));
    index.apply(ev(1, 2, Some(1)));
    assert_eq!(
        index.build(1, Some(2)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::NoGenesis)
    );
    index.apply(ev(2, 1, None));
    index.apply(ev(2, 3, Some(2)));
    assert_eq!(
        index.build(2, Some(3)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::MissingHop(2))
    );
    index.apply(ev(2, 2, Some(1)));
    assert_eq!(
        index.build(2, Some(3)).outcome,
        AdvanceOutcome::ColdRebuild(3)
    );
    index.apply(ev(3, 7, Some(7)));
    assert_eq!(
        index.build(3, Some(7)).outcome,
        AdvanceOutcome::Incomplete(Incomplete::Cycle(7))
    );
}

fn target_moving_back_is_a_cold_rebuild<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    for e in linear(1, 1, 5) {
        index.apply(e);
    }
    assert_eq!(
        index.build(1, Some(5)).outcome,
        AdvanceOutcome::ColdRebuild(5)
    );
    assert_eq!(
        index.build(1, Some(3)).outcome,
        AdvanceOutcome::ColdRebuild(3)
    );
}

fn redelivery_never_double_counts<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    let events = linear(1, 1, 4);
    let first = index.apply_batch(events.clone());
    let stats = index.stats();
    let again = index.apply_batch(events);
    assert_eq!((first.new, again.new), (4, 0));
    assert_eq!(index.stats(), stats);
    assert_eq!(stats.events, 4);
    assert_eq!(
        index.build(1, Some(4)).outcome,
        AdvanceOutcome::ColdRebuild(4)
    );
    index.apply(ev(1, 4, Some(3)));
    assert_eq!(index.build(1, Some(4)).outcome, AdvanceOutcome::CacheHit);
}

fn terminal_event_evicts_after_the_batch<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    let mut batch = linear(1, 1, 3);
    batch.push(end(1, 4, 3));
    batch.extend(linear(2, 10, 2));
    let report = index.apply_batch(batch);
    assert_eq!(report.terminal_evicted, vec![1]);
    assert_eq!(report.executions, 2);
    assert_eq!(index.execution_ids(), vec![2]);
    let stats = index.stats();
    assert_eq!(
        (stats.executions, stats.events),
        (1, 2),
        "all three drop together"
    );
    assert_eq!(Some(stats.bytes), index.resident_bytes(2));
}

fn single_apply_of_a_terminal_does_not_evict<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply(ev(1, 1, None));
    let applied = index.apply(end(1, 2, 1));
    assert!(applied.is_terminal && applied.is_new);
    assert_eq!(ids(&index, 1, Some(2)), vec![1, 2]);
}

fn sink_gate_blocks_every_eviction_until_released<I: StateIndex>() {
    let index = I::with_config(IndexConfig {
        sink_gate: true,
        eviction: EvictionPolicy {
            ttl: Some(Duration::from_secs(1)),
            max_executions: Some(0),
            max_bytes: Some(0),
        },
        ..IndexConfig::default()
    });
    index.apply_batch(linear(1, 1, 2));
    index.mark_pending_sink(1);
    let mut batch = vec![end(1, 3, 2)];
    batch.extend(linear(2, 10, 1));
    let report = index.apply_batch(batch);
    assert_eq!(report.terminal_kept_by_sink_gate, vec![1]);
    assert!(!index.evict(1));
    let far = Instant::now() + Duration::from_secs(3600);
    let sweep = index.enforce_limits_at(far);
    assert_eq!(
        sweep
            .evicted
            .iter()
            .map(|e| e.execution_id)
            .collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(
        sweep.kept_by_sink_gate, 1,
        "a sweep of only gated executions terminates"
    );
    assert_eq!(index.execution_ids(), vec![1]);
    assert!(index.release_pending_sink(1, "test"));
    assert!(!index.confirm_sunk(1), "already released");
    assert_eq!(
        ids(&index, 1, Some(3)),
        vec![1, 2, 3],
        "release keeps the chain"
    );
    assert_eq!(index.enforce_limits_at(far).ttl, 1);
    assert_eq!(index.stats(), IndexStats::default());
}

fn sink_gate_off_ignores_marks<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(linear(1, 1, 2));
    index.mark_pending_sink(1);
    assert!(index.evict(1));
    assert!(!index.evict(1));
}

fn lru_and_byte_ceiling_evict_least_recently_used<I: StateIndex>() {
    let index = I::with_config(IndexConfig {
        eviction: EvictionPolicy {
            max_executions: Some(2),
            ..EvictionPolicy::default()
        },
        ..IndexConfig::default()
    });
    for exec in 1..=3 {
        index.apply_batch(linear(exec, 1, 2));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(index.touch(1));
    let sweep = index.enforce_limits_at(Instant::now());
    assert_eq!(
        sweep
            .evicted
            .iter()
            .map(|v| (v.execution_id, v.reason))
            .collect::<Vec<_>>(),
        vec![(2, wal_index::labels::EvictReason::MaxExecutions)]
    );
    // What execution 1 costs once built (the engine's ledger charges its cached spine too).
    let _ = index.build(1, Some(2));
    let one = index.resident_bytes(1).unwrap();
    let capped = I::with_config(IndexConfig {
        eviction: EvictionPolicy {
            max_bytes: Some(one),
            ..EvictionPolicy::default()
        },
        ..IndexConfig::default()
    });
    for exec in 1..=3 {
        capped.apply_batch(linear(exec, 1, 2));
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = capped.build(1, Some(2)); // a build refreshes recency too
    let sweep = capped.enforce_limits_at(Instant::now());
    assert_eq!(sweep.byte_ceiling, 2);
    assert_eq!(capped.execution_ids(), vec![1]);
    assert_eq!(capped.stats().bytes, one);
}

fn rehydrate_replays_one_execution_and_skips_others<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    let mut retained = linear(5, 1, 3);
    retained.push(end(5, 4, 3));
    retained.extend(linear(6, 1, 2));
    let report = index.rehydrate(5, retained);
    assert_eq!(
        (report.applied, report.new, report.other_execution),
        (4, 4, 2)
    );
    assert_eq!(
        ids(&index, 5, Some(4)),
        vec![1, 2, 3, 4],
        "rehydrate never evicts"
    );
    assert_eq!(index.stats().events, 4);
}

fn apply_json_reports_bad_payloads<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    assert!(
        index
            .apply_json(br#"{"event_id":"1","execution_id":1}"#)
            .is_err()
    );
    let applied = index
        .apply_json(br#"{"event_id":1,"execution_id":1,"event_type":"playbook_started"}"#)
        .unwrap();
    assert!(applied.is_new);
    assert_eq!(index.stats().events, 1);
}

fn slim_index_stores_the_projection<I: StateIndex>() {
    let index = I::with_config(IndexConfig {
        slim: true,
        ..IndexConfig::default()
    });
    index
        .apply_json(
            br#"{"event_id":1,"execution_id":1,"event_type":"playbook_started","worker_id":"w9"}"#,
        )
        .unwrap();
    let spine = index.build(1, Some(1)).spine.unwrap();
    assert_eq!(
        spine.json_array().to_bytes(),
        &br#"[{"event_id":1,"event_type":"playbook_started","execution_id":1}]"#[..]
    );
}

fn drive_serves_an_indexed_tip_without_waiting<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(linear(1, 1, 3));
    let drive = index.drive(1, Some(3), &DriveFlow::new(DriveBudget::default()));
    assert_eq!((drive.builds, drive.wakes, drive.timeouts), (1, 0, 0));
    assert_eq!(drive.outcome.spine().unwrap().len(), 3);
}

fn drive_runs_out_of_budget_with_the_reason<I: StateIndex>() {
    let index = I::with_config(IndexConfig::default());
    index.apply_batch(linear(1, 1, 3));
    let budget = DriveBudget {
        attempts: 2,
        retry: Duration::from_millis(5),
    };
    let drive = index.drive(1, Some(9), &DriveFlow::new(budget));
    assert_eq!(
        drive.outcome,
        DriveOutcome::Incomplete(Incomplete::TipMissing(9))
    );
    // A deadline, not a count: every wait timed out, the last build came at or after the
    // deadline, and no more than one build per `retry` (fewer if the machine is slow).
    assert_eq!(drive.builds, drive.timeouts + 1);
    assert!((2..=3).contains(&drive.builds), "{drive:?}");
    assert!(drive.elapsed >= budget.deadline(), "{drive:?}");
}

for_each_engine!(
    inversion_is_walked_from_the_named_tip,
    inversion_in_event_id_order,
    tip_not_indexed_is_incomplete_then_incremental_equals_cold,
    unknown_execution_is_incomplete,
    genesis_missing_hop_cycle_and_repair,
    target_moving_back_is_a_cold_rebuild,
    redelivery_never_double_counts,
    terminal_event_evicts_after_the_batch,
    single_apply_of_a_terminal_does_not_evict,
    sink_gate_blocks_every_eviction_until_released,
    sink_gate_off_ignores_marks,
    lru_and_byte_ceiling_evict_least_recently_used,
    rehydrate_replays_one_execution_and_skips_others,
    apply_json_reports_bad_payloads,
    slim_index_stores_the_projection,
    drive_serves_an_indexed_tip_without_waiting,
    drive_runs_out_of_budget_with_the_reason,
);
