//! The decodes of recent drives' tail payloads, so a repeated dispatch does not decode its
//! tail again.
//!
//! A drive applies its dispatch's tail: the payloads the server just published for its
//! execution, up to 8 envelopes of ~73 KB in production, each decoded on the drive's
//! thread (about 0.1 ms apiece; the decode is most of a warm drive). A dispatch repeated at
//! the same head (14.6% of production's builds) carries the same payloads again. Decoding
//! is a function of the bytes, so payload bytes equal to a decoded payload's decode to an
//! equal event: the cache keeps each tail payload it decoded (the caller's `Bytes`, a
//! reference) with the event it decoded to, and a payload equal byte for byte to a kept
//! one is served that event after one comparison of the bytes, not a decode. What the
//! drive then applies and serves is exactly what a decode would have given; only the
//! decode is skipped.
//!
//! # Costs and limits
//!
//! - A payload that is not kept costs a fingerprint (its length and 64 bytes at each end),
//!   a short lock and two reference counts; a kept one, a fingerprint, the lock and one
//!   comparison of its bytes (a few percent of its decode).
//! - The cache holds at most [`IndexConfig::tail_cache_bytes`](crate::IndexConfig) of
//!   payloads and decoded events together (default 8 MiB; 0 turns it off), the oldest
//!   entry leaving first. A payload larger than the whole budget is never kept. The events
//!   it holds are often the index's own (shared, not copied), but an evicted execution's
//!   stay alive until they leave the cache; the byte ledger does not count the cache.
//! - The payloads are kept as given, not copied: a copy costs a tenth or more of a
//!   decode on every drive's tail (a fresh allocation of the payload's size), which would
//!   slow the drives that are not repeats. So a `Bytes` sliced from a larger buffer (a
//!   whole dispatch message) keeps that buffer alive while its entry is kept, and the bound
//!   counts only the slice. A dispatch's buffer is mostly its tail, which the bound counts;
//!   a caller whose buffers hold much more than their tails sets the bound lower, or 0.
//! - Undecodable payloads are not kept: each is decoded (and rejected) every time.
//! - One lock guards the entries; it is held to look up or insert, never across a
//!   decode or a comparison of bytes, and only drives take it (not builds, not the drain).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use chain_fold::{Event, EventError};

use crate::ingest::DecodeMode;
use crate::sync::Mutex;

/// Bytes fingerprinted at each end of a payload.
const FINGERPRINT_EDGE: usize = 64;

/// Recent tail payloads and their decodes, bounded by bytes (see the module docs).
pub(crate) struct TailCache {
    budget: usize,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    /// Oldest first.
    kept: VecDeque<Entry>,
    /// What `kept` holds: its copies' lengths and its events' resident bytes.
    bytes: usize,
}

struct Entry {
    fingerprint: u64,
    payload: Bytes,
    event: Event,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.payload.len() + self.event.resident_bytes()
    }
}

/// The payload's length and its first and last [`FINGERPRINT_EDGE`] bytes, hashed: equal
/// payloads have equal fingerprints, and envelopes of different events almost never do
/// (their ids are in their first bytes), so a miss rarely compares whole payloads.
fn fingerprint(payload: &[u8]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    payload.len().hash(&mut hasher);
    let edge = FINGERPRINT_EDGE.min(payload.len());
    payload[..edge].hash(&mut hasher);
    payload[payload.len() - edge..].hash(&mut hasher);
    hasher.finish()
}

