//! The one place the engine's synchronization primitives come from.
//!
//! Every atomic, `Arc`, lock, snapshot cell and wait list that a protocol of this crate
//! relies on is imported from here, so that building with `--cfg wal_index_loom` swaps
//! them all for [loom](https://docs.rs/loom)'s model-checked versions. The cfg is
//! namespaced because a dependency already reacts to plain `cfg(loom)`.
//!
//! [`Swap`] is `arc_swap::ArcSwap` in normal builds. arc-swap has no loom support, so under
//! loom it is a lock around an `Arc`: the model then checks *our* protocol around the
//! publication (what is published before what, which ordering pairs with which), while
//! arc-swap's own algorithm is trusted as the well-tested dependency it is.
//!
//! [`Notify`] is `event_listener::Event` in normal builds, and a loom-visible wait list
//! under loom, with the same register-then-check contract: a listener created before the
//! check is woken by any `notify` that comes after the check.

#[cfg(not(wal_index_loom))]
mod std;
#[cfg(not(wal_index_loom))]
pub(crate) use self::std::*;

#[cfg(wal_index_loom)]
mod loom;
#[cfg(wal_index_loom)]
pub use self::loom::Listener;
#[cfg(wal_index_loom)]
pub(crate) use self::loom::*;
