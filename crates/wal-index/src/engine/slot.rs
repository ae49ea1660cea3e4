//! One execution's slot in the engine: its published chain snapshot, its shared spine
//! cache, its wait list and its sink-gate mark.
//!
//! # Who writes what
//!
//! | field | written by | under | read by |
//! |---|---|---|---|
//! | `chain` | appliers | `writer` | builds, sweeps (no lock) |
//! | `spine` | builds | nothing: compare-and-swap | builds (no lock) |
//! | `writer` (`evicted`) | evictors, appliers, `mark_pending_sink` | itself | the same |
//! | `retired` | evictors (under `writer`, before the directory drops the slot) | nothing: SeqCst store | drive registration, after it listens |
//! | `pending_sink` | `mark`/`release`/`confirm` | `writer` to set, nothing to clear | evictors, under `writer` |
//! | `max_id` | appliers, just before publishing `chain` | `writer` | builds' miss path (no lock) |
//! | `last_used` | appliers, builds | nothing (relaxed store) | sweeps |
//! | `judged` | stall checks | the engine's stall lock | stall checks, under the same lock |
//! | `left_whole` | its evictor's stall record, after the eviction | nothing (relaxed store) | stall checks, under the stall lock |
//!
//! Builds never take `writer`; that is the whole point.

use chain_fold::{Chain, Event, EventId, ExecutionId, Spine, SpineOrder};

use super::accounting::Accounting;
use crate::sync::{self, Arc, AtomicBool, AtomicI64, AtomicU64, Mutex, Notify, Ordering, Swap};

/// The slot was evicted while the caller held it; look the execution up again.
#[derive(Debug)]
pub(crate) struct Evicted;

/// What [`Slot::evict`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotEviction {
    /// Someone else evicted it first.
    AlreadyGone,
    /// The caller's condition no longer held under the slot's lock (a sweep's plan went
    /// stale: the execution was applied to or used after the plan).
    NoLongerJustified,
    /// The sink gate holds it.
    KeptBySinkGate,
    /// Removed; it held this many events (0 for a slot a drive or mark created early).
    Evicted {
        /// Events it held.
        events: usize,
    },
}

/// What one locked apply did to a slot.
#[derive(Debug, Default)]
pub(crate) struct SlotApplied {
    /// Events applied, redeliveries included.
    pub(crate) applied: usize,
    /// Events whose id was new.
    pub(crate) new: usize,
    /// Whether any of them was terminal.
    pub(crate) terminal: bool,
}

/// One execution's slot (see the module documentation).
pub(crate) struct Slot {
    /// The execution.
    pub(crate) execution_id: ExecutionId,
    /// The order of its creation among the index's slots (see
    /// `Directory::get_or_create`): of two slots of one execution, the later created has
    /// the larger generation.
    pub(crate) generation: u64,
    chain: Swap<Chain>,
    /// The largest id of the published chain (`i64::MIN` while it is empty), stored just
    /// before each chain publish: a build asking for a tip above it is a miss decided by one load,
    /// without loading the chain's snapshot (see [`Slot::may_hold`]).
    max_id: AtomicI64,
    spine: Swap<Option<Spine>>,
    /// `true` once evicted; the lock serializes appliers, evictors and sink-gate marks.
    writer: Mutex<bool>,
    /// Mirrors `writer`'s flag for lock-free readers: drive registration checks it after
    /// listening (see [`Slot::listen`]).
    retired: AtomicBool,
    changed: Notify,
    last_used: AtomicU64,
    pending_sink: AtomicBool,
    /// The chain version a stall check last scanned (see [`Slot::judge`]; 0: none), so an
    /// unchanged chain is not scanned again.
    judged: AtomicU64,
    /// Set by the eviction that removed the slot when its chain left with no hole and it
    /// recorded nothing under the stall lock: a stall check that kept clocks for it in
    /// case the eviction needed them drops them (see `stalls::prune_gone`).
    left_whole: AtomicBool,
}

/// What the byte ledger charges per resident execution beyond its chain and cached spine:
/// the slot (and its `Arc`), its published chain snapshot's allocation, and its share of
/// the directory (a hash map: the entry and a calibrated share of its table, measured with
/// the counting-allocator bench, `cargo bench -p sb-benches --bench memory`). A cached
/// spine's own allocation is charged with the spine ([`CACHE_ALLOCATION_BYTES`]).
pub(crate) const SLOT_FIXED_BYTES: usize = 2 * std::mem::size_of::<usize>()
    + std::mem::size_of::<Slot>()
    + 2 * std::mem::size_of::<usize>()
    + std::mem::size_of::<Chain>()
    + DIRECTORY_ENTRY_BYTES;

