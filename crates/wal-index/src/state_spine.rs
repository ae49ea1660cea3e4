//! `GET /ehdb/state-spine?execution=<id>[&head=<id>]`: the spine production's server asks a
//! worker for, answered from any [`StateIndex`] (noetl/worker's
//! `src/metrics_server.rs`).
//!
//! The server folds the events itself; the worker serves them. The answer **fails
//! closed**: an incomplete build (the drain is behind, a link is missing, the index does
//! not hold the execution) serves no events, never a partial spine, and a process without
//! an index says `unavailable` with a 503, so the server never folds "nothing" into a
//! state. The request does what a drive's build does (it advances the cached spine and
//! refreshes the execution's recency) and writes nothing durable.
//!
//! This module is the route's logic without an HTTP server: [`answer`] takes the request
//! target (path and query) and returns the status and the JSON body, so a pool mounts it on
//! whatever serves its `/metrics`.
//!
//! ```
//! use wal_index::{Event, StateIndex, WalIndex};
//! use wal_index::state_spine::answer;
//!
//! let index = WalIndex::default();
//! index.apply(Event::minimal(1, 358159477016371200, None, "playbook_started"));
//! index.apply(Event::minimal(2, 358159477016371200, Some(1), "step.exit"));
//!
//! let ok = answer(Some(&index), "/ehdb/state-spine?execution=358159477016371200&head=2");
//! assert_eq!(ok.status, 200);
//! assert!(ok.body.starts_with(r#"{"action":"ehdb.state.spine","outcome":"ok","build":"cold_rebuild","execution_id":"358159477016371200","requested_head":2,"complete":true,"count":2,"events":[{"#));
//!
//! let behind = answer(Some(&index), "/ehdb/state-spine?execution=358159477016371200&head=3");
//! assert_eq!(behind.status, 200);
//! assert!(behind.body.contains(r#""outcome":"incomplete","build":"incomplete""#));
//! assert!(behind.body.ends_with(r#""complete":false,"count":0,"events":[]}"#));
//!
//! assert_eq!(answer(Some(&index), "/ehdb/state-spine?execution=x").status, 400);
//! assert_eq!(answer(None::<&WalIndex>, "/ehdb/state-spine?execution=1").status, 503);
//! ```

use std::fmt::Write as _;

use chain_fold::{AdvanceOutcome, EventId, ExecutionId};

use crate::index::StateIndex;

/// The route's path.
pub const PATH: &str = "/ehdb/state-spine";

/// The `action` every body names.
const ACTION: &str = "ehdb.state.spine";

/// A status and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status: 200, 400 or 503.
    pub status: u16,
    /// The JSON body.
    pub body: String,
}

impl Answer {
    /// The status line's reason phrase.
    pub fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            _ => "Service Unavailable",
        }
    }

    fn error(status: u16, outcome: &str, error: &str) -> Answer {
        let mut body = format!(r#"{{"action":"{ACTION}","outcome":"{outcome}","error":"#);
        json_string(&mut body, error);
        body.push('}');
        Answer { status, body }
    }
}

/// Answers one request for `target` (`/ehdb/state-spine?execution=…[&head=…]`; the path is
/// not checked, only the query). `index` is `None` in a process that runs no index.
pub fn answer<I: StateIndex>(index: Option<&I>, target: &str) -> Answer {
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let (execution, head) = match parse(query) {
        Ok(parsed) => parsed,
        Err(error) => return Answer::error(400, "invalid", &error),
    };
    let Some(index) = index else {
        return Answer::error(503, "unavailable", "this process runs no state index");
    };
    let build = index.build(execution, head);
    let mut body = String::with_capacity(256);
    let built = match (&build.outcome, &build.spine) {
        (AdvanceOutcome::Incomplete(_), _) | (_, None) => None,
        (outcome, Some(spine)) => Some((outcome.label(), spine)),
    };
    let (outcome, label) = match built {
        Some((label, _)) => ("ok", label),
        None => ("incomplete", "incomplete"),
    };
    let _ = write!(
        body,
        r#"{{"action":"{ACTION}","outcome":"{outcome}","build":"{label}","execution_id":"{execution}","requested_head":"#
    );
    match head {
        Some(head) => {
            let _ = write!(body, "{head}");
        }
        None => body.push_str("null"),
    }
    match built {
        Some((_, spine)) => {
            let _ = write!(
                body,
                r#","complete":true,"count":{},"events":["#,
                spine.len()
            );
            for (i, event) in spine.events().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                // A payload is one JSON object (the decode checked it), as the index
                // stores it.
                body.push_str(&String::from_utf8_lossy(event.payload()));
            }
            body.push_str("]}");
        }
        None => body.push_str(r#","complete":false,"count":0,"events":[]}"#),
    }
    Answer { status: 200, body }
}

/// `execution` (required) and `head` (optional), each a decimal i64.
fn parse(query: &str) -> Result<(ExecutionId, Option<EventId>), String> {
    let mut execution = None;
    let mut head = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "execution" => execution = Some(value),
            "head" => head = Some(value),
            _ => {}
        }
    }
    let number = |name: &str, value: &str| {
        value
            .parse::<i64>()
            .map_err(|_| format!("`{name}` is not a decimal integer: {value:?}"))
    };
    let execution = number(
        "execution",
        execution.ok_or_else(|| "`execution` is required".to_owned())?,
    )?;
    let head = head.map(|h| number("head", h)).transpose()?;
    Ok((execution, head))
}

/// `text` as a JSON string.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::WalIndex;
    use chain_fold::Event;

    fn parsed(body: &str) -> serde_json::Value {
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn each_case_of_the_reference() {
        let index = WalIndex::default();
        let e = |id, prev| {
            Event::minimal(
                id,
                9,
                prev,
                if prev.is_none() {
                    "playbook_started"
                } else {
                    "step"
                },
            )
        };
        index.apply(e(1, None));
        index.apply(e(2, Some(1)));
        let ok = parsed(&answer(Some(&index), "/ehdb/state-spine?execution=9").body);
        assert_eq!(ok["requested_head"], serde_json::Value::Null);
        assert_eq!(ok["count"], 2);
        assert_eq!(ok["events"][1]["event_id"], 2);
        assert_eq!(ok["execution_id"], "9");
        let again = parsed(&answer(Some(&index), "/ehdb/state-spine?execution=9&head=2").body);
        assert_eq!(again["build"], "cache_hit");
        // A gap: event 4 names 3, which is missing. Fail closed.
        index.apply(e(4, Some(3)));
        let gap = parsed(&answer(Some(&index), "/ehdb/state-spine?head=4&execution=9").body);
        assert_eq!(
            (gap["outcome"].as_str(), gap["count"].as_i64()),
            (Some("incomplete"), Some(0))
        );
        // Not held at all: incomplete, not an error.
        let none = answer(Some(&index), "/ehdb/state-spine?execution=77");
        assert_eq!(
            (none.status, parsed(&none.body)["complete"].as_bool()),
            (200, Some(false))
        );
        for bad in [
            "",
            "?head=1",
            "?execution=",
            "?execution=1.5",
            "?execution=1&head=x",
            "?execution=99999999999999999999",
        ] {
            let answer = answer(Some(&index), &format!("/ehdb/state-spine{bad}"));
            assert_eq!(answer.status, 400, "{bad}");
            assert_eq!(parsed(&answer.body)["outcome"], "invalid");
        }
    }
}
