//! The append-only byte arena behind [`Spine::json_array`](crate::Spine::json_array).
//!
//! A spine's JSON is `[p1,p2,...,pk` followed by a closing `]`. Every version of a growing
//! spine shares one prefix, so versions share one buffer: version `k` is the first
//! `end_k` bytes of the arena. Extending version `k` by `m` events writes only the new
//! bytes past `end_k`, so serving a spine that grew by `m` events costs the bytes of those
//! `m` events, not the whole spine.
//!
//! The closing `]` is not stored: it would sit where the next version writes its `,`.
//! [`JsonArray`] therefore hands out two chunks (the shared body and a static `]`), which a
//! vectored write sends without joining; [`JsonArray::to_bytes`] joins them when a caller
//! needs one contiguous buffer (that copy is O(whole spine), and it is the caller's choice).
//!
//! # The ownership protocol
//!
//! Bytes below the arena's `claimed` mark are immutable forever. A writer extends in place
//! only after winning a compare-and-swap of `claimed` from *its own* end to its new end;
//! any other version (an older one, or a concurrent extension of the same one) loses that
//! race and copies into a fresh arena instead. So no byte is ever written twice, and no
//! byte a reader can reach is ever written again.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Buf, Bytes};

/// Smallest arena allocated; a spine's JSON usually outgrows it once or twice.
const MIN_CAPACITY: usize = 256;

struct Arena {
    /// Bytes below `claimed` are initialized; the rest are not (nothing is zeroed: an
    /// arena is written once, front to back).
    buf: Box<[UnsafeCell<MaybeUninit<u8>>]>,
    /// Bytes `[0, claimed)` belong to some version; bytes past it belong to nobody yet.
    claimed: AtomicUsize,
}

// SAFETY: the only shared mutation is through `UnsafeCell` bytes at or past `claimed`, and a
// thread writes there only after its compare-and-swap moved `claimed` past those bytes,
// making it their single writer. Readers read only below the end of a version they were
// handed, which is at or below `claimed` and was written before that version existed.
unsafe impl Sync for Arena {}

impl Arena {
    fn with_capacity(capacity: usize) -> Arena {
        Arena {
            buf: (0..capacity)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            claimed: AtomicUsize::new(0),
        }
    }

    fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The immutable prefix `[0, len)`.
    fn prefix(&self, len: usize) -> &[u8] {
        assert!(
            len <= self.capacity(),
            "a version cannot end past its arena"
        );
        // SAFETY: `len` is the end of a version that was fully written before the caller
        // could hold it, so bytes `[0, len)` are initialized, and bytes below any version's
        // end are never written again (the module's ownership protocol), so no `&mut`
        // aliases them. `UnsafeCell<MaybeUninit<u8>>` has the layout of `u8`.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), len) }
    }

    /// Writes `parts` at `at`. The caller owns `[at, at + total)` through a won claim.
    fn write_owned(&self, at: usize, parts: &[&[u8]]) {
        let mut pos = at;
        for part in parts {
            let dst = &self.buf[pos..pos + part.len()];
            // SAFETY: the caller won the claim over `[at, at + total)`, so this thread is the
            // only one touching these bytes, and no reader is handed them before the write
            // completes. Source and destination are distinct allocations.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    part.as_ptr(),
                    UnsafeCell::raw_get(dst.as_ptr()).cast::<u8>(),
                    part.len(),
                );
            }
            pos += part.len();
        }
    }
}

/// One version of a spine's JSON: `[` followed by comma-separated payloads, without the
/// closing bracket. Cloning is one reference-count increment.
#[derive(Clone)]
pub(crate) struct JsonBody {
    arena: Arc<Arena>,
    len: usize,
}

impl JsonBody {
    /// The body of an empty array: `[`.
    #[cfg(test)]
    pub(crate) fn empty() -> JsonBody {
        JsonBody::of(std::iter::empty())
    }

