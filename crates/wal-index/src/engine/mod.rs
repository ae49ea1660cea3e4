//! [`WalIndex`]: the engine. Per-execution snapshots, wait-free builds, targeted wake-ups.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the index and its [`StateIndex`] surface |
//! | `directory` | execution id → slot: lock-free lookups, slot creation and removal, the finished set, the waiting rooms |
//! | [`slot`] | one execution: its published chain, spine cache, wait list and gate mark |
//! | [`accounting`] | the three resident totals, changed under one lock |
//! | [`read`] | builds and snapshots: no lock |
//! | [`write`] | applies, rehydrate and the sink gate |
//! | [`evict`] | explicit, terminal and policy eviction |
//! | [`stalls`] | the stall checks: holes in chains, open past the bound |

pub(crate) mod accounting;
mod directory;
mod evict;
#[cfg(all(test, wal_index_loom))]
mod loom_models;
mod read;
pub(crate) mod slot;
mod stalls;
mod write;

use std::future::Future;
use std::time::Instant;

use chain_fold::{Chain, Event, EventId, ExecutionId};

use crate::backfill::Backfill;
use crate::config::IndexConfig;
use crate::index::{IndexHooks, StateIndex};
use crate::observe::IndexObserver;
use crate::report::{Applied, BatchReport, Build, EvictionStats, IndexStats, RehydrateReport};
use crate::stall::StalledChain;
use crate::sync::{Arc, AtomicU64, CachePadded, Clock, Ordering};
use crate::waiting_room::Registered;
use accounting::Accounting;
use directory::Directory;
use slot::{Evicted, Slot, SlotApplied};

/// The state-builder index: one published snapshot per execution, read without locks.
///
/// # Model
///
/// Each execution has a *slot*. Its chain is a [`Chain`] snapshot behind an atomic
/// pointer: appliers append the batch's events in place behind the published length (a
/// reader's snapshot is a prefix that never changes) and publish the new version with one
/// pointer store; builds load the pointer and walk a snapshot nobody will ever mutate. The slot also holds the execution's spine cache (published by
/// compare-and-swap, so concurrent builds share it without a lock) and its own wait list,
/// notified only when *its* snapshot changes.
///
/// The directory from execution id to slot is a concurrent hash map (papaya; the
/// repository's docs/design.md, "The directory"): looking an execution up pins a guard and
/// probes one table, and only creating or removing a slot (first event of an execution,
/// eviction) writes one key, under a writers-only lock.
///
/// # Progress guarantees
///
/// Builds never wait for the drain: a build is lock-free and never blocks (a guard pin,
/// two pointer loads, an immutable walk). Writers wait only for writers of the same
/// execution, and drives for their own execution's publish. The
/// [protocol](crate::protocol#progress-guarantees) has the one table of what each
/// operation may wait for.
///
/// # Costs and limits
///
/// Publishing costs one allocation per touched execution per batch (and, per write, one
/// list node that retires the versions it replaced); the events are appended in place
/// behind the chain's published length. A reader that keeps an old snapshot keeps its memory alive
/// (that is what makes eviction safe under readers). Replaced snapshots and evicted chains
/// are freed by writers, not at once: by the write or sweep after the readers that could
/// hold them have left, a batch or two on a busy index and a sweep interval on an idle one;
/// the byte ledger counts what the index holds, not what waits to be freed. `stats()` takes
/// a tiny lock that only writers share, so it never waits for a walk, but it does serialize
/// with appliers.
///
/// A snapshot store costs the same however many threads have read: a pointer swap and a
/// push onto a list (`sync`'s snapshot cell). A store to an `arc_swap::ArcSwap` walks a
/// node per thread that ever read one at once, process-wide: a drain publishing through
/// arc-swap slows 1.3x after 8 such threads and 6x after 128 on the benchmark VM (the
/// repository's docs/benchmarks.md, section 15).
///
/// ```
/// use wal_index::{DriveBudget, DriveFlow, Event, IndexConfig, StateIndex, WalIndex};
///
/// let index = WalIndex::new(IndexConfig::default());
/// index.apply(Event::minimal(1, 7, None, "playbook_started"));
/// index.apply(Event::minimal(2, 7, Some(1), "step"));
/// let build = index.build(7, Some(2));
/// assert_eq!(build.spine.unwrap().ids(), vec![1, 2]);
///
/// // A drive for a tip that is not indexed yet waits for exactly its execution.
/// let drive = std::thread::scope(|s| {
///     let waiter = s.spawn(|| index.drive(7, Some(3), &DriveFlow::new(DriveBudget::default())));
///     std::thread::sleep(std::time::Duration::from_millis(20));
///     index.apply(Event::minimal(3, 7, Some(2), "step"));
///     waiter.join().unwrap()
/// });
/// assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
/// ```
pub struct WalIndex {
    // Layout: each field the drain writes on every batch, creation or eviction (the
    // directory's locks and waiting rooms, the totals, the stall watch's counters, the
    // newest write's clock, the backfill) is `CachePadded`: aligned to and filling whole
    // cache-line pairs, so, wherever rustc places the fields, what every build reads and
    // no write changes (the configuration, the flags, the clock's epoch, the directory's
    // map, the observer) shares no line with a drain's write. Two padded fields are read
    // by builds too (the newest write's clock; the cached-spine counter, which builds
    // also add to): padding them keeps their writes from costing a build the lines around
    // them, not from costing it the field itself.
    config: IndexConfig,
    /// Builds refresh recency from the clock: an eviction limit reads it
    /// ([`EvictionPolicy::reads_recency`](crate::config::EvictionPolicy::reads_recency)).
    /// Without one, from [`WalIndex::last_write`] (a checkpoint still records recency).
    builds_read_the_clock: bool,
    /// Builds are timed: the observer takes their durations
    /// ([`IndexObserver::times_builds`]).
    builds_timed: bool,
    clock: Clock,
    /// Execution id → slot, the finished set and the waiting rooms (`directory.rs`).
    directory: Directory,
    /// The three resident totals, changed together under one lock by writers only.
    accounting: Accounting,
    /// The drain's last [`Backfill`], encoded by [`BackfillCell`].
    backfill: CachePadded<BackfillCell>,
    /// What stall checks remember between runs (`stalls.rs`).
    stalls: CachePadded<stalls::StallWatch>,
    /// The clock as the newest write read it (nanoseconds since the clock's epoch): what a
    /// build without an eviction limit records as its recency, so builds of such an index
    /// read no clock and the writes, which read it anyway, pay one store per batch.
    last_write: CachePadded<AtomicU64>,
    /// What new and evicted slots hold while they hold nothing (`slot.rs`, [`slot::Empties`]).
    empties: slot::Empties,
}

