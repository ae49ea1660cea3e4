//! The engine's evictions: explicit, terminal (at a batch boundary) and the policy sweep.
//! Each one removes slots through the directory's writer (`directory.rs`).

use std::collections::HashMap;
use std::time::Instant;

use chain_fold::{Chain, ExecutionId};

use super::WalIndex;
use super::directory::DirectoryWriter;
use super::slot::{Slot, SlotEviction};
use crate::eviction_plan::{self, Candidate, report_sweep};
use crate::labels::EvictReason;
use crate::report::EvictionStats;
use crate::sync::Arc;

impl WalIndex {
    /// Evicts `execution_id`'s slot (for `reason`).
    pub(super) fn evict_slot(
        &self,
        execution_id: ExecutionId,
        reason: EvictReason,
    ) -> SlotEviction {
        let writer = self.directory.write();
        let Some(slot) = writer.get(execution_id) else {
            return SlotEviction::AlreadyGone;
        };
        self.evict_held(writer, &slot, reason, |_, _| true)
    }

    /// After an eviction, with the directory's lock released (a stall check may hold its
    /// own lock for a whole scan): the holes of the chain that left stay on record.
    fn departed(&self, slot: &Arc<Slot>, result: SlotEviction, chain: Option<Arc<Chain>>) {
        if let (SlotEviction::Evicted { .. }, Some(chain)) = (result, chain) {
            super::stalls::departed(self, slot, &chain, || self.clock.now());
        }
    }

    /// Evicts `expected`, if it is still `execution_id`'s slot and `still_justified` holds
    /// under its lock.
    pub(super) fn evict_slot_if(
        &self,
        execution_id: ExecutionId,
        expected: &Arc<Slot>,
        reason: EvictReason,
        still_justified: impl FnOnce(&Arc<Chain>, u64) -> bool,
    ) -> SlotEviction {
        let writer = self.directory.write();
        match writer.get(execution_id) {
            Some(slot) if Arc::ptr_eq(&slot, expected) => {}
            _ => return SlotEviction::AlreadyGone,
        }
        self.evict_held(writer, expected, reason, still_justified)
    }

    /// Evicts `slot`, found in the directory under `writer`, if `still_justified` holds
    /// under its lock: publishes the removal, releases the lock, then records the
    /// departure.
    fn evict_held(
        &self,
        writer: DirectoryWriter<'_>,
        slot: &Arc<Slot>,
        reason: EvictReason,
        still_justified: impl FnOnce(&Arc<Chain>, u64) -> bool,
    ) -> SlotEviction {
        let mut last = None;
        let result = slot.evict_if(
            &self.accounting,
            &self.empties,
            self.config.sink_gate,
            |chain, used| {
                last = Some(Arc::clone(chain));
                still_justified(chain, used)
            },
        );
        if let SlotEviction::Evicted { .. } = result {
            super::stalls::begin_departures(self, 1);
            writer.publish_removal(&[Arc::clone(slot)], reason == EvictReason::Terminal);
        } else {
            drop(writer);
        }
        self.departed(slot, result, last);
        result
    }
}

/// Evicts one execution now.
pub(super) fn evict(index: &WalIndex, execution_id: ExecutionId) -> bool {
    let evicted = matches!(
        index.evict_slot(execution_id, EvictReason::Explicit),
        SlotEviction::Evicted { events } if events > 0
    );
    // The evicted chain (and whatever else this thread's writes retired), freed on this
    // thread (`sync`'s snapshot cell).
    crate::sync::reclaim_retired();
    if evicted {
        index
            .accounting
            .observer()
            .evicted(EvictReason::Explicit, 1);
    }
    evicted
}

/// What a sweep's plan judged of one slot: the slot itself, and the chain and recency the
/// plan saw. An eviction goes ahead only if all three are still current.
struct Judged {
    slot: Arc<Slot>,
    chain: Arc<Chain>,
    last_used: u64,
}

