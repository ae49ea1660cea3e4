//! One shard row from one event, as production's writer makes it (noetl/worker's
//! `src/state_materializer.rs`, v5.120.0).

use std::collections::BTreeMap;

use chain_fold::{Event, SLIM_KEYS};
use serde_json::Value;
use serde_json::value::RawValue;

/// One row of a shard: an event and the columns production derives from its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    /// `event_id`.
    pub event_id: i64,
    /// `prev_event_id`, when the event names one.
    pub prev_event_id: Option<i64>,
    /// `event_type`: the envelope's string, or `""`.
    pub event_type: String,
    /// `node_name`, when a string.
    pub node_name: Option<String>,
    /// `status`, when a string.
    pub status: Option<String>,
    /// The `uri` of the envelope's first result reference, when a string.
    pub result_ref: Option<String>,
    /// That reference's `extracted` member as compact JSON, cut to the byte budget.
    pub extracted: Option<String>,
    /// The slim payload with `prev_event_id`, as compact JSON with sorted keys.
    pub payload: String,
}

/// Production's default cap on `extracted` (`NOETL_STATE_SHARD_EXTRACTED_BUDGET`).
pub const DEFAULT_EXTRACTED_BUDGET: usize = 4096;

impl ShardRow {
    /// The row of `event`. Its payload is the slim projection plus `prev_event_id` (from
    /// the event's link, so a slim index's events, which keep the link but not the member,
    /// give production's text); `extracted` is cut at the last UTF-8 boundary within
    /// `extracted_budget` bytes (0: no cap). The result reference is searched in the
    /// payload the event holds: on an index that stores slim events, only the slim members.
    ///
    /// ```
    /// use chain_fold::Event;
    /// use state_shard::ShardRow;
    ///
    /// let e = Event::from_json(br#"{"event_id":2,"execution_id":9,"prev_event_id":1,"worker":"w",
    ///     "event_type":"step.exit","result":{"kind":"result_ref","uri":"s3://r/1","extracted":{"n":1}}}"#)?;
    /// let row = ShardRow::from_event(&e, 4096);
    /// assert_eq!(row.payload, r#"{"event_id":2,"event_type":"step.exit","execution_id":9,"prev_event_id":1,"result":{"extracted":{"n":1},"kind":"result_ref","uri":"s3://r/1"}}"#);
    /// assert_eq!((row.result_ref.as_deref(), row.extracted.as_deref()), (Some("s3://r/1"), Some(r#"{"n":1}"#)));
    /// # Ok::<(), chain_fold::EventError>(())
    /// ```
    pub fn from_event(event: &Event, extracted_budget: usize) -> ShardRow {
        // The members one level down, unparsed: the payload's text is assembled from their
        // bytes, and only an envelope that names a result reference is parsed whole.
        let members: Option<BTreeMap<String, &RawValue>> =
            serde_json::from_slice(event.payload()).ok();
        let text = |key: &str| {
            let raw = members.as_ref()?.get(key)?;
            serde_json::from_str::<String>(raw.get()).ok()
        };
        let envelope: Option<Value> = memchr::memmem::find(event.payload(), b"result_ref")
            .and_then(|_| serde_json::from_slice(event.payload()).ok());
        let reference = envelope.as_ref().and_then(first_result_ref);
        ShardRow {
            event_id: event.id(),
            prev_event_id: event.prev(),
            event_type: text("event_type").unwrap_or_default(),
            node_name: text("node_name"),
            status: text("status"),
            result_ref: reference
                .and_then(|r| r.get("uri"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            extracted: reference
                .and_then(|r| r.get("extracted"))
                .map(|v| cut(v.to_string(), extracted_budget)),
            payload: shard_payload(event, members.as_ref()),
        }
    }
}

/// The slim members of the envelope and `prev_event_id`, keys sorted bytewise, compact (a
/// canonical payload's member values are already compact). A payload that is not an object
/// (an event this crate did not decode) is rebuilt from the event's fields.
fn shard_payload(event: &Event, members: Option<&BTreeMap<String, &RawValue>>) -> String {
    let Some(members) = members else {
        let mut minimal = serde_json::json!({
            "event_id": event.id(),
            "execution_id": event.execution_id(),
            "event_type": event.event_type(),
        });
        if let Some(prev) = event.prev() {
            minimal["prev_event_id"] = prev.into();
        }
        return minimal.to_string();
    };
    let prev = event.prev().map(|p| p.to_string());
    let prev_raw: Option<Box<RawValue>> = prev.and_then(|p| RawValue::from_string(p).ok());
    let mut kept: BTreeMap<&str, &RawValue> = members
        .iter()
        .filter(|(key, _)| SLIM_KEYS.contains(&key.as_str()) || key.as_str() == "prev_event_id")
        .map(|(key, value)| (key.as_str(), *value))
        .collect();
    if let Some(prev) = &prev_raw {
        kept.entry("prev_event_id").or_insert(prev);
    }
    serde_json::to_string(&kept).unwrap_or_default()
}

/// The first object with `"kind": "result_ref"` in a depth-first walk (the value itself
/// first; an object's members in sorted key order, an array's in order).
fn first_result_ref(value: &Value) -> Option<&serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => {
            if map.get("kind").and_then(Value::as_str) == Some("result_ref") {
                return Some(map);
            }
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            members.into_iter().find_map(|(_, v)| first_result_ref(v))
        }
        Value::Array(items) => items.iter().find_map(first_result_ref),
        _ => None,
    }
}

