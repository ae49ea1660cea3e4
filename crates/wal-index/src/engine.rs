//! [`WalIndex`]: the engine. Per-execution snapshots, wait-free builds, targeted wake-ups.

use std::time::{Duration, Instant};

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId, Incomplete, advance};

use crate::accounting::Accounting;
use crate::config::{DriveBudget, IndexConfig};
use crate::drive::{drive_loop, drive_loop_blocking, observed};
use crate::eviction::{self, Candidate};
use crate::observe::{IndexObserver, NoopObserver};
use crate::report::{
    Applied, ApplyError, BatchReport, Build, Drive, EvictReason, EvictionStats, IndexStats,
    RehydrateReport,
};
use crate::slot::{Evicted, Slot, SlotEviction};
use crate::sync::{self, Arc, Mutex, Swap};

/// The directory hashes with SipHash under fixed keys (`DefaultHasher`): execution ids come
/// from the server, not from an adversary, and a fixed hasher keeps instruction counts
/// repeatable under callgrind (`benches/callgrind.sh`).
type Directory = imbl::GenericHashMap<
    ExecutionId,
    Arc<Slot>,
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// The state-builder index: one published snapshot per execution, read without locks.
///
/// # Model
///
/// Each execution has a *slot*. Its chain is an immutable, structurally shared
/// [`Chain`] behind an atomic pointer: appliers build the next version off to the side and
/// publish it with one pointer store; builds load the pointer and walk a snapshot nobody
/// will ever mutate. The slot also holds the execution's spine cache (published by
/// compare-and-swap, so concurrent builds share it without a lock) and its own wait list,
/// notified only when *its* snapshot changes.
///
/// The directory from execution id to slot is itself an immutable map behind an atomic
/// pointer: looking an execution up is a load, and only creating or removing a slot
/// (first event of an execution, eviction) copies the map's O(log n) changed path under a
/// writers-only lock.
///
/// # Progress guarantees
///
/// | operation | guarantee | what it may wait for |
/// |---|---|---|
/// | [`build`](WalIndex::build), [`stats`](WalIndex::stats) reads of snapshots | wait-free\* | nothing the drain holds |
/// | [`apply`](WalIndex::apply), [`apply_batch`](WalIndex::apply_batch), [`rehydrate`](WalIndex::rehydrate) | blocking | other writers of the *same* execution; the directory lock when an execution is new |
/// | [`evict`](WalIndex::evict), [`enforce_limits_at`](WalIndex::enforce_limits_at) | blocking | writers of the evicted executions, other evictors |
/// | [`drive`](WalIndex::drive) / [`drive_blocking`](WalIndex::drive_blocking) | blocking by design | its own execution's next publish, or its per-wait cap |
/// | [`stats`](WalIndex::stats) | blocking, briefly | a writer's three-counter update (never a walk) |
///
/// \* arc-swap's load is wait-free on its fast path and lock-free on its fallback. A
/// build also allocates (its spine), which is as wait-free as the allocator.
///
/// # Costs and limits
///
/// Publishing costs one allocation per touched execution per batch, plus the path copy in
/// the persistent chain. A reader that keeps an old snapshot keeps its memory alive (that
/// is what makes eviction safe under readers); the byte ledger counts only what the index
/// itself holds. `stats()` takes a tiny lock that only writers share, so it never waits
/// for a walk, but it does serialize with appliers.
///
/// ```
/// use chain_fold::Event;
/// use wal_index::{DriveBudget, IndexConfig, WalIndex};
///
/// let index = WalIndex::new(IndexConfig::default());
/// index.apply(Event::minimal(1, 7, None, "playbook_started"));
/// index.apply(Event::minimal(2, 7, Some(1), "step"));
/// let build = index.build(7, Some(2));
/// assert_eq!(build.spine.unwrap().ids(), vec![1, 2]);
///
/// // A drive for a tip that is not indexed yet waits for exactly its execution.
/// let drive = std::thread::scope(|s| {
///     let waiter = s.spawn(|| index.drive_blocking(7, Some(3), DriveBudget::default()));
///     std::thread::sleep(std::time::Duration::from_millis(20));
///     index.apply(Event::minimal(3, 7, Some(2), "step"));
///     waiter.join().unwrap()
/// });
/// assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2, 3]);
/// ```
pub struct WalIndex {
    config: IndexConfig,
    directory: Swap<Directory>,
    /// Serializes directory writers (slot creation and removal). Builds never take it.
    directory_writer: Mutex<()>,
    /// The three resident totals, changed together under one lock by writers only.
    accounting: Accounting,
    /// Executions recently evicted after their terminal event: a drive for one of them
    /// whose slot is empty ends at once instead of waiting for a tip that came and went.
    finished: Mutex<FinishedExecutions>,
    epoch: Instant,
}

