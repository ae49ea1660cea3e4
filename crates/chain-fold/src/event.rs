//! One WAL event: the four fields the index reads, and the payload it hands back in canonical form.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use bytes::Bytes;

mod allocation;
mod error;
mod image;
mod slim;

use allocation::Allocation;

pub use image::ImageError;

pub use error::{EventError, Field};

/// The id of one event, unique within the WAL.
pub type EventId = i64;
/// The id of one workflow execution.
pub type ExecutionId = i64;

/// The only genesis event type: a chain is complete only if its walk passes one.
pub(crate) const GENESIS_TYPE: &str = "playbook_started";

/// The six spellings of a terminal event type; after a batch holding one, the execution is
/// evicted.
pub const TERMINAL_TYPES: [&str; 6] = [
    "playbook_completed",
    "playbook_failed",
    "playbook_cancelled",
    "playbook.completed",
    "playbook.failed",
    "playbook.cancelled",
];

/// The keys the slim projection keeps (the consumer ignores every other key).
pub const SLIM_KEYS: [&str; 13] = [
    "event_id",
    "execution_id",
    "catalog_id",
    "event_type",
    "node_name",
    "status",
    "context",
    "result",
    "meta",
    "timestamp",
    "created_at",
    "parent_execution_id",
    "attempt",
];

/// What the index knows about an event type without comparing strings again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeClass {
    Genesis,
    Terminal,
    Other,
}

impl TypeClass {
    fn of(event_type: &str) -> Self {
        if event_type == GENESIS_TYPE {
            TypeClass::Genesis
        } else if TERMINAL_TYPES.contains(&event_type) {
            TypeClass::Terminal
        } else {
            TypeClass::Other
        }
    }
}

/// The fixed-size part of an event's allocation: 24 bytes. The two ids, the link as a
/// distance back from the id (a `prev` within `i32` of the id: every real chain), where the
/// event type lies in the payload, and flags. What does not fit (a far `prev`, a type that
/// is not a short verbatim substring of the payload) is stored after the payload instead
/// (see [`Event::assemble`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    id: EventId,
    execution_id: ExecutionId,
    /// `id - prev`, with [`HAS_PREV`] and without [`PREV_OWNED`].
    prev_back: i32,
    /// Where the event type starts in the payload (an inline type).
    type_start: u16,
    /// Its length (an inline type).
    type_len: u8,
    flags: u8,
}

/// The event has a `prev_event_id`.
const HAS_PREV: u8 = 1 << 0;
/// The event type is not a short verbatim substring of the payload (it had escapes, the
/// caller supplied it, or it lies too far in): its text, then its length as a `u32`,
/// follow the payload.
const TYPE_OWNED: u8 = 1 << 1;
/// The type is `playbook_started`.
const GENESIS: u8 = 1 << 2;
/// The type is one of the terminal spellings.
const TERMINAL: u8 = 1 << 3;
/// `prev` is too far from `id` for `prev_back`: it is the allocation's last 8 bytes.
const PREV_OWNED: u8 = 1 << 4;
/// The payload is already the slim projection ([`Event::to_slim`] made it): projecting it
/// again is the identity, so `to_slim` returns the event as it is instead of parsing it.
const SLIM: u8 = 1 << 5;