/// The allocation that holds a cached spine (an `Arc<Option<Spine>>`), charged with each
/// spine a build publishes. An empty cache is not charged: a slot starts with the index's
/// shared empty one (see [`Empties`]); only a rewrite leaves a slot an empty cache of its
/// own, which the ledger then undercounts by this much (at most once per resident slot)
/// until a build publishes a spine there or the slot is evicted.
const CACHE_ALLOCATION_BYTES: usize =
    2 * std::mem::size_of::<usize>() + std::mem::size_of::<Option<Spine>>();

/// How stale a build lets recency be before it refreshes it, in nanoseconds (see
/// [`Slot::touch_for_build`]).
const BUILD_RECENCY_GRANULE: u64 = 1_000_000;

/// The directory's cost per slot (see [`SLOT_FIXED_BYTES`]).
const DIRECTORY_ENTRY_BYTES: usize = 48;

/// What slots hold while they hold nothing, shared by every slot of one index, so that
/// neither creating a slot nor evicting one allocates an empty value: one empty chain, which
/// a new slot starts with and an evicted slot is left holding, and two empty spine caches,
/// one that every new slot starts with and one that evictions install.
///
/// Sharing the empty chain is sound because a chain snapshot is immutable: an applier
/// clones the snapshot it finds and publishes the clone, and a clone of the shared empty
/// chain is an empty chain like any other. Every slot that starts from it shares its one
/// lineage, which only decides which of those clones keeps the line (the index's first
/// execution does; every other one's first append loses the claim and starts a line of its
/// own, the one allocation a fresh empty chain made at creation): no cached spine is
/// reused against an empty chain. No applier applies to an evicted slot's chain (it finds
/// the slot evicted first); a snapshot read that raced the eviction may hand out a clone
/// of it, which its caller can apply to like any other clone.
///
/// The two empty caches must differ. Sharing the evictions' one is sound because only
/// evictions install it, each after storing `retired`. A build's [`Slot::publish_spine`]
/// compares against the cache it loaded: if that was the evictions' value, its load saw an
/// eviction's swap and so sees `retired`, and it publishes nothing; if it was anything
/// else, the swap to the evictions' value makes its compare-and-swap fail (or comes after
/// it and takes the spine out of the ledger). Were a new slot's cache the evictions' value
/// too, a build that loaded it before an eviction could compare equal after the swap and
/// publish into the retired slot, where no evictor would uncharge it (mutation
/// `first-cache-is-the-retired-one`, caught by the loom model
/// `spine_publish_vs_eviction_leaves_the_ledger_exact`). The new slots' value is installed
/// only by creation, so within one slot it is never installed again after a build loaded
/// it, and a compare-and-swap against it succeeds only if nothing was published since.
#[derive(Debug)]
pub(crate) struct Empties {
    chain: Arc<Chain>,
    new_spine: Arc<Option<Spine>>,
    retired_spine: Arc<Option<Spine>>,
}

impl Empties {
    /// The shared empties for an index whose chains use `order`.
    pub(crate) fn new(order: SpineOrder) -> Empties {
        Empties {
            chain: Arc::new(Chain::new(order)),
            new_spine: Arc::new(None),
            retired_spine: Arc::new(None),
        }
    }

    /// The empty spine cache a new slot starts with.
    fn new_spine(&self) -> Arc<Option<Spine>> {
        // The mutation starts new slots with the evictions' value: a build that loaded it
        // before an eviction compares equal after the eviction's swap.
        if chain_fold::mutation::on("first-cache-is-the-retired-one") {
            return Arc::clone(&self.retired_spine);
        }
        Arc::clone(&self.new_spine)
    }
}

/// What the ledger charges for a cache holding `cached`: the heap the spine keeps alive
/// beyond its events ([`Spine::heap_bytes`]) and the allocation that holds it
/// ([`CACHE_ALLOCATION_BYTES`]); nothing for an empty cache.
fn cache_charge(cached: Option<&Spine>) -> i64 {
    cached.map_or(0, |spine| {
        i64::try_from(spine.heap_bytes() + CACHE_ALLOCATION_BYTES).unwrap_or(i64::MAX)
    })
}

