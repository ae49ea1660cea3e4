//! The canonical bytes of a JSON value: what today's index serves for an event, whatever
//! bytes its producer sent.
//!
//! Today's index parses every payload into a `serde_json::Value` with serde_json's default
//! parser and serializes it again when it builds a drive's input, so the bytes a consumer
//! receives are a function of the payload's text as that parser reads it: key order,
//! whitespace, escapes and number spellings are normalized, and the same text read from the
//! WAL, from a tail, from a state shard or from a rehydrate is the same bytes. Production's
//! shard verification byte-compares drive inputs on that basis. [`canonical_json`] produces
//! exactly those bytes, once, when an event is decoded:
//!
//! - objects with their keys in ascending byte order (a `serde_json::Map` without
//!   `preserve_order`), a repeated key keeping its last value, as serde_json's map does;
//! - no whitespace between tokens;
//! - strings as serde_json writes them (`"` and `\` escaped, control characters as `\n`,
//!   `\t`, ... or `\u00XX`, everything else as UTF-8);
//! - numbers as serde_json writes the number it parsed: integers in `u64` / `i64` range as
//!   digits, every other number as the shortest `f64` that round-trips (`1e2` is `100.0`).
//!   serde_json's default parser reads a float of more than 15 significant digits to within
//!   one unit in the last place, not always to the nearest double, so two spellings of one
//!   double can give different bytes, and the bytes of such a float can change when they are
//!   decoded again: exactly as today's index does with the same text (docs/domain.md,
//!   "Events").
//!
//! The keys are sorted here, not by the map type, so the result does not change when some
//! other crate in a build enables serde_json's `preserve_order` feature.
//!
//! Two writers produce these bytes, and one is the reference for the other:
//!
//! - [`fast`], a hand-written single pass for the text producers write, which copies
//!   canonical text in runs and gives up on anything it does not handle itself;
//! - [`serde_writer`], which drives serde_json's own parser (the same grammar, recursion
//!   limit and number parsing as today's) through serde's visitor interface and writes as
//!   it parses: no tree, no `Value` (which allocates every string and map node). An object
//!   is written member by member as it arrives; if its keys arrive out of order it is
//!   rewritten once, in sorted order, when it closes. It takes every input the fast pass
//!   gives up on, and so gives every error.
//!
//! The differential tests (`canonical/tests.rs`) hold the fast pass to the other writer's
//! bytes on generated producer text, byte flips and cuts included; the `decode` fuzz target
//! holds both to today's (`serde_json::Value`, serialized).
//!
//! The top-level object is left in arrival order by both and put in key order when its
//! bytes are assembled ([`Decoded::object_parts`]), which can leave members out: the slim
//! projection is assembled straight from the decode, without sorting or copying the whole
//! object first.

use std::borrow::Cow;

mod fast;
mod serde_writer;

pub(crate) use serde_writer::Text;
use serde_writer::{write_str, write_with_serde};

/// The map key serde_json's `Value` (with its `raw_value` feature, which this workspace
/// enables) reads as "the string that follows is raw JSON", substituting or rejecting the
/// object; whether today's parser does so depends on a feature of its build. An object
/// whose first key is this token has no single meaning, so it is rejected.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The map key serde_json's `arbitrary_precision` feature hands a number to a visitor under,
/// as a one-entry map. With that feature enabled anywhere in a build, numbers would arrive
/// as such maps; rejecting the token makes that a loud error instead of wrong bytes (and a
/// producer's literal use of it is as ambiguous as the raw-value token's).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// One member of an object being written: its key, and where the member (`"key":value`)
/// and its value lie in the output.
struct Member<'de> {
    /// The key's text (UTF-8).
    key: Cow<'de, [u8]>,
    /// [`prefix_word`] of the key.
    prefix: u64,
    start: usize,
    value: usize,
    end: usize,
}

/// The first eight bytes of a key, zero-padded, as one big-endian word: comparing two keys'
/// words decides almost every comparison of short keys without a call. Padding cannot
/// change the order: where two words differ, either real bytes differ there or the
/// shorter key is a prefix of the longer one.
fn prefix_word(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        None => prefix_word_within(key, key.len()),
    }
}