/// One decoded WAL event.
///
/// An `Event` is a pointer to immutable shared data: cloning it is one reference-count
/// increment, and the payload bytes are never copied again after decoding. Spines, chains
/// and the JSON served to a consumer all point at the same payload.
///
/// ```
/// use chain_fold::Event;
///
/// let e = Event::from_json(br#"{"event_id":7,"execution_id":1,"prev_event_id":6,
///                              "event_type":"step_done","result":{"ok":true}}"#)?;
/// assert_eq!((e.id(), e.execution_id(), e.prev()), (7, 1, Some(6)));
/// assert!(!e.is_genesis() && !e.is_terminal());
/// assert!(e.payload().starts_with(b"{\"event_id\":7"));
///
/// // A string id is a typed error, not a silent drop.
/// let err = Event::from_json(br#"{"event_id":"7","execution_id":1}"#).unwrap_err();
/// assert!(matches!(err, chain_fold::EventError::StringId { .. }));
/// # Ok::<(), chain_fold::EventError>(())
/// ```
///
/// # Memory
///
/// An event is one allocation: a reference count, a 24-byte header (the ids, the type's
/// position, flags), the slice length, then the payload bytes (and, rarely, an unescaped
/// copy of the event type). The handle is one pointer. [`Event::resident_bytes`] is that
/// allocation's exact size, which is what the byte ledger charges; the payload is copied into
/// it once at decode, so a drain's receive buffer is not kept alive by the index.
#[derive(Clone)]
pub struct Event(Allocation);

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("id", &self.id())
            .field("execution_id", &self.execution_id())
            .field("prev", &self.prev())
            .field("event_type", &self.event_type())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

/// Two events are equal when every decoded field and the payload bytes are equal.
impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other)
            || (self.id() == other.id()
                && self.execution_id() == other.execution_id()
                && self.prev() == other.prev()
                && self.event_type() == other.event_type()
                && self.payload() == other.payload())
    }
}

impl Eq for Event {}

/// Fixed heap cost of one resident event beyond its payload: the allocation's 4-byte
/// reference count, 4-byte length and 24-byte header (the allocation is then rounded up to
/// 8 bytes). [`Event::resident_bytes`] is exact; `docs/benchmarks.md` checks it against a
/// counting allocator.
pub const EVENT_OVERHEAD_BYTES: usize = Allocation::PREFIX_BYTES;

impl Event {
    /// serde_json's default recursion limit, which is what today's consumers parse payloads
    /// with: a payload nests arrays and objects fewer than this many levels deep (127 levels
    /// parse, 128 do not).
    pub const MAX_DEPTH: usize = 128;

    /// Decodes one WAL payload, keeping its canonical bytes.
    ///
    /// The payload the event keeps, and every spine serves, is the canonical form of the
    /// payload's JSON value: keys sorted, no whitespace, strings and numbers as serde_json
    /// writes them. These are the bytes today's index serves (it parses each payload and
    /// serializes it again), and they depend only on the value: two producers that write
    /// one event with another key order or spacing give byte-identical events, and so
    /// byte-identical drive inputs, whichever path (the drain, a tail, a state shard, a
    /// rehydrate) supplied them.
    ///
    /// ```
    /// use chain_fold::Event;
    ///
    /// let a = Event::from_json(br#"{"execution_id":1, "event_id":7, "note":"caf\u00e9"}"#)?;
    /// let b = Event::from_json(r#"{"note":"café","event_id":7,"execution_id":1}"#.as_bytes())?;
    /// assert_eq!(a.payload(), r#"{"event_id":7,"execution_id":1,"note":"café"}"#.as_bytes());
    /// assert_eq!(a, b);
    /// # Ok::<(), chain_fold::EventError>(())
    /// ```
    pub fn from_json(payload: &[u8]) -> Result<Event, EventError> {
        Self::decode(payload, false)
    }

    /// Decodes one WAL payload straight to its slim projection: the same event as
    /// `Event::from_json(payload)?.to_slim()`, in one pass instead of two (the full
    /// canonical bytes are written once and the kept members copied out of them, where
    /// `to_slim` parses those bytes again). A drain that stores slim events decodes with
    /// this.
    ///
    /// ```
    /// use chain_fold::Event;
    ///
    /// let payload = br#"{"worker_id":"w-1", "result":{"b":2,"a":1}, "execution_id":2, "event_id":1}"#;
    /// let slim = Event::from_json_slim(payload)?;
    /// assert_eq!(slim.payload(), br#"{"event_id":1,"execution_id":2,"result":{"a":1,"b":2}}"#);
    /// assert_eq!(slim, Event::from_json(payload)?.to_slim());
    /// assert!(slim.to_slim().ptr_eq(&slim), "already slim");
    /// # Ok::<(), chain_fold::EventError>(())
    /// ```
    pub fn from_json_slim(payload: &[u8]) -> Result<Event, EventError> {
        Self::decode(payload, true)
    }