/// One sweep of the eviction policy as of `now`.
///
/// The plan is made from a lock-free snapshot of the directory, so by the time a victim is
/// evicted the execution may have changed: an applier (the drain, a rehydrate, a drive's
/// tail) may have added events, a build may have refreshed it, an evictor may have removed
/// it and a new event re-created it. Each victim is therefore evicted only if, under its
/// slot's lock, it is still the slot the plan judged, with the chain and recency the plan
/// judged; otherwise the plan's reason no longer holds and the victim is skipped (the next
/// sweep judges it afresh). Counts are taken from what was actually evicted.
pub(super) fn enforce_limits_at(index: &WalIndex, now: Instant) -> EvictionStats {
    let policy = index.config.eviction;
    // The same test that lets builds leave the clock alone: every limit judges by recency.
    if !policy.reads_recency() {
        return EvictionStats::default();
    }
    let sink_gate = index.config.sink_gate;
    let slots = index.directory.slots();
    let mut judged: HashMap<ExecutionId, Judged> = HashMap::with_capacity(slots.len());
    let candidates: Vec<Candidate> = slots
        .into_iter()
        .map(|slot| {
            let chain = slot.chain();
            let last_used = slot.last_used();
            let candidate = Candidate {
                execution_id: slot.execution_id,
                last_used,
                events: chain.len(),
                bytes: slot.resident_bytes(&chain),
                gated: sink_gate && slot.is_pending_sink(),
            };
            judged.insert(
                slot.execution_id,
                Judged {
                    slot,
                    chain,
                    last_used,
                },
            );
            candidate
        })
        .collect();
    // The mutation plans against the index's totals read after the scan, which a
    // concurrent eviction can make smaller than the candidates.
    let (now, epoch) = (index.nanos(now), index.clock.epoch());
    let (mut plan, idle_empty) = if chain_fold::mutation::on("sweep-totals-from-stats") {
        eviction_plan::plan_against(candidates, &policy, now, epoch, index.accounting.get())
    } else {
        eviction_plan::plan(candidates, &policy, now, epoch)
    };

    let writer = index.directory.write();
    let mut removed: Vec<Arc<Slot>> = Vec::new();
    let mut evict = |execution_id: ExecutionId| -> SlotEviction {
        let (Some(seen), Some(current)) = (judged.get(&execution_id), writer.get(execution_id))
        else {
            return SlotEviction::AlreadyGone;
        };
        // The mutation evicts whatever the plan named, even a successor or a chain
        // changed since.
        let trusts_plan = chain_fold::mutation::on("sweep-trusts-plan");
        if !trusts_plan && !Arc::ptr_eq(&current, &seen.slot) {
            // Evicted and re-created since the plan: the successor was never judged.
            return SlotEviction::AlreadyGone;
        }
        let unchanged = |chain: &Arc<Chain>, used| {
            trusts_plan || (Arc::ptr_eq(chain, &seen.chain) && used == seen.last_used)
        };
        let result = current.evict_if(&index.accounting, &index.empties, sink_gate, unchanged);
        if let SlotEviction::Evicted { .. } = result {
            removed.push(current);
        }
        result
    };
    for execution_id in idle_empty {
        evict(execution_id);
    }
    let mut gated_at_eviction = 0;
    plan.evicted
        .retain(|victim| match evict(victim.execution_id) {
            SlotEviction::Evicted { .. } => true,
            SlotEviction::KeptBySinkGate => {
                gated_at_eviction += 1;
                false
            }
            SlotEviction::AlreadyGone | SlotEviction::NoLongerJustified => false,
        });
    eviction_plan::recount(&mut plan, gated_at_eviction);
    // The reasons differ per victim, but none is terminal, which is all the removal needs.
    super::stalls::begin_departures(index, removed.len());
    writer.publish_removal(&removed, false);
    let evicted_at = index.clock.now();
    for slot in &removed {
        if let Some(seen) = judged.get(&slot.execution_id) {
            super::stalls::departed(index, slot, &seen.chain, || evicted_at);
        }
    }
    report_sweep(index.accounting.observer(), &plan);
    plan
}