/// A bounded memory of terminal-evicted executions (the oldest is forgotten first).
#[derive(Debug, Default)]
struct FinishedExecutions {
    ids: std::collections::HashSet<ExecutionId>,
    order: std::collections::VecDeque<ExecutionId>,
}

impl FinishedExecutions {
    /// How many finished executions are remembered: at production's ~150 finishing per
    /// second, the last couple of minutes (about 0.5 MiB).
    const CAPACITY: usize = 16_384;

    fn insert(&mut self, execution_id: ExecutionId) {
        if self.ids.insert(execution_id) {
            self.order.push_back(execution_id);
            if self.order.len() > Self::CAPACITY
                && let Some(oldest) = self.order.pop_front()
            {
                self.ids.remove(&oldest);
            }
        }
    }
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
    /// An empty index.
    pub fn new(config: IndexConfig) -> WalIndex {
        WalIndex::with_observer(config, std::sync::Arc::new(NoopObserver))
    }

    /// An empty index that reports builds, drives, residency and evictions to `observer`
    /// (for instance `sb_metrics::StateBuilderMetrics`).
    pub fn with_observer(
        config: IndexConfig,
        observer: std::sync::Arc<dyn IndexObserver>,
    ) -> WalIndex {
        WalIndex {
            config,
            directory: sync::new_swap(Arc::new(Directory::default())),
            directory_writer: Mutex::new(()),
            accounting: Accounting::new(observer),
            finished: Mutex::new(FinishedExecutions::default()),
            epoch: Instant::now(),
        }
    }

    /// The observer this index reports to.
    pub fn observer(&self) -> &dyn IndexObserver {
        self.accounting.observer()
    }