    /// A body of the given payloads, in order.
    pub(crate) fn of<'a>(payloads: impl Iterator<Item = &'a Bytes> + Clone) -> JsonBody {
        let fresh = JsonBody {
            arena: Arc::new(Arena::with_capacity(0)),
            len: 0,
        };
        fresh.extend(payloads)
    }

    /// The body of this version followed by `payloads`: in place when this version owns the
    /// arena's tail, else copied into a fresh arena of 1.5 times the size needed.
    pub(crate) fn extend<'a>(&self, payloads: impl Iterator<Item = &'a Bytes> + Clone) -> JsonBody {
        let mut first_in_array = self.len <= 1;
        let mut parts: Vec<&[u8]> = Vec::new();
        if self.len == 0 {
            parts.push(b"[");
        }
        for payload in payloads {
            if !first_in_array {
                parts.push(b",");
            }
            first_in_array = false;
            parts.push(payload);
        }
        let added: usize = parts.iter().map(|p| p.len()).sum();
        let end = self.len + added;
        // Relaxed: the CAS only arbitrates who owns the bytes past `self.len`; the bytes
        // themselves reach other threads through whatever publishes the returned body
        // (a release store or a channel), which pairs with that reader's acquire.
        if end <= self.arena.capacity()
            && self
                .arena
                .claimed
                .compare_exchange(self.len, end, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.arena.write_owned(self.len, &parts);
            return JsonBody {
                arena: Arc::clone(&self.arena),
                len: end,
            };
        }
        // Half again as much room as needed: amortized O(1) growth, and a cached spine
        // that never grows again wastes at most a third of its arena.
        let arena = Arena::with_capacity(MIN_CAPACITY.max(end.saturating_add(end / 2)));
        arena.write_owned(0, &[self.bytes()]);
        arena.write_owned(self.len, &parts);
        arena.claimed.store(end, Ordering::Relaxed);
        JsonBody {
            arena: Arc::new(arena),
            len: end,
        }
    }

    fn bytes(&self) -> &[u8] {
        self.arena.prefix(self.len)
    }

    /// This body's first `len` bytes as a body of its own, sharing the arena (no copy). The
    /// caller passes the end of an element (or 1, for `[`). Safe under the ownership
    /// protocol: the bytes are below this version's end, so immutable; and extending the
    /// shorter version later loses the claim (the arena's `claimed` is past `len`) and copies.
    pub(crate) fn truncated(&self, len: usize) -> JsonBody {
        assert!(len >= 1 && len <= self.len, "a prefix of this body");
        JsonBody {
            arena: Arc::clone(&self.arena),
            len,
        }
    }

    /// Length in bytes (without the closing bracket).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// A spine's payloads as one JSON array, `[p1,p2,...]`, without copying them.
///
/// It is two chunks: the shared body (`[p1,p2,...`) and the closing `]`. Write it with
/// [`JsonArray::write_to`] (a vectored write), read it as a [`bytes::Buf`] via
/// [`JsonArray::into_buf`], or join it with [`JsonArray::to_bytes`] (one O(n) copy).
///
/// ```
/// use chain_fold::{Chain, Event, SpineOrder};
///
/// let mut chain = Chain::new(SpineOrder::Causal);
/// chain.apply(Event::from_json(br#"{"event_id":1,"execution_id":1,"event_type":"playbook_started"}"#)?);
/// chain.apply(Event::from_json(br#"{"event_id":2,"execution_id":1,"prev_event_id":1}"#)?);
/// let json = chain.walk_from(2).unwrap().json_array();
/// let value: serde_json::Value = serde_json::from_slice(&json.to_bytes()).unwrap();
/// assert_eq!(value[1]["event_id"], 2);
/// # Ok::<(), chain_fold::EventError>(())
/// ```
#[derive(Clone)]
pub struct JsonArray {
    body: JsonBody,
}

impl JsonArray {
    pub(crate) fn new(body: JsonBody) -> JsonArray {
        JsonArray { body }
    }

    /// Total length in bytes, closing bracket included.
    pub fn len(&self) -> usize {
        self.body.len + 1
    }

    /// Never true: even an empty array is `[]`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The two chunks whose concatenation is the array.
    pub fn chunks(&self) -> [&[u8]; 2] {
        [self.body.bytes(), b"]"]
    }

