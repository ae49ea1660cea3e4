//! The canonical bytes of a JSON value: what today's index serves for an event, whatever
//! bytes its producer sent.
//!
//! Today's index parses every payload into a `serde_json::Value` and serializes it again
//! when it builds a drive's input, so the bytes a consumer receives are a function of the
//! event's JSON *value*, not of how a producer wrote it: key order, whitespace, escapes and
//! number spellings are normalized, and the same event read from the WAL, from a tail, from
//! a state shard or from a rehydrate is the same bytes. Production's shard verification
//! byte-compares drive inputs on that basis. [`canonical_json`] produces exactly those
//! bytes, once, when an event is decoded:
//!
//! - objects with their keys in ascending byte order (a `serde_json::Map` without
//!   `preserve_order`), a repeated key keeping its last value, as serde_json's map does;
//! - no whitespace between tokens;
//! - strings as serde_json writes them (`"` and `\` escaped, control characters as `\n`,
//!   `\t`, ... or `\u00XX`, everything else as UTF-8);
//! - numbers as serde_json writes the number it parsed: integers in `u64` / `i64` range as
//!   digits, every other number as the shortest `f64` that round-trips (`1e2` is `100.0`).
//!
//! The keys are sorted here, not by the map type, so the result does not change when some
//! other crate in a build enables serde_json's `preserve_order` feature. The parse is
//! serde_json's own (the same grammar, recursion limit and number parsing as today's), into
//! a tree that borrows every string it can from the input instead of a `Value`, which
//! allocates every string and map node.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One parsed JSON value, borrowing unescaped strings from the input.
enum Node<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// The map key serde_json's `Value` (with its `raw_value` feature, which this workspace
/// enables) reads as "the string that follows is raw JSON", substituting or rejecting the
/// object; whether today's parser does so depends on a feature of its build. An object
/// whose first key is this token has no single meaning, so it is rejected.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

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
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
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

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Node::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Node::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Node::I64(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                // serde_json's `Value` turns a non-finite float into null; its parser never
                // produces one (an overflowing number is an error).
                Ok(if v.is_finite() {
                    Node::F64(v)
                } else {
                    Node::Null
                })
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Node::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Node::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Node::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(Cow<'de, str>, Node<'de>)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    if entries.is_empty() && key == RAW_VALUE_TOKEN {
                        return Err(serde::de::Error::custom(format_args!(
                            "the key {RAW_VALUE_TOKEN:?} is reserved by serde_json"
                        )));
                    }
                    entries.push((key, map.next_value()?));
                }
                // Ascending key order, sorted once here (a stable sort keeps a repeated
                // key's values in input order, so the last of each run is the one kept);
                // already sorted, as a canonical producer writes them, costs one pass.
                if !entries
                    .windows(2)
                    .all(|w| w[0].0.as_bytes() < w[1].0.as_bytes())
                {
                    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                }
                Ok(Node::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl Node<'_> {
    fn write(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Node::Null => out.extend_from_slice(b"null"),
            Node::Bool(true) => out.extend_from_slice(b"true"),
            Node::Bool(false) => out.extend_from_slice(b"false"),
            Node::U64(v) => serde_json::to_writer(&mut *out, v)?,
            Node::I64(v) => serde_json::to_writer(&mut *out, v)?,
            Node::F64(v) => serde_json::to_writer(&mut *out, v)?,
            Node::Str(text) => write_str(text, out)?,
            Node::Array(items) => {
                out.push(b'[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push(b',');
                    }
                    item.write(out)?;
                }
                out.push(b']');
            }
            Node::Object(entries) => write_object(entries, out, None)?,
        }
        Ok(())
    }
}

/// Writes an object whose entries the parse sorted by key; of a repeated key, the last
/// value (the last of each run). With `event_type`, an `event_type` string written without
/// escapes is located in `out`.
fn write_object(
    entries: &[(Cow<'_, str>, Node<'_>)],
    out: &mut Vec<u8>,
    mut event_type: Option<&mut TypeField>,
) -> serde_json::Result<()> {
    out.push(b'{');
    let mut first = true;
    for (at, (key, value)) in entries.iter().map(|e| (&e.0, &e.1)).enumerate() {
        if entries.get(at + 1).is_some_and(|next| next.0 == *key) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(key, out)?;
        out.push(b':');
        let start = out.len();
        value.write(out)?;
        if let (Some(slot), Node::Str(text)) = (event_type.as_deref_mut(), value) {
            // Written as `"text"`: no byte needed an escape.
            if key == "event_type" && out.len() - start == text.len() + 2 {
                *slot = TypeField::At {
                    start: start + 1,
                    len: text.len(),
                };
            }
        }
    }
    out.push(b'}');
    Ok(())
}

