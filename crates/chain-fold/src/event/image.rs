//! An event's image: its one allocation written out as bytes, and read back into the same
//! event without decoding its payload again.
//!
//! A checkpoint of an index holds every resident event. Rebuilding them with
//! [`Event::from_json`] would run the canonical decoder over bytes that are already
//! canonical; an image instead stores what the decoder produced (the header and the
//! allocation's bytes), so reading it back is a bounds check and one copy. The layout,
//! little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | `event_id` |
//! | 8 | `execution_id` |
//! | 4 | the link as a distance back from the id |
//! | 2 | where the event type starts in the payload |
//! | 1 | its length |
//! | 1 | flags |
//! | 4 | the allocation's length `n` |
//! | `n` | the payload, then what the header could not hold (an owned type, a far link) |
//!
//! [`Event::read_image`] checks everything an accessor relies on (known flags, the parts
//! the flags announce present, the type's place inside the payload, the genesis and
//! terminal flags against the type's text), so a damaged image is an [`ImageError`] or an
//! event whose accessors hold, never a panic. It cannot tell every damage from another valid
//! event (a far link turned near, the slim flag flipped), nor check that the payload is
//! JSON: like [`Event::from_parts`], it trusts the payload, and whoever stores images checks
//! their integrity (a checkpoint's blocks carry checksums).

use std::fmt;

use super::{
    Allocation, Event, GENESIS, HAS_PREV, Header, PREV_OWNED, SLIM, TERMINAL, TYPE_OWNED, TypeClass,
};

/// The fixed part of an image, before the allocation's bytes.
pub(crate) const IMAGE_HEADER_BYTES: usize = 8 + 8 + 4 + 2 + 1 + 1 + 4;

/// Every flag an image may carry.
const KNOWN_FLAGS: u8 = HAS_PREV | TYPE_OWNED | GENESIS | TERMINAL | PREV_OWNED | SLIM;

/// Why bytes are not an event's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageError {
    /// The bytes end before the image does (`needed` bytes, `available` present).
    Truncated {
        /// Bytes the image needs.
        needed: usize,
        /// Bytes there are.
        available: usize,
    },
    /// A flag this version does not know.
    UnknownFlags(u8),
    /// The flags announce a part the bytes do not hold, or contradict each other or the
    /// event type's text.
    Inconsistent(&'static str),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Truncated { needed, available } => write!(
                f,
                "an event image needs {needed} bytes and {available} are left"
            ),
            ImageError::UnknownFlags(flags) => {
                write!(f, "an event image has unknown flags {flags:#04x}")
            }
            ImageError::Inconsistent(why) => write!(f, "an event image is inconsistent: {why}"),
        }
    }
}

impl std::error::Error for ImageError {}

impl Event {
    /// The fixed part of every image, before the allocation's bytes: an image is never
    /// shorter.
    pub const IMAGE_FIXED_BYTES: usize = IMAGE_HEADER_BYTES;

    /// The length of this event's image ([`Event::write_image`]).
    pub fn image_len(&self) -> usize {
        IMAGE_HEADER_BYTES + self.0.bytes().len()
    }

    /// Appends this event's image to `out`: what [`Event::read_image`] rebuilds the same
    /// event from, its payload not decoded again.
    ///
    /// ```
    /// use chain_fold::Event;
    ///
    /// let event = Event::from_json(br#"{"event_id":2,"execution_id":7,"prev_event_id":1,"event_type":"step"}"#)?;
    /// let mut image = Vec::new();
    /// event.write_image(&mut image);
    /// let (back, used) = Event::read_image(&image)?;
    /// assert_eq!((back, used), (event, image.len()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_image(&self, out: &mut Vec<u8>) {
        let header = self.header();
        out.reserve(self.image_len());
        out.extend_from_slice(&header.id.to_le_bytes());
        out.extend_from_slice(&header.execution_id.to_le_bytes());
        out.extend_from_slice(&header.prev_back.to_le_bytes());
        out.extend_from_slice(&header.type_start.to_le_bytes());
        out.push(header.type_len);
        out.push(header.flags);
        // An event's allocation holds at most `u32::MAX` bytes.
        let len = u32::try_from(self.0.bytes().len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(self.0.bytes());
    }

    /// Rebuilds an event from the image at the front of `bytes`; returns it and the bytes
    /// the image took. One allocation and one copy; the payload is not parsed. Checked:
    /// the flags are known, the parts they announce are there, the type lies inside the
    /// payload and is UTF-8, the genesis and terminal flags match it; so a damaged image is
    /// an [`ImageError`] or an event whose accessors hold, never a panic. Not checked: that
    /// the payload is JSON, or damage that reads as another valid event (a far link turned
    /// near, the slim flag flipped). Like [`Event::from_parts`], it trusts the payload;
    /// whoever stores images checks their integrity (a checkpoint's blocks carry checksums).
    pub fn read_image(bytes: &[u8]) -> Result<(Event, usize), ImageError> {
        let truncated = |needed| ImageError::Truncated {
            needed,
            available: bytes.len(),
        };
        let fixed: &[u8; IMAGE_HEADER_BYTES] = bytes
            .first_chunk()
            .ok_or_else(|| truncated(IMAGE_HEADER_BYTES))?;
        let header = Header {
            id: i64::from_le_bytes(le(&fixed[0..8])),
            execution_id: i64::from_le_bytes(le(&fixed[8..16])),
            prev_back: i32::from_le_bytes(le(&fixed[16..20])),
            type_start: u16::from_le_bytes(le(&fixed[20..22])),
            type_len: fixed[22],
            flags: fixed[23],
        };
        let len = u32::from_le_bytes(le(&fixed[24..28])) as usize;
        let end = IMAGE_HEADER_BYTES
            .checked_add(len)
            .ok_or_else(|| truncated(usize::MAX))?;
        let slice = bytes
            .get(IMAGE_HEADER_BYTES..end)
            .ok_or_else(|| truncated(end))?;
        check(&header, slice)?;
        // The length came from a `u32`, so the allocation holds it.
        let event = Allocation::new(header, [slice]).ok_or(ImageError::Inconsistent(
            "the allocation's length is past what an event holds",
        ))?;
        Ok((Event(event), end))
    }
}