impl std::fmt::Debug for WalIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalIndex")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for WalIndex {
    fn default() -> Self {
        WalIndex::new(IndexConfig::default())
    }
}

impl WalIndex {
    /// An empty index that reports to nobody.
    pub fn new(config: IndexConfig) -> WalIndex {
        WalIndex::with_config(config)
    }

    fn nanos(&self, at: Instant) -> u64 {
        self.clock.at(at)
    }

    /// The clock now, for a write: also kept as [`last_write`](Self::last_write).
    fn now_for_write(&self) -> u64 {
        let now = self.clock.now();
        // Relaxed: a recency hint, as the slots' own (`Slot::touch`); pairs with the load
        // in `last_write`, and nothing else is read on the strength of it.
        self.last_write.fetch_max(now, Ordering::Relaxed);
        now
    }

    /// The clock as the newest write read it: at most one batch behind the clock while the
    /// drain applies, and never behind any write's own recency.
    fn last_write(&self) -> u64 {
        // Relaxed: see `now_for_write`.
        self.last_write.load(Ordering::Relaxed)
    }

    /// `execution_id`'s published chain and how long it had been neither applied to nor
    /// built for at `now` (its recency, as sweeps judge it), from one lookup; `None` if it
    /// is not resident.
    pub(crate) fn chain_and_idle_at(
        &self,
        execution_id: ExecutionId,
        now: Instant,
    ) -> Option<(Arc<Chain>, std::time::Duration)> {
        let slot = self.lookup(execution_id)?;
        let idle = self.nanos(now).saturating_sub(slot.last_used());
        Some((slot.chain(), std::time::Duration::from_nanos(idle)))
    }

    /// Executions the index does not hold that drives are waiting for, each in a waiting
    /// room its first event wakes. A room disappears with its last drive, so this is zero
    /// whenever no such drive is in flight.
    pub fn awaited_unknown_executions(&self) -> usize {
        self.directory.awaited_unknown()
    }

    /// Takes the drain's word on where it stands against the log's head (see [`Backfill`]):
    /// the [`Drain`](crate::Drain) calls it after each pull and once more, as
    /// [`Backfill::Unknown`], when a drain that was behind goes away. The engine keeps it
    /// for its drives ([`flow`](crate::flow) says what they do) and reports it to its
    /// observer (the `backfilling` gauge). A pool with a [`Drain`](crate::Drain) never
    /// calls it; a pool running a drain loop of its own does.
    ///
    /// ```
    /// use wal_index::ingest::Backfill;
    /// use wal_index::WalIndex;
    ///
    /// let index = WalIndex::default();
    /// index.note_backfill(Backfill::Behind { remaining: Some(17_803) });
    /// assert!(index.backfill().is_behind());
    /// index.note_backfill(Backfill::CaughtUp);
    /// assert_eq!(index.backfill(), Backfill::CaughtUp);
    /// ```
    pub fn note_backfill(&self, state: Backfill) {
        self.backfill.set(state);
        self.observer().backfill(state);
    }

