//! Runs one single-threaded operation `count` times after its setup, for instruction
//! counting under callgrind (`benches/callgrind.sh` runs it twice, with `count` and
//! `2 × count`, and divides the difference, so setup cancels out).
//!
//! `callgrind-ops <operation> <count>`; `callgrind-ops list` names the operations.

use std::hint::black_box;

use chain_fold::{Event, SpineCache, advance};
use sb_benches::lean::LeanIndex;
use sb_benches::{chain, linear, payload};
use wal_index::{IndexConfig, StateIndex, WalIndex};

const OPS: [&str; 11] = [
    "decode_1k",
    "walk_11",
    "cache_hit_27",
    "incremental_1",
    "engine_apply",
    "engine_build_incomplete",
    "engine_build_incremental",
    "lean_build_incremental",
    "engine_batch_200",
    "lean_batch_200",
    "json_write_27",
];

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_default();
    let count: i64 = args.next().and_then(|c| c.parse().ok()).unwrap_or(1000);
    let body = payload(1024);
    match op.as_str() {
        "list" => OPS.iter().for_each(|op| println!("{op}")),
        "decode_1k" => {
            let json = serde_like_envelope(&body);
            for _ in 0..count {
                black_box(Event::from_json(&json).ok());
            }
        }
        "walk_11" => {
            let chain = chain(11, &body);
            for _ in 0..count {
                black_box(chain.walk_from(11).ok());
            }
        }
        "cache_hit_27" => {
            let chain = chain(27, &body);
            let spine = chain.walk_from(27).ok();
            for _ in 0..count {
                black_box(advance(&chain, spine.as_ref(), 27).outcome);
            }
        }
        "incremental_1" => {
            // A chain growing by one event per round, its cached spine advanced by one.
            let mut grown = chain(27, &body);
            let mut cache = SpineCache::default();
            cache.advance_to(&grown, 27);
            for id in 28..28 + count {
                grown.apply(Event::from_parts(id, 1, Some(id - 1), "step", body.clone()));
                black_box(cache.advance_to(&grown, id));
            }
        }
        "engine_apply" => {
            let index = WalIndex::new(IndexConfig::default());
            for id in 1..=count {
                index.apply(Event::from_parts(id, id % 64, None, "step", body.clone()));
            }
        }
        "engine_build_incomplete" => {
            let index = WalIndex::new(IndexConfig::default());
            index.apply_batch(linear(1, 1, 27, false, &body));
            for _ in 0..count {
                black_box(index.build(1, Some(99)).outcome);
            }
        }
        "engine_build_incremental" => {
            let index = WalIndex::new(IndexConfig::default());
            index.apply_batch(linear(1, 1, 27, false, &body));
            index.build(1, Some(27));
            for id in 28..28 + count {
                index.apply(Event::from_parts(id, 1, Some(id - 1), "step", body.clone()));
                black_box(index.build(1, Some(id)).outcome);
            }
        }
        "lean_build_incremental" => {
            // The same as `engine_build_incremental` on the lean design (`sb_benches::lean`).
            let index = LeanIndex::default();
            index.apply_batch(linear(1, 1, 27, false, &body));
            index.build(1, Some(27));
            for id in 28..28 + count {
                index.apply(Event::from_parts(id, 1, Some(id - 1), "step", body.clone()));
                black_box(index.build(1, Some(id)).is_some());
            }
        }
        "engine_batch_200" => {
            // The drain's path: 200-event batches over 50 live executions of 27 events,
            // terminal last, so executions are created and evicted as the WAL cycles. The
            // WAL is built once (a fixed setup that cancels out) and replayed: a replayed
            // execution was evicted by its terminal event, so it is created afresh.
            let index = WalIndex::new(IndexConfig::default());
            let wal = sb_benches::interleaved(200, 27, 50, &payload(64));
            let batches: Vec<&[Event]> = wal.chunks(200).filter(|b| b.len() == 200).collect();
            for round in 0..count as usize {
                index.apply_batch(batches[round % batches.len()].to_vec());
            }
        }
        "lean_batch_200" => {
            // The same as `engine_batch_200` on the lean design (`sb_benches::lean`).
            let index = LeanIndex::default();
            let wal = sb_benches::interleaved(200, 27, 50, &payload(64));
            let batches: Vec<&[Event]> = wal.chunks(200).filter(|b| b.len() == 200).collect();
            for round in 0..count as usize {
                index.apply_batch(batches[round % batches.len()].to_vec());
            }
        }
        "json_write_27" => {
            // Serving a 27-event spine's JSON: one vectored write into a reused buffer.
            let spine = chain(27, &body).walk_from(27).ok();
            let json = spine.map(|s| s.json_array());
            let mut out = Vec::with_capacity(64 * 1024);
            for _ in 0..count {
                out.clear();
                if let Some(json) = &json {
                    let _ = json.write_to(&mut out);
                }
                black_box(out.len());
            }
        }
        other => {
            eprintln!("unknown operation {other:?}; try `list`");
            std::process::exit(2);
        }
    }
}

/// A 1 KiB full envelope.
fn serde_like_envelope(body: &bytes::Bytes) -> Vec<u8> {
    let pad = String::from_utf8_lossy(body).into_owned();
    format!(
        r#"{{"event_id":42,"execution_id":7,"catalog_id":1,"event_type":"step_completed","status":"COMPLETED","prev_event_id":41,"context":{{}},"result":{},"meta":null,"error":null,"worker_id":"w"}}"#,
        pad
    )
    .into_bytes()
}
