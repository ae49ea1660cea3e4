//! The engine's directory: which slot holds each execution, read by every build without a
//! lock, and the one place that creates and removes slots.
//!
//! The map from execution id to slot is a concurrent hash map ([`ConcurrentMap`]: papaya in
//! normal builds): a lookup pins a reclamation guard and probes one table, without a lock.
//! Creating or removing a slot is one insert or removal of its key, under a lock only those
//! writers take, so the map never changes under a writer that holds it. Around the map live
//! the two things whose order relative to a publication matters: the finished set
//! (executions evicted after their terminal event) and the waiting rooms (drives for
//! executions that have no slot yet).
//!
//! # Lock order, by construction
//!
//! The writers' lock is private to this type and taken in four places only: by
//! [`Directory::get_or_create`] on a miss, by [`Directory::write`] (the evictors, who then
//! take slot locks and the ledger's lock inside it), by [`Directory::wait_for_evictor`], and
//! by [`Directory::slots`] for the length of one walk of the map (nothing under it).
//! The finished set's lock and the rooms' lock are private too, and taken either alone or
//! inside the writers' lock, never around it. The layering does the rest: the directory
//! holds slots and calls into them, and `slot.rs` does not import this module (nothing
//! stops it from the compiler's side; the module-cycle check would flag a slot that named
//! the directory which names slots). An applier that finds its slot evicted returns from
//! the slot, releasing its lock, before it waits here. That is the order the protocol
//! states: `directory_writer` → `slot.writer` → `totals`, and `directory_writer` →
//! `finished`, `directory_writer` → `rooms`.
//!
//! # Publication orders
//!
//! - Create: the slot is published *before* its room is woken, and a drive checks residency
//!   under the rooms lock, so the drive either finds the slot or is in the room the creator
//!   wakes (`waiting_room`).
//! - Remove: a terminal eviction inserts its executions into the finished set *before* it
//!   removes them from the map, and wakes their drives *after*: a woken drive that finds its
//!   execution gone also finds it finished, and ends at once.
//!
//! Both rest on the map's one guarantee (see [`ConcurrentMap`]): a lookup that
//! happens-after an insert or a removal (here, through the rooms lock or a wake-up) sees it.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use chain_fold::ExecutionId;

use super::slot::Slot;
use crate::sync::{Arc, CachePadded, ConcurrentMap, Mutex, MutexGuard};
use crate::waiting_room::{Registered, WaitingRooms};

/// The published map: execution id → slot. It hashes with foldhash under a fixed seed
/// (`foldhash::fast::FixedState`): execution ids come from the server, not from an
/// adversary, so HashDoS resistance buys nothing here, and every build's first step is this
/// hash (SipHash cost about a fifth of an incomplete build's instructions). A fixed seed
/// keeps instruction counts repeatable under callgrind (`benches/callgrind.sh`).
type SlotMap = ConcurrentMap<ExecutionId, Arc<Slot>>;

/// Execution id → slot, with the finished set and the waiting rooms (see the module
/// documentation).
pub(super) struct Directory {
    map: SlotMap,
    /// Serializes the map's writers (slot creation and removal), and counts the slots
    /// created (each slot's generation). Builds never take it; padded, so its locking does
    /// not take the map's line from the builds' caches.
    writer: CachePadded<Mutex<u64>>,
    /// Executions recently evicted after their terminal event: a drive for one of them
    /// whose slot is empty ends at once instead of waiting for a tip that came and went.
    finished: CachePadded<Mutex<FinishedExecutions>>,
    /// Drives waiting for executions that have no slot; padded too, since every slot
    /// creation locks it.
    rooms: CachePadded<WaitingRooms>,
}

/// The directory's writers' lock, held: the only way to remove slots.
pub(super) struct DirectoryWriter<'a> {
    directory: &'a Directory,
    _lock: MutexGuard<'a, u64>,
}

impl Directory {
    pub(super) fn new() -> Directory {
        Directory {
            map: SlotMap::new(),
            writer: CachePadded::new(Mutex::new(0)),
            finished: CachePadded::new(Mutex::new(FinishedExecutions::default())),
            rooms: CachePadded::new(WaitingRooms::default()),
        }
    }

    /// The slot of `execution_id`, if it has one. No lock.
    pub(super) fn lookup(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        self.map.peek(&execution_id, |slot| slot.cloned())
    }

    /// Runs `f` on `execution_id`'s slot, borrowed: no reference count is touched. No lock
    /// of the directory's; `f` runs with the map pinned, which delays only the freeing of
    /// slots removed meanwhile. A build's miss path reads the slot so; an applier applies
    /// to it so (taking the slot's writer lock and the ledger's, and notifying its waiters,
    /// none of which waits for a pin).
    pub(super) fn peek<R>(
        &self,
        execution_id: ExecutionId,
        f: impl FnOnce(Option<&Arc<Slot>>) -> R,
    ) -> R {
        self.map.peek(&execution_id, f)
    }

