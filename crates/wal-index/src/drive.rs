//! The drive loop, written once for every index: register, build, wait, repeat.
//!
//! A drive registers a listener *before* each build, so a publish that lands between the
//! build and the wait is never lost: the listener was already there to be woken by it.
//!
//! Each index supplies only its [`DriveHooks`] (what to listen on, how to build without
//! blocking an executor, whether waiting can still help); the loop, its counters and its
//! reporting live here. The blocking drive runs the very same `async` loop with waits and
//! builds that complete inside their first poll, so there is exactly one loop to read, to
//! test and to model-check.

use std::future::Future;
use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, EventId, ExecutionId, Incomplete};

use crate::config::DriveBudget;
use crate::observe::{DriveLabel, IndexObserver, WaitLabel};
use crate::report::{Build, Drive, DriveOutcome};
use crate::state_index::StateIndex;
use crate::sync::{self, Listener};
use crate::waiting_room::Registered;

/// What an index supplies to the shared drive loop. Sealed: it is a supertrait of
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

    /// The index's clock (model builds only: a model advances it).
    #[cfg(any(wal_index_loom, wal_index_shuttle))]
    fn clock(&self) -> &crate::sync::Clock;

    /// Asked after an unserved build: true when no wait can serve the drive (the engine:
    /// the execution finished and was evicted). Today's design never ends a drive early.
    fn finished_and_gone(&self, execution_id: ExecutionId) -> bool {
        let _ = execution_id;
        false
    }
}

/// How the loop waits and builds: on an executor, or by parking the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Awaits builds and waits; the timeout is a `futures-timer` delay, so any executor
    /// (tokio, smol, a plain `block_on`) can run it.
    Async,
    /// Builds and waits block the thread inside their first poll.
    Blocking,
}

/// One drive of `index` for `expected_head`, without reporting its final outcome.
pub(crate) async fn drive_loop<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    expected_head: Option<EventId>,
    budget: DriveBudget,
    mode: Mode,
) -> Drive {
    let observer = index.observer();
    let started = Instant::now();
    let mut drive = Drive {
        outcome: DriveOutcome::Incomplete(Incomplete::NoEvents),
        builds: 0,
        wakes: 0,
        timeouts: 0,
        elapsed: Duration::ZERO,
    };
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
        drive.builds += 1;
        match build.spine {
            Some(spine) => {
                drive.outcome = DriveOutcome::Served(spine);
                break;
            }
            None => {
                if let AdvanceOutcome::Incomplete(why) = build.outcome {
                    drive.outcome = DriveOutcome::Incomplete(why);
                }
                if drive.builds > budget.waits || index.finished_and_gone(execution_id) {
                    break;
                }
            }
        }
        let Registered { listener, ticket } = registered;
        let woken = match mode {
            Mode::Async => wait_async(listener, budget.wait).await,
            Mode::Blocking => sync::wait_timeout(listener, budget.wait),
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
    drive.elapsed = started.elapsed();
    drive
}

/// Runs a [`Mode::Blocking`] drive loop to completion on the calling thread. Its builds and
/// waits never return `Pending`, so the first poll finishes it; `block_on` is only the
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

/// Reports a finished drive's outcome and hands it back.
pub(crate) fn observed(drive: Drive, observer: &dyn IndexObserver) -> Drive {
    observer.drive(match drive.outcome {
        DriveOutcome::Served(_) => DriveLabel::Served,
        DriveOutcome::Incomplete(_) => DriveLabel::FallbackIncomplete,
    });
    drive
}
