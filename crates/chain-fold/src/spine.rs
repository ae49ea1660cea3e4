//! The ordered list of events from genesis to one tip, and its served JSON.

use std::sync::Arc;

use crate::event::{Event, EventId};
use crate::json_arena::{JsonArray, JsonBody};

/// How a spine orders its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SpineOrder {
    /// Root to tip, the reverse of the walk: the order the server stamped. The default.
    #[default]
    Causal,
    /// Ascending `event_id`, the legacy option. A fan-out inversion (a tip with a lower id
    /// than its predecessor) lands in the middle, so extending such a spine re-sorts it and
    /// re-serializes its JSON (O(spine), not O(new events)).
    EventId,
}

impl SpineOrder {
    /// Parses `causal` / `event_id` (case-insensitive; `eventid` and `id` also read as
    /// `EventId`). Anything else is `None`.
    pub fn parse(text: &str) -> Option<SpineOrder> {
        match text.trim().to_ascii_lowercase().as_str() {
            "causal" => Some(SpineOrder::Causal),
            "event_id" | "eventid" | "id" => Some(SpineOrder::EventId),
            _ => None,
        }
    }
}

struct SpineInner {
    head: EventId,
    order: SpineOrder,
    /// The chain's rewrite generation this spine was built against (see
    /// [`Chain::rewrites`](crate::Chain::rewrites)).
    generation: u64,
    events: imbl::Vector<Event>,
    json: JsonBody,
}

/// The events from genesis to one tip, in a [`SpineOrder`].
///
/// Cloning is one reference-count increment. Events are shared with the chain (no payload
/// is copied), and consecutive versions of a growing spine share both their event list
/// (a persistent vector) and their JSON bytes (an append-only arena), so producing the
/// next version costs what was added.
#[derive(Clone)]
pub struct Spine(Arc<SpineInner>);

impl std::fmt::Debug for Spine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spine")
            .field("head", &self.0.head)
            .field("order", &self.0.order)
            .field("ids", &self.ids())
            .finish()
    }
}

/// Spines are equal when they have the same head, order and events; how their memory is
/// shared does not matter.
impl PartialEq for Spine {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.head == other.0.head
                && self.0.order == other.0.order
                && self.0.events == other.0.events)
    }
}

impl Eq for Spine {}

impl Spine {
    /// A spine of `events` already in their final order.
    pub(crate) fn assemble(
        head: EventId,
        order: SpineOrder,
        generation: u64,
        events: imbl::Vector<Event>,
    ) -> Spine {
        let json = JsonBody::of(events.iter().map(Event::payload));
        Spine(Arc::new(SpineInner {
            head,
            order,
            generation,
            events,
            json,
        }))
    }

    /// This spine grown to `head` by `tail` (tip last, causal order). Returns the new spine
    /// and whether it is this one with `tail` appended (false when the event-id order had
    /// to place a new event before an old one).
    pub(crate) fn grow(&self, head: EventId, tail: Vec<Event>) -> (Spine, bool) {
        let inner = &self.0;
        let appendable = match inner.order {
            SpineOrder::Causal => true,
            SpineOrder::EventId => {
                let last = inner.events.last().map(Event::id).unwrap_or(EventId::MIN);
                tail.iter().all(|e| e.id() > last)
            }
        };
        let mut tail = tail;
        if inner.order == SpineOrder::EventId {
            tail.sort_by_key(Event::id);
        }
        if appendable {
            let json = inner.json.extend(tail.iter().map(Event::payload));
            let mut events = inner.events.clone();
            events.extend(tail);
            let spine = Spine(Arc::new(SpineInner {
                head,
                order: inner.order,
                generation: inner.generation,
                events,
                json,
            }));
            return (spine, true);
        }
        let mut all: Vec<Event> = inner.events.iter().cloned().chain(tail).collect();
        all.sort_by_key(Event::id);
        let spine = Spine::assemble(head, inner.order, inner.generation, all.into());
        (spine, false)
    }

    /// The spine of `head`, an ancestor of this spine's head found `dropped` events from its
    /// end, whose payloads hold `dropped_bytes` bytes: the first `len - dropped` events and
    /// the matching prefix of the JSON, shared with this spine (O(log n), no walk, no copy).
    /// Causal order only (in event-id order an ancestor's spine is not a prefix).
    pub(crate) fn ancestor(&self, head: EventId, dropped: usize, dropped_bytes: usize) -> Spine {
        let inner = &self.0;
        debug_assert_eq!(inner.order, SpineOrder::Causal);
        let keep = inner.events.len() - dropped;
        // Each dropped payload was preceded by its comma.
        let json = inner
            .json
            .truncated(inner.json.len() - dropped_bytes - dropped);
        Spine(Arc::new(SpineInner {
            head,
            order: inner.order,
            generation: inner.generation,
            events: inner.events.take(keep),
            json,
        }))
    }

    pub(crate) fn generation(&self) -> u64 {
        self.0.generation
    }

    /// The tip this spine was built for (in event-id order, not necessarily the last
    /// event).
    pub fn head(&self) -> EventId {
        self.0.head
    }

    /// The order of [`Spine::events`].
    pub fn order(&self) -> SpineOrder {
        self.0.order
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.0.events.len()
    }

    /// Never true for a spine produced by a walk (it holds at least the genesis event).
    pub fn is_empty(&self) -> bool {
        self.0.events.is_empty()
    }

    /// The event ids, in spine order.
    pub fn ids(&self) -> Vec<EventId> {
        self.0.events.iter().map(Event::id).collect()
    }

    /// The events, in spine order.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &Event> + ExactSizeIterator + '_ {
        self.0.events.iter()
    }

    /// The event at `index` in spine order.
    pub fn get(&self, index: usize) -> Option<&Event> {
        self.0.events.get(index)
    }

    /// The payloads as one JSON array, built incrementally and shared across versions.
    pub fn json_array(&self) -> JsonArray {
        JsonArray::new(self.0.json.clone())
    }

    /// True when both handles point at the same spine allocation.
    pub fn ptr_eq(&self, other: &Spine) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
