//! [`StateIndex`]: the one interface the engine and the baselines share, so the simulator,
//! the benches and the tests run any of them.

use std::future::Future;
use std::time::Instant;

use chain_fold::{Chain, Event, EventId, ExecutionId};

use crate::config::{DriveBudget, IndexConfig};
use crate::report::{
    Applied, ApplyError, BatchReport, Build, Drive, EvictionStats, IndexStats, RehydrateReport,
};

/// The state-builder index interface. See [`WalIndex`](crate::WalIndex) for the semantics
/// of each method; implementations differ only in how they synchronize.
pub trait StateIndex: Send + Sync + 'static {
    /// A short name for reports (`lockfree`, `mutex`, ...).
    const NAME: &'static str;
    /// An empty index.
    fn with_config(config: IndexConfig) -> Self
    where
        Self: Sized;
    /// The configuration.
    fn config(&self) -> &IndexConfig;
    /// Indexes one event (never evicts).
    fn apply(&self, event: Event) -> Applied;
    /// Decodes and indexes one payload.
    fn apply_json(&self, payload: &[u8]) -> Result<Applied, ApplyError>;
    /// Indexes a batch, then evicts its terminal executions.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport;
    /// One build at `expected_head` (`None`: the max-id head).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build;
    /// Builds and waits until served or out of budget.
    fn drive(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> impl Future<Output = Drive> + Send;
    /// [`StateIndex::drive`], parking the thread.
    fn drive_blocking(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive;
    /// Refreshes recency.
    fn touch(&self, execution_id: ExecutionId) -> bool;
    /// Evicts one execution now (unless gated).
    fn evict(&self, execution_id: ExecutionId) -> bool;
    /// One eviction sweep as of `now`.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats;
    /// Marks an execution as holding unsunk context.
    fn mark_pending_sink(&self, execution_id: ExecutionId);
    /// Unmarks without dropping the chain.
    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool;
    /// Unmarks after sinking.
    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool;
    /// Resident totals.
    fn stats(&self) -> IndexStats;
    /// Replays one execution's retained events.
    fn rehydrate(&self, execution_id: ExecutionId, events: Vec<Event>) -> RehydrateReport;
    /// A snapshot of one execution's chain.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain>;
    /// Resident execution ids, ascending.
    fn execution_ids(&self) -> Vec<ExecutionId>;
}

macro_rules! delegate_state_index {
    ($ty:ty, $name:literal) => {
        impl $crate::StateIndex for $ty {
            const NAME: &'static str = $name;
            fn with_config(config: $crate::IndexConfig) -> Self {
                <$ty>::new(config)
            }
            fn config(&self) -> &$crate::IndexConfig {
                <$ty>::config(self)
            }
            fn apply(&self, event: chain_fold::Event) -> $crate::Applied {
                <$ty>::apply(self, event)
            }
            fn apply_json(&self, payload: &[u8]) -> Result<$crate::Applied, $crate::ApplyError> {
                <$ty>::apply_json(self, payload)
            }
            fn apply_batch(&self, events: Vec<chain_fold::Event>) -> $crate::BatchReport {
                <$ty>::apply_batch(self, events)
            }
            fn build(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
            ) -> $crate::Build {
                <$ty>::build(self, execution_id, expected_head)
            }
            fn drive(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
                budget: $crate::DriveBudget,
            ) -> impl std::future::Future<Output = $crate::Drive> + Send {
                <$ty>::drive(self, execution_id, expected_head, budget)
            }
            fn drive_blocking(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
                budget: $crate::DriveBudget,
            ) -> $crate::Drive {
                <$ty>::drive_blocking(self, execution_id, expected_head, budget)
            }
            fn touch(&self, execution_id: chain_fold::ExecutionId) -> bool {
                <$ty>::touch(self, execution_id)
            }
            fn evict(&self, execution_id: chain_fold::ExecutionId) -> bool {
                <$ty>::evict(self, execution_id)
            }
            fn enforce_limits_at(&self, now: std::time::Instant) -> $crate::EvictionStats {
                <$ty>::enforce_limits_at(self, now)
            }
            fn mark_pending_sink(&self, execution_id: chain_fold::ExecutionId) {
                <$ty>::mark_pending_sink(self, execution_id)
            }
            fn release_pending_sink(
                &self,
                execution_id: chain_fold::ExecutionId,
                reason: &str,
            ) -> bool {
                <$ty>::release_pending_sink(self, execution_id, reason)
            }
            fn confirm_sunk(&self, execution_id: chain_fold::ExecutionId) -> bool {
                <$ty>::confirm_sunk(self, execution_id)
            }
            fn stats(&self) -> $crate::IndexStats {
                <$ty>::stats(self)
            }
            fn rehydrate(
                &self,
                execution_id: chain_fold::ExecutionId,
                events: Vec<chain_fold::Event>,
            ) -> $crate::RehydrateReport {
                <$ty>::rehydrate(self, execution_id, events)
            }
            fn chain(&self, execution_id: chain_fold::ExecutionId) -> Option<chain_fold::Chain> {
                <$ty>::chain(self, execution_id)
            }
            fn execution_ids(&self) -> Vec<chain_fold::ExecutionId> {
                <$ty>::execution_ids(self)
            }
        }
    };
}

delegate_state_index!(crate::WalIndex, "lockfree");
delegate_state_index!(crate::MutexIndex, "mutex");
