//! The drive, written once for every index, as today's worker runs it: apply the
//! dispatch's tail events, then a deadline loop (register, build, wait, repeat), then the
//! state shard, then rehydrate on a miss, then fall back.
//!
//! A drive registers a listener *before* each build, so a publish that lands between the
//! build and the wait is never lost: the listener was already there to be woken by it.
//! The budget is a deadline (`attempts × retry` from the first build) and a wake-up costs
//! nothing: after every wake the drive builds again, until it is served or the deadline
//! passes. No wait is longer than `retry` nor runs past the deadline.
//!
//! Each index supplies only its [`DriveHooks`] (what to listen on, how to build and apply
//! without blocking an executor, whether waiting can still help); the loop, the flow, their
//! counters and their reporting live here. The blocking drive runs the very same `async`
//! code with waits, builds and applies that complete inside their first poll, so there is
//! exactly one drive to read, to test and to model-check.

use std::future::Future;
use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete};

use crate::config::DriveBudget;
use crate::flow::DriveFlow;
use crate::observe::{DriveLabel, RehydrateLabel, WaitLabel};
use crate::report::{Applied, BatchReport, Build, Drive, DriveOutcome, RehydrateReport};
use crate::state_index::StateIndex;
use crate::sync::{self, Listener};
use crate::waiting_room::Registered;

/// What an index supplies to the shared drive. Sealed: it is a supertrait of
/// [`StateIndex`](crate::StateIndex) in a private module, so only this crate's indexes
/// implement it.
// `pub` in a private module is the sealed-trait pattern: nameable here, not outside.
#[allow(unreachable_pub)]
pub trait DriveHooks {
    /// Registers a waiter that any publish of `execution_id` after this call wakes,
    /// including the publish that makes a non-resident execution resident. Must not create
    /// state the index keeps after the drive ends.
    fn listen(&self, execution_id: ExecutionId) -> Registered<'_>;

    /// One build that awaits, rather than blocks on, whatever the index locks.
    fn build_async(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
    ) -> impl Future<Output = Build> + Send;

