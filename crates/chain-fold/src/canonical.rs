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
//! - the writer below, which drives serde_json's own parser (the same grammar, recursion
//!   limit and number parsing as today's) through serde's visitor interface and writes as
//!   it parses: no tree, no `Value` (which allocates every string and map node). An object
//!   is written member by member as it arrives; if its keys arrive out of order it is
//!   rewritten once, in sorted order, when it closes. It takes every input the fast pass
//!   gives up on, and so gives every error.
//!
//! The differential tests below hold the fast pass to the other writer's bytes on
//! generated producer text, byte flips and cuts included; the `decode` fuzz target holds
//! both to today's (`serde_json::Value`, serialized).
//!
//! The top-level object is left in arrival order by both and put in key order when its
//! bytes are assembled ([`Decoded::object_bytes`]), which can leave members out: the slim
//! projection is assembled straight from the decode, without sorting or copying the whole
//! object first.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

mod fast;

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

/// Writes `text` as a JSON string, as serde_json does: a run without a byte to escape is
/// copied as is.
fn write_str(text: &str, out: &mut Vec<u8>) -> serde_json::Result<()> {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        return Ok(());
    }
    serde_json::to_writer(&mut *out, text)
}

/// A string that borrows from the input when it has no escapes.
pub(crate) struct Text<'de>(pub(crate) Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

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

/// What the writers share: the members of every object still open (a stack: an object's
/// members sit above its parent's), a buffer for rewriting an object in sorted order, and
/// the top-level object's members once it closed.
#[derive(Default)]
struct Scratch<'de> {
    members: Vec<Member<'de>>,
    moved: Vec<u8>,
    order: Vec<usize>,
    top: Vec<Member<'de>>,
}

/// Parses one JSON value and writes its canonical bytes to `out`.
struct Writer<'a, 'de> {
    out: &'a mut Vec<u8>,
    scratch: &'a mut Scratch<'de>,
    top: bool,
}