/// `text` cut to the last UTF-8 boundary within `budget` bytes (0: no cap).
fn cut(mut text: String, budget: usize) -> String {
    if budget > 0 && text.len() > budget {
        let mut end = budget;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's example payload (W's test event 2), from an envelope with extra
    /// members and another key order.
    #[test]
    fn the_payload_is_the_references_example() {
        let envelope = br#"{"execution_id":330390737327759360,"event_id":2,"prev_event_id":1,
            "event_type":"step.enter","node_name":"show_places","worker_id":"w-7",
            "result":{"status":"completed","context":{"iterations_expected":2}},
            "status":"completed","timestamp":"2026-06-30T12:00:00Z","catalog_id":657533161378677602}"#;
        let expected = r#"{"catalog_id":657533161378677602,"event_id":2,"event_type":"step.enter","execution_id":330390737327759360,"node_name":"show_places","prev_event_id":1,"result":{"context":{"iterations_expected":2},"status":"completed"},"status":"completed","timestamp":"2026-06-30T12:00:00Z"}"#;
        let whole = Event::from_json(envelope).unwrap();
        assert_eq!(ShardRow::from_event(&whole, 0).payload, expected);
        // A slim index's event keeps the link but not the member: the same text.
        let slim = Event::from_json_slim(envelope).unwrap();
        assert_eq!(ShardRow::from_event(&slim, 0).payload, expected);
        let row = ShardRow::from_event(&slim, 0);
        assert_eq!(
            (
                row.node_name.as_deref(),
                row.status.as_deref(),
                row.result_ref
            ),
            (Some("show_places"), Some("completed"), None)
        );
    }

    #[test]
    fn extracted_is_cut_at_a_char_boundary_and_null_kept() {
        let e = Event::from_json(
            r#"{"event_id":1,"execution_id":1,"a":{"kind":"result_ref","uri":7,"extracted":"ééé"}}"#
                .as_bytes(),
        )
        .unwrap();
        let row = ShardRow::from_event(&e, 4);
        // `"ééé"` is 8 bytes; 4 keeps the quote and one `é`.
        assert_eq!(row.extracted.as_deref(), Some("\"é"));
        assert_eq!(row.result_ref, None, "a uri that is not a string");
        let e = Event::from_json(
            br#"{"event_id":1,"execution_id":1,"b":[{"kind":"result_ref","extracted":null}],"a":{"kind":"result_ref","uri":"first"}}"#,
        )
        .unwrap();
        let row = ShardRow::from_event(&e, 0);
        assert_eq!(
            row.result_ref.as_deref(),
            Some("first"),
            "sorted: a before b"
        );
        assert_eq!(row.extracted, None);
    }
}
