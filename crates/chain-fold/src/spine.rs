//! The ordered list of events from genesis to one tip, and its served JSON.

use crate::sync::Arc;

use crate::append_log::AppendLog;
use crate::event::{Event, EventId};
use crate::lineage::Lineage;

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
    /// The chain version this spine was built on: it is reused only by that version or a
    /// later one of the same chain (see [`crate::lineage`]).
    built_on: Lineage,
    /// The position of the first genesis event in spine order (`usize::MAX` if none): a
    /// prefix of the spine is a complete spine only if it is longer than this.
    first_genesis: usize,
    events: AppendLog<Event>,
    /// The payloads' total length (the JSON array is this plus one separator per event
    /// and the closing bracket).
    payload_bytes: usize,
    /// `events` is a prefix of the ascending log of the chain version `built_on`, sharing
    /// its buffer: the chain charges that buffer, and a later version of the same line
    /// (no rewrite between) holds the same events at the same positions.
    shares_chain_log: bool,
}

/// The events from genesis to one tip, in a [`SpineOrder`].
///
/// Cloning is one reference-count increment. Events are shared with the chain (no payload
/// is copied), and consecutive versions of a growing spine share one append-only event list,
/// so producing the next version costs what was added. The served JSON
/// ([`Spine::json_array`]) is not stored at all: it is the events' own payload bytes,
/// handed out as a rope.
///
/// When the spine is the first events of the chain's log, one after the other (a chain
/// whose events arrived in causal order with no branch: the common case), its list *is*
/// the chain's log, shared: such a spine holds no handle of its own, and neither building
/// nor extending it clones an event. A spine of a branch, or of events that arrived late,
/// keeps its own list of 8-byte handles.
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
                && self.as_slice() == other.as_slice())
    }
}

impl Eq for Spine {}

/// Room a spine's own list of `len` events gets to grow by an eighth (and at least 4)
/// before its first copy: a spine is usually extended next, and a copy of a long spine's
/// list costs O(len).
fn growth_room(len: usize) -> usize {
    len / 8 + 4
}

/// The spine allocation's size: its reference counts and fields.
pub(crate) const SPINE_HEADER_BYTES: usize =
    2 * std::mem::size_of::<usize>() + std::mem::size_of::<SpineInner>();

impl Spine {
    /// A spine of `events` already in their final order.
    pub(crate) fn assemble(
        head: EventId,
        order: SpineOrder,
        built_on: Lineage,
        events: Vec<Event>,
    ) -> Spine {
        let mut log = AppendLog::with_capacity(events.len() + growth_room(events.len()));
        let mut payload_bytes = 0;
        let first_genesis = events
            .iter()
            .position(Event::is_genesis)
            .unwrap_or(usize::MAX);
        for event in events {
            payload_bytes += event.payload().len();
            log.push(event);
        }
        Spine(Arc::new(SpineInner {
            head,
            order,
            built_on,
            first_genesis,
            events: log,
            payload_bytes,
            shares_chain_log: false,
        }))
    }

    /// The spine whose events are `prefix`, the first events of the ascending log of the
    /// chain version `built_on` (already in spine order in either order: the log ascends
    /// by id and the walk visited it one event before the other), whose payloads hold
    /// `payload_bytes` bytes.
    pub(crate) fn over_log(
        head: EventId,
        order: SpineOrder,
        built_on: Lineage,
        prefix: AppendLog<Event>,
        payload_bytes: usize,
    ) -> Spine {
        let first_genesis = prefix
            .as_slice()
            .iter()
            .position(Event::is_genesis)
            .unwrap_or(usize::MAX);
        Spine(Arc::new(SpineInner {
            head,
            order,
            built_on,
            first_genesis,
            events: prefix,
            payload_bytes,
            shares_chain_log: true,
        }))
    }

    /// Whether this spine's list is a prefix of its chain's log (see [`Spine::over_log`]).
    pub(crate) fn shares_chain_log(&self) -> bool {
        self.0.shares_chain_log
    }

    /// This spine, which shares its chain's log, grown to `head` by the events after it in
    /// that log: `prefix` is the log's first events up to `head`, of the chain version
    /// `built_on`, a later version of this spine's line (so its first events are this
    /// spine's), and the added events' payloads hold `added_bytes`.
    pub(crate) fn extended_over_log(
        &self,
        head: EventId,
        built_on: Lineage,
        prefix: AppendLog<Event>,
        added_bytes: usize,
    ) -> Spine {
        let inner = &self.0;
        debug_assert!(inner.shares_chain_log && prefix.len() >= inner.events.len());
        Spine(Arc::new(SpineInner {
            head,
            order: inner.order,
            built_on,
            first_genesis: inner.first_genesis,
            events: prefix,
            payload_bytes: inner.payload_bytes + added_bytes,
            shares_chain_log: true,
        }))
    }

