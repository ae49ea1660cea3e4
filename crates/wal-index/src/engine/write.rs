//! The engine's writes: applies (one event, a batch, a rehydrate replay) and the sink
//! gate's marks. Each execution's writers serialize on its slot; nothing here makes a
//! build wait.

use chain_fold::{Event, ExecutionId};

use super::WalIndex;
use super::slot::SlotEviction;
use crate::labels::EvictReason;
use crate::report::{Applied, BatchReport, RehydrateReport};

/// Indexes one event, publishes its execution's new snapshot and wakes its waiters.
pub(super) fn apply(index: &WalIndex, event: Event) -> Applied {
    let event = index.prepare(event);
    let applied = Applied {
        execution_id: event.execution_id(),
        event_id: event.id(),
        is_new: false,
        is_terminal: event.is_terminal(),
    };
    let now = index.now_for_write();
    let (done, _) = index.apply_to_slot(applied.execution_id, std::iter::once(event), now);
    // The snapshot it replaced, and whatever else waits for a reclaim, freed here, on this
    // writer's thread (`sync`'s snapshot cell).
    crate::sync::reclaim_retired();
    Applied {
        is_new: done.new == 1,
        ..applied
    }
}

/// Applies a batch: each touched execution is published once and its waiters woken once
/// (in ascending execution id); then the executions whose terminal event was in the batch
/// are evicted (unless the sink gate holds them).
pub(super) fn apply_batch(index: &WalIndex, events: Vec<Event>) -> BatchReport {
    let mut events: Vec<Event> = events.into_iter().map(|e| index.prepare(e)).collect();
    // A stable sort groups each execution's events, keeping their WAL order.
    events.sort_by_key(Event::execution_id);
    let now = index.now_for_write();
    let mut report = BatchReport::default();
    let mut terminal = Vec::new();
    let mut events = events.into_iter().peekable();
    while let Some(first) = events.next() {
        let execution_id = first.execution_id();
        let rest = std::iter::from_fn(|| events.next_if(|e| e.execution_id() == execution_id));
        let (done, slot) =
            index.apply_to_slot(execution_id, std::iter::once(first).chain(rest), now);
        report.executions += 1;
        report.applied += done.applied;
        report.new += done.new;
        if let Some(slot) = slot {
            terminal.push((execution_id, slot));
        }
    }
    // Each terminal execution is evicted only if it is still the slot its terminal event
    // landed in: if another evictor removed that slot and another applier re-created the
    // execution meanwhile, the new slot holds no terminal event and nothing justifies
    // evicting it.
    for (execution_id, slot) in terminal {
        match index.evict_slot_if(execution_id, &slot, EvictReason::Terminal, |_, _| true) {
            SlotEviction::Evicted { .. } => report.terminal_evicted.push(execution_id),
            SlotEviction::KeptBySinkGate => report.terminal_kept_by_sink_gate.push(execution_id),
            SlotEviction::AlreadyGone | SlotEviction::NoLongerJustified => {}
        }
    }
    if !report.terminal_evicted.is_empty() {
        index
            .accounting
            .observer()
            .evicted(EvictReason::Terminal, report.terminal_evicted.len());
    }
    // The snapshots the batch replaced and the chains it evicted, freed on the drain's
    // thread (`sync`'s snapshot cell).
    crate::sync::reclaim_retired();
    report
}

/// Replays one execution's retained events as one published snapshot.
pub(super) fn rehydrate(
    index: &WalIndex,
    execution_id: ExecutionId,
    events: impl IntoIterator<Item = Event>,
) -> RehydrateReport {
    let (mut report, mine) = RehydrateReport::sorted(execution_id, events);
    if !mine.is_empty() {
        let now = index.now_for_write();
        let mine = mine.into_iter().map(|e| index.prepare(e));
        let (done, _) = index.apply_to_slot(execution_id, mine, now);
        report.applied = done.applied;
        report.new = done.new;
        crate::sync::reclaim_retired();
    }
    report
}

/// Sets the sink-gate mark, on a fresh slot if the one found was evicted meanwhile. With
/// the gate off, marking is a no-op, as today: production marks on every sink step of every
/// execution, and the mark would otherwise create a slot for each.
pub(super) fn mark_pending_sink(index: &WalIndex, execution_id: ExecutionId) {
    if !index.config.sink_gate {
        return;
    }
    loop {
        if index
            .slot_or_create(execution_id, || index.clock.now())
            .mark_pending_sink()
            .is_ok()
        {
            return;
        }
        index.directory.wait_for_evictor();
    }
}

/// Clears the sink-gate mark; returns whether it was set. A slot that held only the mark
/// (marked before its first event) is removed with it.
pub(super) fn clear_pending_sink(index: &WalIndex, execution_id: ExecutionId) -> bool {
    let Some(slot) = index.lookup(execution_id) else {
        return false;
    };
    let was_marked = slot.clear_pending_sink();
    if was_marked && slot.is_vacant() {
        index.evict_slot_if(execution_id, &slot, EvictReason::Explicit, |chain, _| {
            chain.is_empty()
        });
        crate::sync::reclaim_retired();
    }
    was_marked
}
