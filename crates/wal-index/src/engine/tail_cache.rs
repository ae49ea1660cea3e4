//! The decodes of recent drives' tail payloads, so a dispatch repeated with the same tail
//! does not decode it again.
//!
//! A drive applies its dispatch's tail: the payloads the server just published for its
//! execution, up to 8 envelopes of ~73 KB in production, each decoded on the drive's
//! thread (about 0.1 ms apiece; the decode is most of a warm drive). A dispatch repeated at
//! the same head carries the same payloads again. Decoding is a function of the bytes and
//! of the index's decode mode, which is fixed when the index is built, so payload bytes
//! equal to a decoded payload's decode to an equal event: the cache keeps each tail payload
//! it decoded (the caller's `Bytes`, a reference) with the event it decoded to, and a
//! payload equal byte for byte to a kept one is served that event after one comparison of
//! the bytes, not a decode. What the drive then applies and serves is what a decode would
//! have given; only the decode is skipped.
//!
//! # Costs and limits
//!
//! - A payload that is not kept costs a fingerprint (its length and 64 bytes at each end),
//!   a map probe under the lock, the decode, and the lock again to keep it; a kept one, the
//!   fingerprint, the probe and one comparison of its bytes (a few percent of its decode).
//! - The cache holds at most [`IndexConfig::tail_cache_bytes`](crate::IndexConfig) of
//!   payloads, decoded events and a fixed 128 bytes of bookkeeping per entry together
//!   (default 8 MiB; 0 turns it off), the oldest entry leaving first (a hit does not make
//!   an entry younger). A payload larger than the whole budget is never kept. The events
//!   it holds are often the index's own (shared, not copied), but an evicted execution's
//!   stay alive until they leave the cache; the byte ledger does not count the cache.
//! - The payloads are kept as given, not copied: a copy costs a tenth or more of a decode
//!   on every drive's tail (a fresh allocation of the payload's size), which would slow the
//!   drives that are not repeats. So a `Bytes` sliced from a larger buffer (a whole
//!   dispatch message, a codec's read buffer) keeps that buffer alive while its entry is
//!   kept, and the bound counts only the slice. A caller whose tail buffers hold much more
//!   than their payloads sets the bound lower, or 0.
//! - Undecodable payloads are not kept: each is decoded (and rejected) every time. Two
//!   drives that miss on the same bytes at once both decode them; the second keeps nothing.
//! - One lock guards the entries. It is held to probe or to insert, never across a decode,
//!   a comparison of bytes or the drop of an entry that leaves, and only drives take it
//!   (not builds, not the drain).

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use chain_fold::{Event, EventError};

use crate::ingest::DecodeMode;
use crate::sync::Mutex;

/// Bytes fingerprinted at each end of a payload.
const FINGERPRINT_EDGE: usize = 64;

/// What one entry's bookkeeping is charged beyond its payload and event: the entry in the
/// queue, its fingerprint's map slot, and the map's and queue's slack.
const ENTRY_OVERHEAD_BYTES: usize = 128;

/// Recent tail payloads and their decodes, bounded by bytes (see the module docs).
pub(crate) struct TailCache {
    budget: usize,
    /// The index's decode mode: every kept event was decoded in it.
    mode: DecodeMode,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    /// Oldest first, each with the sequence number it was kept under.
    kept: VecDeque<(u64, Entry)>,
    /// Fingerprint → the sequence numbers of the kept entries that have it.
    by_fingerprint: HashMap<u64, Vec<u64>>,
    /// The sequence number the next entry is kept under.
    next: u64,
    /// What `kept` is charged: payload lengths, events' resident bytes, bookkeeping.
    bytes: usize,
}

struct Entry {
    fingerprint: u64,
    payload: Bytes,
    event: Event,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.payload
            .len()
            .saturating_add(self.event.resident_bytes())
            .saturating_add(ENTRY_OVERHEAD_BYTES)
    }
}

impl Entries {
    /// The entry kept under sequence number `seq`, if it is still kept.
    fn get(&self, seq: u64) -> Option<&Entry> {
        let first = self.kept.front()?.0;
        let at = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.kept.get(at).map(|(_, entry)| entry)
    }

