//! What the shard tests share: a WAL of production-shaped envelopes, a replay of it, and
//! temporary directories.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

use bytes::Bytes;
use chain_fold::{Chain, Event, ExecutionId};
use wal_index::IndexConfig;

/// The first execution id: W's cold-load test's (a snowflake of 2026-06-30).
pub const FIRST: ExecutionId = 330_390_737_327_759_360;

/// `executions` executions of `len` events each (the last one a single genesis event,
/// so its shard's `prev_event_id` column is all null), production-shaped: node names,
/// statuses, a result reference with `extracted`, members a slim index drops, non-ASCII
/// text. Every other execution ends with `playbook.completed`.
pub fn wal(executions: i64, len: i64) -> Vec<String> {
    let mut lines = Vec::new();
    for x in 0..executions {
        let execution = FIRST + x;
        let events = if x == executions - 1 { 1 } else { len };
        for i in 1..=events {
            let id = 1_000 * (x + 1) + i;
            let event_type = match i {
                1 => "playbook_started".to_owned(),
                i if i == events && x % 2 == 0 && events > 1 => "playbook.completed".to_owned(),
                _ => "step.exit".to_owned(),
            };
            let prev = if i == 1 {
                String::new()
            } else {
                format!(r#""prev_event_id":{},"#, id - 1)
            };
            lines.push(format!(
                r#"{{"event_id":{id},"execution_id":{execution},{prev}"event_type":"{event_type}","node_name":"step_{i}","status":"completed","worker_id":"w-{x}","catalog_id":657533161378677602,"timestamp":"2026-06-30T12:00:{:02}Z","result":{{"kind":"result_ref","uri":"noetl://r/{id}","extracted":{{"rows":{i},"note":"café ☕"}}}},"meta":{{"attempt":1}}}}"#,
                i % 60
            ));
        }
    }
    lines
}

/// The chain's head of execution `x` of [`wal`].
pub fn head(executions: i64, len: i64, x: i64) -> i64 {
    let events = if x == executions - 1 { 1 } else { len };
    1_000 * (x + 1) + events
}

/// The spine a replay of `lines` gives for `execution` to `head`, slim as production's
/// index stores it: each line decoded and applied to the execution's chain, in log order.
pub fn replayed(lines: &[String], execution: ExecutionId, head: i64) -> Vec<Bytes> {
    let mut chain = Chain::new(IndexConfig::default().order);
    for line in lines {
        let event = Event::from_json_slim(line.as_bytes()).unwrap();
        if event.execution_id() == execution {
            chain.apply(event);
        }
    }
    let spine = chain.walk_from(head).expect("a whole chain");
    spine.events().map(|e| e.payload_bytes()).collect()
}

/// Production's index settings: slim payloads.
pub fn slim() -> IndexConfig {
    IndexConfig {
        slim: true,
        ..IndexConfig::default()
    }
}

/// The payload bytes of the spine a drive served.
pub fn served_bytes(drive: &wal_index::Drive) -> Vec<Bytes> {
    let spine = drive.outcome.spine().expect("served");
    spine.events().map(|e| e.payload_bytes()).collect()
}

/// A fresh directory under the system's temporary one.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("state-shard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
