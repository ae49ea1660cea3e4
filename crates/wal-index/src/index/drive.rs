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
//! Each index supplies only its [`IndexHooks`](super::IndexHooks) (what to listen on, its
//! clock, whether waiting can still help) and the async forms of its operations; the loop,
//! the flow, their counters and their reporting live here, written once as `async` code.
//! The blocking drive runs that same code to completion on the calling thread: the only
//! thing that differs is how a wait waits ([`Waiting`]: a parked thread or a timer), so
//! there is exactly one drive to read, to test and to model-check.

use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete};

use super::StateIndex;
use bytes::Bytes;

use super::flow::{DriveFlow, ShardAnswer};
use crate::labels::{DriveLabel, RehydrateLabel, ShardReadLabel, ShardVerifyLabel, WaitLabel};
use crate::rehydrate::RehydratePermit;
use crate::report::{Build, Drive, DriveOutcome};
use crate::sync::Waiting;
use crate::waiting_room::Registered;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What every step of one drive reads: the index, the drive's question, its flow, how it
/// waits, and its window (the deadline on the index's clock and the per-wait cap).
struct Steps<'d, 'g, I> {
    index: &'d I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    flow: &'d DriveFlow<'g>,
    waiting: Waiting,
    window: (u64, Duration),
}

/// Why a deadline loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoopEnd {
    /// A build served the drive.
    Served,
    /// The deadline passed, or the index says no wait can serve it (finished and gone).
    Over,
    /// The drain is backfilling and the drive can read its execution: it leaves at once.
    Backfilling,
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
        tail_decode: Duration::ZERO,
        rehydrate: None,
        shard: None,
        backfill_skip: false,
        elapsed: Duration::ZERO,
    }
}

/// Today's drive flow, end to end, reported to the index's observer. The steps are
/// numbered as [`flow`](crate::flow)'s table numbers them:
///
/// 0. not authoritative → `fallback_disabled`, nothing built;
/// 1. apply the dispatch's tail events (each an overwrite by id; an undecodable one is
///    counted and skipped);
/// 2. the deadline loop → `served`; on the engine, a drive that can rehydrate leaves it at
///    an unserved build while the drain backfills and reads its execution at once (step 4's
///    cap and labels; see [`Steps::early_read`]), then waits out the rest of its deadline;
/// 3. the state shard, if a loader has one → `served_shard` / `served_shard_mismatch`;
/// 4. rehydrate from the retained WAL, within the gate's cap → `served_rehydrated`;
/// 5. otherwise `fallback_incomplete` (`stateless_retry` on the stateless edge).
pub(crate) async fn run_flow<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    flow: &DriveFlow<'_>,
    waiting: Waiting,
) -> Drive {
    let started = Instant::now();
    let mut drive = fresh_drive();
    if flow.authoritative {
        apply_tail(index, execution_id, flow, &mut drive).await;
        // The deadline starts after the tail, at the first build.
        let deadline = index
            .clock()
            .now()
            .saturating_add(nanos(flow.budget.deadline()));
        let steps = Steps {
            index,
            execution_id,
            expected_head,
            flow,
            waiting,
            window: (deadline, flow.budget.retry),
        };
        let end = steps.wait(&mut drive).await;
        steps.after_deadline(end, &mut drive).await;
    } else {
        drive.label = DriveLabel::FallbackDisabled;
    }
    drive.elapsed = started.elapsed();
    index.observer().drive(drive.label);
    drive
}