    /// The last [`Backfill`] the drain noted.
    pub fn backfill(&self) -> Backfill {
        self.backfill.get()
    }

    /// Slots in the directory, resident or not: executions holding events, plus any
    /// holding only a sink-gate mark. Every slot is counted by `stats()` or held by a mark;
    /// drives never create one.
    pub fn slots(&self) -> usize {
        self.directory.len()
    }

    fn lookup(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        self.directory.lookup(execution_id)
    }

    /// `execution_id`'s slot, created with recency `now()` if it has none (the clock is
    /// read only then).
    fn slot_or_create(&self, execution_id: ExecutionId, now: impl FnOnce() -> u64) -> Arc<Slot> {
        self.directory.get_or_create(execution_id, |generation| {
            Slot::new(execution_id, generation, &self.empties, now())
        })
    }

    /// Applies `events` of one execution through its slot, retrying on a fresh slot if the
    /// one found was evicted meanwhile (so no event is ever applied to an orphan). Returns
    /// the slot the events landed in when they held a terminal event (its eviction needs
    /// the slot's identity), else `None`.
    ///
    /// A resident slot is applied to as the directory lends it, under the map's guard: no
    /// reference count is taken on it unless it is returned (two atomic read-modify-writes
    /// per execution of a batch fewer). The wait for an evictor happens outside the guard.
    fn apply_to_slot(
        &self,
        execution_id: ExecutionId,
        mut events: impl Iterator<Item = Event>,
        now: u64,
    ) -> (SlotApplied, Option<Arc<Slot>>) {
        let landed = |slot: &Arc<Slot>, done: SlotApplied| {
            let slot = done.terminal.then(|| Arc::clone(slot));
            (done, slot)
        };
        loop {
            let resident = self.directory.peek(execution_id, |slot| {
                slot.map(|slot| {
                    slot.apply(&mut events, &self.accounting, now)
                        .map(|done| landed(slot, done))
                })
            });
            let applied = match resident {
                Some(applied) => applied,
                None => {
                    let slot = self.slot_or_create(execution_id, || now);
                    slot.apply(&mut events, &self.accounting, now)
                        .map(|done| landed(&slot, done))
                }
            };
            match applied {
                Ok(landed) => return landed,
                Err(Evicted) => self.directory.wait_for_evictor(),
            }
        }
    }

    fn prepare(&self, event: Event) -> Event {
        if self.config.slim {
            event.to_slim()
        } else {
            event
        }
    }
}

impl IndexHooks for WalIndex {
    /// A resident execution: its slot's own wait list. An execution without a slot: a
    /// waiting room that its first event wakes, so a drive never leaves state behind.
    fn listen(&self, execution_id: ExecutionId) -> Registered<'_> {
        self.directory.register(execution_id)
    }

    fn clock(&self) -> &crate::sync::Clock {
        &self.clock
    }

    fn finished_and_gone(&self, execution_id: ExecutionId) -> bool {
        self.directory.finished_and_gone(execution_id)
    }

    fn backfilling(&self) -> bool {
        self.backfill.get().is_behind()
    }

    fn drain_decodes_slim(&self) -> bool {
        self.config.slim
    }

    fn note_backfill(&self, state: Backfill) {
        WalIndex::note_backfill(self, state);
    }

    fn apply_batch_async(&self, events: Vec<Event>) -> impl Future<Output = BatchReport> + Send {
        std::future::ready(self.apply_batch(events))
    }

    fn enforce_limits_async(&self, now: Instant) -> impl Future<Output = EvictionStats> + Send {
        std::future::ready(self.enforce_limits_at(now))
    }
}

/// The drain's last [`Backfill`] in one atomic word: `u64::MAX` unknown, `u64::MAX - 1`
/// caught up, `u64::MAX - 2` behind by an unknown count, anything less behind by that many
/// records.
///
/// Relaxed on both sides: the word is a hint that decides whether a drive waits or reads its
/// execution at once, and nothing else is read on the strength of it. A drive that reads a
/// stale value either waits as today's worker does or reads early; either way only a build
/// serves, and a build serves only a walk that reaches genesis.
struct BackfillCell(AtomicU64);

impl Default for BackfillCell {
    fn default() -> Self {
        BackfillCell(AtomicU64::new(u64::MAX))
    }
}

impl BackfillCell {
    const UNKNOWN: u64 = u64::MAX;
    const CAUGHT_UP: u64 = u64::MAX - 1;
    const BEHIND_UNCOUNTED: u64 = u64::MAX - 2;