/// [`prefix_word`] of the key `text[..len]`, read as one eight-byte load when `text` has
/// eight bytes (the bytes past `len` masked off).
fn prefix_word_within(text: &[u8], len: usize) -> u64 {
    match text.first_chunk::<8>() {
        Some(first) if len < 8 => {
            // The first `len` bytes are the word's high ones; no byte is kept when `len` is 0.
            let mask = u64::MAX.checked_shl(8 * (8 - len as u32)).unwrap_or(0);
            u64::from_be_bytes(*first) & mask
        }
        Some(first) => u64::from_be_bytes(*first),
        None => {
            let mut word = [0u8; 8];
            for (to, from) in word.iter_mut().zip(&text[..len]) {
                *to = *from;
            }
            u64::from_be_bytes(word)
        }
    }
}

/// The byte order of two members' keys, as `a.key.cmp(&b.key)`.
fn key_order(a: &Member<'_>, b: &Member<'_>) -> std::cmp::Ordering {
    a.prefix.cmp(&b.prefix).then_with(|| a.key.cmp(&b.key))
}

/// Writes to `order` the indices of `members` in key order, of a repeated key only the last
/// (as serde_json's map keeps the last value): a stable sort keeps repeats in arrival order,
/// and each run of one key keeps its last index.
fn key_order_of(members: &[Member<'_>], order: &mut Vec<usize>) {
    order.clear();
    order.extend(0..members.len());
    order.sort_by(|&a, &b| key_order(&members[a], &members[b]));
    let mut kept = 0;
    for at in 0..order.len() {
        let next = order.get(at + 1);
        if next.is_none_or(|&next| members[next].key != members[order[at]].key) {
            order[kept] = order[at];
            kept += 1;
        }
    }
    order.truncate(kept);
}

/// Rewrites the object opened at `open` (its `members` written in arrival order, one comma
/// between each two, up to the end of `out`) with its members in `order`
/// ([`key_order_of`]). The largest member is moved once, within `out`; the others are set
/// aside in `moved` and written back around it (an out-of-order object usually has one
/// large member, such as a result's rows beside its status). Their positions are stale
/// afterwards.
fn rewrite_sorted(
    out: &mut Vec<u8>,
    open: usize,
    (members, order): (&[Member<'_>], &[usize]),
    moved: &mut Vec<u8>,
) {
    let from = open + 1;
    let span = |at: usize| members[at].start..members[at].end;
    let Some(&largest) = order.iter().max_by_key(|&&at| span(at).len()) else {
        out.truncate(from);
        return;
    };
    // Where the largest lands: after the members before it in `order` and their commas.
    let before = order.iter().take_while(|&&at| at != largest);
    let landing = from + before.map(|&at| span(at).len() + 1).sum::<usize>();
    let total = order.iter().map(|&at| span(at).len()).sum::<usize>() + order.len() - 1;
    moved.clear();
    for &at in order.iter().filter(|&&at| at != largest) {
        moved.extend_from_slice(&out[span(at)]);
    }
    // The rewritten object is never longer than the one written (a repeated key's earlier
    // values are left out), so every position below is within `out`.
    out.copy_within(span(largest), landing);
    let (mut write, mut taken) = (from, 0);
    for (k, &at) in order.iter().enumerate() {
        if k > 0 {
            out[write] = b',';
            write += 1;
        }
        let len = span(at).len();
        if at != largest {
            out[write..write + len].copy_from_slice(&moved[taken..taken + len]);
            taken += len;
        }
        write += len;
    }
    out.truncate(from + total);
}

/// The canonical bytes of the JSON text `json` (see the module documentation), or
/// serde_json's error for text today's index could not parse.
pub(crate) fn canonical_json(json: &[u8]) -> serde_json::Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(json.len());
    let decoded = decode(json, &mut raw)?;
    Ok(match decoded.not_an_object {
        Some(_) => raw,
        None => {
            let mut out = Vec::with_capacity(raw.len());
            decoded.object_bytes(&raw, |_| true, &mut out);
            out
        }
    })
}

/// The canonical bytes as the serde_json-driven writer alone writes them (what the
/// hand-written pass is tested against).
#[cfg(test)]
fn canonical_json_with_serde(json: &[u8]) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    let top = write_with_serde(json, &mut out)?;
    Ok(with_top_in_key_order(&out, top))
}

/// `written` (a pass's output, the top-level object's members in arrival order) with the
/// top-level object in key order.
#[cfg(test)]
fn with_top_in_key_order(written: &[u8], top: Vec<Member<'_>>) -> Vec<u8> {
    if written.first() != Some(&b'{') {
        return written.to_vec();
    }
    let mut out = written.to_vec();
    let (mut moved, mut order) = (Vec::new(), Vec::new());
    out.truncate(written.len() - 1);
    key_order_of(&top, &mut order);
    rewrite_sorted(&mut out, 0, (&top, &order), &mut moved);
    out.push(b'}');
    out
}

/// An id field of an envelope, as its parsed value.
pub(crate) enum IdField {
    Missing,
    Int(i64),
    /// Present but not an integer in `i64` range: its canonical text (at most 64 bytes of
    /// it), for the caller to name why.
    Other(String),
}

/// Where the event type lies, as [`decode`] found it.
pub(crate) enum TypeField {
    /// Absent or not a string: the empty type.
    Empty,
    /// A string written unescaped at `start..start + len` of the raw output.
    At { start: usize, len: usize },
    /// A string that needed escapes in the canonical bytes: its text.
    Owned(String),
}

/// One payload parsed once: its canonical bytes (all but the top-level object's member
/// order) and the four fields the index reads, by the same rules as today's consumer,
/// which reads them from the parsed value (a repeated key keeps its last value).
///
/// The canonical bytes themselves are in the buffer [`decode`] wrote to (its *raw* output),
/// except that a top-level object's members are in arrival order (repeats included):
/// [`Decoded::object_parts`] puts them in key order, and can leave some out without having
/// sorted the whole object first.
pub(crate) struct Decoded {
    /// `None` when the value is not an object: the kind it is instead.
    pub(crate) not_an_object: Option<&'static str>,
    pub(crate) event_id: IdField,
    pub(crate) execution_id: IdField,
    /// An integer `prev_event_id` in `i64` range; anything else makes the event a root.
    pub(crate) prev: Option<i64>,
    pub(crate) event_type: TypeField,
    /// The top-level object's members in the raw output, in key order, a repeated key's
    /// earlier values left out.
    members: Vec<MemberSpan>,
}

/// Where one top-level member lies in the raw output: `start..value` is its key, quoted,
/// and the colon; `value..end` its value.
struct MemberSpan {
    start: usize,
    value: usize,
    end: usize,
}

impl Decoded {
    /// The top-level object's members whose key (as written, without quotes) `keep`
    /// accepts, in key order.
    fn kept<'a>(
        &'a self,
        raw: &'a [u8],
        keep: impl Fn(&[u8]) -> bool + Clone + 'a,
    ) -> impl Iterator<Item = &'a MemberSpan> + Clone + 'a {
        (self.members.iter()).filter(move |member| keep(&raw[member.start + 1..member.value - 2]))
    }

    /// The length of the canonical bytes of the top-level object (`raw` is what [`decode`]
    /// wrote) reduced to the members `keep` accepts ([`Decoded::object_parts`]), and where
    /// the event type's text ([`TypeField::At`]) lies in them, if its member is kept.
    pub(crate) fn object_layout(
        &self,
        raw: &[u8],
        keep: impl Fn(&[u8]) -> bool + Clone,
    ) -> (usize, Option<usize>) {
        let type_at = match self.event_type {
            TypeField::At { start, .. } => Some(start),
            _ => None,
        };
        let mut moved_type = None;
        let mut len = 1;
        for (k, member) in self.kept(raw, keep).enumerate() {
            len += usize::from(k > 0);
            if let Some(at) = type_at.filter(|at| (member.value..member.end).contains(at)) {
                moved_type = Some(len + (at - member.start));
            }
            len += member.end - member.start;
        }
        (len + 1, moved_type)
    }

    /// The canonical bytes of the top-level object (`raw` is what [`decode`] wrote) reduced
    /// to the members whose key (as written, without quotes) `keep` accepts, in key order,
    /// as pieces to be concatenated, borrowed from `raw` where they are its bytes: whoever
    /// assembles the object copies each byte once, and nothing is allocated for the pieces.
    pub(crate) fn object_parts<'a>(
        &'a self,
        raw: &'a [u8],
        keep: impl Fn(&[u8]) -> bool + Clone + 'a,
    ) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
        let members = self.kept(raw, keep).enumerate();
        let pieces = members.flat_map(move |(k, member)| {
            let comma: &[u8] = if k > 0 { b"," } else { b"" };
            [comma, &raw[member.start..member.end]]
        });
        std::iter::once(&b"{"[..])
            .chain(pieces)
            .chain(std::iter::once(&b"}"[..]))
    }

    /// [`Decoded::object_parts`], concatenated into `out` (cleared first); returns where the
    /// event type's text lies in it, if its member is kept.
    pub(crate) fn object_bytes(
        &self,
        raw: &[u8],
        keep: impl Fn(&[u8]) -> bool + Clone,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let (len, moved_type) = self.object_layout(raw, keep.clone());
        out.clear();
        out.reserve(len);
        self.object_parts(raw, keep)
            .for_each(|part| out.extend_from_slice(part));
        moved_type
    }
}