/// Step 1: the dispatch's tail events, each decoded on its own, so a bad one costs only
/// itself, and once, the way the index stores events.
async fn apply_tail<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    flow: &DriveFlow<'_>,
    drive: &mut Drive,
) {
    // The tail of an execution that already finished and was evicted would re-create a
    // partial chain (a tail rarely reaches genesis) that no terminal event evicts again:
    // the engine skips it, and its drive ends after one build. (Today's index, which keeps
    // no finished set, re-creates it; so do the comparators.)
    let finished = !flow.tail_events.is_empty() && index.finished_and_gone(execution_id);
    let mode = index.decode_mode();
    for payload in flow.tail_events.iter().filter(|_| !finished) {
        let started = Instant::now();
        let decoded = mode.decode(payload);
        drive.tail_decode += started.elapsed();
        match decoded {
            Ok(event) if event.execution_id() == execution_id => {
                index.apply_async(event).await;
                drive.tail_applied += 1;
            }
            // A tail event of another execution is the dispatcher's mistake: applying it
            // would be harmless (an overwrite by id) but it is not this drive's to apply.
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
}

impl<I: StateIndex> Steps<'_, '_, I> {
    /// Step 2: the deadline loop, left early for a read while the drain backfills (the
    /// read, then what is left of the deadline).
    async fn wait(&self, drive: &mut Drive) -> LoopEnd {
        let end = self.deadline_loop(self.flow.can_rehydrate(), drive).await;
        if end != LoopEnd::Backfilling {
            return end;
        }
        // The drain is replaying history this drive's chain is still behind: read the
        // execution now rather than after the deadline, its state shard first (one keyed
        // read), then the retained WAL.
        if let Some(label) = self.serve_from_shard(drive).await {
            drive.label = label;
            return LoopEnd::Served;
        }
        if self.early_read(drive).await {
            LoopEnd::Served
        } else if chain_fold::mutation::on("backfill-read-ends-drive") {
            // The mutation: an early read that did not serve ends the drive, which then
            // gives up a tip the drain was about to apply (the shuttle model's drive with
            // an empty retained WAL must still be served, by waiting).
            LoopEnd::Over
        } else {
            // Then wait out what is left of the deadline (nothing, if the read took it).
            self.deadline_loop(false, drive).await
        }
    }

    /// Steps 3 to 5, after a deadline loop that ended with `end`: the label of a served
    /// drive, or the state shard, the read after the deadline, and the fallback.
    async fn after_deadline(&self, end: LoopEnd, drive: &mut Drive) {
        if end == LoopEnd::Served && drive.outcome.spine().is_some() {
            // Served by waiting, unless an early read (the shard's or the WAL's) served it.
            if !matches!(
                drive.label,
                DriveLabel::ServedRehydrated
                    | DriveLabel::ServedShard
                    | DriveLabel::ServedShardMismatch
            ) {
                drive.label = DriveLabel::Served;
            }
        } else {
            // The state shard, unless it was read early, behind the backfill (a shard is
            // read once per drive).
            let shard = match drive.shard {
                None => self.serve_from_shard(drive).await,
                Some(_) => None,
            };
            if let Some(label) = shard {
                drive.label = label;
            } else {
                // Today's read after the deadline, whatever an early read gave: one that
                // did not serve the drive (a broker still cold from the restart may answer
                // short or not at all) takes nothing away from the read today's flow makes.
                let read = self.read_retained().await;
                if let Some(replay) = self.replay(read, drive).await {
                    self.report_replay(replay, drive);
                }
            }
        }
        if drive.outcome.spine().is_none() {
            drive.label = if self.flow.stateless {
                DriveLabel::StatelessRetry
            } else {
                DriveLabel::FallbackIncomplete
            };
        }
    }

    /// The deadline loop of one drive until its deadline (on the index's clock), updating
    /// `drive` (its builds, wakes, timeouts and outcome). Ends served, at the deadline,
    /// when the index says no wait can serve it, or, if `leave_when_backfilling`, at an
    /// unserved build while the index's drain is backfilling.
    async fn deadline_loop(&self, leave_when_backfilling: bool, drive: &mut Drive) -> LoopEnd {
        let (index, execution_id) = (self.index, self.execution_id);
        let (deadline, retry) = self.window;
        let observer = index.observer();
        let clock = index.clock();
        loop {
            // Register before the build: a publish after this point wakes the listener, so
            // one that lands between the build and the wait is never lost. The mutation
            // registers after the build, and loom must find the lost wake-up.
            let listen_after_build = chain_fold::mutation::on("listen-after-build");
            let early = (!listen_after_build).then(|| index.listen(execution_id));
            let build = index.build_async(execution_id, self.expected_head).await;
            let registered = early.unwrap_or_else(|| index.listen(execution_id));
            if record(drive, build) {
                return LoopEnd::Served;
            }
            // A drive with a per-execution read leaves while the drain backfills.
            if leave_when_backfilling && index.backfilling() {
                drive.backfill_skip = true;
                return LoopEnd::Backfilling;
            }
            let now = clock.now();
            if now >= deadline || index.finished_and_gone(execution_id) {
                return LoopEnd::Over;
            }
            let cap = retry.min(Duration::from_nanos(deadline - now));
            let Registered { listener, ticket } = registered;
            let woken = self.waiting.wait(listener, cap).await;
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

    /// Step 3: the execution's state shard, as production's worker reads it: its events
    /// are applied to the index (each an overwrite by id, as a rehydrate's) and the index
    /// builds once more. A shard is never trusted to be complete: it serves only when that
    /// build reaches genesis from the expected head, like any other; otherwise the drive
    /// goes on to the retained WAL. With [`DriveFlow::verify_shard`], a served spine is
    /// compared with the retained WAL's ([`Steps::verify_shard`]).
    async fn serve_from_shard(&self, drive: &mut Drive) -> Option<DriveLabel> {
        let (index, execution_id) = (self.index, self.execution_id);
        let read = self
            .flow
            .fallbacks?
            .state_shard(execution_id, self.index.decode_mode());
        let started = Instant::now();
        let answer = self
            .waiting
            .within(read, self.flow.fallback_timeout)
            .await
            .unwrap_or_else(|| ShardAnswer::Failed("no answer within the fallback timeout".into()));
        let report = |outcome: ShardReadLabel, drive: &mut Drive| {
            drive.shard = Some(outcome);
            index
                .observer()
                .state_shard_read(outcome, started.elapsed());
        };
        let events: Vec<Event> = match answer {
            ShardAnswer::NoReader => return None,
            ShardAnswer::NotFound | ShardAnswer::Empty => {
                report(ShardReadLabel::Miss, drive);
                return None;
            }
            ShardAnswer::Failed(_) => {
                report(ShardReadLabel::Fallback, drive);
                return None;
            }
            ShardAnswer::Events(events) => events
                .into_iter()
                .filter(|e| e.execution_id() == execution_id)
                .collect(),
        };
        if events.is_empty() {
            report(ShardReadLabel::Miss, drive);
            return None;
        }
        index.rehydrate_async(execution_id, events).await;
        let build = index.build_async(execution_id, self.expected_head).await;
        if !record(drive, build) {
            report(ShardReadLabel::Fallback, drive);
            return None;
        }
        let took = started.elapsed();
        let label = if self.flow.verify_shard {
            self.verify_shard(drive).await
        } else {
            DriveLabel::ServedShard
        };
        // A shard the retained WAL contradicts is production's `fallback`: the WAL served.
        let read = if label == DriveLabel::ServedShardMismatch {
            ShardReadLabel::Fallback
        } else {
            ShardReadLabel::Hit
        };
        drive.shard = Some(read);
        index.observer().state_shard_read(read, took);
        Some(label)
    }

    /// Verify mode: the retained WAL's spine from the served spine's head, compared byte
    /// for byte (slim payloads) with the spine served after the shard was applied: two
    /// reads of two stores, never a build compared with itself. A difference serves the
    /// WAL's spine and replays it into the index.
    async fn verify_shard(&self, drive: &mut Drive) -> DriveLabel {
        let observer = self.index.observer();
        let Some(served) = drive.outcome.spine().cloned() else {
            return DriveLabel::ServedShard;
        };
        let Some(head) = served.events().last().map(Event::id) else {
            return DriveLabel::ServedShard;
        };
        let order = self.index.config().order;
        let walk = |events: &[Event]| {
            let mut chain = Chain::new(order);
            for event in events
                .iter()
                .filter(|e| e.execution_id() == self.execution_id)
            {
                chain.apply(event.clone());
            }
            chain.walk_from(head).ok()
        };
        let (wal_events, permit) = match self.read_retained().await {
            Read::Events(events, permit) if !events.is_empty() => (events, permit),
            _ => {
                observer.state_shard_verify(ShardVerifyLabel::Unverified);
                return DriveLabel::ServedShard;
            }
        };
        let Some(wal) = walk(&wal_events) else {
            observer.state_shard_verify(ShardVerifyLabel::Unverified);
            return DriveLabel::ServedShard;
        };
        let slim = |spine: &chain_fold::Spine| -> Vec<Bytes> {
            spine
                .events()
                .map(|e| e.to_slim().payload_bytes())
                .collect()
        };
        if slim(&wal) == slim(&served) {
            observer.state_shard_verify(ShardVerifyLabel::Matched);
            return DriveLabel::ServedShard;
        }
        observer.state_shard_verify(ShardVerifyLabel::Mismatched);
        self.index
            .rehydrate_async(self.execution_id, wal_events)
            .await;
        drop(permit);
        drive.outcome = DriveOutcome::Served(wal);
        DriveLabel::ServedShardMismatch
    }

    /// Reports one replay attempt and keeps it on the drive (`served_rehydrated` if it
    /// served).
    fn report_replay(&self, replay: RehydrateLabel, drive: &mut Drive) {
        self.index.observer().rehydrate(replay);
        drive.rehydrate = Some(replay);
        if replay == RehydrateLabel::Served {
            drive.label = DriveLabel::ServedRehydrated;
        }
    }

    /// Reads the execution's retained events within the gate's cap, for at most the
    /// flow's fallback timeout. Touches neither the index nor the drive, so it can race a
    /// wait.
    async fn read_retained(&self) -> Read<'_> {
        let flow = self.flow;
        let (Some(fallbacks), Some(gate)) = (flow.fallbacks, flow.rehydrate_gate) else {
            return Read::NoSource;
        };
        // The cap covers the retained read and the replay, not the build after it.
        let Some(permit) = gate.try_enter() else {
            return Read::Throttled;
        };
        let read = fallbacks.retained(self.execution_id, self.index.decode_mode());
        match self
            .waiting
            .within(read, flow.fallback_timeout)
            .await
            .flatten()
        {
            Some(events) => Read::Events(events, permit),
            None => Read::NoAnswer,
        }
    }

    /// Step 4's replay of what `read` gave, then one build. `None` when nothing was
    /// replayed and nothing is to be reported (no source, no answer); `Throttled` and
    /// `Empty` replay nothing.
    async fn replay(&self, read: Read<'_>, drive: &mut Drive) -> Option<RehydrateLabel> {
        let (events, permit) = match read {
            Read::NoSource | Read::NoAnswer => return None,
            Read::Throttled => return Some(RehydrateLabel::Throttled),
            Read::Events(events, _) if events.is_empty() => return Some(RehydrateLabel::Empty),
            Read::Events(events, permit) => (events, permit),
        };
        let index = self.index;
        let _replayed = index.rehydrate_async(self.execution_id, events).await;
        drop(permit);
        let build = index
            .build_async(self.execution_id, self.expected_head)
            .await;
        Some(if record(drive, build) {
            RehydrateLabel::Served
        } else {
            RehydrateLabel::Incomplete
        })
    }

    /// The early read of a drive behind a backfill.
    ///
    /// An async drive reads while it goes on waiting, within its deadline, for the drain to
    /// serve it: if the drain does (a tie included: the wait is polled first), the read is
    /// dropped; if the read ends first, the wait is dropped and the read's events are replayed
    /// and built once; if the deadline passes first, the drive awaits the read alone, within
    /// the fallback timeout it started with. So a drive waits no wait past its deadline. A read
    /// that served ends the drive within the later of its deadline and its read's timeout,
    /// plus the replay: never later than today's flow, which reads after the deadline. One
    /// that did not serve (short, empty, throttled or unanswered) leaves today's read after the
    /// deadline, which may still serve the drive (a broker cold at the restart answers later
    /// reads, and answers them whole): such a drive can end up to one read timeout later than
    /// today's. A blocking drive cannot wait and read at once, so it reads first and then waits
    /// out what is left of its deadline.
    ///
    /// Returns whether the early read served the drive. Every read that answered is reported;
    /// one that did not serve leaves today's read after the deadline in place.
    async fn early_read(&self, drive: &mut Drive) -> bool {
        let mut read = std::pin::pin!(self.read_retained());
        let raced = match self.waiting {
            Waiting::Timer => {
                futures_lite::future::or(
                    async { Race::Waited(self.deadline_loop(false, drive).await) },
                    async { Race::Read(read.as_mut().await) },
                )
                .await
            }
            Waiting::Park => Race::Read(read.as_mut().await),
        };
        let read = match raced {
            Race::Waited(LoopEnd::Served) => return true,
            // The deadline passed (or the execution finished and is gone): the read alone.
            Race::Waited(_) => read.await,
            Race::Read(read) => read,
        };
        match self.replay(read, drive).await {
            Some(RehydrateLabel::Throttled) | None => false,
            Some(label) => {
                self.report_replay(label, drive);
                label == RehydrateLabel::Served
            }
        }
    }
}

/// What a read of the retained WAL gave.
enum Read<'g> {
    /// The flow has no retained WAL or no replay cap.
    NoSource,
    /// The cap was reached; nothing was read.
    Throttled,
    /// No events: the source answered that it has nothing to offer (a source without
    /// this execution, or at its own limit), or gave no answer within the fallback timeout.
    NoAnswer,
    /// The execution's retained events, and the place under the cap they hold until they
    /// are replayed.
    Events(Vec<Event>, RehydratePermit<'g>),
}

/// What raced in an async drive's early read.
enum Race<'g> {
    /// The read ended first.
    Read(Read<'g>),
    /// Waiting ended first: served by the drain, or the execution finished and is gone.
    Waited(LoopEnd),
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