impl TailCache {
    /// A cache of at most `budget` bytes; 0: off (every payload is decoded).
    pub(crate) fn new(budget: usize) -> TailCache {
        TailCache {
            budget,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// `payload` decoded in `mode`: the kept event if an equal payload was decoded before
    /// and is still kept, otherwise a fresh decode, kept if it decoded and fits.
    ///
    /// The index decodes every tail in one mode, so a kept event is always in `mode`.
    pub(crate) fn decode(&self, payload: &Bytes, mode: DecodeMode) -> Result<Event, EventError> {
        if self.budget == 0 {
            return mode.decode(payload);
        }
        let fingerprint = fingerprint(payload);
        // Clones (two reference counts each) under the lock; the bytes are compared
        // outside it.
        let candidates: Vec<(Bytes, Event)> = self
            .entries
            .lock()
            .kept
            .iter()
            .filter(|e| e.fingerprint == fingerprint && e.payload.len() == payload.len())
            .map(|e| (e.payload.clone(), e.event.clone()))
            .collect();
        if let Some((_, event)) = candidates.into_iter().find(|(kept, _)| kept == payload) {
            return Ok(event);
        }
        let event = mode.decode(payload)?;
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
        let mut entries = self.entries.lock();
        while entries.bytes + size > self.budget {
            let Some(oldest) = entries.kept.pop_front() else {
                break;
            };
            entries.bytes -= oldest.bytes();
        }
        entries.bytes += size;
        entries.kept.push_back(entry);
    }

    /// Entries and bytes held (copies and events).
    #[cfg(all(test, not(wal_index_loom)))]
    pub(crate) fn held(&self) -> (usize, usize) {
        let entries = self.entries.lock();
        (entries.kept.len(), entries.bytes)
    }
}

#[cfg(all(test, not(wal_index_loom)))]
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
        let cache = TailCache::new(1 << 20);
        let first = cache.decode(&envelope(7, 100), DecodeMode::Slim).unwrap();
        // Another buffer with the same bytes: the same event, not another decode.
        let again = cache.decode(&envelope(7, 100), DecodeMode::Slim).unwrap();
        assert!(first.ptr_eq(&again));
        assert_eq!(again, DecodeMode::Slim.decode(&envelope(7, 100)).unwrap());
        // One byte different at the end, beyond the ids: decoded afresh.
        let other = cache.decode(&envelope(7, 101), DecodeMode::Slim).unwrap();
        assert!(!other.ptr_eq(&first));
        assert_eq!(other, DecodeMode::Slim.decode(&envelope(7, 101)).unwrap());
        assert_eq!(cache.held().0, 2);
    }

    #[test]
    fn a_colliding_fingerprint_is_told_apart_by_the_bytes() {
        // Same length and the same 64 bytes at each end: only the middle differs.
        let cache = TailCache::new(1 << 20);
        let a = envelope(7, 300);
        let mut b = a.to_vec();
        let middle = b.len() / 2;
        b[middle] = b'y';
        let b = Bytes::from(b);
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let first = cache.decode(&a, DecodeMode::Whole).unwrap();
        let second = cache.decode(&b, DecodeMode::Whole).unwrap();
        assert!(!second.ptr_eq(&first));
        assert_eq!(second, DecodeMode::Whole.decode(&b).unwrap());
    }

    #[test]
    fn the_budget_bounds_what_is_held_and_the_oldest_leaves_first() {
        let one = {
            let probe = TailCache::new(1 << 20);
            probe.decode(&envelope(1, 1000), DecodeMode::Whole).unwrap();
            probe.held().1
        };
        let cache = TailCache::new(3 * one);
        for id in 1..=5 {
            cache
                .decode(&envelope(id, 1000), DecodeMode::Whole)
                .unwrap();
        }
        let (entries, bytes) = cache.held();
        assert_eq!(entries, 3);
        assert!(bytes <= 3 * one);
        // The two oldest left: decoding them again keeps them anew (a miss).
        let kept_before = cache.decode(&envelope(5, 1000), DecodeMode::Whole).unwrap();
        let again = cache.decode(&envelope(5, 1000), DecodeMode::Whole).unwrap();
        assert!(kept_before.ptr_eq(&again));
        let oldest = cache.decode(&envelope(1, 1000), DecodeMode::Whole).unwrap();
        let oldest_again = cache.decode(&envelope(1, 1000), DecodeMode::Whole).unwrap();
        assert!(oldest.ptr_eq(&oldest_again), "kept again after its miss");
    }

    #[test]
    fn off_too_large_and_undecodable_payloads_are_decoded_every_time() {
        let off = TailCache::new(0);
        let a = off.decode(&envelope(1, 10), DecodeMode::Whole).unwrap();
        let b = off.decode(&envelope(1, 10), DecodeMode::Whole).unwrap();
        assert!(!a.ptr_eq(&b) && a == b);
        assert_eq!(off.held(), (0, 0));

        let small = TailCache::new(64);
        small.decode(&envelope(1, 1000), DecodeMode::Whole).unwrap();
        assert_eq!(small.held(), (0, 0), "larger than the whole budget");

        let cache = TailCache::new(1 << 20);
        let bad = Bytes::from_static(b"{not json");
        assert!(cache.decode(&bad, DecodeMode::Whole).is_err());
        assert!(cache.decode(&bad, DecodeMode::Whole).is_err());
        assert_eq!(cache.held(), (0, 0));
    }
}
