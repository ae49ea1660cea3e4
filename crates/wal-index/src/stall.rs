//! [`StalledChain`]: an execution whose newest event has waited past a bound for a hop that
//! would connect its chain to genesis.
//!
//! # Why
//!
//! A write-ahead log that loses an acknowledged event (a broker node's truncated store, a
//! retention limit, a producer that never published) leaves every later event of that
//! execution linking to an id the index will never hold. The chain never connects, so no
//! drive of that execution is ever served; without a signal of its own, the loss shows only
//! as drives falling back to the server-built state, one by one, with nothing that names
//! the hole.
//!
//! # The rule
//!
//! A check ([`StateIndex::stalled_chains_at`](crate::StateIndex::stalled_chains_at), run by
//! the drain every quarter of [`IndexConfig::stall_after`](crate::IndexConfig::stall_after))
//! walks back from the newest event (by arrival,
//! [`Chain::newest`](chain_fold::Chain::newest)) of each execution whose chain changed
//! since the last check. A walk that does not reach genesis gives a verdict: the reason
//! and, for a missing hop, the id the chain waits for. An execution whose walks have given
//! the same verdict for longer than the bound is reported, once per verdict: an event that
//! fills the hole clears it, and a different hole is a new case. New events behind the
//! same hole do not restart the clock (they wait for the same hop), so an execution that
//! keeps running past a lost event is reported as soon as one that stopped.
//!
//! An execution whose terminal event arrives while its chain is broken is evicted at the
//! end of that batch, as every finished execution is, and nothing would ever check it
//! again: it is reported then, without waiting for the bound (in
//! [`BatchReport::finished_stalled`](crate::report::BatchReport::finished_stalled)), unless
//! a check already reported the same verdict.
//!
//! The clock starts when a check first sees the verdict, so a chain is reported between one
//! bound and one and a half bounds after its hop went missing (the check runs every
//! quarter bound). A walk costs what a cold build costs, and only chains that changed are
//! walked.
//!
//! Nothing changes in what is served: a stalled chain's drives fall back exactly as before,
//! never with a spine that stops short of genesis.
//!
//! # Limits
//!
//! - While the drain is backfilling, a hole is expected to be in the backlog: the check
//!   judges nothing until the source is caught up (or cannot tell); a chain still broken
//!   then is reported one bound later.
//! - A chain waiting for its *tip* (the server named an event the WAL has not delivered)
//!   is not stalled by this rule: the walk starts from the newest event the index holds.
//!   Such drives show as `fallback_incomplete` only.
//! - Today's design and the per-execution-lock comparator do not check (the trait's
//!   default reports nothing), as today's worker does not.
//! - A loss that removes an execution's *last* events, with nothing after them, leaves a
//!   chain that connects: nothing links to the lost ids, so nothing can tell them missing.

use std::time::Duration;

use chain_fold::{EventId, ExecutionId, Incomplete};

use crate::labels::StallReason;

/// One execution whose chain has not connected its newest event to genesis, the same
/// way, for longer than the bound.
///
/// ```
/// use std::time::Duration;
/// use wal_index::labels::StallReason;
/// use wal_index::stall::StalledChain;
///
/// let stalled = StalledChain {
///     execution_id: 7,
///     newest_event_id: 12,
///     reason: StallReason::MissingHop,
///     missing_event_id: Some(9),
///     waited: Duration::from_secs(31),
/// };
/// assert_eq!(
///     stalled.to_string(),
///     "execution 7: newest event 12 has waited 31.0 s; missing_hop: event 9 is not in the WAL's delivery"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalledChain {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its newest event by arrival, where the last walk started.
    pub newest_event_id: EventId,
    /// Why the walk did not reach genesis.
    pub reason: StallReason,
    /// For [`StallReason::MissingHop`], the id a `prev_event_id` names that the index does
    /// not hold; for [`StallReason::Cycle`], the event reached twice.
    pub missing_event_id: Option<EventId>,
    /// How long the checks have seen this verdict, when it was reported.
    pub waited: Duration,
}

impl StalledChain {
    /// The stall a walk's `incomplete` describes, if it is one: a walk that could not start
    /// (its tip or every event gone) is not a stall.
    pub(crate) fn from_walk(
        execution_id: ExecutionId,
        newest_event_id: EventId,
        incomplete: &Incomplete,
        waited: Duration,
    ) -> Option<StalledChain> {
        let (reason, missing_event_id) = match *incomplete {
            Incomplete::MissingHop(id) => (StallReason::MissingHop, Some(id)),
            Incomplete::NoGenesis => (StallReason::NoGenesis, None),
            Incomplete::Cycle(id) => (StallReason::Cycle, Some(id)),
            Incomplete::WalkLimit => (StallReason::WalkLimit, None),
            Incomplete::TipMissing(_) | Incomplete::NoEvents => return None,
        };
        Some(StalledChain {
            execution_id,
            newest_event_id,
            reason,
            missing_event_id,
            waited,
        })
    }
}

impl std::fmt::Display for StalledChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "execution {}: newest event {} has waited {:.1} s; {}",
            self.execution_id,
            self.newest_event_id,
            self.waited.as_secs_f64(),
            self.reason.label()
        )?;
        match (self.reason, self.missing_event_id) {
            (StallReason::MissingHop, Some(id)) => {
                write!(f, ": event {id} is not in the WAL's delivery")
            }
            (StallReason::Cycle, Some(id)) => write!(f, ": event {id} is reached twice"),
            _ => Ok(()),
        }
    }
}