/// A value's canonical text read as an `i64`: canonical integers are plain digits (a float
/// is written with a `.` or an exponent, `-0` as `-0.0`), so this is exactly "the parsed
/// value is an integer in `i64` range".
fn as_id(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Parses `json` once into its canonical bytes and the envelope's fields: the hand-written
/// pass ([`fast`]) first, and when it gives up, the serde_json-driven writer.
pub(crate) fn decode(json: &[u8], out: &mut Vec<u8>) -> serde_json::Result<Decoded> {
    out.clear();
    out.reserve(json.len());
    let top = match fast::write(json, out) {
        Some(top) => top,
        None => {
            out.clear();
            write_with_serde(json, out)?
        }
    };
    let mut order = Vec::with_capacity(top.len());
    key_order_of(&top, &mut order);
    let mut decoded = Decoded {
        not_an_object: None,
        event_id: IdField::Missing,
        execution_id: IdField::Missing,
        prev: None,
        event_type: TypeField::Empty,
        members: Vec::new(),
    };
    if out.first() != Some(&b'{') {
        decoded.not_an_object = Some(match out.first() {
            Some(b'[') => "array",
            Some(b'"') => "string",
            Some(b't' | b'f') => "boolean",
            Some(b'n') => "null",
            _ => "number",
        });
        return Ok(decoded);
    }
    for member in order.iter().map(|&at| &top[at]) {
        decoded.members.push(MemberSpan {
            start: member.start,
            value: member.value,
            end: member.end,
        });
        let value = &out[member.value..member.end];
        let id = || {
            as_id(value).map_or_else(
                || {
                    IdField::Other(
                        String::from_utf8_lossy(&value[..value.len().min(64)]).into_owned(),
                    )
                },
                IdField::Int,
            )
        };
        match member.key.as_ref() {
            b"event_id" => decoded.event_id = id(),
            b"execution_id" => decoded.execution_id = id(),
            b"prev_event_id" => decoded.prev = as_id(value),
            b"event_type" if value.first() == Some(&b'"') => {
                decoded.event_type = if value.contains(&b'\\') {
                    TypeField::Owned(serde_json::from_slice(value)?)
                } else {
                    TypeField::At {
                        start: member.value + 1,
                        len: value.len() - 2,
                    }
                };
            }
            _ => {}
        }
    }
    Ok(decoded)
}

#[cfg(all(test, not(chain_fold_loom)))]
mod tests;
