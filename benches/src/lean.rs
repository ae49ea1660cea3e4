//! [`LeanIndex`]: the leanest design of the same chain work, as a floor for the engine's
//! build and drain.
//!
//! A `papaya::HashMap` from execution to slot; in each slot the chain behind an
//! [`ArcSwap`], the spine cache behind another, and a mutex for its writers. A batch groups
//! each execution's events, appends them to a copy of its chain snapshot and publishes it
//! once; an execution whose batch held its terminal event leaves the map. A build pins the
//! map, loads the cache and the chain, advances the cached spine with chain-fold and
//! publishes the longer spine by compare-and-swap.
//!
//! What it leaves out, on purpose: waits (no drive can park on it), every eviction but the
//! terminal one, the finished set, the byte ledger, recency, build timing and every
//! observer call, stall checks, checkpoints, the sink gate and slim projection. It passes
//! no concurrency model and serves no drive: it is what the engine's bookkeeping is
//! measured against, not a design to run.

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Spine, SpineOrder, advance};

/// One execution: its published chain, its spine cache, its writers' lock.
struct Slot {
    chain: ArcSwap<Chain>,
    spine: ArcSwap<Option<Spine>>,
    writer: Mutex<()>,
}

/// The lean design (module docs).
pub struct LeanIndex {
    slots: papaya::HashMap<ExecutionId, Arc<Slot>>,
    order: SpineOrder,
}

impl std::fmt::Debug for LeanIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeanIndex")
            .field("executions", &self.slots.len())
            .field("order", &self.order)
            .finish()
    }
}

impl Default for LeanIndex {
    fn default() -> Self {
        LeanIndex::new(SpineOrder::default())
    }
}

impl LeanIndex {
    /// An empty index whose builds use `order`.
    pub fn new(order: SpineOrder) -> LeanIndex {
        LeanIndex {
            slots: papaya::HashMap::new(),
            order,
        }
    }

    /// Applies `events`: one published snapshot per execution, then the batch's terminal
    /// executions leave the map.
    pub fn apply_batch(&self, mut events: Vec<Event>) {
        events.sort_by_key(Event::execution_id);
        let mut terminal = Vec::new();
        for group in events.chunk_by(|a, b| a.execution_id() == b.execution_id()) {
            let execution_id = group[0].execution_id();
            if self.apply_group(execution_id, group) {
                terminal.push(execution_id);
            }
        }
        let slots = self.slots.pin();
        for execution_id in terminal {
            slots.remove(&execution_id);
        }
    }

    /// Applies one event (its own batch).
    pub fn apply(&self, event: Event) {
        self.apply_batch(vec![event]);
    }

    /// Appends `group` to its execution's chain and publishes it; true if one was terminal.
    fn apply_group(&self, execution_id: ExecutionId, group: &[Event]) -> bool {
        let slot = Arc::clone(self.slots.pin().get_or_insert_with(execution_id, || {
            Arc::new(Slot {
                chain: ArcSwap::from_pointee(Chain::new(self.order)),
                spine: ArcSwap::from_pointee(None),
                writer: Mutex::new(()),
            })
        }));
        let _writer = slot.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut chain = Chain::clone(&slot.chain.load());
        let rewrites = chain.rewrites();
        let mut terminal = false;
        for event in group {
            terminal |= event.is_terminal();
            chain.apply(event.clone());
        }
        let rewritten = chain.rewrites() != rewrites;
        slot.chain.store(Arc::new(chain));
        if rewritten {
            // A spine built before a rewrite must not be extended.
            slot.spine.store(Arc::new(None));
        }
        terminal
    }

    /// The spine at `expected_head` (the chain's largest id when `None`); `None` when the
    /// execution is not here or its chain does not reach genesis from there.
    pub fn build(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
    ) -> Option<Spine> {
        let slots = self.slots.pin();
        let slot = slots.get(&execution_id)?;
        let cached = slot.spine.load();
        let chain = slot.chain.load();
        let target = expected_head.or_else(|| chain.max_id())?;
        let result = advance(&chain, Option::as_ref(&cached), target);
        if let Some(spine) = &result.spine
            && result.replaces_cache
        {
            slot.spine
                .compare_and_swap(&cached, Arc::new(Some(spine.clone())));
        }
        match result.outcome {
            AdvanceOutcome::Incomplete(_) => None,
            _ => result.spine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LeanIndex;
    use crate::{linear, payload};

    #[test]
    fn builds_extend_the_cached_spine_and_a_terminal_execution_leaves() {
        let index = LeanIndex::default();
        let body = payload(16);
        index.apply_batch(linear(1, 1, 3, false, &body));
        assert_eq!(
            index.build(1, Some(3)).map(|s| s.ids()),
            Some(vec![1, 2, 3])
        );
        assert!(index.build(1, Some(4)).is_none(), "not indexed yet");
        index.apply(chain_fold::Event::from_parts(
            4,
            1,
            Some(3),
            "step",
            body.clone(),
        ));
        assert_eq!(
            index.build(1, None).map(|s| s.ids()),
            Some(vec![1, 2, 3, 4])
        );
        index.apply_batch(linear(2, 10, 2, true, &body));
        assert!(index.build(2, Some(11)).is_none(), "terminal: gone");
    }
}