/// The canonical bytes of the JSON text `json` (see the module documentation), or
/// serde_json's error for text today's index could not parse.
pub(crate) fn canonical_json(json: &[u8]) -> serde_json::Result<Vec<u8>> {
    Ok(decode(json)?.bytes)
}

/// An id field of an envelope, as its parsed value.
pub(crate) enum IdField {
    Missing,
    Int(i64),
    /// Present but not an integer in `i64` range; the caller names why from the text.
    Other,
}

/// Where the event type lies, as [`decode`] found it.
pub(crate) enum TypeField {
    /// Absent or not a string: the empty type.
    Empty,
    /// A string written unescaped at `start..start + len` of the canonical bytes.
    At { start: usize, len: usize },
    /// A string that needed escapes in the canonical bytes: its text.
    Owned(String),
}

/// One payload parsed once: its canonical bytes and the four fields the index reads, by the
/// same rules as today's consumer, which reads them from the parsed value (a repeated key
/// keeps its last value).
pub(crate) struct Decoded {
    pub(crate) bytes: Vec<u8>,
    /// `None` when the value is not an object: the kind it is instead.
    pub(crate) not_an_object: Option<&'static str>,
    pub(crate) event_id: IdField,
    pub(crate) execution_id: IdField,
    /// An integer `prev_event_id` in `i64` range; anything else makes the event a root.
    pub(crate) prev: Option<i64>,
    pub(crate) event_type: TypeField,
}

fn as_id(node: &Node<'_>) -> Option<i64> {
    match *node {
        Node::U64(v) => i64::try_from(v).ok(),
        Node::I64(v) => Some(v),
        _ => None,
    }
}

/// Parses `json` once into its canonical bytes and the envelope's fields.
pub(crate) fn decode(json: &[u8]) -> serde_json::Result<Decoded> {
    let node: Node<'_> = serde_json::from_slice(json)?;
    let mut out = Vec::with_capacity(json.len());
    let mut decoded = Decoded {
        bytes: Vec::new(),
        not_an_object: None,
        event_id: IdField::Missing,
        execution_id: IdField::Missing,
        prev: None,
        event_type: TypeField::Empty,
    };
    let Node::Object(entries) = &node else {
        decoded.not_an_object = Some(match node {
            Node::Array(_) => "array",
            Node::Str(_) => "string",
            Node::Bool(_) => "boolean",
            Node::Null => "null",
            _ => "number",
        });
        node.write(&mut out)?;
        decoded.bytes = out;
        return Ok(decoded);
    };
    // The fields, last value of a repeated key winning.
    for (key, value) in entries {
        let id = || as_id(value).map_or(IdField::Other, IdField::Int);
        match key.as_ref() {
            "event_id" => decoded.event_id = id(),
            "execution_id" => decoded.execution_id = id(),
            "prev_event_id" => decoded.prev = as_id(value),
            "event_type" => {
                decoded.event_type = match value {
                    Node::Str(text) => TypeField::Owned(text.as_ref().to_owned()),
                    _ => TypeField::Empty,
                }
            }
            _ => {}
        }
    }
    write_object(entries, &mut out, Some(&mut decoded.event_type))?;
    decoded.bytes = out;
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

    #[test]
    fn matches_todays_serialization_on_the_odd_cases() {
        for json in [
            r#"{"b":1,"a":{"d":[1,2,{"z":null,"y":true}],"c":"x"}}"#,
            "{ \"a\" : 1 ,\n \"a\": 2 }",
            r#"{"s":"\u00e9\/\"\\\n\t\u0001\u007f","é":1,"e":2,"\u0065":3}"#,
            r#"[1e2, -0, 0.1, 1.5e300, 18446744073709551615, -9223372036854775808, 18446744073709551616, 1E-7, -1.0]"#,
            r#"{"emoji":"\ud83d\ude00","":""}"#,
            "  \"top\"  ",
            "123",
            "[]",
            "{}",
        ] {
            assert_eq!(canonical(json), todays(json), "{json}");
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