impl Slot {
    /// An empty slot of the given creation `generation`, last used at `now`.
    pub(crate) fn new(
        execution_id: ExecutionId,
        generation: u64,
        empties: &Empties,
        now: u64,
    ) -> Slot {
        Slot {
            execution_id,
            generation,
            chain: sync::new_swap(Arc::clone(&empties.chain)),
            max_id: AtomicI64::new(i64::MIN),
            spine: sync::new_swap(empties.new_spine()),
            writer: Mutex::new(false),
            retired: AtomicBool::new(false),
            changed: sync::new_notify(),
            last_used: AtomicU64::new(now),
            pending_sink: AtomicBool::new(false),
            judged: AtomicU64::new(0),
            left_whole: AtomicBool::new(false),
        }
    }

    /// The published chain (the snapshot cell's load).
    pub(crate) fn chain(&self) -> Arc<Chain> {
        sync::load(&self.chain)
    }

    /// Runs `f` on the published chain without touching its reference count.
    pub(crate) fn with_chain<R>(&self, f: impl FnOnce(&Chain) -> R) -> R {
        sync::peek(&self.chain, f)
    }

    /// Whether the published chain may hold `id`: `false` means it does not, and no apply
    /// that published it has yet reached its notify (so a drive registered before calling
    /// this is woken by that apply). `true` means "look in the chain" (ids are not
    /// monotonic: a tip below the largest id may still be absent).
    pub(crate) fn may_hold(&self, id: EventId) -> bool {
        // SeqCst pairs with the SeqCst store in `apply`: the id is a condition of the wait
        // list's listen-then-check pattern (the drive listens, then builds and reads it; the
        // applier stores it, then notifies; `sync::Notify`'s two fences order it against the
        // listener's registration). A false "absent" is therefore always followed by a
        // wake-up.
        id <= self.max_id.load(Ordering::SeqCst)
    }

    /// The shared spine cache as last published.
    pub(crate) fn cached_spine(&self) -> Arc<Option<Spine>> {
        sync::load(&self.spine)
    }

    /// Runs `f` on the shared spine cache as last published, lent without touching its
    /// reference count (builds of one hot execution on several cores would otherwise take
    /// turns owning the count's line); what `f` is lent is what
    /// [`publish_spine`](Self::publish_spine) compares.
    pub(crate) fn with_cached_spine<R>(&self, f: impl FnOnce(&Arc<Option<Spine>>) -> R) -> R {
        sync::peek_arc(&self.spine, f)
    }

    /// Publishes `spine` if the cache still holds `seen` and the slot is not retired; a
    /// concurrent build that published first wins and this one's result is simply not
    /// cached. Never blocks. The winner charges the ledger the difference between the spine
    /// it published and the one it replaced.
    ///
    /// A retired slot takes no spine: its evictor already took the cache out and
    /// subtracted it, and nobody would subtract a later one. The check is sound because
    /// the caller loaded `seen` before calling: if that load saw the evictor's swap, it
    /// also sees the retirement stored before it; if it did not, the evictor's swap makes
    /// the compare-and-swap fail, or comes after it and takes (and subtracts) this spine.
    pub(crate) fn publish_spine(
        &self,
        seen: &Arc<Option<Spine>>,
        spine: Spine,
        accounting: &Accounting,
    ) -> bool {
        // SeqCst pairs with the SeqCst store in `evict_if`, which precedes its swap of the
        // cache (the snapshot cell's swap is SeqCst).
        // The mutation publishes into a retired slot, whose spine nobody will uncharge.
        if !chain_fold::mutation::on("spine-publish-ignores-retirement")
            && self.retired.load(Ordering::SeqCst)
        {
            return false;
        }
        let added = cache_charge(Some(&spine));
        if !sync::compare_and_swap(&self.spine, seen, Arc::new(Some(spine))) {
            return false;
        }
        accounting.cached_spines_changed(added - cache_charge(Option::as_ref(seen)));
        true
    }

    /// Empties the spine cache (with a fresh empty value, which no build can have loaded)
    /// and takes its bytes out of the ledger.
    fn drop_cached_spine(&self, accounting: &Accounting) {
        self.take_cached_spine(Arc::new(None), accounting);
    }

