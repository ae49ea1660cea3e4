//! The event chains the tests publish, and helpers to wait and read metrics.

#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use bytes::Bytes;

/// The events of one execution: a root, then `len - 1` events each linked to the previous,
/// ids `execution * 1000 + 1 ..`, none terminal.
pub fn chain(execution: i64, len: i64) -> Vec<(i64, Bytes)> {
    (1..=len)
        .map(|k| {
            let id = execution * 1000 + k;
            let payload = if k == 1 {
                format!(
                    r#"{{"event_id":{id},"execution_id":{execution},"event_type":"playbook_started","result":{{"k":{k}}}}}"#
                )
            } else {
                format!(
                    r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{},"event_type":"step_completed","result":{{"k":{k}}}}}"#,
                    id - 1
                )
            };
            (execution, Bytes::from(payload))
        })
        .collect()
}

/// The tip of [`chain`]`(execution, len)`.
pub fn tip(execution: i64, len: i64) -> i64 {
    execution * 1000 + len
}

/// Waits for `done`, polling, up to `limit`.
pub fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The sum of every sample of `series` (all label sets) in a Prometheus exposition.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(series)?;
            let value = if rest.starts_with('{') {
                rest.rsplit_once(' ')?.1
            } else {
                rest.strip_prefix(' ')?
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}
