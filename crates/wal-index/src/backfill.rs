//! [`Backfill`]: where a WAL source stands against the head its log had when it subscribed.
//!
//! A leaf module: the sources report it, the drain passes it on, the index and its observer
//! read it, and it needs none of them.

/// Where a source stands against the log's head as it was when the source subscribed:
/// still replaying what the log held then (a backfill), past it, or unable to tell.
///
/// A source learns the head once, at subscription (JetStream's last stream sequence, the
/// end of EHDB's first frame, an in-process channel's queued records), and compares what
/// it has handed over with it. The drain reports the answer to its index after every pull
/// ([`WalIndex::note_backfill`](crate::WalIndex::note_backfill)); the engine uses it to
/// send a drive whose chain is still behind the drain to its per-execution read at once,
/// instead of spending its deadline waiting for a backfill that will not end in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backfill {
    /// The source does not know the head (a file, a pipe, a source that does not say).
    #[default]
    Unknown,
    /// The drain has not yet been handed everything the log held at subscription;
    /// `remaining` records of it are still to come, where the source can count them.
    Behind {
        /// Records between what was handed over and the head, if the source knows.
        remaining: Option<u64>,
    },
    /// Everything the log held at subscription was handed over: what follows is live.
    CaughtUp,
}

impl Backfill {
    /// True while the drain is replaying the log's history.
    pub fn is_behind(self) -> bool {
        matches!(self, Backfill::Behind { .. })
    }

    /// Records still to come before the head, where the source can count them (0 once
    /// caught up).
    pub fn remaining(self) -> Option<u64> {
        match self {
            Backfill::Behind { remaining } => remaining,
            Backfill::CaughtUp => Some(0),
            Backfill::Unknown => None,
        }
    }
}
