//! Where a drive waits for an execution the index does not hold yet, without creating any
//! state for it.
//!
//! A drive for a tip of an execution with no slot (never seen, a misrouted shard, finished
//! and evicted) must still be woken by that execution's first event. Creating an empty slot
//! for it would leak one slot per such drive; instead the drive takes a ticket in a *room*
//! keyed by the execution id, and the room disappears when its last ticket is dropped. The
//! applier that makes the execution resident wakes the room after publishing the slot.
//!
//! # Protocol
//!
//! ```text
//! drive (registrant)                         applier (creator)
//! lock rooms                                 publish the slot (directory store / map insert)
//!   if resident(): unlock, listen on slot    lock rooms
//!   else: room(id).waiters += 1, listen        room(id).notify(all), if any
//! unlock rooms                               unlock rooms
//! ```
//!
//! The registrant checks residency *under* the rooms lock and the creator publishes the slot
//! *before* taking it, so either the registrant's critical section comes first (its listener
//! is in the room before the creator notifies it) or the creator's does (the mutex orders
//! the slot's publication before the registrant's check, which then finds the slot). A
//! dropped ticket takes the lock to decrement the room and removes it at zero.

use std::collections::HashMap;

use chain_fold::ExecutionId;

use crate::sync::{self, Arc, Listener, Mutex, Notify};

struct Room {
    notify: Arc<Notify>,
    waiters: usize,
}

/// The rooms of one index (see the module documentation).
#[derive(Default)]
pub(crate) struct WaitingRooms {
    rooms: Mutex<HashMap<ExecutionId, Room>>,
}

/// One drive's place in a room; dropping it leaves the room.
pub(crate) struct RoomTicket<'a> {
    rooms: &'a WaitingRooms,
    execution_id: ExecutionId,
}

impl WaitingRooms {
    /// Registers a waiter for `execution_id` unless `resident()`, asked under the rooms
    /// lock, says the execution has a slot now (the caller then listens on the slot).
    pub(crate) fn enter(
        &self,
        execution_id: ExecutionId,
        resident: impl FnOnce() -> bool,
    ) -> Option<(Listener, RoomTicket<'_>)> {
        let mut rooms = self.rooms.lock();
        // The mutation drops the residency check, re-opening the window between a drive's
        // lookup and its registration: loom must then find a lost wake-up.
        if !chain_fold::mutation::on("room-ignores-residency") && resident() {
            return None;
        }
        let room = rooms.entry(execution_id).or_insert_with(|| Room {
            notify: Arc::new(sync::new_notify()),
            waiters: 0,
        });
        room.waiters += 1;
        let listener = room.notify.listen();
        Some((
            listener,
            RoomTicket {
                rooms: self,
                execution_id,
            },
        ))
    }

    /// Wakes every drive waiting in `execution_id`'s room. Call after the execution's slot
    /// is published.
    pub(crate) fn wake(&self, execution_id: ExecutionId) {
        if let Some(room) = self.rooms.lock().get(&execution_id) {
            room.notify.notify(usize::MAX);
        }
    }

    /// Rooms with at least one waiter.
    pub(crate) fn occupied(&self) -> usize {
        self.rooms.lock().len()
    }
}

impl Drop for RoomTicket<'_> {
    fn drop(&mut self) {
        let mut rooms = self.rooms.rooms.lock();
        if let Some(room) = rooms.get_mut(&self.execution_id) {
            room.waiters -= 1;
            if room.waiters == 0 {
                rooms.remove(&self.execution_id);
            }
        }
    }
}

/// What a drive registered on before a build: the listener, and the room ticket that keeps
/// its place when the execution had no slot.
pub struct Registered<'a> {
    pub(crate) listener: Listener,
    pub(crate) ticket: Option<RoomTicket<'a>>,
}

impl<'a> Registered<'a> {
    /// Registered on a resident execution's own wait list.
    pub(crate) fn on(listener: Listener) -> Registered<'a> {
        Registered {
            listener,
            ticket: None,
        }
    }

    /// Registered in a waiting room.
    pub(crate) fn in_room((listener, ticket): (Listener, RoomTicket<'a>)) -> Registered<'a> {
        Registered {
            listener,
            ticket: Some(ticket),
        }
    }
}

impl std::fmt::Debug for Registered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("in_a_room", &self.ticket.is_some())
            .finish_non_exhaustive()
    }
}
