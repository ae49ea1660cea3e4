//! Why a payload is not an event: the error type, and the checks that name each malformed
//! shape. They run only for a payload the canonical decode refused (or whose id did not
//! read as an `i64`), to say why; a payload that decodes never comes here.

use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Event, EventId};

/// Which field of an envelope an [`EventError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// `event_id`
    EventId,
    /// `execution_id`
    ExecutionId,
    /// `prev_event_id`
    PrevEventId,
}

impl Field {
    /// The JSON key of the field.
    pub fn key(self) -> &'static str {
        match self {
            Field::EventId => "event_id",
            Field::ExecutionId => "execution_id",
            Field::PrevEventId => "prev_event_id",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Why a WAL payload could not be decoded into a chainable [`Event`].
///
/// Every variant names what was wrong so a drain can count and log it; none of them is ever
/// a panic, whatever the input bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The bytes are not one JSON value today's parser reads: truncated, invalid UTF-8,
    /// trailing garbage, a number beyond `f64`'s range, or nesting at serde_json's
    /// recursion limit. A repeated key keeps its last value, as serde_json's map does.
    #[error("payload is not valid JSON: {0}")]
    Json(String),
    /// The payload is valid JSON but not an object.
    #[error("payload is a JSON {found}, not an object")]
    NotAnObject {
        /// The JSON kind that was found (`array`, `string`, ...).
        found: &'static str,
    },
    /// A required id is absent or `null`.
    #[error("`{field}` is missing or null")]
    Missing {
        /// The field.
        field: Field,
    },
    /// An id was sent as a JSON string (`"42"`). Today's index drops such events silently;
    /// this is reported instead so the producer can be fixed.
    #[error("`{field}` is a JSON string ({text}); ids must be JSON integers")]
    StringId {
        /// The field.
        field: Field,
        /// The raw JSON text of the value, truncated to 32 bytes.
        text: String,
    },
    /// An id is a number but not an integer (`1.5`, `1e3`).
    #[error("`{field}` is not an integer ({text})")]
    NotAnInteger {
        /// The field.
        field: Field,
        /// The raw JSON text of the value, truncated to 32 bytes.
        text: String,
    },
    /// An id is an integer outside the `i64` range.
    #[error("`{field}` does not fit in an i64 ({text})")]
    OutOfRange {
        /// The field.
        field: Field,
        /// The raw JSON text of the value, truncated to 32 bytes.
        text: String,
    },
    /// An id is a boolean, an object or an array.
    #[error("`{field}` is a JSON {found}, not an integer")]
    WrongType {
        /// The field.
        field: Field,
        /// The JSON kind that was found.
        found: &'static str,
    },
    /// A string holds a `\u` escape of half a surrogate pair. It is valid JSON text, but
    /// no UTF-8 string can hold it, so today's consumers (which parse each payload into a
    /// JSON value) cannot read the payload.
    #[error("payload has a lone surrogate escape at byte {offset}")]
    LoneSurrogate {
        /// Where the escape starts.
        offset: usize,
    },
    /// Arrays and objects nest [`Event::MAX_DEPTH`] levels deep or deeper: the recursion
    /// limit of the JSON parser today's consumers use.
    #[error("payload nests {limit} levels deep or deeper")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// The canonical payload (with the event type or link stored after it, when the header
    /// cannot hold them) is 4 GiB or longer: more than an event's allocation holds (its
    /// length is 32 bits). No WAL this index reads carries records near that size.
    #[error("an event of {len} bytes is past the 4 GiB an event holds")]
    TooLarge {
        /// The bytes the event's allocation would have held.
        len: usize,
    },
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    event_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    execution_id: Option<&'a RawValue>,
    /// Parsed, never read (the link is never an error): kept so the envelope rejects what
    /// it always rejected (a repeated key), and an error is named the same way.
    #[serde(borrow, default)]
    #[allow(dead_code)]
    prev_event_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    event_type: Option<&'a RawValue>,
}

/// Why `payload` does not parse: the field checks' typed error where one applies (a
/// lone surrogate, too deep, not an object, a string id), else serde_json's message.
pub(super) fn why_unparsed(payload: &[u8], parse: serde_json::Error) -> EventError {
    match check_fields(payload) {
        // A missing field cannot be why text does not parse (the field checks skip what
        // they do not read, a reserved key included).
        Ok(_) | Err(EventError::Missing { .. }) => EventError::Json(parse.to_string()),
        Err(typed) => typed,
    }
}

/// Why an id field whose parsed value is `canonical` (its canonical text) is not an
/// `i64`: named from the payload's own text where the field checks can read it (a huge
/// integer is out of range however it parses), else from the parsed value (a repeated
/// key, which the field checks reject outright, or `-0`, which parses as a float).
pub(super) fn why_not_an_id(payload: &[u8], field: Field, canonical: &str) -> EventError {
    match check_fields(payload) {
        Err(EventError::Json(_)) | Ok(_) => {
            parse_id(canonical, field)
                .err()
                .unwrap_or(EventError::NotAnInteger {
                    field,
                    text: canonical.chars().take(32).collect(),
                })
        }
        Err(typed) => typed,
    }
}

/// The field checks on the payload's own text, which name each malformed shape
/// (only run for a payload that does not decode, to say why).
fn check_fields(payload: &[u8]) -> Result<(), EventError> {
    let first = payload.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first != Some(b'{') {
        // Validate first so truncated or garbage input reports as JSON, then name the kind.
        let value: &RawValue =
            serde_json::from_slice(payload).map_err(|e| EventError::Json(e.to_string()))?;
        return Err(EventError::NotAnObject {
            found: json_kind(value.get()),
        });
    }
    // Validate UTF-8 up front: serde_json skips unknown fields without checking their
    // strings (this also runs on text the canonical parse rejected, to name why).
    let text = std::str::from_utf8(payload).map_err(|e| EventError::Json(e.to_string()))?;
    let env: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| EventError::Json(e.to_string()))?;
    required_id(env.event_id, Field::EventId)?;
    required_id(env.execution_id, Field::ExecutionId)?;
    // What the event would need beyond the ids: its link is never an error (anything but an
    // i64 makes the event a chain root, as today), and an escaped type must decode.
    consumer_readable(payload)?;
    if let Some(raw) = env.event_type {
        let quoted = raw.get();
        if quoted.starts_with('"') && quoted.contains('\\') {
            serde_json::from_str::<String>(quoted).map_err(|e| EventError::Json(e.to_string()))?;
        }
    }
    Ok(())
}