    /// One build that may block the calling thread.
    fn build_blocking(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build;

    /// One apply (a drive's tail event) that awaits, rather than blocks on, the index's
    /// locks.
    fn apply_async(&self, event: Event) -> impl Future<Output = Applied> + Send;

    /// A batch, applied as `apply_batch` does, awaiting rather than blocking on the
    /// index's locks (the drain run as a task on an executor).
    fn apply_batch_async(&self, events: Vec<Event>) -> impl Future<Output = BatchReport> + Send;

    /// A replay, as `rehydrate` does, awaiting rather than blocking on the index's locks.
    fn rehydrate_async(
        &self,
        execution_id: ExecutionId,
        events: Vec<Event>,
    ) -> impl Future<Output = RehydrateReport> + Send;

    /// A sweep, as `enforce_limits_at` does, awaiting rather than blocking on the index's
    /// locks (the drain run as a task).
    fn enforce_limits_async(
        &self,
        now: std::time::Instant,
    ) -> impl Future<Output = crate::report::EvictionStats> + Send;

    /// A snapshot of one execution's chain, as `chain` returns, awaiting the index's locks.
    fn chain_async(&self, execution_id: ExecutionId) -> impl Future<Output = Option<Chain>> + Send;

    /// The index's clock (a model advances it; the deadline is measured on it).
    fn clock(&self) -> &crate::sync::Clock;

    /// Asked after an unserved build: true when no wait can serve the drive (the engine:
    /// the execution finished and was evicted). Today's design never ends a drive early.
    fn finished_and_gone(&self, execution_id: ExecutionId) -> bool {
        let _ = execution_id;
        false
    }
}

/// The async hooks of an index whose locks are never held across an await (the engine's
/// writer locks, the per-execution comparator's entry locks): each is the synchronous
/// operation, which finishes without parking on anything a task holds.
macro_rules! async_forms_are_the_sync_ones {
    () => {
        async fn apply_async(&self, event: chain_fold::Event) -> crate::report::Applied {
            self.apply(event)
        }

        async fn apply_batch_async(
            &self,
            events: Vec<chain_fold::Event>,
        ) -> crate::report::BatchReport {
            self.apply_batch(events)
        }

        async fn rehydrate_async(
            &self,
            execution_id: chain_fold::ExecutionId,
            events: Vec<chain_fold::Event>,
        ) -> crate::report::RehydrateReport {
            self.rehydrate(execution_id, events)
        }

        async fn enforce_limits_async(
            &self,
            now: std::time::Instant,
        ) -> crate::report::EvictionStats {
            self.enforce_limits_at(now)
        }

        async fn chain_async(
            &self,
            execution_id: chain_fold::ExecutionId,
        ) -> Option<chain_fold::Chain> {
            self.chain(execution_id)
        }
    };
}
pub(crate) use async_forms_are_the_sync_ones;

/// How the drive waits, builds and applies: on an executor, or by blocking the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Awaits builds, applies and waits; the timeout is a `futures-timer` delay, so any
    /// executor (tokio, smol, a plain `block_on`) can run it.
    Async,
    /// Builds, applies and waits block the thread inside their first poll.
    Blocking,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The deadline loop of one drive for `expected_head`, updating `drive` (its builds,
/// wakes, timeouts and outcome). Ends served, at the deadline, or when the index says no
/// wait can serve it.
pub(crate) async fn drive_loop<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    budget: DriveBudget,
    mode: Mode,
    drive: &mut Drive,
) {
    let observer = index.observer();
    let clock = index.clock();
    let deadline = clock.now().saturating_add(nanos(budget.deadline()));
    loop {
        // Register before the build: a publish after this point wakes the listener, so one
        // that lands between the build and the wait is never lost. The mutation registers
        // after the build, and loom must find the lost wake-up.
        #[cfg(not(feature = "mutation-listen-after-build"))]
        let registered = index.listen(execution_id);
        let build = match mode {
            Mode::Async => index.build_async(execution_id, expected_head).await,
            Mode::Blocking => index.build_blocking(execution_id, expected_head),
        };
        #[cfg(feature = "mutation-listen-after-build")]
        let registered = index.listen(execution_id);
        if record(drive, build) {
            return;
        }
        let now = clock.now();
        if now >= deadline || index.finished_and_gone(execution_id) {
            return;
        }
        let cap = budget.retry.min(Duration::from_nanos(deadline - now));
        let Registered { listener, ticket } = registered;
        let woken = match mode {
            Mode::Async => wait_async(listener, cap).await,
            Mode::Blocking => sync::wait_timeout(listener, cap),
        };
        drop(ticket);
        if woken {
            drive.wakes += 1;
            observer.drive_wait(WaitLabel::Woken);
        } else {
            drive.timeouts += 1;
            observer.drive_wait(WaitLabel::Timeout);
        }
    }
}

/// A drive that has done nothing yet.
fn fresh_drive() -> Drive {
    Drive {
        outcome: DriveOutcome::Incomplete(Incomplete::NoEvents),
        label: DriveLabel::FallbackIncomplete,
        builds: 0,
        wakes: 0,
        timeouts: 0,
        tail_applied: 0,
        tail_rejected: 0,
        rehydrate: None,
        elapsed: Duration::ZERO,
    }
}

/// Today's drive flow, end to end, reported to the index's observer:
///
/// 1. not authoritative → `fallback_disabled`, nothing built;
/// 2. apply the dispatch's tail events (each an overwrite by id; an undecodable one is
///    counted and skipped);
/// 3. the deadline loop → `served`;
/// 4. the state shard, if a loader has one → `served_shard` / `served_shard_mismatch`;
/// 5. rehydrate from the retained WAL, within the gate's cap → `served_rehydrated`;
/// 6. otherwise `fallback_incomplete` (`stateless_retry` on the stateless edge).
pub(crate) async fn run_flow<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    flow: &DriveFlow<'_>,
    mode: Mode,
) -> Drive {
    let started = Instant::now();
    let mut drive = fresh_drive();
    if !flow.authoritative {
        drive.label = DriveLabel::FallbackDisabled;
        drive.elapsed = started.elapsed();
        index.observer().drive(drive.label);
        return drive;
    }
    // The tail of an execution that already finished and was evicted would re-create a
    // partial chain (a tail rarely reaches genesis) that no terminal event evicts again:
    // the engine skips it, and its drive ends after one build. (Today's index, which keeps
    // no finished set, re-creates it; so do the comparators.)
    let finished = !flow.tail_events.is_empty() && index.finished_and_gone(execution_id);
    for payload in flow.tail_events.iter().filter(|_| !finished) {
        match Event::from_json_bytes(payload.clone()) {
            Ok(event) if event.execution_id() == execution_id => {
                match mode {
                    Mode::Async => index.apply_async(event).await,
                    Mode::Blocking => index.apply(event),
                };
                drive.tail_applied += 1;
            }
            // A tail event of another execution is the dispatcher's mistake: applying it
            // would be harmless (an overwrite by id) but it is not this drive's to apply.
            // Each payload is decoded on its own, so a bad one costs only itself.
            Ok(_) | Err(_) => drive.tail_rejected += 1,
        }
    }
    if finished {
        drive.tail_rejected += flow.tail_events.len() as u32;
    }
    if drive.tail_applied + drive.tail_rejected > 0 {
        index
            .observer()
            .drive_tail(drive.tail_applied, drive.tail_rejected);
    }
    drive_loop(
        index,
        execution_id,
        expected_head,
        flow.budget,
        mode,
        &mut drive,
    )
    .await;
    if drive.outcome.spine().is_some() {
        drive.label = DriveLabel::Served;
    } else if let Some(label) =
        serve_from_shard(index, execution_id, expected_head, flow, mode, &mut drive).await
    {
        drive.label = label;
    } else if let Some(replay) =
        rehydrate(index, execution_id, expected_head, flow, mode, &mut drive).await
    {
        index.observer().rehydrate(replay);
        drive.rehydrate = Some(replay);
        if replay == RehydrateLabel::Served {
            drive.label = DriveLabel::ServedRehydrated;
        }
    }
    if drive.outcome.spine().is_none() {
        drive.label = if flow.stateless {
            DriveLabel::StatelessRetry
        } else {
            DriveLabel::FallbackIncomplete
        };
    }
    drive.elapsed = started.elapsed();
    index.observer().drive(drive.label);
    drive
}