    fn set(&self, state: Backfill) {
        let word = match state {
            Backfill::Unknown => Self::UNKNOWN,
            Backfill::CaughtUp => Self::CAUGHT_UP,
            Backfill::Behind { remaining: None } => Self::BEHIND_UNCOUNTED,
            Backfill::Behind { remaining: Some(n) } => n.min(Self::BEHIND_UNCOUNTED - 1),
        };
        // Relaxed: a hint (see the type's documentation); pairs with the load in `get`.
        self.0.store(word, Ordering::Relaxed);
    }

    fn get(&self) -> Backfill {
        // Relaxed: pairs with the store in `set`; a hint, no data depends on it.
        match self.0.load(Ordering::Relaxed) {
            Self::UNKNOWN => Backfill::Unknown,
            Self::CAUGHT_UP => Backfill::CaughtUp,
            Self::BEHIND_UNCOUNTED => Backfill::Behind { remaining: None },
            n => Backfill::Behind { remaining: Some(n) },
        }
    }
}

/// The engine's surface. Each method's progress guarantee is in the table on [`WalIndex`].
impl StateIndex for WalIndex {
    const NAME: &'static str = "lockfree";

    fn with_observer(config: IndexConfig, observer: std::sync::Arc<dyn IndexObserver>) -> Self {
        WalIndex {
            config,
            directory: Directory::new(),
            builds_read_the_clock: config.eviction.reads_recency(),
            last_write: CachePadded::new(AtomicU64::new(0)),
            builds_timed: observer.times_builds(),
            accounting: Accounting::new(observer),
            clock: Clock::new(),
            backfill: CachePadded::new(BackfillCell::default()),
            stalls: CachePadded::new(stalls::StallWatch::default()),
            empties: slot::Empties::new(config.order),
        }
    }

    fn config(&self) -> &IndexConfig {
        &self.config
    }

    fn observer(&self) -> &dyn IndexObserver {
        self.accounting.observer()
    }

    /// Publishes the execution's new snapshot (one pointer store) and wakes only that
    /// execution's waiters.
    fn apply(&self, event: Event) -> Applied {
        write::apply(self, event)
    }

    /// Each touched execution is published once and its waiters woken once (in ascending
    /// execution id); then the batch's terminal executions are evicted.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        write::apply_batch(self, events)
    }

    /// Lock-free, never blocks ([protocol](crate::protocol#progress-guarantees)), so
    /// `Build::waited` is always zero.
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        read::build(self, execution_id, expected_head)
    }

    fn touch(&self, execution_id: ExecutionId) -> bool {
        self.lookup(execution_id)
            .map(|slot| slot.touch(self.clock.now()))
            .is_some()
    }

    /// Readers holding the execution's snapshot keep a valid one; its waiters are woken.
    fn evict(&self, execution_id: ExecutionId) -> bool {
        evict::evict(self, execution_id)
    }

    fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
        // Every sweep frees what waits in the snapshot cells' domain, limits or not: a drain
        // sweeps on its interval even when idle, which bounds how long an evicted chain or
        // a replaced spine outlives its replacement when nothing else writes. Again after
        // the sweep (its plan's holds on the victims' chains gone), so what it evicted is
        // freed on this thread (`sync`'s snapshot cell).
        crate::sync::reclaim_retired();
        let swept = evict::enforce_limits_at(self, now);
        crate::sync::reclaim_retired();
        swept
    }

    /// Never blocks a build or a drive: it scans published snapshots (each chain again only
    /// once it changed) under the stall lock, which only checks and evictions take (an
    /// eviction after its removal is published, to record what its chain left with), so an
    /// applier whose batch evicts an execution may wait for a scan.
    fn check_stalls_at(&self, now: Instant) -> Vec<StalledChain> {
        stalls::check_stalls_at(self, now)
    }

    /// A no-op when the sink gate is off (as today): nothing is created or marked.
    fn mark_pending_sink(&self, execution_id: ExecutionId) {
        write::mark_pending_sink(self, execution_id)
    }

    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool {
        let _ = reason;
        write::clear_pending_sink(self, execution_id)
    }

    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool {
        write::clear_pending_sink(self, execution_id)
    }

    /// Takes a tiny lock that only writers share: it never waits for a walk.
    fn stats(&self) -> IndexStats {
        self.accounting.get()
    }

    /// The replay is one published snapshot that wakes the execution's waiters once.
    fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport {
        write::rehydrate(self, execution_id, events)
    }

    /// O(1); the snapshot stays valid whatever happens next.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        read::chain(self, execution_id)
    }

    fn resident_bytes(&self, execution_id: ExecutionId) -> Option<usize> {
        let slot = self.lookup(execution_id)?;
        let chain = slot.chain();
        (!chain.is_empty()).then(|| slot.resident_bytes(&chain))
    }

    fn execution_ids(&self) -> Vec<ExecutionId> {
        read::execution_ids(self)
    }
}