    /// Writes the array with one vectored write where the writer supports it.
    pub fn write_to<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        let [body, close] = self.chunks();
        let slices = [std::io::IoSlice::new(body), std::io::IoSlice::new(close)];
        let written = w.write_vectored(&slices)?;
        let all = body.len() + close.len();
        if written < all {
            let rest: Vec<u8> = body.iter().chain(close).copied().skip(written).collect();
            w.write_all(&rest)?;
        }
        Ok(())
    }

    /// The array as a [`Buf`] of two chunks, sharing the body (no copy).
    pub fn into_buf(self) -> impl Buf + Send + Sync + 'static {
        let len = self.body.len;
        Bytes::from_owner(BodyOwner(self.body))
            .slice(..len)
            .chain(Bytes::from_static(b"]"))
    }

    /// The array joined into one contiguous buffer (copies the whole spine's JSON).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len());
        let [body, close] = self.chunks();
        out.extend_from_slice(body);
        out.extend_from_slice(close);
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
        let [body, close] = self.chunks();
        other.len() == body.len() + close.len()
            && &other[..body.len()] == body
            && &other[body.len()..] == close
    }
}

struct BodyOwner(JsonBody);

impl AsRef<[u8]> for BodyOwner {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payloads(items: &[&'static str]) -> Vec<Bytes> {
        items
            .iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect()
    }

    fn joined(a: &JsonArray) -> String {
        String::from_utf8(a.to_bytes().to_vec()).unwrap()
    }

    #[test]
    fn empty_body_is_an_empty_array() {
        assert_eq!(joined(&JsonArray::new(JsonBody::empty())), "[]");
    }

    #[test]
    fn extension_in_place_shares_the_arena() {
        let p = payloads(&["1", "2", "3"]);
        let a = JsonBody::of(p[..1].iter());
        let b = a.extend(p[1..].iter());
        assert!(Arc::ptr_eq(&a.arena, &b.arena));
        assert_eq!(joined(&JsonArray::new(a)), "[1]");
        assert_eq!(joined(&JsonArray::new(b)), "[1,2,3]");
    }

    #[test]
    fn a_second_extension_of_one_version_copies_and_leaves_the_first_intact() {
        let p = payloads(&["1", "22", "333"]);
        let base = JsonBody::of(p[..1].iter());
        let left = base.extend(p[1..2].iter());
        let right = base.extend(p[2..3].iter());
        assert!(!Arc::ptr_eq(&left.arena, &right.arena));
        assert_eq!(joined(&JsonArray::new(left)), "[1,22]");
        assert_eq!(joined(&JsonArray::new(right)), "[1,333]");
        assert_eq!(joined(&JsonArray::new(base)), "[1]");
    }

    #[test]
    fn growth_past_capacity_reallocates() {
        let big = Bytes::from(vec![b'7'; 1000]);
        let a = JsonBody::of(std::iter::once(&big));
        let b = a.extend(std::iter::once(&big));
        assert_eq!(b.len, 1 + 1000 + 1 + 1000);
        assert_eq!(JsonArray::new(b).len(), 2003);
    }

    #[test]
    fn buf_and_vectored_write_agree_with_to_bytes() {
        let p = payloads(&["{\"a\":1}", "null"]);
        let a = JsonArray::new(JsonBody::of(p.iter()));
        let mut written = Vec::new();
        a.write_to(&mut written).unwrap();
        let mut buf = a.clone().into_buf();
        let via_buf = buf.copy_to_bytes(buf.remaining());
        assert_eq!(written, a.to_bytes().to_vec());
        assert_eq!(via_buf, a.to_bytes());
        assert!(a == *b"[{\"a\":1},null]".as_slice());
    }

    #[test]
    fn concurrent_extensions_of_one_version_never_corrupt_each_other() {
        let base = JsonBody::of(payloads(&["0"]).iter());
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let base = base.clone();
                std::thread::spawn(move || {
                    let p = Bytes::from(t.to_string());
                    let grown = base.extend(std::iter::once(&p));
                    (t, joined(&JsonArray::new(grown)))
                })
            })
            .collect();
        for h in handles {
            let (t, s) = h.join().unwrap();
            assert_eq!(s, format!("[0,{t}]"));
        }
    }
}