/// The first `N` bytes of `bytes` as an array (callers pass exactly `N`).
fn le<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// What the accessors rely on, checked against the allocation's bytes.
fn check(header: &Header, slice: &[u8]) -> Result<(), ImageError> {
    let flags = header.flags;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(ImageError::UnknownFlags(flags & !KNOWN_FLAGS));
    }
    if flags & PREV_OWNED != 0 && flags & HAS_PREV == 0 {
        return Err(ImageError::Inconsistent("a far link without a link"));
    }
    if flags & HAS_PREV == 0 && header.prev_back != 0 {
        return Err(ImageError::Inconsistent("a link distance without a link"));
    }
    let mut rest = slice;
    if flags & PREV_OWNED != 0 {
        let Some((head, _)) = rest.split_last_chunk::<8>() else {
            return Err(ImageError::Inconsistent("a far link the bytes do not hold"));
        };
        rest = head;
    }
    let type_text = if flags & TYPE_OWNED != 0 {
        let Some((head, len)) = rest.split_last_chunk::<4>() else {
            return Err(ImageError::Inconsistent(
                "an owned type the bytes do not hold",
            ));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > head.len() {
            return Err(ImageError::Inconsistent(
                "an owned type longer than the bytes",
            ));
        }
        &head[head.len() - len..]
    } else {
        let start = usize::from(header.type_start);
        rest.get(start..start + usize::from(header.type_len))
            .ok_or(ImageError::Inconsistent("a type outside the payload"))?
    };
    let type_text = std::str::from_utf8(type_text)
        .map_err(|_| ImageError::Inconsistent("a type that is not UTF-8"))?;
    let class = match TypeClass::of(type_text) {
        TypeClass::Genesis => GENESIS,
        TypeClass::Terminal => TERMINAL,
        TypeClass::Other => 0,
    };
    if flags & (GENESIS | TERMINAL) != class {
        return Err(ImageError::Inconsistent(
            "genesis or terminal flags that the type does not have",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(event: &Event) {
        let mut image = Vec::new();
        event.write_image(&mut image);
        assert_eq!(image.len(), event.image_len());
        let (back, used) = Event::read_image(&image).unwrap();
        assert_eq!(used, image.len());
        assert_eq!(back, *event);
        assert_eq!(back.is_genesis(), event.is_genesis());
        assert_eq!(back.is_terminal(), event.is_terminal());
        assert_eq!(back.resident_bytes(), event.resident_bytes());
        // Slim stays slim: projecting again is the identity.
        assert_eq!(back.to_slim().ptr_eq(&back), event.to_slim().ptr_eq(event));
    }

    #[test]
    fn every_layout_of_an_event_comes_back_the_same() {
        round_trip(&Event::minimal(1, 7, None, "playbook_started"));
        round_trip(&Event::minimal(9, 7, Some(8), "playbook_completed"));
        // A far link (owned) and an escaped type (owned).
        round_trip(&Event::minimal(i64::MAX, 7, Some(1), "step"));
        let escaped =
            Event::from_json(br#"{"event_id":3,"execution_id":7,"event_type":"st\"ep"}"#).unwrap();
        round_trip(&escaped);
        round_trip(
            &Event::from_json(br#"{"event_id":4,"execution_id":7,"worker":"w","result":1}"#)
                .unwrap()
                .to_slim(),
        );
    }

    #[test]
    fn every_truncation_and_every_flipped_flag_is_an_error_not_a_panic() {
        let event = Event::minimal(i64::MAX, 7, Some(1), "playbook_completed");
        let mut image = Vec::new();
        event.write_image(&mut image);
        for cut in 0..image.len() {
            assert!(Event::read_image(&image[..cut]).is_err(), "cut at {cut}");
        }
        // The flags the structure can check: the link's presence (this event's link is
        // far, so dropping HAS_PREV leaves PREV_OWNED alone), the type's class, unknown
        // bits. A dropped PREV_OWNED or a flipped SLIM reads as another valid event: the
        // checksum of whatever stores the image covers those.
        for bit in [0, 2, 3, 6, 7] {
            let mut flipped = image.clone();
            flipped[23] ^= 1 << bit;
            assert!(Event::read_image(&flipped).is_err(), "flag bit {bit}");
        }
        for bit in [1, 4, 5] {
            let mut flipped = image.clone();
            flipped[23] ^= 1 << bit;
            let _ = Event::read_image(&flipped);
        }
        // Any byte of the fixed part damaged: an error or an event, never a panic.
        for at in 0..IMAGE_HEADER_BYTES {
            for value in [0u8, 0x7f, 0xff] {
                let mut damaged = image.clone();
                damaged[at] = value;
                let _ = Event::read_image(&damaged);
            }
        }
    }
}
