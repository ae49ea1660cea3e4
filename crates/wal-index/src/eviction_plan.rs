//! Which executions a sweep evicts: a pure function every index shares, and how a sweep's
//! result is reported.

use std::time::Instant;

use chain_fold::ExecutionId;

use crate::config::EvictionPolicy;
use crate::labels::EvictReason;
use crate::observe::IndexObserver;
use crate::report::{EvictionStats, IndexStats, Victim};

/// One resident execution as a sweep sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) execution_id: ExecutionId,
    /// Nanoseconds since the index's epoch of the last apply or build.
    pub(crate) last_used: u64,
    pub(crate) events: usize,
    pub(crate) bytes: usize,
    /// Held by the sink gate: never evicted.
    pub(crate) gated: bool,
}

/// The evictions one sweep makes, in order: TTL first, then least recently used until under
/// the execution cap, then until under the byte ceiling. Gated executions are skipped and
/// counted; the plan walks a finite list once, so a sweep where only gated executions remain
/// terminates.
///
/// Slots without events (a drive or a sink-gate mark arrived before the first event) are not
/// executions: they are not reported, and are returned separately as `idle_empty` once idle
/// past the TTL, for the engine to drop as housekeeping.
///
/// The totals the LRU passes count down from are the candidates' own, so the plan is
/// consistent with itself whatever happened to the index since the candidates were read
/// (totals read from the index separately can be smaller than the candidates' after a
/// concurrent eviction, and the count-down would wrap).
///
/// Times are nanoseconds since `epoch`, the index's clock origin.
pub(crate) fn plan(
    candidates: Vec<Candidate>,
    policy: &EvictionPolicy,
    now: u64,
    epoch: Instant,
) -> (EvictionStats, Vec<ExecutionId>) {
    let totals = IndexStats {
        executions: candidates.iter().filter(|c| c.events > 0).count(),
        events: candidates.iter().map(|c| c.events).sum(),
        bytes: candidates.iter().map(|c| c.bytes).sum(),
    };
    plan_against(candidates, policy, now, epoch, totals)
}

/// [`plan`] against totals read elsewhere. Only the mutation `sweep-totals-from-stats` build
/// calls it directly: it plans against the index's own totals, the wrap [`plan`] rules out.
pub(crate) fn plan_against(
    mut candidates: Vec<Candidate>,
    policy: &EvictionPolicy,
    now: u64,
    epoch: Instant,
    totals: IndexStats,
) -> (EvictionStats, Vec<ExecutionId>) {
    let mut idle_empty = Vec::new();
    candidates.sort_by_key(|c| (c.last_used, c.execution_id));
    let mut sweep = Sweep {
        stats: EvictionStats::default(),
        evicted: vec![false; candidates.len()],
        executions: totals.executions,
        bytes: totals.bytes,
        epoch,
    };
    let mut gated_skipped: Vec<ExecutionId> = Vec::new();

    if let Some(ttl) = policy.ttl {
        let ttl = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        for (i, c) in candidates.iter().enumerate() {
            if now.saturating_sub(c.last_used) < ttl {
                continue;
            }
            if c.events == 0 {
                if !c.gated {
                    idle_empty.push(c.execution_id);
                }
            } else if c.gated {
                gated_skipped.push(c.execution_id);
            } else {
                sweep.take(i, c, EvictReason::Ttl);
            }
        }
    }
    let lru_passes = [
        (policy.max_executions, EvictReason::MaxExecutions),
        (policy.max_bytes, EvictReason::ByteCeiling),
    ];
    for (limit, reason) in lru_passes {
        let Some(limit) = limit else { continue };
        for (i, c) in candidates.iter().enumerate() {
            if !sweep.over(reason, limit) {
                break;
            }
            if sweep.evicted[i] || c.events == 0 {
                continue;
            }
            if c.gated {
                gated_skipped.push(c.execution_id);
            } else {
                sweep.take(i, c, reason);
            }
        }
    }
    gated_skipped.sort_unstable();
    gated_skipped.dedup();
    sweep.stats.kept_by_sink_gate = gated_skipped.len();
    (sweep.stats, idle_empty)
}