    /// The configuration the index was built with.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    fn lookup(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        sync::peek(&self.directory, |directory| {
            directory.get(&execution_id).cloned()
        })
    }

    fn slot_or_create(&self, execution_id: ExecutionId) -> Arc<Slot> {
        if let Some(slot) = self.lookup(execution_id) {
            return slot;
        }
        let _writer = self.directory_writer.lock();
        let directory = sync::load(&self.directory);
        if let Some(slot) = directory.get(&execution_id) {
            return Arc::clone(slot);
        }
        let slot = Arc::new(Slot::new(
            execution_id,
            self.config.order,
            self.nanos(Instant::now()),
        ));
        let next = directory.update(execution_id, Arc::clone(&slot));
        sync::store(&self.directory, Arc::new(next));
        slot
    }

    /// Applies `events` of one execution through its slot, retrying on a fresh slot if the
    /// one found was evicted meanwhile (so no event is ever applied to an orphan).
    fn apply_to_slot(
        &self,
        execution_id: ExecutionId,
        mut events: impl Iterator<Item = Event>,
        now: u64,
    ) -> crate::slot::SlotApplied {
        loop {
            let slot = self.slot_or_create(execution_id);
            match slot.apply(&mut events, &self.accounting, now) {
                Ok(done) => return done,
                Err(Evicted) => {
                    // The evictor removes the slot from the directory before it releases the
                    // directory lock; taking that lock here waits for it, then retries.
                    drop(self.directory_writer.lock());
                }
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

    /// Indexes one event, publishes its execution's new snapshot and wakes that execution's
    /// waiters. Never evicts: terminal eviction happens at a batch boundary
    /// ([`apply_batch`](WalIndex::apply_batch)).
    pub fn apply(&self, event: Event) -> Applied {
        let event = self.prepare(event);
        let applied = Applied {
            execution_id: event.execution_id(),
            event_id: event.id(),
            is_new: false,
            is_terminal: event.is_terminal(),
        };
        let now = self.nanos(Instant::now());
        let done = self.apply_to_slot(applied.execution_id, std::iter::once(event), now);
        Applied {
            is_new: done.new == 1,
            ..applied
        }
    }

    /// Decodes and applies one WAL payload.
    pub fn apply_json(&self, payload: &[u8]) -> Result<Applied, ApplyError> {
        Ok(self.apply(Event::from_json(payload)?))
    }

    /// Applies a batch: each touched execution is published once and its waiters woken
    /// once (in ascending execution id); then the executions whose terminal event was in
    /// the batch are evicted (unless the sink gate holds them).
    pub fn apply_batch(&self, events: Vec<Event>) -> BatchReport {
        let mut events: Vec<Event> = events.into_iter().map(|e| self.prepare(e)).collect();
        // A stable sort groups each execution's events, keeping their WAL order.
        events.sort_by_key(Event::execution_id);
        let now = self.nanos(Instant::now());
        let mut report = BatchReport::default();
        let mut terminal = Vec::new();
        let mut events = events.into_iter().peekable();
        while let Some(first) = events.next() {
            let execution_id = first.execution_id();
            let rest = std::iter::from_fn(|| events.next_if(|e| e.execution_id() == execution_id));
            let done = self.apply_to_slot(execution_id, std::iter::once(first).chain(rest), now);
            report.executions += 1;
            report.applied += done.applied;
            report.new += done.new;
            if done.terminal {
                terminal.push(execution_id);
            }
        }
        for execution_id in terminal {
            match self.evict_slot(execution_id) {
                SlotEviction::Evicted { .. } => report.terminal_evicted.push(execution_id),
                SlotEviction::KeptBySinkGate => {
                    report.terminal_kept_by_sink_gate.push(execution_id)
                }
                SlotEviction::AlreadyGone => {}
            }
        }
        if !report.terminal_evicted.is_empty() {
            let mut finished = self.finished.lock();
            report
                .terminal_evicted
                .iter()
                .for_each(|&id| finished.insert(id));
            drop(finished);
            self.observer()
                .evicted(EvictReason::Terminal, report.terminal_evicted.len());
        }
        report
    }

    /// True when `execution_id` was evicted after its terminal event and holds no events
    /// now: its drives cannot be served by waiting (a late redelivery that re-creates the
    /// execution makes this false again). Only drives whose build was incomplete ask.
    fn finished_and_gone(&self, execution_id: ExecutionId) -> bool {
        // The wait-free test first: a drive waiting for a tip of an execution that holds
        // events (the common incomplete build) never touches the lock.
        self.lookup(execution_id)
            .is_none_or(|slot| slot.chain().is_empty())
            && self.finished.lock().ids.contains(&execution_id)
    }

    /// Removes `execution_id`'s slot.
    fn evict_slot(&self, execution_id: ExecutionId) -> SlotEviction {
        let _writer = self.directory_writer.lock();
        let directory = sync::load(&self.directory);
        let Some(slot) = directory.get(&execution_id) else {
            return SlotEviction::AlreadyGone;
        };
        let result = slot.evict(&self.accounting, self.config.sink_gate);
        if let SlotEviction::Evicted { .. } = result {
            sync::store(&self.directory, Arc::new(directory.without(&execution_id)));
            slot.wake_all();
        }
        result
    }

    /// Builds the spine at `expected_head` (`None`: at the largest indexed id, the legacy
    /// path). Wait-free: it loads two pointers and walks an immutable snapshot; it has no
    /// step that can block, so `Build::waited` is always zero.
    pub fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build {
        let started = Instant::now();
        let Some(slot) = self.lookup(execution_id) else {
            let why = expected_head.map_or(Incomplete::NoEvents, Incomplete::TipMissing);
            return self.incomplete(why, started);
        };
        // The cache is loaded as an owned Arc (its identity is what the compare-and-swap
        // below compares); the chain is only borrowed for the walk, without touching its
        // reference count, so builds of one hot execution do not contend on it.
        let cached = slot.cached_spine();
        let result = slot.with_chain(|chain| {
            let target = expected_head.or_else(|| chain.max_id());
            target.map(|t| advance(chain, Option::as_ref(&cached), t))
        });
        let Some(result) = result else {
            return self.incomplete(Incomplete::NoEvents, started);
        };
        if let Some(spine) = &result.spine {
            if result.outcome != AdvanceOutcome::CacheHit {
                slot.publish_spine(&cached, spine.clone());
            }
            slot.touch(self.nanos(started));
        }
        let build = Build {
            outcome: result.outcome,
            spine: result.spine,
            // Nothing above can block: no lock, no wait loop (see the progress table).
            waited: Duration::ZERO,
            elapsed: started.elapsed(),
        };
        self.observer()
            .build(&build.outcome, build.elapsed, build.waited);
        build
    }

    fn incomplete(&self, why: Incomplete, started: Instant) -> Build {
        let build = Build {
            outcome: AdvanceOutcome::Incomplete(why),
            spine: None,
            waited: Duration::ZERO,
            elapsed: started.elapsed(),
        };
        self.observer()
            .build(&build.outcome, build.elapsed, build.waited);
        build
    }

    /// Builds until served, waiting on this execution's own wait list between builds, within
    /// `budget`. Runtime-agnostic.
    ///
    /// A drive for an execution with nothing indexed yet registers on an empty slot, which
    /// its first event then notifies. Empty slots are not executions (`stats()` and
    /// `execution_ids()` skip them); TTL sweeps drop them, and without a TTL they stay until
    /// the execution arrives or is evicted.
    pub async fn drive(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive {
        let drive = drive_loop(
            budget,
            self.observer(),
            || self.slot_or_create(execution_id).listen(),
            || std::future::ready(self.build(execution_id, expected_head)),
            || self.finished_and_gone(execution_id),
        )
        .await;
        observed(drive, self.observer())
    }

    /// [`drive`](WalIndex::drive), parking the calling thread between builds.
    pub fn drive_blocking(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive {
        observed(
            self.drive_blocking_unobserved(execution_id, expected_head, budget),
            self.observer(),
        )
    }

    /// The drive loop without reporting its final outcome (a rehydrating caller reports
    /// it once it knows whether the replay served).
    pub(crate) fn drive_blocking_unobserved(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive {
        drive_loop_blocking(
            budget,
            self.observer(),
            || self.slot_or_create(execution_id).listen(),
            || self.build(execution_id, expected_head),
            || self.finished_and_gone(execution_id),
        )
    }

    /// Refreshes `execution_id`'s recency; false if it is not resident.
    pub fn touch(&self, execution_id: ExecutionId) -> bool {
        self.lookup(execution_id)
            .map(|slot| slot.touch(self.nanos(Instant::now())))
            .is_some()
    }

    /// Evicts one execution now. Readers holding its snapshot keep a valid one; its waiters
    /// are woken. Returns true if an execution holding events was removed; false if none
    /// was resident or the sink gate holds it.
    pub fn evict(&self, execution_id: ExecutionId) -> bool {
        let evicted =
            matches!(self.evict_slot(execution_id), SlotEviction::Evicted { events } if events > 0);
        if evicted {
            self.observer().evicted(EvictReason::Explicit, 1);
        }
        evicted
    }

    /// One sweep of the eviction policy as of `now`: TTL, then LRU to the execution cap,
    /// then LRU to the byte ceiling, skipping executions the sink gate holds.
    pub fn enforce_limits_at(&self, now: Instant) -> EvictionStats {
        let policy = self.config.eviction;
        if policy == Default::default() {
            return EvictionStats::default();
        }
        let candidates: Vec<Candidate> = sync::load(&self.directory)
            .values()
            .map(|slot| {
                let (events, bytes) = slot.with_chain(|chain| (chain.len(), chain.bytes()));
                Candidate {
                    execution_id: slot.execution_id,
                    last_used: slot.last_used(),
                    events,
                    bytes,
                    gated: self.config.sink_gate && slot.is_pending_sink(),
                }
            })
            .collect();
        let (mut plan, idle_empty) =
            eviction::plan(candidates, &policy, self.nanos(now), self.stats());
        let _writer = self.directory_writer.lock();
        let mut directory = Directory::clone(&sync::load(&self.directory));
        let mut removed: Vec<Arc<Slot>> = Vec::new();
        for execution_id in idle_empty {
            let evicted = directory
                .get(&execution_id)
                .map(|slot| slot.evict(&self.accounting, self.config.sink_gate));
            if let Some(SlotEviction::Evicted { .. }) = evicted {
                removed.extend(directory.remove(&execution_id));
            }
        }
        plan.evicted.retain(|(execution_id, reason)| {
            let Some(slot) = directory.get(execution_id) else {
                return false;
            };
            match slot.evict(&self.accounting, self.config.sink_gate) {
                SlotEviction::Evicted { .. } => {
                    removed.extend(directory.remove(execution_id));
                    true
                }
                SlotEviction::KeptBySinkGate => {
                    plan.kept_by_sink_gate += 1;
                    match reason {
                        EvictReason::Ttl => plan.ttl -= 1,
                        EvictReason::MaxExecutions => plan.max_executions -= 1,
                        _ => plan.byte_ceiling -= 1,
                    }
                    false
                }
                SlotEviction::AlreadyGone => false,
            }
        });
        sync::store(&self.directory, Arc::new(directory));
        for slot in removed {
            slot.wake_all();
        }
        drop(_writer);
        report_sweep(self.observer(), &plan);
        plan
    }

    /// Marks `execution_id` as holding unsunk business context: with the sink gate on, no
    /// eviction (terminal, TTL, LRU, byte ceiling, explicit) removes it until released.
    pub fn mark_pending_sink(&self, execution_id: ExecutionId) {
        loop {
            if self
                .slot_or_create(execution_id)
                .mark_pending_sink()
                .is_ok()
            {
                return;
            }
            drop(self.directory_writer.lock());
        }
    }

    /// Unmarks `execution_id` without dropping its chain (`reason` is for the caller's
    /// logs and metrics). Returns whether it was marked.
    pub fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool {
        let _ = reason;
        self.lookup(execution_id)
            .is_some_and(|slot| slot.clear_pending_sink())
    }

    /// Unmarks `execution_id` after its context was sunk. Returns whether it was marked.
    pub fn confirm_sunk(&self, execution_id: ExecutionId) -> bool {
        self.lookup(execution_id)
            .is_some_and(|slot| slot.clear_pending_sink())
    }

    /// The resident totals, all three from one state.
    pub fn stats(&self) -> IndexStats {
        self.accounting.get()
    }

    /// Replays one execution's retained events into the index (rehydrate on miss), as one
    /// published snapshot that wakes its waiters. Events of other executions are skipped
    /// and counted. Never evicts, even if a terminal event is replayed.
    pub fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport {
        let mut report = RehydrateReport::default();
        let mine: Vec<Event> = events
            .into_iter()
            .filter(|e| {
                let ok = e.execution_id() == execution_id;
                report.other_execution += usize::from(!ok);
                ok
            })
            .map(|e| self.prepare(e))
            .collect();
        if !mine.is_empty() {
            let now = self.nanos(Instant::now());
            let done = self.apply_to_slot(execution_id, mine.into_iter(), now);
            report.applied = done.applied;
            report.new = done.new;
        }
        report
    }

    /// A snapshot of one execution's chain (O(1); it stays valid whatever happens next).
    pub fn chain(&self, execution_id: ExecutionId) -> Option<Chain> {
        self.lookup(execution_id)
            .map(|slot| Chain::clone(&slot.chain()))
    }

    /// The ids of resident executions (those holding at least one event), ascending.
    pub fn execution_ids(&self) -> Vec<ExecutionId> {
        let mut ids: Vec<ExecutionId> = sync::load(&self.directory)
            .values()
            .filter(|slot| !slot.with_chain(Chain::is_empty))
            .map(|slot| slot.execution_id)
            .collect();
        ids.sort_unstable();
        ids
    }
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
