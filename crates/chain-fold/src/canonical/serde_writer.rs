//! The serde_json-driven writer: serde_json's own parser (the same grammar, recursion
//! limit and number parsing as today's) drives a visitor that writes the canonical bytes as
//! it parses, with no tree and no `Value`. It takes every input the hand-written pass gives
//! up on, and so gives every error; it is also the reference the pass is tested against.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{Member, NUMBER_TOKEN, RAW_VALUE_TOKEN, key_order_of, prefix_word, rewrite_sorted};

/// Writes `text` as a JSON string, as serde_json does: a run without a byte to escape is
/// copied as is.
pub(super) fn write_str(text: &str, out: &mut Vec<u8>) -> serde_json::Result<()> {
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
        // (`Decoded::object_parts`), which may leave members out.
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

/// Writes the canonical bytes of `json` to `out` with serde_json's parser driving the
/// writer (every input; the errors are serde_json's) and returns the top-level object's
/// members.
pub(super) fn write_with_serde<'de>(
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
