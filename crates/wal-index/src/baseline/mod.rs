//! The comparators every figure of this project is measured against (feature `baselines`).
//!
//! A worker pool does not need them: they exist so a claim about [`WalIndex`] is a ratio
//! measured side by side, through the same [`StateIndex`] calls, in one run.
//!
//! | index | locking | wakes a waiting drive on |
//! |---|---|---|
//! | [`MutexIndex`] | today's design: one async mutex over every execution | any applied event of any execution |
//! | [`ShardedMutexIndex`] | one async mutex per execution | an applied event of its own execution |
//!
//! Both keep each execution as an entry mutated in place under their lock, and build by
//! copying every payload of the spine out under it, as today's index does.
//!
//! [`WalIndex`]: crate::WalIndex
//! [`StateIndex`]: crate::StateIndex

mod entry;
mod mutex;
mod sharded;

pub use mutex::MutexIndex;
pub use sharded::ShardedMutexIndex;
