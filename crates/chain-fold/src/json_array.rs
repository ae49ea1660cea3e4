//! A spine's payloads served as one JSON array, `[p1,p2,...,pk]`, straight from the
//! events' own bytes.
//!
//! Nothing is stored for it: the array is a rope of `2k + 1` pieces, the separators
//! (`[`, `,`, `]`, static) between the payloads (each event's own allocation). Producing it
//! is O(1); writing it is one vectored write per [`MAX_SLICES_PER_WRITE`] pieces, so a
//! consumer's socket gets the bytes without any intermediate copy, and a spine that grew by
//! `m` events cost only those `m` events to build. [`JsonArray::to_bytes`] joins the pieces
//! when a caller needs one contiguous buffer (that copy is O(whole spine), and it is the
//! caller's choice).
//!
//! The trade-off against a contiguous arena (what this crate did before): a payload byte is
//! never held twice, and a cached spine costs 8 bytes per event instead of its payloads'
//! size again; in exchange, a write hands the kernel two slices per event instead of one.

use std::io::IoSlice;

use bytes::{Buf, Bytes};

use crate::event::Event;
use crate::spine::Spine;

/// Slices handed to one `write_vectored` call (Linux's `IOV_MAX` is 1024).
pub(crate) const MAX_SLICES_PER_WRITE: usize = 1024;

/// A spine's payloads as one JSON array, `[p1,p2,...]`, without copying them.
///
/// Write it with [`JsonArray::write_to`] (vectored writes), read it as a [`bytes::Buf`] via
/// [`JsonArray::into_buf`], walk its pieces with [`JsonArray::chunks`], or join it with
/// [`JsonArray::to_bytes`] (one O(n) copy).
///
/// ```
/// use bytes::Buf;
/// use chain_fold::{Chain, Event, SpineOrder};
///
/// let mut chain = Chain::new(SpineOrder::Causal);
/// chain.apply(Event::from_json(br#"{"event_id":1,"execution_id":1,"event_type":"playbook_started"}"#)?);
/// chain.apply(Event::from_json(br#"{"event_id":2,"execution_id":1,"prev_event_id":1}"#)?);
/// let json = chain.walk_from(2).unwrap().json_array();
///
/// let value: serde_json::Value = serde_json::from_slice(&json.to_bytes()).unwrap();
/// assert_eq!(value[1]["event_id"], 2);
///
/// let mut socket = Vec::new();
/// json.write_to(&mut socket).unwrap(); // vectored: the payloads are not joined first
/// assert_eq!(socket, json.to_bytes());
/// assert_eq!(json.clone().into_buf().remaining(), json.len());
/// # Ok::<(), chain_fold::EventError>(())
/// ```
#[derive(Clone)]
pub struct JsonArray {
    spine: Spine,
}

/// Piece `i` of a spine's array of `k` events: even pieces are separators, odd pieces
/// payloads, and piece `2k` the closing bracket.
fn piece(events: &[Event], i: usize) -> &[u8] {
    match (i / 2, i % 2) {
        (at, 1) => events[at].payload(),
        (0, _) if events.is_empty() => b"[]",
        (at, _) if at == events.len() => b"]",
        (0, _) => b"[",
        _ => b",",
    }
}

/// How many pieces the array of `k` events has: `2k + 1`, or 1 (`[]`) when empty.
fn pieces(events: &[Event]) -> usize {
    if events.is_empty() {
        1
    } else {
        2 * events.len() + 1
    }
}

impl Spine {
    /// The payloads as one JSON array, `[p1,p2,...]`: a view of the events' own bytes
    /// (O(1), nothing copied or stored). Defined here, beside [`JsonArray`], so the spine
    /// module does not import the module that serves it.
    pub fn json_array(&self) -> JsonArray {
        JsonArray {
            spine: self.clone(),
        }
    }
}

impl JsonArray {
    fn events(&self) -> &[Event] {
        self.spine.as_slice()
    }

    /// Total length in bytes, brackets and commas included. O(1).
    pub fn len(&self) -> usize {
        let k = self.events().len();
        // `[` + payloads + (k - 1) commas + `]`
        self.spine.payload_bytes() + k.saturating_sub(1) + 2
    }

    /// Never true: even an empty array is `[]`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The pieces whose concatenation is the array, in order.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let events = self.events();
        (0..pieces(events)).map(move |i| piece(events, i))
    }

    /// Writes the array with vectored writes of up to 1,024 pieces
    /// each, finishing any partial write and retrying interrupted ones (as `write_all`
    /// does). A non-blocking writer should use [`JsonArray::into_buf`] instead, which keeps
    /// its position across `WouldBlock`.
    pub fn write_to<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        let events = self.events();
        let total = pieces(events);
        let (mut at, mut offset) = (0, 0);
        let mut slices = Vec::with_capacity(MAX_SLICES_PER_WRITE.min(total));
        while at < total {
            slices.clear();
            slices.push(IoSlice::new(&piece(events, at)[offset..]));
            slices.extend(
                (at + 1..total.min(at + MAX_SLICES_PER_WRITE))
                    .map(|i| IoSlice::new(piece(events, i))),
            );
            let mut written = match w.write_vectored(&slices) {
                Ok(n) => n,
                // As `write_all` does: an interrupted write wrote nothing, so retry.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            // Move past what was written: whole pieces, then part of one.
            while at < total {
                let left = piece(events, at).len() - offset;
                if written < left {
                    offset += written;
                    break;
                }
                written -= left;
                at += 1;
                offset = 0;
            }
        }
        Ok(())
    }

    /// The array as a [`Buf`] over the events' own bytes (no copy).
    pub fn into_buf(self) -> JsonBuf {
        let remaining = self.len();
        JsonBuf {
            array: self,
            piece: 0,
            offset: 0,
            remaining,
        }
    }

    /// The array joined into one contiguous buffer (copies the whole spine's JSON).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len());
        for chunk in self.chunks() {
            out.extend_from_slice(chunk);
        }
        Bytes::from(out)
    }
}

