//! What a drive may do besides waiting: today's worker flow, step by step.
//!
//! A dispatch asks for the spine at `expected_head`. Today's worker then:
//!
//! | step | what | `drive_builds_total{outcome}` |
//! |---|---|---|
//! | 0 | a worker that is not authoritative for building does not drive | `fallback_disabled` |
//! | 1 | applies the dispatch's `tail_events` (the payloads the server just published for this execution): a warm index serves on the first build without waiting for the drain | — |
//! | 2 | the deadline loop: register, build, wait for the execution to change (or the per-wait cap, or the deadline), build again after every wake | `served` |
//! | 3 | after the deadline, the execution's state shard (one keyed read of each event's slim payload) | `served_shard`, `served_shard_mismatch` |
//! | 4 | rehydrate from the retained WAL, at most `RehydrateGate::max_concurrent` at once, and build once more | `served_rehydrated` |
//! | 5 | give up: the caller uses the server-built state (on the stateless edge, it retries) | `fallback_incomplete`, `stateless_retry` |
//!
//! [`DriveFlow`] says which of those steps a worker has; [`StateIndex::drive_flow`] runs them
//! on any index. The shard loader and the retained WAL are the caller's, behind
//! [`DriveFallbacks`].
//!
//! ```
//! use bytes::Bytes;
//! use wal_index::{DriveBudget, DriveFlow, StateIndex, WalIndex};
//! use wal_index::labels::DriveLabel;
//!
//! let index = WalIndex::default();
//! // The dispatch carries the two events the server just published: a warm start without
//! // the drain.
//! let tail = vec![
//!     Bytes::from_static(br#"{"event_id":1,"execution_id":3,"event_type":"playbook_started"}"#),
//!     Bytes::from_static(br#"{"event_id":2,"execution_id":3,"prev_event_id":1}"#),
//! ];
//! let flow = DriveFlow::new(DriveBudget::default()).tail_events(tail);
//! let drive = index.drive_flow_blocking(3, Some(2), &flow);
//! assert_eq!(drive.label, DriveLabel::Served);
//! assert_eq!((drive.builds, drive.tail_applied), (1, 2));
//! ```
//!
//! [`StateIndex::drive_flow`]: crate::StateIndex::drive_flow

use bytes::Bytes;
use chain_fold::{Event, ExecutionId};

use crate::config::DriveBudget;
use crate::rehydrate::RehydrateGate;

/// The worker's sources for the steps after the deadline. Both default to "none".
///
/// Called at most once per drive each, only after the deadline loop ended unserved, from
/// the drive's own task or thread: an implementation may block briefly (an object-store or
/// a retained-WAL read) but should keep it bounded.
pub trait DriveFallbacks: Send + Sync {
    /// The execution's state shard: each of its events with its slim payload, any order.
    /// `None` when this worker has no shard loader or no shard for the execution.
    fn state_shard(&self, execution_id: ExecutionId) -> Option<Vec<Event>> {
        let _ = execution_id;
        None
    }

    /// The execution's events retained by the WAL, for rehydrate on miss. `None` when this
    /// worker cannot read the retained WAL (no replay is attempted).
    fn retained(&self, execution_id: ExecutionId) -> Option<Vec<Event>> {
        let _ = execution_id;
        None
    }
}

/// How one drive runs: its budget, its tail, and which steps after the deadline the worker
/// has. [`DriveFlow::new`] is the deadline loop alone, authoritative, not stateless.
#[derive(Clone)]
pub struct DriveFlow<'a> {
    /// The deadline and the per-wait cap.
    pub budget: DriveBudget,
    /// The dispatch's `tail_events`, raw WAL payloads, applied before the first build.
    pub tail_events: Vec<Bytes>,
    /// The shard loader and retained WAL.
    pub fallbacks: Option<&'a dyn DriveFallbacks>,
    /// The cap on concurrent replays; without one no replay is attempted.
    pub rehydrate_gate: Option<&'a RehydrateGate>,
    /// The stateless edge: an unserved drive is `stateless_retry`, not
    /// `fallback_incomplete`.
    pub stateless: bool,
    /// False for a worker that does not build: the drive returns `fallback_disabled`
    /// without building.
    pub authoritative: bool,
}

impl std::fmt::Debug for DriveFlow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveFlow")
            .field("budget", &self.budget)
            .field("tail_events", &self.tail_events.len())
            .field("fallbacks", &self.fallbacks.is_some())
            .field("rehydrate_gate", &self.rehydrate_gate)
            .field("stateless", &self.stateless)
            .field("authoritative", &self.authoritative)
            .finish()
    }
}

impl Default for DriveFlow<'_> {
    /// Today's default budget, the deadline loop alone.
    fn default() -> Self {
        DriveFlow::new(DriveBudget::default())
    }
}

impl<'a> DriveFlow<'a> {
    /// The deadline loop alone: no tail, no shard, no replay.
    pub fn new(budget: DriveBudget) -> DriveFlow<'a> {
        DriveFlow {
            budget,
            tail_events: Vec::new(),
            fallbacks: None,
            rehydrate_gate: None,
            stateless: false,
            authoritative: true,
        }
    }

    /// With the dispatch's tail events.
    pub fn tail_events(mut self, tail: Vec<Bytes>) -> Self {
        self.tail_events = tail;
        self
    }

    /// With a shard loader and retained WAL; a replay also needs
    /// [`rehydrate_gate`](DriveFlow::rehydrate_gate).
    pub fn fallbacks(mut self, fallbacks: &'a dyn DriveFallbacks) -> Self {
        self.fallbacks = Some(fallbacks);
        self
    }

    /// With rehydrate on miss, capped by `gate`.
    pub fn rehydrate_gate(mut self, gate: &'a RehydrateGate) -> Self {
        self.rehydrate_gate = Some(gate);
        self
    }

    /// On the stateless edge (a miss is `stateless_retry`).
    pub fn stateless(mut self, stateless: bool) -> Self {
        self.stateless = stateless;
        self
    }

    /// Whether this worker builds at all.
    pub fn authoritative(mut self, authoritative: bool) -> Self {
        self.authoritative = authoritative;
        self
    }
}
