//! The engine's evictions: explicit, terminal (at a batch boundary) and the policy sweep,
//! and the memory of executions that finished.

use std::time::Instant;

use chain_fold::{Chain, ExecutionId};

use super::slot::{Slot, SlotEviction};
use super::{Directory, WalIndex};
use crate::eviction_plan::{self, Candidate, report_sweep};
use crate::report::{EvictReason, EvictionStats};
use crate::sync::{self, Arc};

/// A bounded memory of terminal-evicted executions (the oldest is forgotten first).
#[derive(Debug, Default)]
pub(super) struct FinishedExecutions {
    ids: std::collections::HashSet<ExecutionId>,
    order: std::collections::VecDeque<ExecutionId>,
}

impl FinishedExecutions {
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
    /// Removes `execution_id`'s slot.
    pub(super) fn evict_slot(&self, execution_id: ExecutionId) -> SlotEviction {
        let _writer = self.directory_writer.lock();
        let directory = sync::load(&self.directory);
        let Some(slot) = directory.get(&execution_id) else {
            return SlotEviction::AlreadyGone;
        };
        let result = slot.evict(&self.accounting, self.config.sink_gate);
        if let SlotEviction::Evicted { .. } = result {
            sync::store(&self.directory, Arc::new(directory.without(&execution_id)));
            slot.wake_all();
        }
        result
    }
}

/// Evicts one execution now.
pub(super) fn evict(index: &WalIndex, execution_id: ExecutionId) -> bool {
    let evicted =
        matches!(index.evict_slot(execution_id), SlotEviction::Evicted { events } if events > 0);
    if evicted {
        index
            .accounting
            .observer()
            .evicted(EvictReason::Explicit, 1);
    }
    evicted
}

/// One sweep of the eviction policy as of `now`.
pub(super) fn enforce_limits_at(index: &WalIndex, now: Instant) -> EvictionStats {
    let policy = index.config.eviction;
    if policy == Default::default() {
        return EvictionStats::default();
    }
    let sink_gate = index.config.sink_gate;
    let candidates: Vec<Candidate> = sync::load(&index.directory)
        .values()
        .map(|slot| {
            let (events, bytes) = slot.with_chain(|chain: &Chain| (chain.len(), chain.bytes()));
            Candidate {
                execution_id: slot.execution_id,
                last_used: slot.last_used(),
                events,
                bytes,
                gated: sink_gate && slot.is_pending_sink(),
            }
        })
        .collect();
    let (mut plan, idle_empty) = eviction_plan::plan(
        candidates,
        &policy,
        index.nanos(now),
        index.accounting.get(),
    );
    let _writer = index.directory_writer.lock();
    let mut directory = Directory::clone(&sync::load(&index.directory));
    let mut removed: Vec<Arc<Slot>> = Vec::new();
    for execution_id in idle_empty {
        let evicted = directory
            .get(&execution_id)
            .map(|slot| slot.evict(&index.accounting, sink_gate));
        if let Some(SlotEviction::Evicted { .. }) = evicted {
            removed.extend(directory.remove(&execution_id));
        }
    }
    plan.evicted.retain(|(execution_id, reason)| {
        let Some(slot) = directory.get(execution_id) else {
            return false;
        };
        match slot.evict(&index.accounting, sink_gate) {
            SlotEviction::Evicted { .. } => {
                removed.extend(directory.remove(execution_id));
                true
            }
            SlotEviction::KeptBySinkGate => {
                plan.kept_by_sink_gate += 1;
                match reason {
                    EvictReason::Ttl => plan.ttl -= 1,
                    EvictReason::MaxExecutions => plan.max_executions -= 1,
                    _ => plan.byte_ceiling -= 1,
                }
                false
            }
            SlotEviction::AlreadyGone => false,
        }
    });
    sync::store(&index.directory, Arc::new(directory));
    for slot in removed {
        slot.wake_all();
    }
    drop(_writer);
    report_sweep(index.accounting.observer(), &plan);
    plan
}