impl std::fmt::Debug for JsonArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonArray")
            .field("len", &self.len())
            .finish()
    }
}

impl PartialEq<[u8]> for JsonArray {
    fn eq(&self, other: &[u8]) -> bool {
        if other.len() != self.len() {
            return false;
        }
        let mut rest = other;
        self.chunks().all(|chunk| {
            let (head, tail) = rest.split_at(chunk.len());
            rest = tail;
            head == chunk
        })
    }
}

/// A [`JsonArray`] being read: a [`Buf`] whose chunks are the array's pieces (the
/// separators and each event's payload), so `chunks_vectored` hands a writer the events'
/// own bytes.
#[derive(Debug, Clone)]
pub struct JsonBuf {
    array: JsonArray,
    /// The piece being read, and how far into it.
    piece: usize,
    offset: usize,
    remaining: usize,
}

impl Buf for JsonBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        let events = self.array.events();
        if self.piece >= pieces(events) {
            return &[];
        }
        &piece(events, self.piece)[self.offset..]
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "cannot advance past the end of the array"
        );
        self.remaining -= cnt;
        let events = self.array.events();
        while cnt > 0 {
            let left = piece(events, self.piece).len() - self.offset;
            if cnt < left {
                self.offset += cnt;
                return;
            }
            cnt -= left;
            self.piece += 1;
            self.offset = 0;
        }
        // Skip empty payloads so `chunk` is empty only at the end.
        while self.piece < pieces(events) && piece(events, self.piece).is_empty() {
            self.piece += 1;
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let events = self.array.events();
        let mut filled = 0;
        let mut at = self.piece;
        let mut offset = self.offset;
        while filled < dst.len() && at < pieces(events) {
            let bytes = &piece(events, at)[offset..];
            if !bytes.is_empty() {
                dst[filled] = IoSlice::new(bytes);
                filled += 1;
            }
            at += 1;
            offset = 0;
        }
        filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Chain;
    use crate::spine::SpineOrder;

    fn spine_of(payloads: &[&str]) -> Spine {
        let events: Vec<Event> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let ty = if i == 0 { "playbook_started" } else { "step" };
                let prev = (i > 0).then_some(i as i64);
                Event::from_parts(i as i64 + 1, 1, prev, ty, p.as_bytes())
            })
            .collect();
        Spine::assemble(
            events.len() as i64,
            SpineOrder::Causal,
            crate::lineage::Lineage::fresh(),
            events,
        )
    }

    fn joined(a: &JsonArray) -> String {
        String::from_utf8(a.to_bytes().to_vec()).unwrap()
    }

    #[test]
    fn empty_spine_is_an_empty_array() {
        let a = spine_of(&[]).json_array();
        assert_eq!(joined(&a), "[]");
        assert_eq!(a.len(), 2);
        let mut buf = a.into_buf();
        assert_eq!(buf.copy_to_bytes(2), Bytes::from_static(b"[]"));
    }

    #[test]
    fn buf_vectored_write_and_to_bytes_agree() {
        let a = spine_of(&["{\"a\":1}", "null", "[2]"]).json_array();
        assert_eq!(joined(&a), "[{\"a\":1},null,[2]]");
        assert_eq!(a.len(), joined(&a).len());
        let mut written = Vec::new();
        a.write_to(&mut written).unwrap();
        assert_eq!(written, a.to_bytes().to_vec());
        let mut buf = a.clone().into_buf();
        assert_eq!(buf.copy_to_bytes(buf.remaining()), a.to_bytes());
        assert!(a == *b"[{\"a\":1},null,[2]]".as_slice());
        assert!(a != *b"[{\"a\":1},null,[3]]".as_slice());
    }

    #[test]
    fn a_buf_read_in_odd_steps_yields_every_byte_once() {
        let a = spine_of(&["12345", "6", "789"]).json_array();
        let mut buf = a.clone().into_buf();
        let mut out = Vec::new();
        while buf.has_remaining() {
            let take = buf.chunk().len().min(2);
            out.extend_from_slice(&buf.chunk()[..take]);
            buf.advance(take);
        }
        assert_eq!(out, a.to_bytes().to_vec());
    }

    /// A writer that takes at most 3 bytes per call, to exercise partial vectored writes.
    struct Trickle(Vec<u8>);

    impl std::io::Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(3);
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_are_finished() {
        let a = spine_of(&["\"abcdef\"", "{}", "1"]).json_array();
        let mut w = Trickle(Vec::new());
        a.write_to(&mut w).unwrap();
        assert_eq!(w.0, a.to_bytes().to_vec());
    }

    #[test]
    // 1,500 events of JSON building is minutes under Miri; the same pieces are exercised
    // there by the shorter tests.
    #[cfg_attr(miri, ignore)]
    fn a_long_spine_needs_several_writes_and_loses_nothing() {
        let mut chain = Chain::new(SpineOrder::Causal);
        chain.apply(Event::minimal(1, 1, None, "playbook_started"));
        for id in 2..=1500 {
            chain.apply(Event::minimal(id, 1, Some(id - 1), "step"));
        }
        let a = chain.walk_from(1500).unwrap().json_array();
        let mut written = Vec::new();
        a.write_to(&mut written).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(value.as_array().unwrap().len(), 1500);
        assert_eq!(written.len(), a.len());
    }
}