/// A sweep in progress: what it evicted and what would remain.
struct Sweep {
    stats: EvictionStats,
    evicted: Vec<bool>,
    executions: usize,
    bytes: usize,
    epoch: Instant,
}

impl Sweep {
    fn take(&mut self, index: usize, c: &Candidate, reason: EvictReason) {
        self.evicted[index] = true;
        self.stats.evicted.push(Victim {
            execution_id: c.execution_id,
            reason,
            last_used: self.epoch + std::time::Duration::from_nanos(c.last_used),
        });
        self.executions -= 1;
        self.bytes -= c.bytes;
        match reason {
            EvictReason::Ttl => self.stats.ttl += 1,
            EvictReason::MaxExecutions => self.stats.max_executions += 1,
            _ => self.stats.byte_ceiling += 1,
        }
    }

    fn over(&self, reason: EvictReason, limit: usize) -> bool {
        match reason {
            EvictReason::MaxExecutions => self.executions > limit,
            _ => self.bytes > limit,
        }
    }
}

/// Sets the per-reason counts from the victims a sweep actually evicted (planned victims that
/// vanished, changed or turned out gated are not counted), adding `gated_at_eviction` to the
/// executions the sink gate kept.
pub(crate) fn recount(stats: &mut EvictionStats, gated_at_eviction: usize) {
    let count = |reason| stats.evicted.iter().filter(|v| v.reason == reason).count();
    stats.ttl = count(EvictReason::Ttl);
    stats.max_executions = count(EvictReason::MaxExecutions);
    stats.byte_ceiling = count(EvictReason::ByteCeiling);
    stats.kept_by_sink_gate += gated_at_eviction;
}

/// Reports a sweep's evictions per reason.
pub(crate) fn report_sweep(observer: &dyn IndexObserver, plan: &EvictionStats) {
    for (reason, count) in [
        (EvictReason::Ttl, plan.ttl),
        (EvictReason::MaxExecutions, plan.max_executions),
        (EvictReason::ByteCeiling, plan.byte_ceiling),
    ] {
        if count > 0 {
            observer.evicted(reason, count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn c(id: i64, last_used: u64, bytes: usize, gated: bool) -> Candidate {
        Candidate {
            execution_id: id,
            last_used,
            events: 1,
            bytes,
            gated,
        }
    }

    #[test]
    fn ttl_then_lru_by_count_then_by_bytes() {
        let cands = vec![
            c(1, 0, 10, false),
            c(2, 50, 10, false),
            c(3, 60, 100, false),
            c(4, 70, 10, false),
        ];
        let policy = EvictionPolicy {
            ttl: Some(Duration::from_nanos(60)),
            max_executions: Some(2),
            max_bytes: Some(15),
        };
        let epoch = Instant::now();
        let (s, _) = plan(cands.clone(), &policy, 100, epoch);
        let evicted: Vec<_> = s
            .evicted
            .iter()
            .map(|v| (v.execution_id, v.reason))
            .collect();
        assert_eq!(
            evicted,
            vec![
                (1, EvictReason::Ttl),
                (2, EvictReason::MaxExecutions),
                (3, EvictReason::ByteCeiling)
            ]
        );
        assert_eq!(s.evicted[0].last_used, epoch);
        assert_eq!((s.ttl, s.max_executions, s.byte_ceiling), (1, 1, 1));
    }

    #[test]
    fn gated_executions_are_skipped_and_the_sweep_terminates() {
        let cands = vec![c(1, 0, 10, true), c(2, 1, 10, true)];
        let policy = EvictionPolicy {
            ttl: Some(Duration::ZERO),
            max_executions: Some(0),
            max_bytes: Some(0),
        };
        let epoch = Instant::now();
        let (s, _) = plan(cands.clone(), &policy, 100, epoch);
        assert!(s.evicted.is_empty());
        assert_eq!(s.kept_by_sink_gate, 2);
    }

    #[test]
    fn no_policy_evicts_nothing() {
        let cands = vec![c(1, 0, 10, false)];
        let (s, _) = plan(
            cands.clone(),
            &EvictionPolicy::default(),
            u64::MAX,
            Instant::now(),
        );
        assert_eq!(s, EvictionStats::default());
    }
}
