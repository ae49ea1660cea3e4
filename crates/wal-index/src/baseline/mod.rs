//! The comparators every figure of this project is measured against (feature `baselines`).
//!
//! A worker pool does not need them: they exist so a claim about [`WalIndex`] is a ratio
//! measured side by side, through the same [`StateIndex`] calls, in one run.
//!
//! | index | locking | wakes a waiting drive on |
//! |---|---|---|
//! | [`MutexIndex`] | today's design: one fair async mutex (Tokio's) over every execution | any applied event of any execution |
//! | [`ShardedMutexIndex`] | one short blocking lock per execution | an applied event of its own execution |
//! | [`PapayaIndex`] | none for builds: a papaya map of slots, each chain behind an `ArcSwap` | a batch's events of its own execution |
//!
//! The two lock designs keep each execution as an entry mutated in place under their lock,
//! with today's data path: payloads parsed before the lock, deep-cloned and walked under it
//! on apply; every payload value of the spine cloned under it on build, and serialized after
//! it. [`PapayaIndex`] is the design a user would write instead of the engine with today's
//! best crates, on the engine's data path (chain-fold's snapshots, builds without a lock).
//!
//! On an executor, `MutexIndex`'s async paths (`drive_async`, the drain's
//! `step_async`) await its mutex; its synchronous methods park the calling thread in the
//! same queue. They finish wherever they are called, a Tokio task included (they run
//! outside Tokio's cooperative budget, which a blocking call could never refill), but
//! prefer plain threads for them: a runtime thread parked there can hold up the task the
//! fair queue hands the lock to next.
//!
//! [`WalIndex`]: crate::WalIndex
//! [`StateIndex`]: crate::StateIndex

/// What every comparator implements the same way: `Debug` (its name and configuration),
/// `Default` (the default configuration), and no checkpoint (it keeps nothing across a
/// restart, as today's design does not).
macro_rules! comparator_basics {
    ($index:ident) => {
        impl std::fmt::Debug for $index {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($index))
                    .field("config", &self.config)
                    .finish_non_exhaustive()
            }
        }

        impl Default for $index {
            fn default() -> Self {
                <$index as $crate::index::StateIndex>::with_config(
                    $crate::config::IndexConfig::default(),
                )
            }
        }

        /// It keeps nothing across a restart: it captures no checkpoint.
        impl $crate::checkpoint::Checkpointable for $index {
            fn checkpoint(
                &self,
                at: $crate::checkpoint::SourcePosition,
            ) -> Option<$crate::checkpoint::Checkpoint> {
                let _ = at;
                None
            }
        }
    };
}

/// The drain's hooks of a comparator whose applies and sweeps never await: the async forms
/// are the blocking ones, ready at once, and the backfill word only goes to the observer
/// (its drives keep the worker's flow).
macro_rules! synchronous_drain_hooks {
    () => {
        fn note_backfill(&self, state: $crate::backfill::Backfill) {
            self.observer.backfill(state);
        }

        fn apply_batch_async(
            &self,
            events: Vec<chain_fold::Event>,
        ) -> impl Future<Output = $crate::report::BatchReport> + Send {
            std::future::ready(self.apply_batch(events))
        }

        fn enforce_limits_async(
            &self,
            now: std::time::Instant,
        ) -> impl Future<Output = $crate::report::EvictionStats> + Send {
            std::future::ready(self.enforce_limits_at(now))
        }
    };
}

/// What one attempt to evict a slot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// Not in the map, already evicted, or no longer the slot the caller judged.
    Gone,
    /// The sink gate holds it.
    Gated,
    /// The caller's condition no longer held under the entry's lock.
    Changed,
    /// Removed; it held this many events.
    Evicted(usize),
}

mod entry;
mod mutex;
mod papaya;
mod sharded;

pub use self::papaya::PapayaIndex;
pub use mutex::MutexIndex;
pub use sharded::ShardedMutexIndex;