    /// Replaces the spine cache with `empty` and takes what it held out of the ledger.
    fn take_cached_spine(&self, empty: Arc<Option<Spine>>, accounting: &Accounting) {
        let taken = sync::swap(&self.spine, empty);
        accounting.cached_spines_changed(-cache_charge(Option::as_ref(&taken)));
    }

    /// What evicting this slot would free, as the ledger charges it: its chain, its cached
    /// spine and the slot itself.
    pub(crate) fn resident_bytes(&self, chain: &Chain) -> usize {
        let spine = cache_charge(Option::as_ref(&self.cached_spine()));
        chain.bytes()
            + usize::try_from(spine).unwrap_or(usize::MAX)
            + if chain.is_empty() {
                0
            } else {
                SLOT_FIXED_BYTES
            }
    }

    /// Registers a waiter, or `None` if the slot is retired (being evicted or gone): the
    /// caller then looks the execution up again. Call before building, so a publish after
    /// the build wakes it.
    ///
    /// Listening and then checking `retired` is the register-then-check half of
    /// event-listener's contract; the evictor's retire-then-[`wake_all`](Slot::wake_all) is
    /// the other. Either the check sees the retirement, or the wake comes after the
    /// registration and reaches it: a waiter is never left on a slot nobody will notify.
    pub(crate) fn listen(&self) -> Option<crate::sync::Listener> {
        let listener = self.changed.listen();
        // SeqCst pairs with the SeqCst store in `evict_if`. This is the wait list's pattern
        // for a condition checked after `listen` (`sync::Notify`): the condition is stored
        // before `notify`, whose leading SeqCst fence orders that store before it looks for
        // listeners, and loaded after `listen`, whose fence follows the registration's flag.
        // The mutation listens on a retired slot, which nobody will notify again.
        if !chain_fold::mutation::on("listen-ignores-retirement")
            && self.retired.load(Ordering::SeqCst)
        {
            return None;
        }
        Some(listener)
    }

    /// Refreshes recency.
    pub(crate) fn touch(&self, now: u64) {
        // Relaxed: recency is a hint for sweeps; no other data is published through it.
        self.last_used.fetch_max(now, Ordering::Relaxed);
    }

