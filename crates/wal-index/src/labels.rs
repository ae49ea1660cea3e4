//! The metric label enums: a fixed set of values each, as the `noetl_worker_state_builder_*`
//! series label them. A metrics layer keeps one series per value in an array and indexes it
//! with `index()`, so no hot path matches a string.
//!
//! This module imports nothing of the crate: reports, observers and the drive all name
//! these labels, and none of them is needed to define one.

/// A metric label enum: a fixed set of values, each with its place in `LABELS`, so a
/// metrics layer keeps one series per value in an array and indexes it with
/// [`index`](DriveLabel::index) (no string matching on the hot path).
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $label:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order of [`Self::LABELS`].
            pub const ALL: [$name; [$($label),+].len()] = [$($name::$variant),+];
            /// Every label, in the order metrics pre-register them.
            pub const LABELS: [&'static str; [$($label),+].len()] = [$($label),+];

            /// This value's position in [`Self::LABELS`] and [`Self::ALL`].
            pub const fn index(self) -> usize {
                self as usize
            }

            /// The metrics label.
            pub const fn label(self) -> &'static str {
                Self::LABELS[self as usize]
            }
        }
    };
}

label_enum! {
    /// The final outcome of a drive, as `drive_builds_total{outcome}` labels it: every
    /// value is one way [`StateIndex::drive`](crate::StateIndex::drive) can end
    /// (the [`flow`](crate::flow) module's table says which step gives which).
    DriveLabel {
        /// Served within the wait budget.
        Served = "served",
        /// Served after replaying the execution from the retained WAL.
        ServedRehydrated = "served_rehydrated",
        /// Not served: the caller falls back to the server-built state.
        FallbackIncomplete = "fallback_incomplete",
        /// Served from the execution's state shard.
        ServedShard = "served_shard",
        /// Served from the state shard, whose bytes disagreed with the WAL's.
        ServedShardMismatch = "served_shard_mismatch",
        /// Not served on the stateless edge; the caller retries.
        StatelessRetry = "stateless_retry",
        /// Not attempted: this worker does not build.
        FallbackDisabled = "fallback_disabled",
    }
}

label_enum! {
    /// How one wait of a drive ended, as `drive_wait_total{outcome}` labels it.
    WaitLabel {
        /// Ended by a notification.
        Woken = "woken",
        /// Ended by the per-wait cap.
        Timeout = "timeout",
    }
}

label_enum! {
    /// How one rehydration attempt ended, as `rehydrate_total{outcome}` labels it.
    RehydrateLabel {
        /// The replay made the build complete.
        Served = "served",
        /// Replayed, still incomplete.
        Incomplete = "incomplete",
        /// The retained WAL had nothing for the execution.
        Empty = "empty",
        /// The concurrency cap was reached; nothing was replayed.
        Throttled = "throttled",
    }
}

label_enum! {
    /// What one state-shard read came to, as production's
    /// `noetl_worker_state_shard_reads_total{outcome}` labels it.
    ShardReadLabel {
        /// The shard was read and the drive's build from it reached genesis: served.
        Hit = "hit",
        /// No shard (neither `sealed` nor `open`), or one with none of the execution's
        /// events.
        Miss = "miss",
        /// The read failed (transport, status, decode, no `payload` column), or the shard's
        /// chain does not reach genesis from the expected head (stale or partial).
        Fallback = "fallback",
    }
}

label_enum! {
    /// What the verify mode's comparison of a served shard with the retained WAL found
    /// (`state_shard_verify_total{outcome}`).
    ShardVerifyLabel {
        /// The WAL's spine has the same bytes as the one the shard served.
        Matched = "match",
        /// They differ: `state_equivalence_mismatch_total` +1, and the WAL's spine is served.
        Mismatched = "mismatch",
        /// Nothing to compare with: the replay cap was reached, the retained WAL did not
        /// answer, or its events do not reach genesis from the same head.
        Unverified = "unverified",
    }
}

label_enum! {
    /// Why an execution left the index (the `reason` label of `evictions_total`).
    EvictReason {
        /// Idle longer than the TTL.
        Ttl = "ttl",
        /// Least recently used while over the execution cap.
        MaxExecutions = "max_executions",
        /// Least recently used while over the byte ceiling.
        ByteCeiling = "byte_ceiling",
        /// Its terminal event was in the last batch.
        Terminal = "terminal",
        /// `evict` was called.
        Explicit = "explicit",
    }
}

label_enum! {
    /// Why an execution's chain does not connect (the `reason` label of
    /// `stalled_chains_total`; see [`StalledChain`](crate::stall::StalledChain)).
    StallReason {
        /// An event names as its `prev_event_id` an id the index does not hold, in a chain
        /// that holds its genesis: an event the WAL lost, or has not delivered yet.
        MissingHop = "missing_hop",
    }
}

label_enum! {
    /// What became of one checkpoint, as `checkpoints_total{outcome}` labels it.
    CheckpointLabel {
        /// Captured by the drain and written durably.
        Written = "written",
        /// Captured; its write failed (the previous checkpoints stay as they were).
        Failed = "failed",
        /// Due while the previous one was still being written: skipped.
        SkippedBusy = "skipped_busy",
        /// Due while the source could not say where it stands: skipped.
        SkippedNoPosition = "skipped_no_position",
        /// Restored into a new index at start.
        Restored = "restored",
    }
}

label_enum! {
    /// Why a checkpoint was refused (the `reason` label of `checkpoint_refused_total`;
    /// see [`Refusal`](crate::checkpoint::Refusal)).
    RefusalLabel {
        /// The magic number is missing.
        NotACheckpoint = "not_a_checkpoint",
        /// Another format version.
        FormatVersion = "format_version",
        /// The file ends inside a block or before its trailer.
        Truncated = "truncated",
        /// A block fails its checksum.
        Checksum = "checksum",
        /// A verified block does not say what the format says.
        Malformed = "malformed",
        /// Taken from an index of another shape.
        IndexShape = "index_shape",
        /// Taken of another log.
        OtherLog = "other_log",
        /// The log no longer holds the checkpoint's last record at its position.
        Fingerprint = "fingerprint",
        /// The pool's source cannot resume from a checkpoint.
        CannotResume = "cannot_resume",
        /// The file could not be read, or the log did not answer.
        Io = "io",
    }
}
