//! The pure core of the state-builder index: events, per-execution chains, hop walks,
//! cached spines and incremental folds.
//!
//! # The model
//!
//! A workflow execution emits events to a write-ahead log. Each event names the event
//! before it (`prev_event_id`, stamped by the server in *arrival* order), so an execution's
//! events form a singly linked list from the newest event back to `playbook_started`. A
//! [`Chain`] holds one execution's events by id. A [`Spine`] is the ordered list of events
//! from genesis to one tip, found by walking the links back from that tip
//! ([`Chain::walk_from`]).
//!
//! Builds are always rooted at the tip the server names, never at the largest id: under
//! fan-out the tip can carry a *lower* id than its predecessor.
//!
//! ```
//! use chain_fold::{Chain, Event, SpineOrder};
//!
//! // 1 playbook_started <- 2 <- 3 <- 100 <- 50: event 50 arrived last.
//! let mut chain = Chain::new(SpineOrder::Causal);
//! for (id, prev) in [(1, None), (2, Some(1)), (3, Some(2)), (100, Some(3)), (50, Some(100))] {
//!     let ty = if id == 1 { "playbook_started" } else { "step" };
//!     chain.apply(Event::minimal(id, 9, prev, ty));
//! }
//! assert_eq!(chain.walk_from(50).unwrap().ids(), vec![1, 2, 3, 100, 50]);
//! assert_eq!(chain.walk_from(100).unwrap().ids(), vec![1, 2, 3, 100]); // drops 50
//! ```
//!
//! # Costs
//!
//! | operation | cost |
//! |---|---|
//! | [`Event::clone`], [`Spine::clone`], [`Chain::clone`] | O(1): shared, nothing copied |
//! | [`Chain::apply`] of an id above every indexed one | O(1) amortized: written in place behind the chain's length |
//! | [`Chain::apply`] of a late id, or a rewrite | O(log n) (the late map); a rewrite of an in-order event copies the log, O(n) |
//! | [`Chain::contains`] / [`Chain::get`] | O(1) above the largest id or at it; O(log d) for an id `d` events back |
//! | [`advance`] cache hit | O(1): one lookup and one id comparison |
//! | [`advance`] incremental by k | O(k) hops (each the event just before in the log); k handles appended, none when the spine is the chain's log (a spine that was the log and now leaves it copies its handles out once, O(len)) |
//! | [`advance`] cold rebuild | O(len) hops; a list of `len` handles, none when the spine is the chain's log |
//! | [`Spine::json_array`] | O(1): a view of the events' own payload bytes |
//!
//! Memory: an event is one allocation, 32 bytes beyond its payload
//! ([`EVENT_OVERHEAD_BYTES`]); a chain adds an 8-byte handle per event (and its buffer's
//! growth room); a spine another, unless it is the first events of the chain's log one after
//! the other (events that arrived in causal order, no branch: the common case), when its
//! list is that log, shared. No payload byte is ever held twice.
//!
//! # What this crate does not do
//!
//! It holds no locks, spawns nothing and reads no clock: the same inputs give the same
//! outputs. Concurrency (publishing snapshots, waiting for a tip, eviction) is the
//! `wal-index` crate's job.

mod advance;
mod append_log;
mod canonical;
mod chain;
mod event;
pub mod fold;
mod json_array;
mod lineage;
#[doc(hidden)]
pub mod mutation;
mod spine;
mod sync;

pub use advance::{Advance, AdvanceOutcome, SpineCache, advance};
pub use chain::{Chain, Incomplete};
pub use event::{
    EVENT_OVERHEAD_BYTES, Event, EventError, EventId, ExecutionId, Field, ImageError, SLIM_KEYS,
    TERMINAL_TYPES,
};
pub use json_array::{JsonArray, JsonBuf};
pub use spine::{Spine, SpineOrder};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