    fn decode(payload: &[u8], slim: bool) -> Result<Event, EventError> {
        thread_local! {
            /// Each thread's decode buffers (the pass's raw output and the assembled
            /// object), reused from one decode to the next.
            static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
        }
        /// A buffer grown past this is given back after use rather than kept.
        const KEPT_CAPACITY: usize = 1 << 20;
        SCRATCH.with(|scratch| {
            let mut fresh = (Vec::new(), Vec::new());
            let mut borrowed = scratch.try_borrow_mut();
            // A decode cannot run inside another on one thread; if it ever did, it would
            // use buffers of its own.
            let (raw, out) = match borrowed.as_deref_mut() {
                Ok(buffers) => buffers,
                Err(_) => &mut fresh,
            };
            let decoded = Self::decode_with(payload, slim, raw, out);
            for buffer in [raw, out] {
                if buffer.capacity() > KEPT_CAPACITY {
                    *buffer = Vec::new();
                }
            }
            decoded
        })
    }

    fn decode_with(
        payload: &[u8],
        slim: bool,
        raw: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Event, EventError> {
        use crate::canonical::{IdField, TypeField};
        let mut decoded = match crate::canonical::decode(payload, raw) {
            Ok(decoded) => decoded,
            // Name the problem as the field checks do (a lone surrogate, too deep, a
            // string id); what passes them but does not parse as a JSON value (a number
            // beyond f64, say) is a JSON error.
            Err(parse) => return Err(error::why_unparsed(payload, parse)),
        };
        if let Some(found) = decoded.not_an_object {
            return Err(EventError::NotAnObject { found });
        }
        let id_of = |value: IdField, field: Field| match value {
            IdField::Int(id) => Ok(id),
            IdField::Missing => Err(EventError::Missing { field }),
            IdField::Other(text) => Err(error::why_not_an_id(payload, field, &text)),
        };
        let id = id_of(
            std::mem::replace(&mut decoded.event_id, IdField::Missing),
            Field::EventId,
        )?;
        let execution_id = id_of(
            std::mem::replace(&mut decoded.execution_id, IdField::Missing),
            Field::ExecutionId,
        )?;
        let keep = |key: &[u8]| !slim || SLIM_KEYS.iter().any(|kept| kept.as_bytes() == key);
        // The object's pieces are copied once, straight into the event's allocation; only a
        // slim event whose type must be looked for in its payload is put together first.
        let (_, type_at) = decoded.object_layout(raw, keep);
        let event_type = std::mem::replace(&mut decoded.event_type, TypeField::Empty);
        // Holds the joined payload when one is needed, and is empty otherwise.
        out.clear();
        let located = |out: &mut Vec<u8>, text: &str| {
            out.extend(decoded.object_parts(raw, keep).flatten());
            EventType::located(out, text)
        };
        let event_type = match event_type {
            TypeField::Empty => EventType::InPayload { start: 0, len: 0 },
            TypeField::At { start, len } => match type_at {
                // Where the header can point at it (and always for a whole event, as
                // before): `assemble` copies a type it cannot point at.
                Some(moved) if !slim || moved <= usize::from(u16::MAX) => {
                    EventType::InPayload { start: moved, len }
                }
                // A slim event whose type lies past where the header can point, or (not
                // today: `event_type` is a slim key) was left out: the text is looked for
                // as `to_slim` does, so both charge the ledger the same bytes.
                _ => {
                    let text = std::str::from_utf8(&raw[start..start + len]).unwrap_or("");
                    located(out, text)
                }
            },
            // A type that needed an escape is stored as its text; a slim event looks for
            // that text in its payload first, as `to_slim` does, so both charge the ledger
            // the same bytes.
            TypeField::Owned(text) if slim => located(out, &text),
            TypeField::Owned(text) => EventType::Owned(text),
        };
        let flags = if slim { SLIM } else { 0 };
        if out.is_empty() {
            let parts = decoded.object_parts(raw, keep);
            Self::assemble(id, execution_id, decoded.prev, event_type, parts, flags)
        } else {
            let joined = std::iter::once(out.as_slice());
            Self::assemble(id, execution_id, decoded.prev, event_type, joined, flags)
        }
        .map_err(|len| EventError::TooLarge { len })
    }

    /// Decodes one WAL payload received as a [`Bytes`].
    ///
    /// The payload's canonical bytes ([`Event::from_json`]) are written once into the
    /// event's own allocation (see the type's documentation) and `payload` can be dropped:
    /// a receive buffer is never pinned by an indexed event.
    ///
    /// Rules (docs/domain.md): `event_id` and `execution_id` must be JSON
    /// integers in the `i64` range (a *string* id in either is an error); `prev_event_id`
    /// absent, `null`, a string, a boolean, an object, an array or a non-integer number
    /// makes the event a chain root, as today; `event_type` that is absent or not a string
    /// reads as the empty string. A payload today's consumers could not parse is an error
    /// too: a lone surrogate escape ([`EventError::LoneSurrogate`]) or nesting
    /// [`Event::MAX_DEPTH`] levels deep or deeper ([`EventError::TooDeep`]).
    pub fn from_json_bytes(payload: Bytes) -> Result<Event, EventError> {
        Self::from_json(&payload)
    }

    /// Builds an event from already-decoded parts.
    ///
    /// The payload is trusted to be one JSON value: it is spliced verbatim into
    /// [`Spine::json_array`](crate::Spine::json_array). Use this for synthetic workloads and
    /// tests; a drain should use [`Event::from_json`].
    ///
    /// # Panics
    ///
    /// If the payload (with the event type, when the type is not a substring of it) is
    /// 4 GiB or longer: an event's allocation holds less ([`EventError::TooLarge`] is what
    /// the decoders return instead).
    pub fn from_parts(
        id: EventId,
        execution_id: ExecutionId,
        prev: Option<EventId>,
        event_type: &str,
        payload: impl AsRef<[u8]>,
    ) -> Event {
        let payload = payload.as_ref();
        let event_type = EventType::located(payload, event_type);
        Self::assemble(
            id,
            execution_id,
            prev,
            event_type,
            std::iter::once(payload),
            0,
        )
        .expect("a payload shorter than 4 GiB (see `# Panics`)")
    }

    /// Builds an event whose payload is the minimal envelope of its four fields.
    ///
    /// ```
    /// let e = chain_fold::Event::minimal(2, 9, Some(1), "step");
    /// assert_eq!(chain_fold::Event::from_json(e.payload()).unwrap(), e);
    /// ```
    pub fn minimal(
        id: EventId,
        execution_id: ExecutionId,
        prev: Option<EventId>,
        event_type: &str,
    ) -> Event {
        let payload = serde_json::json!({
            "event_id": id,
            "execution_id": execution_id,
            "prev_event_id": prev,
            "event_type": event_type,
        });
        let bytes = serde_json::to_vec(&payload).unwrap_or_default();
        // Canonical whatever serde_json's map order is in this build.
        let bytes = crate::canonical::canonical_json(&bytes).unwrap_or(bytes);
        Self::from_parts(id, execution_id, prev, event_type, bytes)
    }

    /// Lays the event out in one allocation: the header, then
    /// `payload ++ [owned type ++ its length as u32 LE] ++ [prev as i64 LE]`, the two
    /// optional parts present only when their flag is set; the payload comes as pieces,
    /// copied in one after the other. Their length, when it is longer than an allocation
    /// holds (`u32::MAX`), is the error.
    fn assemble<'p>(
        id: EventId,
        execution_id: ExecutionId,
        prev: Option<EventId>,
        event_type: EventType,
        payload: impl Iterator<Item = &'p [u8]> + Clone,
        extra_flags: u8,
    ) -> Result<Event, usize> {
        // A type inside the payload that the header cannot point at is stored owned.
        let event_type = match event_type {
            EventType::InPayload { start, len }
                if u8::try_from(len).is_err() || u16::try_from(start).is_err() =>
            {
                EventType::Owned(
                    String::from_utf8_lossy(&span(payload.clone(), start, len)).into_owned(),
                )
            }
            other => other,
        };
        let mut flags = extra_flags;
        let mut tail: Vec<u8> = Vec::new();
        let (type_start, type_len, type_text) = match &event_type {
            // Both fit: checked above.
            EventType::InPayload { start, len } => (
                *start as u16,
                *len as u8,
                span(payload.clone(), *start, *len),
            ),
            EventType::Owned(text) => {
                flags |= TYPE_OWNED;
                tail.extend_from_slice(text.as_bytes());
                // A type of 4 GiB or more cannot be a WAL envelope's; it reads as empty.
                let len = u32::try_from(text.len()).unwrap_or(0);
                if len == 0 {
                    tail.clear();
                }
                tail.extend_from_slice(&len.to_le_bytes());
                (0, 0, Cow::Borrowed(text.as_bytes()))
            }
        };
        flags |= match TypeClass::of(std::str::from_utf8(&type_text).unwrap_or("")) {
            TypeClass::Genesis => GENESIS,
            TypeClass::Terminal => TERMINAL,
            TypeClass::Other => 0,
        };
        let mut prev_back = 0;
        if let Some(prev) = prev {
            flags |= HAS_PREV;
            match id
                .checked_sub(prev)
                .and_then(|back| i32::try_from(back).ok())
            {
                Some(back) => prev_back = back,
                None => {
                    flags |= PREV_OWNED;
                    tail.extend_from_slice(&prev.to_le_bytes());
                }
            }
        }
        let header = Header {
            id,
            execution_id,
            prev_back,
            type_start,
            type_len,
            flags,
        };
        // The payload's pieces outlive the tail: the chain takes the tail's lifetime.
        let parts = payload
            .map(|part| -> &[u8] { part })
            .chain(std::iter::once(tail.as_slice()));
        Allocation::new(header, parts.clone())
            .map(Event)
            .ok_or_else(|| parts.fold(0, |total: usize, part| total.saturating_add(part.len())))
    }

