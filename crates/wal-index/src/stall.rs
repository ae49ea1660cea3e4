//! [`StalledChain`]: an execution whose chain has waited past a bound for an event that
//! other events of it link to.
//!
//! # Why
//!
//! A write-ahead log that loses an acknowledged event (a broker node's truncated store, a
//! retention limit, a producer that never published) leaves every later event of that
//! execution linking past an id the index will never hold. The chain never connects, so no
//! drive of that execution is ever served; without a signal of its own, the loss shows only
//! as drives falling back to the server-built state, one by one, with nothing that names
//! the hole.
//!
//! # The rule
//!
//! A *hole* is an id that an event of an execution names as its `prev_event_id` and that
//! the index does not hold ([`Chain::missing_links`](chain_fold::Chain::missing_links)), in
//! a chain that holds its genesis. Each hole has its own clock, started by the first check
//! that sees it; an execution that keeps running past the hole, or meets and fills other
//! holes meanwhile, does not restart it, and the order events arrived in does not matter.
//! A hole still open after [`IndexConfig::stall_after`](crate::IndexConfig::stall_after) is
//! reported once, with the execution, the missing id and the chain's newest event.
//!
//! The checks ([`StateIndex::check_stalls_at`](crate::StateIndex::check_stalls_at)) run on
//! the drain every quarter of the bound; each loads every resident chain's snapshot and
//! scans again only those that changed since (a new event or a rewrite). An execution that
//! leaves the index (its terminal event, a TTL, LRU or explicit eviction) with holes keeps
//! them on record, without its events: they are reported when their bound has passed,
//! unless the missing id arrived meanwhile (the execution came back holding it). One that
//! comes back with its genesis and the same hole is watched as resident again, under the
//! same clock, and reported once.
//!
//! Timing: a hole's clock runs while the drain is caught up and healthy and its checks
//! come every quarter bound. While the drain is backfilling nothing is reported (the
//! missing event may be in the backlog; holes of executions that finish meanwhile are
//! recorded, and resident chains are looked at once it caught up), a failing drain checks
//! nothing, and a gap of more than a bound between two checks (a drain that failed or was
//! stuck) restarts every clock: the drain may have been late rather than the WAL lossy. A
//! hole is reported by the first check more than a bound after the later of its first
//! sighting and the last such restart: at most a bound and a quarter after the check that
//! first saw it, which comes at most a quarter bound after the event that revealed it.
//!
//! Nothing changes in what is served: a stalled chain's drives fall back as any unserved drive does,
//! never with a spine that stops short of genesis.
//!
//! # Limits
//!
//! - Only a chain that holds its genesis is judged. An execution the index evicted and that
//!   comes back without its history (a late redelivery, its next event after a TTL
//!   eviction) links to ids the *index* dropped, and cannot be told from one whose WAL lost
//!   them; neither is reported. So a lost genesis is not reported either.
//! - A loss of an execution's *last* events, which nothing links to, cannot be told from an
//!   execution that stopped.
//! - A drain that is caught up and healthy but lags the live log by more than the bound
//!   (a loaded machine) can see holes that drives' tail events opened ahead of it: those
//!   are reported as if lost. The JetStream source stays caught up once it has been, so
//!   its lag does not count as a backfill.
//! - The record of departed executions' holes is capped at 10,000 holes (past
//!   it, new ones are not recorded), and the memory of what was reported (so a re-created
//!   execution does not report the same hole again) at 4,096 holes.
//! - Today's design and the per-execution-lock comparator do not check (the trait's
//!   default reports nothing), as today's worker does not.

use std::time::Duration;

use chain_fold::{EventId, ExecutionId};

use crate::labels::StallReason;

/// The most holes of departed executions kept on record at once.
pub(crate) const DEPARTED_HOLES_MAX: usize = 10_000;

/// How many reported holes are remembered, so an execution re-created with the same hole
/// does not report it twice.
pub(crate) const REPORTED_MEMORY: usize = 4_096;

/// One hole that has been open for longer than the bound.
///
/// ```
/// use std::time::Duration;
/// use wal_index::labels::StallReason;
/// use wal_index::stall::StalledChain;
///
/// let stalled = StalledChain {
///     execution_id: 7,
///     missing_event_id: 9,
///     newest_event_id: 12,
///     reason: StallReason::MissingHop,
///     waited: Duration::from_secs(31),
/// };
/// assert_eq!(
///     stalled.to_string(),
///     "execution 7: event 9 is linked to but missing for 31.0 s (missing_hop; newest event 12)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalledChain {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The id an event names as its `prev_event_id` and the index does not hold.
    pub missing_event_id: EventId,
    /// The chain's newest event by arrival when the hole was last seen.
    pub newest_event_id: EventId,
    /// Why the chain does not connect.
    pub reason: StallReason,
    /// How long the hole had been open (counted while the drain was caught up) when it was
    /// reported.
    pub waited: Duration,
}

impl std::fmt::Display for StalledChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "execution {}: event {} is linked to but missing for {:.1} s ({}; newest event {})",
            self.execution_id,
            self.missing_event_id,
            self.waited.as_secs_f64(),
            self.reason.label(),
            self.newest_event_id
        )
    }
}
