//! The drive loop's waiting half, shared by every engine: register, build, wait, repeat.
//!
//! A drive registers a listener *before* each build, so a publish that lands between the
//! build and the wait is never lost: the listener was already there to be woken by it.

use std::time::{Duration, Instant};

use chain_fold::Incomplete;
use event_listener::Listener as _;

use crate::config::DriveBudget;
use crate::observe::{IndexObserver, WaitLabel};
use crate::report::{Build, Drive, DriveOutcome};
use crate::sync::Listener;

/// How one wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    Woken,
    TimedOut,
}

/// Parks the thread until `listener` fires or `cap` passes.
pub(crate) fn wait_blocking(listener: Listener, cap: Duration) -> WaitEnd {
    match listener.wait_timeout(cap) {
        Some(()) => WaitEnd::Woken,
        None => WaitEnd::TimedOut,
    }
}

/// Waits without blocking the executor. Runtime-agnostic: the timeout is a
/// `futures-timer` delay (its own timer thread), so this runs under tokio, smol, or a plain
/// `block_on`.
pub(crate) async fn wait_async(listener: Listener, cap: Duration) -> WaitEnd {
    futures_lite::future::or(
        async {
            listener.await;
            WaitEnd::Woken
        },
        async {
            futures_timer::Delay::new(cap).await;
            WaitEnd::TimedOut
        },
    )
    .await
}

/// The counters of one drive in progress.
pub(crate) struct Tally {
    started: Instant,
    budget: DriveBudget,
    builds: u32,
    wakes: u32,
    timeouts: u32,
}

impl Tally {
    pub(crate) fn start(budget: DriveBudget) -> Tally {
        Tally {
            started: Instant::now(),
            budget,
            builds: 0,
            wakes: 0,
            timeouts: 0,
        }
    }

    /// Counts a build; returns the finished drive if it served, the budget is spent, or
    /// `hopeless` says no wait can help (the execution finished and was evicted).
    pub(crate) fn after_build(
        &mut self,
        build: Build,
        hopeless: impl FnOnce() -> bool,
    ) -> Option<Drive> {
        self.builds += 1;
        let outcome = match build.spine {
            Some(spine) => DriveOutcome::Served(spine),
            None if self.builds > self.budget.waits || hopeless() => {
                let why = match build.outcome {
                    chain_fold::AdvanceOutcome::Incomplete(why) => why,
                    _ => Incomplete::NoEvents,
                };
                DriveOutcome::Incomplete(why)
            }
            None => return None,
        };
        Some(Drive {
            outcome,
            builds: self.builds,
            wakes: self.wakes,
            timeouts: self.timeouts,
            elapsed: self.started.elapsed(),
        })
    }

    pub(crate) fn after_wait(&mut self, end: WaitEnd, observer: &dyn IndexObserver) {
        match end {
            WaitEnd::Woken => {
                self.wakes += 1;
                observer.drive_wait(WaitLabel::Woken);
            }
            WaitEnd::TimedOut => {
                self.timeouts += 1;
                observer.drive_wait(WaitLabel::Timeout);
            }
        }
    }

    pub(crate) fn cap(&self) -> Duration {
        self.budget.wait
    }
}

/// The async drive loop every index shares: register with `listen`, build, and if not
/// served, wait on the listener (up to the budget's cap) and go again. After an unserved
/// build, `hopeless` may end the drive early (the engine: the execution already finished and
/// was evicted, so its tip can never arrive; the baselines never end early, as today).
pub(crate) async fn drive_loop<F: std::future::Future<Output = Build>>(
    budget: DriveBudget,
    observer: &dyn IndexObserver,
    mut listen: impl FnMut() -> Listener,
    mut build: impl FnMut() -> F,
    hopeless: impl Fn() -> bool,
) -> Drive {
    let mut tally = Tally::start(budget);
    loop {
        let listener = listen();
        if let Some(drive) = tally.after_build(build().await, &hopeless) {
            return drive;
        }
        let end = wait_async(listener, tally.cap()).await;
        tally.after_wait(end, observer);
    }
}

/// [`drive_loop`], parking the calling thread between builds.
pub(crate) fn drive_loop_blocking(
    budget: DriveBudget,
    observer: &dyn IndexObserver,
    mut listen: impl FnMut() -> Listener,
    mut build: impl FnMut() -> Build,
    hopeless: impl Fn() -> bool,
) -> Drive {
    let mut tally = Tally::start(budget);
    loop {
        let listener = listen();
        if let Some(drive) = tally.after_build(build(), &hopeless) {
            return drive;
        }
        tally.after_wait(wait_blocking(listener, tally.cap()), observer);
    }
}

/// Reports a finished drive's outcome and hands it back.
pub(crate) fn observed(drive: Drive, observer: &dyn IndexObserver) -> Drive {
    observer.drive(match drive.outcome {
        DriveOutcome::Served(_) => crate::observe::DriveLabel::Served,
        DriveOutcome::Incomplete(_) => crate::observe::DriveLabel::FallbackIncomplete,
    });
    drive
}
