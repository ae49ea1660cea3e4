//! The engine's directory: which slot holds each execution, read by every build without a
//! lock, and the one place that creates and removes slots.
//!
//! The map from execution id to slot is an immutable `imbl` map published through
//! [`Published`] (crossbeam-epoch): a lookup is an epoch pin and a load. Creating or removing
//! a slot copies the map's O(log n) changed path and publishes the copy, under a lock only
//! those writers take. Around the map live the two things whose order relative to a
//! publication matters: the finished set (executions evicted after their terminal event)
//! and the waiting rooms (drives for executions that have no slot yet).
//!
//! # Lock order, by construction
//!
//! The writers' lock is private to this type and taken in three places only: by
//! [`Directory::get_or_create`] on a miss, by [`Directory::write`] (the evictors, who then
//! take slot locks and the ledger's lock inside it), and by [`Directory::wait_for_evictor`].
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
//!   publishes the map without them, and wakes their drives *after*: a woken drive that
//!   finds its execution gone also finds it finished, and ends at once.

use std::collections::{HashSet, VecDeque};

use chain_fold::ExecutionId;

use super::slot::Slot;
use crate::sync::{Arc, Mutex, MutexGuard, Published};
use crate::waiting_room::{Registered, WaitingRooms};

/// The published map. It hashes with foldhash under a fixed seed
/// (`foldhash::fast::FixedState`): execution ids come from the server, not from an
/// adversary, so HashDoS resistance buys nothing here, and every build's first step is this
/// hash (SipHash cost about a fifth of an incomplete build's instructions). A fixed seed
/// keeps instruction counts repeatable under callgrind (`benches/callgrind.sh`).
pub(super) type SlotMap = imbl::GenericHashMap<
    ExecutionId,
    Arc<Slot>,
    foldhash::fast::FixedState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// Execution id → slot, with the finished set and the waiting rooms (see the module
/// documentation).
pub(super) struct Directory {
    map: Published<SlotMap>,
    /// Serializes the map's writers (slot creation and removal), and counts the slots
    /// created (each slot's generation). Builds never take it.
    writer: Mutex<u64>,
    /// Executions recently evicted after their terminal event: a drive for one of them
    /// whose slot is empty ends at once instead of waiting for a tip that came and went.
    finished: Mutex<FinishedExecutions>,
    /// Drives waiting for executions that have no slot.
    rooms: WaitingRooms,
}

/// The directory's writers' lock, held: the only way to remove slots.
pub(super) struct DirectoryWriter<'a> {
    directory: &'a Directory,
    /// The map as published when the lock was taken; no other writer can replace it while
    /// this one lives.
    map: Arc<SlotMap>,
    _lock: MutexGuard<'a, u64>,
}

impl Directory {
    pub(super) fn new() -> Directory {
        Directory {
            map: Published::new(Arc::new(SlotMap::default())),
            writer: Mutex::new(0),
            finished: Mutex::new(FinishedExecutions::default()),
            rooms: WaitingRooms::default(),
        }
    }

    /// The slot of `execution_id`, if it has one. No lock.
    pub(super) fn lookup(&self, execution_id: ExecutionId) -> Option<Arc<Slot>> {
        self.map.peek(|map| map.get(&execution_id).cloned())
    }

    /// Runs `f` on the published map without touching any reference count (a build's miss
    /// path). No lock.
    pub(super) fn peek<R>(&self, f: impl FnOnce(&SlotMap) -> R) -> R {
        self.map.peek(f)
    }

    /// The published map, owned (a sweep's scan, `execution_ids`). No lock.
    pub(super) fn snapshot(&self) -> Arc<SlotMap> {
        self.map.load()
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
        let map = self.map.load();
        // Another creator may have published this execution's slot between the lookup
        // above and the lock: the check under the lock keeps one slot per execution. The
        // mutation skips it, and the directory's model must see two slots.
        if !cfg!(feature = "mutation-create-without-recheck")
            && let Some(slot) = map.get(&execution_id)
        {
            return Arc::clone(slot);
        }
        // Under the writers' lock: a slot created after another of the same execution was
        // removed (under the same lock) has the larger generation.
        *created += 1;
        let slot = Arc::new(new(*created));
        let next = map.update(execution_id, Arc::clone(&slot));
        self.finished.lock().forget(execution_id);
        // The room is woken after the store: a drive registering in the room checks
        // residency under the rooms lock, so it either finds this slot or is in the room
        // this wakes. The mutation wakes it first, and the directory's model must see a
        // drive that entered the room after the wake wait forever.
        let wake_first = cfg!(feature = "mutation-room-woken-before-publish");
        if wake_first {
            self.rooms.wake(execution_id);
        }
        self.map.store(Arc::new(next));
        if !wake_first {
            self.rooms.wake(execution_id);
        }
        slot
    }

    /// Takes the writers' lock, to remove slots.
    pub(super) fn write(&self) -> DirectoryWriter<'_> {
        let lock = self.writer.lock();
        DirectoryWriter {
            directory: self,
            map: self.map.load(),
            _lock: lock,
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
    /// The map as it is now (no other writer can change it while this lock is held).
    pub(super) fn map(&self) -> &SlotMap {
        &self.map
    }

    /// The end of every eviction: remember finished executions, publish `next` (the map
    /// without the `removed` slots), wake their waiters, release the lock.
    ///
    /// The order is the protocol. A terminal execution enters the finished set *before* its
    /// waiters are woken, so a woken drive that finds the execution gone also finds it
    /// finished and ends, instead of waiting a whole cap for a wake nobody will send. Waiters
    /// are woken *after* the map no longer holds the slot, so one that looks the execution up
    /// again cannot find the dead slot (and a registration that raced the eviction sees the
    /// slot retired and looks again). The mutation records the finished executions after the
    /// wake, and the terminal eviction's model must see a drive wait for a tip that will
    /// never come.
    pub(super) fn publish_removal(self, next: SlotMap, removed: &[Arc<Slot>], terminal: bool) {
        let finished_after_wake = cfg!(feature = "mutation-finished-after-wake");
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
        self.directory.map.store(Arc::new(next));
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
#[derive(Debug, Default)]
struct FinishedExecutions {
    ids: HashSet<ExecutionId>,
    order: VecDeque<ExecutionId>,
}

impl FinishedExecutions {
    /// How many finished executions are remembered: at production's ~150 finishing per
    /// second, the last couple of minutes (about 0.5 MiB). The oldest is forgotten first.
    const CAPACITY: usize = 16_384;

    fn contains(&self, execution_id: ExecutionId) -> bool {
        self.ids.contains(&execution_id)
    }

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

    /// Forgets `execution_id` (it was re-created). O(1) when the set is empty, the common
    /// case; O(capacity) otherwise, on the rare re-creation of a finished execution.
    fn forget(&mut self, execution_id: ExecutionId) {
        if self.ids.remove(&execution_id) {
            self.order.retain(|id| *id != execution_id);
        }
    }
}