    /// Every slot, as one exact snapshot (a sweep's scan, a stall check, `execution_ids`).
    ///
    /// The walk holds the writers' lock, the only lock it takes. A walk of a map that writers
    /// change under it is a weak snapshot: it can yield a slot removed during the walk
    /// *and* its execution's successor inserted after it (the successor lands further along
    /// the probe sequence), and a plan made from both would judge the successor by its
    /// predecessor. Under the lock no slot is created or removed, so the walk sees exactly
    /// one map. It costs the drain's creations and removals a wait of one walk (about 1 ms
    /// per 100,000 slots); builds never take the lock.
    pub(super) fn slots(&self) -> Vec<Arc<Slot>> {
        // The mutation walks without the lock, and the sweep's model must see a successor
        // evicted on its predecessor's plan.
        let _writers =
            (!chain_fold::mutation::on("walk-without-writers-lock")).then(|| self.writer.lock());
        let mut slots = Vec::with_capacity(self.map.len());
        self.map.for_each(|_, slot| slots.push(Arc::clone(slot)));
        slots
    }

    /// How many slots the map holds. No lock.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The slot of `execution_id`, created by `new` if it has none. A created slot is
    /// published, then its waiting room (if a drive is in one) is woken. A re-created
    /// execution is no longer known to be finished: what arrives for it now came after its
    /// terminal eviction, and only another terminal eviction makes it finished again.
    pub(super) fn get_or_create(
        &self,
        execution_id: ExecutionId,
        new: impl FnOnce(u64) -> Slot,
    ) -> Arc<Slot> {
        if let Some(slot) = self.lookup(execution_id) {
            return slot;
        }
        let mut created = self.writer.lock();
        // Another creator may have published this execution's slot between the lookup
        // above and the lock: the check under the lock keeps one slot per execution. The
        // mutation skips it, and the directory's model must see two slots.
        if !chain_fold::mutation::on("create-without-recheck")
            && let Some(slot) = self.lookup(execution_id)
        {
            return slot;
        }
        // Under the writers' lock: a slot created after another of the same execution was
        // removed (under the same lock) has the larger generation.
        *created += 1;
        let slot = Arc::new(new(*created));
        self.finished.lock().forget(execution_id);
        // The room is woken after the store: a drive registering in the room checks
        // residency under the rooms lock, so it either finds this slot or is in the room
        // this wakes. The mutation wakes it first, and the directory's model must see a
        // drive that entered the room after the wake wait forever.
        let wake_first = chain_fold::mutation::on("room-woken-before-publish");
        if wake_first {
            self.rooms.wake(execution_id);
        }
        self.map.insert(execution_id, Arc::clone(&slot));
        if !wake_first {
            self.rooms.wake(execution_id);
        }
        slot
    }

    /// Takes the writers' lock, to remove slots.
    pub(super) fn write(&self) -> DirectoryWriter<'_> {
        DirectoryWriter {
            directory: self,
            _lock: self.writer.lock(),
        }
    }

    /// Returns once any eviction in progress has published its removal. A slot found
    /// retired is being evicted by a writer that holds the writers' lock until the slot is
    /// out of the map, so taking the lock waits for exactly that. The caller holds no
    /// slot's lock (the slot released it when it reported itself evicted).
    pub(super) fn wait_for_evictor(&self) {
        drop(self.writer.lock());
    }

    /// A drive's registration for `execution_id`'s next publish: its slot's own wait list
    /// (looked up again if the slot is being evicted), or, without a slot, a waiting room
    /// that its first event wakes and that disappears with its last drive.
    pub(super) fn register(&self, execution_id: ExecutionId) -> Registered<'_> {
        loop {
            if let Some(slot) = self.lookup(execution_id) {
                if let Some(listener) = slot.listen() {
                    return Registered::on(listener);
                }
                self.wait_for_evictor();
                continue;
            }
            if let Some(place) = self
                .rooms
                .enter(execution_id, || self.lookup(execution_id).is_some())
            {
                return Registered::in_room(place);
            }
        }
    }

    /// True when `execution_id` holds no events here and was evicted after its terminal
    /// event. The wait-free test first: a drive waiting for a tip of an execution that holds
    /// events (the common incomplete build) never takes the finished set's lock.
    pub(super) fn finished_and_gone(&self, execution_id: ExecutionId) -> bool {
        self.lookup(execution_id)
            .is_none_or(|slot| slot.chain().is_empty())
            && self.finished.lock().contains(execution_id)
    }

    /// Executions without a slot that drives are waiting for.
    pub(super) fn awaited_unknown(&self) -> usize {
        self.rooms.occupied()
    }
}