/// Step 4: the execution's state shard, walked from the expected head like a cold rebuild.
/// Served from the shard; `mismatch` when an event the index also holds has a different
/// slim payload there (the shard is served anyway: it is what the worker can read).
async fn serve_from_shard<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    flow: &DriveFlow<'_>,
    mode: Mode,
    drive: &mut Drive,
) -> Option<DriveLabel> {
    let shard = flow.fallbacks?.state_shard(execution_id)?;
    let mut chain = Chain::new(index.config().order);
    for event in shard.iter().filter(|e| e.execution_id() == execution_id) {
        chain.apply(event.clone());
    }
    let target = expected_head.or_else(|| chain.max_id())?;
    let spine = chain.walk_from(target).ok()?;
    let resident = match mode {
        Mode::Async => index.chain_async(execution_id).await,
        Mode::Blocking => index.chain(execution_id),
    };
    let mismatch = resident.is_some_and(|resident| {
        spine.events().any(|event| {
            resident
                .get(event.id())
                .is_some_and(|ours| ours.to_slim().payload() != event.to_slim().payload())
        })
    });
    drive.outcome = DriveOutcome::Served(spine);
    Some(if mismatch {
        DriveLabel::ServedShardMismatch
    } else {
        DriveLabel::ServedShard
    })
}

/// Step 5: replay the retained events within the gate's cap, then build once more.
/// `None` when the flow has no retained WAL or no gate.
async fn rehydrate<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    flow: &DriveFlow<'_>,
    mode: Mode,
    drive: &mut Drive,
) -> Option<RehydrateLabel> {
    let (fallbacks, gate) = (flow.fallbacks?, flow.rehydrate_gate?);
    // The cap covers the retained read and the replay, not the build after it.
    let permit = gate.try_enter();
    if permit.is_none() {
        return Some(RehydrateLabel::Throttled);
    }
    let events = fallbacks.retained(execution_id)?;
    if events.is_empty() {
        return Some(RehydrateLabel::Empty);
    }
    let _replayed = match mode {
        Mode::Async => index.rehydrate_async(execution_id, events).await,
        Mode::Blocking => index.rehydrate(execution_id, events),
    };
    drop(permit);
    let build = match mode {
        Mode::Async => index.build_async(execution_id, expected_head).await,
        Mode::Blocking => index.build_blocking(execution_id, expected_head),
    };
    Some(if record(drive, build) {
        RehydrateLabel::Served
    } else {
        RehydrateLabel::Incomplete
    })
}

/// Counts one build of `drive` and keeps what it gave: the spine, or why it is incomplete.
/// True when served.
fn record(drive: &mut Drive, build: Build) -> bool {
    drive.builds += 1;
    match build.spine {
        Some(spine) => {
            drive.outcome = DriveOutcome::Served(spine);
            true
        }
        None => {
            if let AdvanceOutcome::Incomplete(why) = build.outcome {
                drive.outcome = DriveOutcome::Incomplete(why);
            }
            false
        }
    }
}

/// Runs a [`Mode::Blocking`] drive to completion on the calling thread. Its builds, applies
/// and waits never return `Pending`, so the first poll finishes it; `block_on` is only the
/// harness that polls it.
pub(crate) fn run_blocking(drive: impl Future<Output = Drive>) -> Drive {
    futures_lite::future::block_on(drive)
}

/// Waits for `listener` or `cap`, whichever comes first; true if woken.
async fn wait_async(listener: Listener, cap: Duration) -> bool {
    futures_lite::future::or(
        async {
            listener.await;
            true
        },
        async {
            futures_timer::Delay::new(cap).await;
            false
        },
    )
    .await
}