fn required_id(raw: Option<&RawValue>, field: Field) -> Result<EventId, EventError> {
    match raw {
        None => Err(EventError::Missing { field }),
        Some(raw) => parse_id(raw.get(), field),
    }
}

fn parse_id(text: &str, field: Field) -> Result<EventId, EventError> {
    if let Ok(id) = text.parse::<i64>() {
        return Ok(id);
    }
    let shown = || text.chars().take(32).collect::<String>();
    let first = text.as_bytes().first().copied().unwrap_or(b' ');
    if first == b'"' {
        return Err(EventError::StringId {
            field,
            text: shown(),
        });
    }
    if first == b'-' || first.is_ascii_digit() {
        let integral = text.bytes().skip(1).all(|b| b.is_ascii_digit());
        return Err(if integral {
            EventError::OutOfRange {
                field,
                text: shown(),
            }
        } else {
            EventError::NotAnInteger {
                field,
                text: shown(),
            }
        });
    }
    Err(EventError::WrongType {
        field,
        found: json_kind(text),
    })
}

fn json_kind(text: &str) -> &'static str {
    match text.as_bytes().first() {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// Checks, in one pass over well-formed JSON text, what a consumer that parses the payload
/// into a JSON value needs beyond well-formedness: no string escape that is half a
/// surrogate pair, and nesting less deep than [`Event::MAX_DEPTH`]. Iterative, so a payload
/// nested far deeper than the limit costs one scan, never the stack.
fn consumer_readable(json: &[u8]) -> Result<(), EventError> {
    let hex4 = |at: usize| -> Option<u32> {
        let digits = std::str::from_utf8(json.get(at..at + 4)?).ok()?;
        u32::from_str_radix(digits, 16).ok()
    };
    let is_high = |unit: u32| (0xD800..0xDC00).contains(&unit);
    let is_low = |unit: u32| (0xDC00..0xE000).contains(&unit);
    let mut depth = 0usize;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i += 1;
                while i < json.len() {
                    match json[i] {
                        b'"' => break,
                        b'\\' if json.get(i + 1) == Some(&b'u') => {
                            let unit = hex4(i + 2).unwrap_or(0);
                            if is_high(unit) {
                                let pair = json.get(i + 6..i + 8) == Some(b"\\u".as_slice())
                                    && hex4(i + 8).is_some_and(is_low);
                                if !pair {
                                    return Err(EventError::LoneSurrogate { offset: i });
                                }
                                i += 12;
                            } else if is_low(unit) {
                                return Err(EventError::LoneSurrogate { offset: i });
                            } else {
                                i += 6;
                            }
                            continue;
                        }
                        b'\\' => i += 2,
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth >= Event::MAX_DEPTH {
                    return Err(EventError::TooDeep {
                        limit: Event::MAX_DEPTH,
                    });
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    Ok(())
}
