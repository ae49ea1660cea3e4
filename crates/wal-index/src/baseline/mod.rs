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

mod entry;
mod mutex;
mod papaya;
mod sharded;

pub use self::papaya::PapayaIndex;
pub use mutex::MutexIndex;
pub use sharded::ShardedMutexIndex;