    fn header(&self) -> &Header {
        self.0.header()
    }

    /// The allocation's bytes split into the payload, the owned type (if any) and the
    /// owned `prev` (if any), parsed from the end.
    fn parts(&self) -> (&[u8], Option<&[u8]>, Option<EventId>) {
        let flags = self.header().flags;
        let mut rest: &[u8] = self.0.bytes();
        let mut prev = None;
        if flags & PREV_OWNED != 0 {
            if let Some((head, last)) = rest.split_last_chunk::<8>() {
                prev = Some(EventId::from_le_bytes(*last));
                rest = head;
            }
        }
        let mut owned_type = None;
        if flags & TYPE_OWNED != 0 {
            if let Some((head, len)) = rest.split_last_chunk::<4>() {
                let len = (u32::from_le_bytes(*len) as usize).min(head.len());
                let (payload, text) = head.split_at(head.len() - len);
                owned_type = Some(text);
                rest = payload;
            }
        }
        (rest, owned_type, prev)
    }

    /// The event's id.
    pub fn id(&self) -> EventId {
        self.header().id
    }
    /// The execution this event belongs to.
    pub fn execution_id(&self) -> ExecutionId {
        self.header().execution_id
    }
    /// The previous event in arrival order, or `None` for a chain root.
    pub fn prev(&self) -> Option<EventId> {
        let header = self.header();
        if header.flags & HAS_PREV == 0 {
            None
        } else if header.flags & PREV_OWNED != 0 {
            self.parts().2
        } else {
            // Cannot overflow: `prev_back` was computed as `id - prev`.
            Some(header.id.wrapping_sub(EventId::from(header.prev_back)))
        }
    }
    /// The event type (empty when absent or not a string).
    pub fn event_type(&self) -> &str {
        let header = self.header();
        let text = if header.flags & TYPE_OWNED != 0 {
            self.parts().1.unwrap_or_default()
        } else {
            let bytes: &[u8] = self.0.bytes();
            let start = usize::from(header.type_start).min(bytes.len());
            &bytes[start..(start + usize::from(header.type_len)).min(bytes.len())]
        };
        // Always valid: the text came from a `&str` or from a UTF-8-checked payload.
        std::str::from_utf8(text).unwrap_or("")
    }
    /// The payload bytes exactly as they were decoded.
    pub fn payload(&self) -> &[u8] {
        if self.header().flags & (TYPE_OWNED | PREV_OWNED) == 0 {
            self.0.bytes()
        } else {
            self.parts().0
        }
    }
    /// The payload as a [`Bytes`] that shares this event's allocation (no copy; one small
    /// allocation for the owner handle).
    pub fn payload_bytes(&self) -> Bytes {
        let len = self.payload().len();
        Bytes::from_owner(PayloadOwner(self.clone())).slice(..len)
    }
    /// `event_type == "playbook_started"`.
    pub fn is_genesis(&self) -> bool {
        self.header().flags & GENESIS != 0
    }
    /// One of the six terminal spellings ([`TERMINAL_TYPES`]).
    pub fn is_terminal(&self) -> bool {
        self.header().flags & TERMINAL != 0
    }
    /// What keeping this event resident costs: the exact size of its one allocation
    /// ([`EVENT_OVERHEAD_BYTES`] plus the payload, plus an owned event type, rounded up to
    /// 8 bytes). The byte ledger charges this per indexed event.
    pub fn resident_bytes(&self) -> usize {
        Allocation::size_for(self.0.bytes().len())
    }
    /// True when both handles point at the same decoded allocation.
    pub fn ptr_eq(&self, other: &Event) -> bool {
        self.0.ptr_eq(&other.0)
    }
}