    /// This spine grown to `head` by `tail` (tip last, causal order), on the chain version
    /// `built_on` that holds `tail`. Returns the new spine and whether it is this one with
    /// `tail` appended (false when the event-id order had to place a new event before an
    /// old one).
    pub(crate) fn grow(&self, head: EventId, tail: Vec<Event>, built_on: Lineage) -> (Spine, bool) {
        let inner = &self.0;
        let mut tail = tail;
        if inner.order == SpineOrder::EventId {
            tail.sort_by_key(Event::id);
        }
        let appendable = match inner.order {
            SpineOrder::Causal => true,
            SpineOrder::EventId => {
                let last = self
                    .as_slice()
                    .last()
                    .map(Event::id)
                    .unwrap_or(EventId::MIN);
                tail.first().is_none_or(|first| first.id() > last)
            }
        };
        if appendable {
            // A list shared with the chain's log is copied first: appending to it in place
            // would claim the log's next cell and make the chain copy its log instead.
            let mut events = if inner.shares_chain_log {
                let len = inner.events.len();
                inner.events.detached(tail.len() + growth_room(len))
            } else {
                inner.events.clone()
            };
            let mut payload_bytes = inner.payload_bytes;
            for event in tail {
                payload_bytes += event.payload().len();
                events.push(event);
            }
            let spine = Spine(Arc::new(SpineInner {
                head,
                order: inner.order,
                built_on,
                first_genesis: inner.first_genesis,
                events,
                payload_bytes,
                shares_chain_log: false,
            }));
            return (spine, true);
        }
        let mut all: Vec<Event> = self.as_slice().iter().cloned().chain(tail).collect();
        all.sort_by_key(Event::id);
        let spine = Spine::assemble(head, inner.order, built_on, all);
        (spine, false)
    }

    /// The spine of `head`, an ancestor of this spine's head found `dropped` events from its
    /// end, whose payloads hold `dropped_bytes` bytes: the first `len - dropped` events,
    /// sharing this spine's list (O(1), no walk, no copy). Causal order only (in event-id
    /// order an ancestor's spine is not a prefix).
    ///
    /// `None` when the prefix holds no genesis event: the walk from `head` is exactly the
    /// prefix, so it reaches the root without passing `playbook_started` and there is no
    /// spine (a chain may start with a root that is not genesis and meet genesis later).
    pub(crate) fn ancestor(
        &self,
        head: EventId,
        dropped: usize,
        dropped_bytes: usize,
    ) -> Option<Spine> {
        let inner = &self.0;
        debug_assert_eq!(inner.order, SpineOrder::Causal);
        let keep = inner.events.len() - dropped;
        if inner.first_genesis >= keep {
            return None;
        }
        Some(Spine(Arc::new(SpineInner {
            head,
            order: inner.order,
            built_on: inner.built_on.clone(),
            first_genesis: inner.first_genesis,
            events: inner.events.truncated(keep),
            payload_bytes: inner.payload_bytes - dropped_bytes,
            shares_chain_log: inner.shares_chain_log,
        })))
    }

    /// The spine's event list.
    #[cfg(test)]
    pub(crate) fn log(&self) -> &AppendLog<Event> {
        &self.0.events
    }

    pub(crate) fn as_slice(&self) -> &[Event] {
        self.0.events.as_slice()
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        self.0.payload_bytes
    }

    /// What keeping this spine cached can cost on the heap, beyond its events (which the
    /// chain owns and charges): the spine's allocation and its event list's buffer. The
    /// engine's byte ledger charges this for each cached spine; the JSON it serves costs
    /// nothing more.
    ///
    /// A spine that shares its chain's log ([`Spine::events`] is then a version of the
    /// chain's own list) is charged that list too, although the chain charges it as well
    /// while it uses it: the chain moves to a fresh buffer when it outgrows its own or a
    /// rewrite replaces it, and the spine keeps the old one alive until it is replaced,
    /// which may be long (a cache hit, an ancestor's build or an incomplete one keep it).
    /// Counting it twice while shared is what keeps the ledger from ever counting less than
    /// a cached spine keeps alive; a pure function of the spine, it is also what the ledger
    /// takes back when the spine leaves the cache.
    pub fn heap_bytes(&self) -> usize {
        SPINE_HEADER_BYTES + self.0.events.heap_bytes()
    }

    /// The chain version this spine was built on.
    pub(crate) fn built_on(&self) -> &Lineage {
        &self.0.built_on
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
        self.0.events.len() == 0
    }

    /// The event ids, in spine order.
    pub fn ids(&self) -> Vec<EventId> {
        self.as_slice().iter().map(Event::id).collect()
    }

    /// The events, in spine order.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &Event> + ExactSizeIterator + '_ {
        self.as_slice().iter()
    }

    /// The event at `index` in spine order.
    pub fn get(&self, index: usize) -> Option<&Event> {
        self.as_slice().get(index)
    }

    /// True when both handles point at the same spine allocation.
    pub fn ptr_eq(&self, other: &Spine) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