    /// A build's refresh of recency: skipped while the recorded use is less than
    /// [`BUILD_RECENCY_GRANULE`] old. A write makes the slot's cache line the writer's own,
    /// so builds of one hot execution on several cores would otherwise take turns owning
    /// the line every other build reads the chain and cache pointers from. What the skip
    /// costs: a sweep may judge a build up to a millisecond older than it was, which moves
    /// no TTL (seconds to hours) and reorders LRU only among executions used within the
    /// same millisecond. Applies always refresh (`touch`): the acknowledged-events ledger
    /// relies on it.
    pub(crate) fn touch_for_build(&self, now: u64) {
        // Relaxed, as in `touch`.
        if now
            > self
                .last_used
                .load(Ordering::Relaxed)
                .saturating_add(BUILD_RECENCY_GRANULE)
        {
            self.last_used.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Recency, nanoseconds since the index's epoch.
    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// Whether the sink gate mark is set.
    pub(crate) fn is_pending_sink(&self) -> bool {
        // Acquire pairs with the Release in `mark_pending_sink`/`clear_pending_sink`; the
        // evictor reads it under `writer`, which is what actually orders it against a mark.
        self.pending_sink.load(Ordering::Acquire)
    }

    /// Applies `events` (all of this execution) as one published snapshot, and updates
    /// the index totals in the same critical section, so a concurrent eviction or `stats()`
    /// sees either none or all of it.
    ///
    /// `events` is consumed only on success: after `Err(Evicted)` the caller retries with
    /// the same iterator on a fresh slot.
    pub(crate) fn apply(
        &self,
        events: &mut impl Iterator<Item = Event>,
        accounting: &Accounting,
        now: u64,
    ) -> Result<SlotApplied, Evicted> {
        let evicted = self.writer.lock();
        // The mutation applies to a slot an evictor already retired: the event lands on an
        // orphan the directory no longer holds.
        if !chain_fold::mutation::on("apply-to-retired-slot") && *evicted {
            return Err(Evicted);
        }
        // The mutation releases the writer lock before the read-copy-publish, so two
        // appliers of one execution can each publish a copy that lacks the other's events.
        let unserialized = chain_fold::mutation::on("unserialized-apply");
        let mut evicted = Some(evicted);
        if unserialized {
            evicted = None;
        }
        // Cloned from the snapshot as lent (no reference count taken on the old version).
        let mut chain = self.with_chain(Chain::clone);
        let (len_before, bytes_before, rewrites_before) =
            (chain.len(), chain.bytes(), chain.rewrites());
        let mut done = SlotApplied::default();
        for event in events {
            done.terminal |= event.is_terminal();
            done.applied += 1;
            done.new += usize::from(chain.apply(event));
        }
        if done.applied == 0 {
            return Ok(done);
        }
        accounting.change(|t| {
            if len_before == 0 && !chain.is_empty() {
                t.executions += 1;
                t.bytes += SLOT_FIXED_BYTES;
            }
            t.events += chain.len() - len_before;
            t.bytes = t.bytes + chain.bytes() - bytes_before;
        });
        let rewritten = chain.rewrites() != rewrites_before;
        // The largest id is stored before the chain: a reader that sees the new chain (an
        // acquire load) then sees this id too, so a build after `chain()` showed the tip
        // never reports it absent. A build that sees the new id but the old chain looks in
        // the chain, finds nothing, and is woken by the notify below. SeqCst because this
        // id is a condition of the wait list's listen-then-check pattern (checked after
        // `listen`, changed before `notify`), as the chain pointer is.
        // The mutation stores it after the notify instead: a woken drive can rebuild, still
        // read the old id, decide "absent" and wait for a notify that already happened.
        let max_id_after_notify = chain_fold::mutation::on("max-id-after-notify");
        let max_id = chain.max_id();
        if let Some(max_id) = max_id.filter(|_| !max_id_after_notify) {
            self.max_id.store(max_id, Ordering::SeqCst);
        }
        // The snapshot store is a release (the cell's swap is SeqCst); it pairs with the
        // acquire load in `chain()`, so a build that sees the new chain sees every event in
        // it fully constructed.
        sync::store(&self.chain, Arc::new(chain));
        if rewritten {
            // A spine built before a rewrite is never served again (the chain started a
            // fresh lineage), so it would only keep the replaced payloads alive.
            self.drop_cached_spine(accounting);
        }
        self.touch(now);
        drop(evicted);
        // After the store: a waiter registered before its build either saw the new chain in
        // that build or is woken here. The chain pointer is the condition of the wait
        // list's listen-then-check pattern: the cell's store is SeqCst, and `notify`
        // (`sync::Notify`) begins with a SeqCst fence before it looks for listeners.
        self.changed.notify(usize::MAX);
        if let Some(max_id) = max_id.filter(|_| max_id_after_notify) {
            self.max_id.store(max_id, Ordering::SeqCst);
        }
        Ok(done)
    }

    /// Records that a stall check scanned `chain`, a snapshot of this slot; returns whether
    /// it differs from the version scanned before. A slot's chain only grows (a new id adds
    /// an event) or is rewritten (the rewrite count grows), so its length and rewrite count
    /// name its version. Relaxed: only stall checks touch it, and they serialize on the
    /// engine's stall lock.
    pub(crate) fn judge(&self, chain: &Chain) -> bool {
        let version = ((chain.len() as u64) << 32 | (chain.rewrites() & 0xffff_ffff)) + 1;
        self.judged.swap(version, Ordering::Relaxed) != version
    }

    /// Notes that this slot's eviction recorded nothing for the stall checks (its chain left
    /// whole). Relaxed: a hint; a check that misses it keeps an entry one check longer.
    pub(crate) fn note_left_whole(&self) {
        self.left_whole.store(true, Ordering::Relaxed);
    }

    /// Whether [`Slot::note_left_whole`] ran. Relaxed, as there.
    pub(crate) fn left_whole(&self) -> bool {
        self.left_whole.load(Ordering::Relaxed)
    }

    /// Makes the next stall check scan the chain again. Relaxed, as [`Slot::judge`].
    pub(crate) fn forget_judged(&self) {
        self.judged.store(0, Ordering::Relaxed);
    }

    /// Evicts the slot unless the sink gate holds it, subtracting exactly what the slot
    /// holds from the totals. The caller removes it from the directory and *then* calls
    /// [`Slot::wake_all`], so a woken waiter that looks the execution up again cannot find
    /// this slot and listen on it forever.
    #[cfg(all(test, wal_index_loom))]
    pub(crate) fn evict(&self, accounting: &Accounting, sink_gate: bool) -> SlotEviction {
        self.evict_if(
            accounting,
            &Empties::new(SpineOrder::default()),
            sink_gate,
            |_, _| true,
        )
    }

    /// [`Slot::evict`], only if `still_justified(chain, last_used)` holds under the slot's
    /// lock, that is after every apply that returned before it. A sweep passes "the chain
    /// and the recency its plan judged are still the current ones", so an event applied
    /// after the plan is never evicted on that plan's word.
    pub(crate) fn evict_if(
        &self,
        accounting: &Accounting,
        empties: &Empties,
        sink_gate: bool,
        still_justified: impl FnOnce(&Arc<Chain>, u64) -> bool,
    ) -> SlotEviction {
        let mut evicted = self.writer.lock();
        if *evicted {
            return SlotEviction::AlreadyGone;
        }
        if sink_gate && self.is_pending_sink() {
            return SlotEviction::KeptBySinkGate;
        }
        let chain = self.chain();
        if !still_justified(&chain, self.last_used()) {
            return SlotEviction::NoLongerJustified;
        }
        *evicted = true;
        // SeqCst: pairs with the load after `listen` (see there), before `wake_all`, and
        // with the load in `publish_spine`, before the cache is taken out below.
        self.retired.store(true, Ordering::SeqCst);
        self.take_cached_spine(Arc::clone(&empties.retired_spine), accounting);
        // The slot itself may outlive the eviction (in a reader's hands, in the directory's
        // recently replaced versions): its events must not. A reader that already holds the
        // chain keeps it; one that reads it from now on finds it empty, as a lookup after
        // the eviction would find nothing.
        sync::store(&self.chain, Arc::clone(&empties.chain));
        accounting.change(|t| {
            if !chain.is_empty() {
                t.executions -= 1;
                t.bytes -= SLOT_FIXED_BYTES;
            }
            t.events -= chain.len();
            t.bytes -= chain.bytes();
        });
        drop(evicted);
        SlotEviction::Evicted {
            events: chain.len(),
        }
    }

    /// Whether the slot holds no events and no sink mark: nothing but a name.
    pub(crate) fn is_vacant(&self) -> bool {
        self.with_chain(Chain::is_empty) && !self.is_pending_sink()
    }

    /// Wakes every waiter (after an eviction was published in the directory).
    pub(crate) fn wake_all(&self) {
        self.changed.notify(usize::MAX);
    }

    /// Marks the slot as holding unsunk context. Fails if the slot was evicted first.
    pub(crate) fn mark_pending_sink(&self) -> Result<(), Evicted> {
        let evicted = self.writer.lock();
        if *evicted {
            return Err(Evicted);
        }
        // Release pairs with the Acquire in `is_pending_sink`.
        self.pending_sink.store(true, Ordering::Release);
        Ok(())
    }

    /// Clears the mark; returns whether it was set.
    pub(crate) fn clear_pending_sink(&self) -> bool {
        // AcqRel: the swap both reads the mark (pairs with the Release that set it) and
        // publishes the clear (pairs with `is_pending_sink`).
        self.pending_sink.swap(false, Ordering::AcqRel)
    }
}

#[cfg(all(test, wal_index_loom))]
mod loom_models;

#[cfg(all(test, not(any(wal_index_loom, wal_index_shuttle))))]
mod tests {
    use super::{BUILD_RECENCY_GRANULE, Empties, Slot};
    use chain_fold::SpineOrder;

    #[test]
    fn a_build_refreshes_recency_once_per_granule_and_an_apply_always() {
        let slot = Slot::new(1, 1, &Empties::new(SpineOrder::Causal), 1_000);
        // Within the granule of the recorded use: unchanged.
        slot.touch_for_build(1_000 + BUILD_RECENCY_GRANULE);
        assert_eq!(slot.last_used(), 1_000);
        // Past it: refreshed to the build's instant.
        slot.touch_for_build(1_001 + BUILD_RECENCY_GRANULE);
        assert_eq!(slot.last_used(), 1_001 + BUILD_RECENCY_GRANULE);
        // An apply's refresh is exact, and recency never moves back.
        slot.touch(1_002 + BUILD_RECENCY_GRANULE);
        assert_eq!(slot.last_used(), 1_002 + BUILD_RECENCY_GRANULE);
        slot.touch_for_build(5);
        slot.touch(5);
        assert_eq!(slot.last_used(), 1_002 + BUILD_RECENCY_GRANULE);
    }
}