/// Where an event's type text comes from, while it is being assembled.
enum EventType {
    InPayload { start: usize, len: usize },
    Owned(String),
}

impl EventType {
    /// `text` where it first occurs verbatim in `payload`, else a copy of it.
    fn located(payload: &[u8], text: &str) -> EventType {
        match find(payload, text.as_bytes()) {
            Some(start) => EventType::InPayload {
                start,
                len: text.len(),
            },
            None => EventType::Owned(text.to_owned()),
        }
    }
}

/// The bytes `start..start + len` of the concatenation of `pieces`: borrowed when one
/// piece holds them all (an event type always lies within one member's piece), else copied;
/// as much of the range as the pieces hold.
fn span<'p>(pieces: impl Iterator<Item = &'p [u8]>, start: usize, len: usize) -> Cow<'p, [u8]> {
    let mut at = 0;
    let mut copied = Vec::new();
    for piece in pieces {
        let (from, to) = (start.max(at), (start + len).min(at + piece.len()));
        if from < to {
            if from == start && to == start + len {
                return Cow::Borrowed(&piece[from - at..to - at]);
            }
            copied.extend_from_slice(&piece[from - at..to - at]);
        }
        at += piece.len();
    }
    Cow::Owned(copied)
}

/// The first position of `needle` in `haystack` (an empty needle is at 0): memchr's
/// vectorized substring search, so building an event from parts stays a small fraction of
/// copying its payload.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

struct PayloadOwner(Event);

impl AsRef<[u8]> for PayloadOwner {
    fn as_ref(&self) -> &[u8] {
        self.0.payload()
    }
}

#[cfg(test)]
mod tests {
    use super::span;

    #[test]
    fn a_span_is_borrowed_within_one_piece_and_copied_across_pieces() {
        let pieces: [&[u8]; 4] = [b"{", b"\"a\":1", b",", b"\"b\":2}"];
        let span = |start, len| span(pieces.iter().copied(), start, len);
        let within = span(2, 1);
        assert!(matches!(within, std::borrow::Cow::Borrowed(b"a")));
        assert_eq!(span(5, 4).as_ref(), b"1,\"b");
        assert_eq!(span(0, 13).as_ref(), b"{\"a\":1,\"b\":2}");
        assert_eq!(span(11, 50).as_ref(), b"2}", "as much as the pieces hold");
    }
}