impl<'a, 'de> Writer<'a, 'de> {
    fn child(&mut self) -> Writer<'_, 'de> {
        Writer {
            out: &mut *self.out,
            scratch: &mut *self.scratch,
            top: false,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Writer<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

fn written<E: serde::de::Error>(result: serde_json::Result<()>) -> Result<(), E> {
    result.map_err(E::custom)
}

impl<'de> Visitor<'de> for Writer<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if v { b"true".as_slice() } else { b"false" });
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        written(serde_json::to_writer(&mut *self.out, &v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        written(serde_json::to_writer(&mut *self.out, &v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        // serde_json's `Value` turns a non-finite float into null; its parser never
        // produces one (an overflowing number is an error).
        if !v.is_finite() {
            return self.visit_unit();
        }
        written(serde_json::to_writer(&mut *self.out, &v))
    }
    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<(), E> {
        written(write_str(v, self.out))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        written(write_str(v, self.out))
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            let before = self.out.len();
            if !first {
                self.out.push(b',');
            }
            if seq.next_element_seed(self.child())?.is_none() {
                self.out.truncate(before);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let open = self.out.len();
        self.out.push(b'{');
        let base = self.scratch.members.len();
        let mut sorted = true;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if self.scratch.members.len() == base && (key == RAW_VALUE_TOKEN || key == NUMBER_TOKEN)
            {
                return Err(serde::de::Error::custom(format_args!(
                    "the key {key:?} is reserved by serde_json"
                )));
            }
            if let Some(last) = self.scratch.members[base..].last() {
                sorted &= last.key.as_ref() < key.as_bytes();
                self.out.push(b',');
            }
            let start = self.out.len();
            written(write_str(&key, self.out))?;
            let key = match key {
                Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
                Cow::Owned(text) => Cow::Owned(text.into_bytes()),
            };
            self.out.push(b':');
            let value = self.out.len();
            map.next_value_seed(self.child())?;
            let end = self.out.len();
            self.scratch.members.push(Member {
                prefix: prefix_word(&key),
                key,
                start,
                value,
                end,
            });
        }
        // The top-level object is put in key order when its bytes are assembled
        // (`Decoded::object_bytes`), which may leave members out.
        if !sorted && !self.top {
            let members = &self.scratch.members[base..];
            key_order_of(members, &mut self.scratch.order);
            rewrite_sorted(
                self.out,
                open,
                (members, &self.scratch.order),
                &mut self.scratch.moved,
            );
        }
        self.out.push(b'}');
        if self.top {
            self.scratch.top = self.scratch.members.drain(base..).collect();
        } else {
            self.scratch.members.truncate(base);
        }
        Ok(())
    }
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

/// Rewrites the object opened at `open` (its `members` written in arrival order) with its
/// members in `order` ([`key_order_of`]). Moves the members' bytes once; their positions
/// are stale afterwards.
fn rewrite_sorted(
    out: &mut Vec<u8>,
    open: usize,
    (members, order): (&[Member<'_>], &[usize]),
    moved: &mut Vec<u8>,
) {
    let from = open + 1;
    moved.clear();
    moved.extend_from_slice(&out[from..]);
    out.truncate(from);
    for (k, &at) in order.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        let member = &members[at];
        out.extend_from_slice(&moved[member.start - from..member.end - from]);
    }
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
/// [`Decoded::object_bytes`] puts them in key order, and can leave some out without having
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
    /// Writes to `out` the canonical bytes of the top-level object (`raw` is what [`decode`]
    /// wrote) reduced to the members whose key (as written, without quotes) `keep`
    /// accepts, in key order; returns where the event type's text ([`TypeField::At`]) lies
    /// in them, if its member is kept.
    pub(crate) fn object_bytes(
        &self,
        raw: &[u8],
        keep: impl Fn(&[u8]) -> bool,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let type_at = match self.event_type {
            TypeField::At { start, .. } => Some(start),
            _ => None,
        };
        let mut moved_type = None;
        out.clear();
        out.push(b'{');
        for member in &self.members {
            if !keep(&raw[member.start + 1..member.value - 2]) {
                continue;
            }
            if out.len() > 1 {
                out.push(b',');
            }
            if let Some(at) = type_at.filter(|at| (member.value..member.end).contains(at)) {
                moved_type = Some(out.len() + (at - member.start));
            }
            out.extend_from_slice(&raw[member.start..member.end]);
        }
        out.push(b'}');
        moved_type
    }
}

/// A value's canonical text read as an `i64`: canonical integers are plain digits (a float
/// is written with a `.` or an exponent, `-0` as `-0.0`), so this is exactly "the parsed
/// value is an integer in `i64` range".
fn as_id(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Writes the canonical bytes of `json` to `out` with serde_json's parser driving the
/// writer (every input; the errors are serde_json's) and returns the top-level object's
/// members.
fn write_with_serde<'de>(
    json: &'de [u8],
    out: &mut Vec<u8>,
) -> serde_json::Result<Vec<Member<'de>>> {
    let mut scratch = Scratch::default();
    let mut parser = serde_json::Deserializer::from_slice(json);
    Writer {
        out,
        scratch: &mut scratch,
        top: true,
    }
    .deserialize(&mut parser)?;
    parser.end()?;
    Ok(scratch.top)
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
mod tests {
    use super::canonical_json;

    /// Today's bytes: serde_json's `Value`, serialized (this crate's serde_json has no
    /// `preserve_order`, so its maps are sorted).
    fn todays(json: &str) -> String {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        serde_json::to_string(&value).unwrap()
    }

    fn canonical(json: &str) -> String {
        String::from_utf8(canonical_json(json.as_bytes()).unwrap()).unwrap()
    }

    /// Odd producer text: keys out of order at every level, repeats, spacing, every kind of
    /// escape, numbers at the integer limits and in float spellings, non-objects.
    const ODD_CASES: [&str; 9] = [
        r#"{"b":1,"a":{"d":[1,2,{"z":null,"y":true}],"c":"x"}}"#,
        "{ \"a\" : 1 ,\n \"a\": 2 }",
        r#"{"s":"\u00e9\/\"\\\n\t\u0001\u007f","é":1,"e":2,"\u0065":3}"#,
        r#"[1e2, -0, 0.1, 1.5e300, 18446744073709551615, -9223372036854775808, 18446744073709551616, 1E-7, -1.0]"#,
        r#"{"emoji":"\ud83d\ude00","":""}"#,
        "  \"top\"  ",
        "123",
        "[]",
        "{}",
    ];

    #[test]
    fn matches_todays_serialization_on_the_odd_cases() {
        for json in ODD_CASES {
            assert_eq!(canonical(json), todays(json), "{json}");
        }
    }

    /// JSON text as producers may write it: random whitespace, keys in any order and
    /// repeated, strings with any escape a producer may choose, numbers in any spelling.
    fn producer_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let space = prop_oneof![Just(""), Just(""), Just(" "), Just("\n\t ")];
        let char_text = prop_oneof![
            any::<char>(),
            prop_oneof![
                Just('"'),
                Just('\\'),
                Just('/'),
                Just('\u{1}'),
                Just('\n'),
                Just('\u{7f}'),
                Just('é'),
                Just('😀')
            ],
        ];
        let string = proptest::collection::vec((char_text, 0u8..4), 0..6).prop_map(|chars| {
            let mut out = String::from("\"");
            for (c, how) in chars {
                match (c, how) {
                    ('"', _) => out.push_str("\\\""),
                    ('\\', _) => out.push_str("\\\\"),
                    (c, _) if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    ('/', 0) => out.push_str("\\/"),
                    (c, 1) if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04X}", c as u32)),
                    (c, 2) if (c as u32) >= 0x10000 => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{unit:04x}"));
                        }
                    }
                    (c, _) => out.push(c),
                }
            }
            out.push('"');
            out
        });
        let number = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| format!("{f:e}")),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| format!("{f:?}")),
            Just("-0".to_string()),
            Just("1E2".to_string()),
            Just("100000000000000000000".to_string()),
            Just("0.30000000000000004".to_string()),
        ];
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            number,
            string.clone(),
        ];
        let key = prop_oneof![
            Just("\"a\"".to_string()),
            Just("\"b\"".to_string()),
            Just("\"\\u0061\"".to_string()),
            Just("\"aa\"".to_string()),
            Just("\"A\"".to_string()),
            Just("\"\"".to_string()),
            Just("\"é\"".to_string()),
            string,
        ];
        leaf.prop_recursive(4, 48, 5, move |inner| {
            let space = space.clone();
            prop_oneof![
                (
                    proptest::collection::vec(inner.clone(), 0..5),
                    space.clone()
                )
                    .prop_map(|(items, s)| {
                        format!("[{s}{}{s}]", items.join(&format!("{s},{s}")))
                    }),
                (proptest::collection::vec((key.clone(), inner), 0..5), space).prop_map(
                    |(members, s)| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(k, v)| format!("{s}{k}{s}:{s}{v}{s}"))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }
                ),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The canonical bytes are today's bytes, whatever the producer wrote.
        #[test]
        fn canonical_bytes_are_a_value_round_trip(text in producer_text()) {
            let todays = serde_json::from_str::<serde_json::Value>(&text)
                .map(|value| serde_json::to_string(&value).unwrap());
            let ours = canonical_json(text.as_bytes())
                .map(|bytes| String::from_utf8(bytes).unwrap());
            match (todays, ours) {
                (Ok(todays), Ok(ours)) => proptest::prop_assert_eq!(ours, todays, "{}", text),
                (Err(_), Err(_)) => {}
                (todays, ours) => proptest::prop_assert!(false, "{text}: today {todays:?}, ours {ours:?}"),
            }
        }
    }

    /// What the hand-written pass says of `json`, beside what the serde_json-driven writer
    /// says: the pass may give up on anything, but whenever it writes bytes they are the
    /// other writer's, and it never accepts what the other writer rejects.
    fn passes_agree(json: &[u8]) -> Result<bool, String> {
        let mut written = Vec::new();
        let top = super::fast::write(json, &mut written);
        let accepted = top.is_some();
        let fast = top.map_or_else(Vec::new, |top| super::with_top_in_key_order(&written, top));
        match (accepted, super::canonical_json_with_serde(json)) {
            (true, Ok(serde)) if fast == serde => Ok(true),
            (true, Ok(serde)) => Err(format!(
                "{:?}: the pass wrote {:?}, serde {:?}",
                String::from_utf8_lossy(json),
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&serde)
            )),
            (true, Err(e)) => Err(format!(
                "{:?}: the pass accepted what serde rejects ({e})",
                String::from_utf8_lossy(json)
            )),
            (false, _) => Ok(false),
        }
    }

    #[test]
    fn the_hand_written_pass_writes_what_producers_send_itself() {
        let envelope = r#"{"event_id":3,"execution_id":1,"prev_event_id":2,"result":{"rows":[{"row":0,"name":"item-0","ok":true}]}}"#;
        for json in ODD_CASES.into_iter().chain([envelope]) {
            assert_eq!(passes_agree(json.as_bytes()), Ok(true), "{json}");
        }
    }

    /// A float spelled as producers spell them: up to 17 significant digits, a decimal
    /// point anywhere, an exponent or none, either sign.
    fn float_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            (1u32..=17).prop_flat_map(|n| 10u64.pow(n - 1)..10u64.pow(n)),
            0usize..18,
            prop_oneof![Just(None), (-30i32..30).prop_map(Some)],
            any::<bool>(),
            prop_oneof![Just("e"), Just("E"), Just("e+")],
        )
            .prop_map(|(mantissa, point, exponent, negative, e)| {
                let digits = mantissa.to_string();
                let point = point.min(digits.len() - 1);
                let (int, frac) = digits.split_at(digits.len() - point);
                let mut text = String::new();
                if negative {
                    text.push('-');
                }
                text.push_str(int);
                if !frac.is_empty() {
                    text.push('.');
                    text.push_str(frac);
                }
                if let Some(exponent) = exponent {
                    let e = if exponent < 0 { "e" } else { e };
                    text.push_str(&format!("{e}{exponent}"));
                }
                text
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]

        /// Floats the pass reads itself are written as serde's parse and serialization
        /// write them, and the rest are left to serde.
        #[test]
        fn floats_are_read_as_serde_reads_them(text in float_text()) {
            let json = format!("[{text},{{\"b\":{text},\"a\":1}}]");
            if let Err(why) = passes_agree(json.as_bytes()) {
                proptest::prop_assert!(false, "{}", why);
            }
        }
    }

    #[test]
    fn floats_at_the_edges_of_what_the_pass_reads() {
        for text in [
            "0.1",
            "0.30000000000000004",
            "1e22",
            "1e23",
            "-1e-22",
            "1e-23",
            "123456789012345e-22",
            "1234567890123456e-22",
            "9007199254740993.0",
            "4.35",
            "2.675",
            "1.0",
            "-0.0",
            "0e0",
            "0.0000001",
            "1e+0",
            "1E-0",
            "5e-324",
            "1.7976931348623157e308",
            "1e0005",
            "999999999999999e22",
            "0.000000000000000000001",
            "100000000000000000000000.0",
        ] {
            let json = format!("[{text}]");
            assert!(
                passes_agree(json.as_bytes()).is_ok(),
                "{text}: {:?}",
                passes_agree(json.as_bytes())
            );
            assert_eq!(canonical(&json), todays(&json), "{text}");
        }
        // These are read by the pass itself, not left to serde.
        for text in [
            "0.1",
            "4.35",
            "1e22",
            "-1e-22",
            "123456789012345e-22",
            "0e0",
        ] {
            let json = format!("[{text}]");
            assert_eq!(passes_agree(json.as_bytes()), Ok(true), "{text}");
        }
    }

    /// Rows one after the other reuse the last row's key order only when their keys are the
    /// same: same words but other lengths, other keys, repeats, long keys and escaped keys
    /// in between.
    #[test]
    fn rows_in_a_row_are_written_in_their_own_key_order() {
        let rows = [
            r#"{"row":1,"name":"a","qty":2}"#,
            r#"{"row":2,"name":"b","qty":3}"#,
            r#"{"row":3,"name":"c","qty":4,"qty":5}"#,
            r#"{"row":4,"name":"d","qt":6}"#,
            r#"{"ro":5,"name":"e","qty":7}"#,
            r#"{"row":6,"name":"f","qty":8}"#,
            r#"{"row\u0000":7,"name":"g","qty":9}"#,
            r#"{"row":8,"name":"h","quantity_long":10,"quantity_lo":11}"#,
            r#"{"row":9,"name":"i","quantity_long":12,"quantity_lo":13}"#,
            r#"{"\u0072ow":10,"name":"j","qty":14}"#,
            r#"{"row":11,"name":"k","qty":15,"row":16}"#,
            r#"{"row":12,"name":"l","qty":17,"row":18}"#,
            r#"{"row":13,"name":"m","qty":19}"#,
            r#"{"z":0,"quantity_b":1,"quantity_a":2}"#,
            r#"{"z":0,"quantity_a":1,"quantity_b":2}"#,
            r#"{"z":0,"b":1,"a":2}"#,
            r#"{"z":0,"a":1,"b":2}"#,
        ];
        let json = format!("[{}]", rows.join(","));
        assert_eq!(passes_agree(json.as_bytes()), Ok(true), "{json}");
        assert_eq!(canonical(&json), todays(&json));
    }

    #[test]
    fn the_hand_written_pass_leaves_every_error_to_serde() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let mut cases: Vec<Vec<u8>> = [
            "",
            " ",
            "{",
            "}",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{\"a\":}",
            "{1:2}",
            "01",
            "-01",
            "1.",
            ".5",
            "-",
            "1e",
            "1e+",
            "1e400",
            "-1e400",
            "+1",
            "tru",
            "nul",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"open",
            "{\"a\":1} x",
            "[1] [2]",
            "\u{feff}{}",
            r#"{"$serde_json::private::RawValue":"7"}"#,
            r#"{"$serde_json::private::Number":"7"}"#,
            r#"{"x":{"$serde_json::private::RawValue":"[2, 1]"}}"#,
        ]
        .iter()
        .map(|text| text.as_bytes().to_vec())
        .collect();
        cases.push(b"\"a\x01b\"".to_vec());
        cases.push(b"\"\xff\"".to_vec());
        cases.push(b"{\"\xc3\":1}".to_vec());
        cases.push(b"\"\xed\xa0\x80\"".to_vec());
        for n in [95, 96, 97, 126, 127, 128, 129, 300] {
            cases.push(deep(n).into_bytes());
        }
        for json in cases {
            assert!(
                passes_agree(&json).is_ok(),
                "{}",
                passes_agree(&json).unwrap_err()
            );
        }
        // And the whole decode gives serde_json's answer for each of them.
        assert!(canonical_json(deep(128).as_bytes()).is_err());
        assert!(canonical_json(deep(127).as_bytes()).is_ok());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever producers write, and whatever a byte flipped or a cut makes of it, the
        /// hand-written pass writes serde's bytes or gives up.
        #[test]
        fn the_hand_written_pass_agrees_with_serde(
            text in producer_text(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
            how in 0u8..3,
        ) {
            let mut json = text.into_bytes();
            if !json.is_empty() {
                let at = at.index(json.len());
                match how {
                    0 => {}
                    1 => json[at] = byte,
                    _ => json.truncate(at),
                }
            }
            if let Err(why) = passes_agree(&json) {
                proptest::prop_assert!(false, "{}", why);
            }
        }
    }

    #[test]
    fn the_raw_value_token_of_serde_json_is_rejected_as_a_first_key() {
        for json in [
            r#"{"x":{"$serde_json::private::RawValue":"[2, 1]"}}"#,
            r#"{"$serde_json::private::RawValue":"7","event_id":1}"#,
            r#"{"x":{"\u0024serde_json::private::RawValue":"nope"}}"#,
        ] {
            assert!(canonical_json(json.as_bytes()).is_err(), "{json}");
        }
        // Elsewhere it is an ordinary key.
        assert_eq!(
            canonical(r#"{"b":{"a":1,"$serde_json::private::RawValue":"x"}}"#),
            r#"{"b":{"$serde_json::private::RawValue":"x","a":1}}"#
        );
    }

    #[test]
    fn rejects_what_todays_parser_rejects() {
        for json in [r#"{"a":1e400}"#, r#"{"a":"\ud800"}"#, "[1,]", "{\"a\":1} x"] {
            assert!(canonical_json(json.as_bytes()).is_err(), "{json}");
            assert!(
                serde_json::from_str::<serde_json::Value>(json).is_err(),
                "{json}"
            );
        }
    }
}