    /// Removes the oldest entry and its map slot.
    fn pop_oldest(&mut self) -> Option<Entry> {
        let (seq, entry) = self.kept.pop_front()?;
        self.bytes -= entry.bytes();
        if let Some(seqs) = self.by_fingerprint.get_mut(&entry.fingerprint) {
            seqs.retain(|&s| s != seq);
            if seqs.is_empty() {
                self.by_fingerprint.remove(&entry.fingerprint);
            }
        }
        Some(entry)
    }
}

/// The payload's length and its first and last [`FINGERPRINT_EDGE`] bytes, hashed: equal
/// payloads have equal fingerprints. Payloads that share a length and both ends share a
/// fingerprint too, and are told apart by comparing their bytes.
fn fingerprint(payload: &[u8]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    payload.len().hash(&mut hasher);
    let edge = FINGERPRINT_EDGE.min(payload.len());
    payload[..edge].hash(&mut hasher);
    payload[payload.len() - edge..].hash(&mut hasher);
    hasher.finish()
}

impl TailCache {
    /// A cache of at most `budget` bytes of payloads decoded in `mode`; 0: off (every
    /// payload is decoded).
    pub(crate) fn new(budget: usize, mode: DecodeMode) -> TailCache {
        TailCache {
            budget,
            mode,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// `payload` decoded: the kept event if an equal payload was decoded before and is
    /// still kept, otherwise a fresh decode, kept if it decoded and fits.
    pub(crate) fn decode(&self, payload: &Bytes) -> Result<Event, EventError> {
        if self.budget == 0 {
            return self.mode.decode(payload);
        }
        let fingerprint = fingerprint(payload);
        // Clones (two reference counts each) under the lock; the bytes are compared
        // outside it.
        let candidates: Vec<(Bytes, Event)> = {
            let entries = self.entries.lock();
            entries
                .by_fingerprint
                .get(&fingerprint)
                .into_iter()
                .flatten()
                .filter_map(|&seq| entries.get(seq))
                .filter(|e| e.payload.len() == payload.len())
                .map(|e| (e.payload.clone(), e.event.clone()))
                .collect()
        };
        if let Some((_, event)) = candidates.into_iter().find(|(kept, _)| kept == payload) {
            return Ok(event);
        }
        let event = self.mode.decode(payload)?;
        self.keep(Entry {
            fingerprint,
            // The caller's bytes, not a copy (the module docs say why).
            payload: payload.clone(),
            event: event.clone(),
        });
        Ok(event)
    }

    fn keep(&self, entry: Entry) {
        let size = entry.bytes();
        if size > self.budget {
            return;
        }
        let mut leaving = Vec::new();
        {
            let mut entries = self.entries.lock();
            while entries.bytes.saturating_add(size) > self.budget {
                match entries.pop_oldest() {
                    Some(oldest) => leaving.push(oldest),
                    None => break,
                }
            }
            let seq = entries.next;
            entries.next += 1;
            entries.bytes += size;
            entries
                .by_fingerprint
                .entry(entry.fingerprint)
                .or_default()
                .push(seq);
            entries.kept.push_back((seq, entry));
        }
        // The entries that left are dropped here, after the lock: the last reference to a
        // large event or to a caller's buffer may be among them.
        drop(leaving);
    }

    /// Entries and bytes held.
    #[cfg(all(test, not(any(wal_index_loom, wal_index_shuttle))))]
    pub(crate) fn held(&self) -> (usize, usize) {
        let entries = self.entries.lock();
        (entries.kept.len(), entries.bytes)
    }
}

#[cfg(all(test, not(any(wal_index_loom, wal_index_shuttle))))]
mod tests {
    use super::*;

    fn envelope(id: i64, filler: usize) -> Bytes {
        Bytes::from(format!(
            r#"{{"event_id":{id},"execution_id":1,"event_type":"step","result":"{}"}}"#,
            "x".repeat(filler)
        ))
    }

    #[test]
    fn an_equal_payload_is_served_the_kept_event() {
        let cache = TailCache::new(1 << 20, DecodeMode::Slim);
        let first = cache.decode(&envelope(7, 100)).unwrap();
        // Another buffer with the same bytes: the same event, not another decode.
        let again = cache.decode(&envelope(7, 100)).unwrap();
        assert!(first.ptr_eq(&again));
        assert_eq!(again, DecodeMode::Slim.decode(&envelope(7, 100)).unwrap());
        // One byte different at the end, beyond the ids: decoded afresh.
        let other = cache.decode(&envelope(7, 101)).unwrap();
        assert!(!other.ptr_eq(&first));
        assert_eq!(other, DecodeMode::Slim.decode(&envelope(7, 101)).unwrap());
        assert_eq!(cache.held().0, 2);
    }

    #[test]
    fn a_colliding_fingerprint_is_told_apart_by_the_bytes() {
        // Same length and the same 64 bytes at each end: only the middle differs.
        let cache = TailCache::new(1 << 20, DecodeMode::Whole);
        let a = envelope(7, 300);
        let mut b = a.to_vec();
        let middle = b.len() / 2;
        b[middle] = b'y';
        let b = Bytes::from(b);
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let first = cache.decode(&a).unwrap();
        let second = cache.decode(&b).unwrap();
        assert!(!second.ptr_eq(&first));
        assert_eq!(second, DecodeMode::Whole.decode(&b).unwrap());
        // Both are kept under the one fingerprint, and each is found again.
        assert!(cache.decode(&a).unwrap().ptr_eq(&first));
        assert!(cache.decode(&b).unwrap().ptr_eq(&second));
    }

    #[test]
    fn the_budget_bounds_what_is_held_and_the_oldest_leaves_first() {
        let one = {
            let probe = TailCache::new(1 << 20, DecodeMode::Whole);
            probe.decode(&envelope(1, 1000)).unwrap();
            probe.held().1
        };
        let cache = TailCache::new(3 * one, DecodeMode::Whole);
        let kept: Vec<Event> = (1..=5)
            .map(|id| cache.decode(&envelope(id, 1000)).unwrap())
            .collect();
        let (entries, bytes) = cache.held();
        assert_eq!((entries, bytes), (3, 3 * one));
        // 3, 4 and 5 are still kept, in that order; 1 and 2 left.
        for id in [3, 4, 5] {
            let again = cache.decode(&envelope(id, 1000)).unwrap();
            assert!(again.ptr_eq(&kept[id as usize - 1]), "{id} is kept");
        }
        let oldest = cache.decode(&envelope(1, 1000)).unwrap();
        assert!(
            !oldest.ptr_eq(&kept[0]),
            "1 left first and is decoded afresh"
        );
        // Keeping 1 again pushed out 3, the oldest left, and kept 4 and 5.
        assert!(cache.decode(&envelope(1, 1000)).unwrap().ptr_eq(&oldest));
        assert!(!cache.decode(&envelope(3, 1000)).unwrap().ptr_eq(&kept[2]));
        assert_eq!(cache.held(), (3, 3 * one));
    }

    #[test]
    fn off_too_large_and_undecodable_payloads_are_decoded_every_time() {
        let off = TailCache::new(0, DecodeMode::Whole);
        let a = off.decode(&envelope(1, 10)).unwrap();
        let b = off.decode(&envelope(1, 10)).unwrap();
        assert!(!a.ptr_eq(&b) && a == b);
        assert_eq!(off.held(), (0, 0));

        let small = TailCache::new(64, DecodeMode::Whole);
        small.decode(&envelope(1, 1000)).unwrap();
        assert_eq!(small.held(), (0, 0), "larger than the whole budget");

        let cache = TailCache::new(1 << 20, DecodeMode::Whole);
        let bad = Bytes::from_static(b"{not json");
        assert!(cache.decode(&bad).is_err());
        assert!(cache.decode(&bad).is_err());
        assert_eq!(cache.held(), (0, 0));
    }
}
