//! The engine's evictions: explicit, terminal (at a batch boundary) and the policy sweep,
//! and the memory of executions that finished.

use std::collections::HashMap;
use std::time::Instant;

use chain_fold::{Chain, ExecutionId};

use super::slot::{Slot, SlotEviction};
use super::{Directory, WalIndex};
use crate::eviction_plan::{self, Candidate, report_sweep};
use crate::report::{EvictReason, EvictionStats};
use crate::sync::Arc;

/// A bounded memory of terminal-evicted executions (the oldest is forgotten first).
#[derive(Debug, Default)]
pub(super) struct FinishedExecutions {
    ids: std::collections::HashSet<ExecutionId>,
    order: std::collections::VecDeque<ExecutionId>,
}

impl FinishedExecutions {
    /// Forgets `execution_id` (it was re-created). O(capacity) when it was remembered,
    /// which only a redelivery after a terminal eviction costs; O(1) otherwise.
    fn forget(&mut self, execution_id: ExecutionId) {
        if self.ids.remove(&execution_id) {
            self.order.retain(|id| *id != execution_id);
        }
    }

    /// How many finished executions are remembered: at production's ~150 finishing per
    /// second, the last couple of minutes (about 0.5 MiB).
    const CAPACITY: usize = 16_384;

    pub(super) fn insert(&mut self, execution_id: ExecutionId) {
        if self.ids.insert(execution_id) {
            self.order.push_back(execution_id);
            if self.order.len() > Self::CAPACITY
                && let Some(oldest) = self.order.pop_front()
            {
                self.ids.remove(&oldest);
            }
        }
    }
}

/// Forgets that `execution_id` finished: it is being re-created (the caller holds the
/// directory lock).
pub(super) fn forget_finished(index: &WalIndex, execution_id: ExecutionId) {
    let mut finished = index.finished.lock();
    if !finished.ids.is_empty() {
        finished.forget(execution_id);
    }
}

/// True when `execution_id` was evicted after its terminal event and holds no events now:
/// its drives cannot be served by waiting (a late redelivery that re-creates the execution
/// makes this false again). Only drives whose build was incomplete ask.
pub(super) fn finished_and_gone(index: &WalIndex, execution_id: ExecutionId) -> bool {
    // The wait-free test first: a drive waiting for a tip of an execution that holds
    // events (the common incomplete build) never touches the lock.
    index
        .lookup(execution_id)
        .is_none_or(|slot| slot.chain().is_empty())
        && index.finished.lock().ids.contains(&execution_id)
}

impl WalIndex {
    /// Evicts `execution_id`'s slot (for `reason`).
    pub(super) fn evict_slot(
        &self,
        execution_id: ExecutionId,
        reason: EvictReason,
    ) -> SlotEviction {
        let _writer = self.directory_writer.lock();
        let directory = self.directory.load();
        let Some(slot) = directory.get(&execution_id).cloned() else {
            return SlotEviction::AlreadyGone;
        };
        let result = slot.evict(&self.accounting, self.config.sink_gate);
        if let SlotEviction::Evicted { .. } = result {
            self.publish_removal(directory.without(&execution_id), &[slot], reason);
        }
        result
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
        let _writer = self.directory_writer.lock();
        let directory = self.directory.load();
        match directory.get(&execution_id) {
            Some(slot) if Arc::ptr_eq(slot, expected) => {}
            _ => return SlotEviction::AlreadyGone,
        }
        let result = expected.evict_if(&self.accounting, self.config.sink_gate, still_justified);
        if let SlotEviction::Evicted { .. } = result {
            let slot = Arc::clone(expected);
            self.publish_removal(directory.without(&execution_id), &[slot], reason);
        }
        result
    }

    /// The end of every eviction, under `directory_writer`: remember finished executions,
    /// publish the directory without the `removed` slots, then wake their waiters.
    ///
    /// The order is the protocol. A terminal execution enters the finished set *before* its
    /// waiters are woken, so a woken drive that finds the execution gone also finds it
    /// finished and ends, instead of waiting a whole cap for a wake nobody will send. Waiters
    /// are woken *after* the directory no longer holds the slot, so one that looks the
    /// execution up again cannot find the dead slot (and a registration that raced the
    /// eviction sees the slot retired and looks again).
    fn publish_removal(&self, directory: Directory, removed: &[Arc<Slot>], reason: EvictReason) {
        #[cfg(not(feature = "mutation-finished-after-wake"))]
        if reason == EvictReason::Terminal {
            let mut finished = self.finished.lock();
            removed
                .iter()
                .for_each(|slot| finished.insert(slot.execution_id));
        }
        self.directory.store(Arc::new(directory));
        for slot in removed {
            slot.wake_all();
        }
        #[cfg(feature = "mutation-finished-after-wake")]
        if reason == EvictReason::Terminal {
            let mut finished = self.finished.lock();
            removed
                .iter()
                .for_each(|slot| finished.insert(slot.execution_id));
        }
    }
}

/// Evicts one execution now.
pub(super) fn evict(index: &WalIndex, execution_id: ExecutionId) -> bool {
    let evicted = matches!(
        index.evict_slot(execution_id, EvictReason::Explicit),
        SlotEviction::Evicted { events } if events > 0
    );
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
#[cfg_attr(feature = "mutation-sweep-trusts-plan", allow(dead_code))]
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
    if policy == Default::default() {
        return EvictionStats::default();
    }
    let sink_gate = index.config.sink_gate;
    let snapshot = index.directory.load();
    let mut judged: HashMap<ExecutionId, Judged> = HashMap::with_capacity(snapshot.len());
    let candidates: Vec<Candidate> = snapshot
        .values()
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
                    slot: Arc::clone(slot),
                    chain,
                    last_used,
                },
            );
            candidate
        })
        .collect();
    drop(snapshot);
    #[cfg(not(feature = "mutation-sweep-totals-from-stats"))]
    let (mut plan, idle_empty) =
        eviction_plan::plan(candidates, &policy, index.nanos(now), index.clock.epoch());
    #[cfg(feature = "mutation-sweep-totals-from-stats")]
    let (mut plan, idle_empty) = eviction_plan::plan_against(
        candidates,
        &policy,
        index.nanos(now),
        index.clock.epoch(),
        index.accounting.get(),
    );

    let writer = index.directory_writer.lock();
    let mut directory = Directory::clone(&index.directory.load());
    let mut removed: Vec<Arc<Slot>> = Vec::new();
    let mut evict = |execution_id: ExecutionId| -> SlotEviction {
        let (Some(seen), Some(current)) = (judged.get(&execution_id), directory.get(&execution_id))
        else {
            return SlotEviction::AlreadyGone;
        };
        #[cfg(not(feature = "mutation-sweep-trusts-plan"))]
        if !Arc::ptr_eq(current, &seen.slot) {
            // Evicted and re-created since the plan: the successor was never judged.
            return SlotEviction::AlreadyGone;
        }
        let result = current.evict_if(&index.accounting, sink_gate, |chain, last_used| {
            #[cfg(feature = "mutation-sweep-trusts-plan")]
            let _ = (chain, last_used, seen);
            #[cfg(feature = "mutation-sweep-trusts-plan")]
            return true;
            #[cfg(not(feature = "mutation-sweep-trusts-plan"))]
            return Arc::ptr_eq(chain, &seen.chain) && last_used == seen.last_used;
        });
        if let SlotEviction::Evicted { .. } = result {
            removed.extend(directory.remove(&execution_id));
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
    index.publish_removal(directory, &removed, EvictReason::Ttl);
    drop(writer);
    report_sweep(index.accounting.observer(), &plan);
    plan
}