impl DirectoryWriter<'_> {
    /// `execution_id`'s slot as it is now (no other writer can change the map while this
    /// lock is held).
    pub(super) fn get(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        self.directory.lookup(execution_id)
    }

    /// The end of every eviction: remember finished executions, remove the `removed` slots
    /// from the map, wake their waiters, release the lock.
    ///
    /// The order is the protocol. A terminal execution enters the finished set *before* its
    /// waiters are woken, so a woken drive that finds the execution gone also finds it
    /// finished and ends, instead of waiting a whole cap for a wake nobody will send. Waiters
    /// are woken *after* the map no longer holds the slot, so one that looks the execution up
    /// again cannot find the dead slot (and a registration that raced the eviction sees the
    /// slot retired and looks again). The mutation records the finished executions after the
    /// wake, and the terminal eviction's model must see a drive wait for a tip that will
    /// never come.
    pub(super) fn publish_removal(self, removed: &[Arc<Slot>], terminal: bool) {
        let finished_after_wake = chain_fold::mutation::on("finished-after-wake");
        let record_finished = || {
            if terminal {
                let mut finished = self.directory.finished.lock();
                removed
                    .iter()
                    .for_each(|slot| finished.insert(slot.execution_id));
            }
        };
        if !finished_after_wake {
            record_finished();
        }
        for slot in removed {
            self.directory.map.remove(&slot.execution_id);
        }
        for slot in removed {
            slot.wake_all();
        }
        if finished_after_wake {
            record_finished();
        }
    }
}

/// A bounded memory of executions evicted after their terminal event (the most recent
/// [`FinishedExecutions::CAPACITY`]), so a drive for one of them ends at once.
///
/// Every operation is O(1) amortized. Forgetting an execution (it was re-created) removes it
/// from the set only; its place in the order goes stale, recognised by its stamp, and is
/// dropped when it reaches the front or when stale places outnumber live ones.
#[derive(Debug, Default)]
struct FinishedExecutions {
    /// Each remembered execution, with the stamp of its place in `order`. Hashed as the
    /// directory's map is (foldhash, fixed seed): the drain pays a removal on each creation
    /// and an insertion on each terminal eviction.
    ids: HashMap<ExecutionId, u64, foldhash::fast::FixedState>,
    /// Places in insertion order, oldest first; a place whose stamp is not its execution's
    /// current one is stale.
    order: VecDeque<(ExecutionId, u64)>,
    next_stamp: u64,
}

impl FinishedExecutions {
    /// How many finished executions are remembered: at production's ~150 finishing per
    /// second, the last couple of minutes (about 1.5 MiB with the order's stale places at
    /// their bound). The oldest is forgotten first.
    const CAPACITY: usize = 16_384;

    fn contains(&self, execution_id: ExecutionId) -> bool {
        self.ids.contains_key(&execution_id)
    }

    fn insert(&mut self, execution_id: ExecutionId) {
        // One probe of the table for the new id and one for the oldest: past the caches at
        // this capacity, each probe is a miss.
        let Entry::Vacant(place) = self.ids.entry(execution_id) else {
            return;
        };
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        place.insert(stamp);
        self.order.push_back((execution_id, stamp));
        while self.ids.len() > Self::CAPACITY {
            let Some((oldest, stamp)) = self.order.pop_front() else {
                break;
            };
            if let Entry::Occupied(place) = self.ids.entry(oldest)
                && *place.get() == stamp
            {
                place.remove();
            }
        }
        if self.order.len() > 2 * Self::CAPACITY {
            let ids = &self.ids;
            self.order.retain(|(id, stamp)| ids.get(id) == Some(stamp));
        }
    }

    /// Forgets `execution_id` (it was re-created).
    fn forget(&mut self, execution_id: ExecutionId) {
        self.ids.remove(&execution_id);
    }
}

#[cfg(all(test, not(any(wal_index_loom, wal_index_shuttle))))]
mod tests {
    use super::FinishedExecutions;

    #[test]
    fn the_finished_set_keeps_the_newest_and_forgets_in_constant_time() {
        let mut finished = FinishedExecutions::default();
        let cap = FinishedExecutions::CAPACITY as i64;
        // Re-created and finished again, over and over: the order never grows past twice
        // the capacity, and a re-finished execution counts as new.
        for round in 0..4 {
            for id in 0..cap {
                finished.forget(id);
                finished.insert(id);
                assert!(
                    finished.order.len() <= 2 * FinishedExecutions::CAPACITY,
                    "round {round}"
                );
            }
        }
        assert_eq!(finished.ids.len(), FinishedExecutions::CAPACITY);
        // One more pushes out the oldest: execution 0, re-finished first in the last round.
        finished.insert(cap);
        assert!(!finished.contains(0));
        assert!(finished.contains(1) && finished.contains(cap));
        // A forgotten execution is gone at once, and its stale place does not push out the
        // one finished again after it.
        finished.forget(5);
        assert!(!finished.contains(5));
        finished.insert(5);
        for id in cap + 1..cap + 6 {
            finished.insert(id);
        }
        assert!(
            finished.contains(5),
            "its newest place counts, not the stale one"
        );
        assert!(!finished.contains(6));
    }
}
