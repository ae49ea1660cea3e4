//! The frame reader against frames serde_json encodes (an independent encoder), read whole
//! and one byte at a time, and against hostile frames: each is a typed error or a counted
//! bad record, never a panic or an unbounded allocation, and good neighbours are kept.

mod common;

use std::io::{BufReader, Cursor};

use chain_fold::Event;
use common::{LogRecord, frame_of};
use proptest::prelude::*;
use wal_index::ingest::{Decoded, RecordError};
use wal_source_ehdb::frame::{FeedError, FrameReader, FrameSummary, Limits, frame};

/// Every item of every frame in `bytes`, read through a buffer of `capacity` bytes.
fn read_all(
    bytes: &[u8],
    capacity: usize,
    limits: Limits,
) -> (Vec<Decoded>, Vec<FrameSummary>, Option<FeedError>) {
    let mut input = BufReader::with_capacity(capacity, Cursor::new(bytes));
    let mut reader = FrameReader::new(limits);
    let (mut items, mut frames) = (Vec::new(), Vec::new());
    loop {
        match reader.read_frame(&mut input, |d| items.push(d)) {
            Ok(Some(summary)) => frames.push(summary),
            Ok(None) => return (items, frames, None),
            Err(error) => return (items, frames, Some(error)),
        }
    }
}

fn good(items: &[Decoded]) -> Vec<(u64, Vec<u8>)> {
    items
        .iter()
        .filter_map(|d| {
            d.event
                .as_ref()
                .ok()
                .map(|e| (d.position, e.payload().to_vec()))
        })
        .collect()
}

fn bad_reasons(items: &[Decoded]) -> Vec<String> {
    items
        .iter()
        .filter_map(|d| d.event.as_ref().err().map(ToString::to_string))
        .collect()
}

#[test]
fn records_of_two_frames_arrive_in_order_with_their_sequence_as_position() {
    let first = [
        LogRecord::event(1, 7, 1, None),
        LogRecord::event(2, 7, 2, Some(1)),
    ];
    let second = [LogRecord::event(5, 8, 1, None)];
    let mut bytes = frame_of(&first);
    bytes.extend(frame_of(&[]));
    bytes.extend(frame_of(&second));
    let (items, frames, error) = read_all(&bytes, 64 << 10, Limits::default());
    assert!(error.is_none());
    assert_eq!(frames.len(), 3, "an empty frame (a heartbeat) is a frame");
    assert_eq!(
        items.iter().map(|d| d.position).collect::<Vec<_>>(),
        vec![1, 2, 5]
    );
    for (item, record) in items.iter().zip(first.iter().chain(&second)) {
        let expected = Event::from_json(record.payload.as_bytes()).unwrap();
        assert_eq!(item.event.as_ref().unwrap(), &expected);
    }
}

/// A payload with every kind of character a producer sends: quotes, backslashes, control
/// characters, non-ASCII text and characters outside the BMP (which serde_json writes raw,
/// and `ascii_escaped` writes as surrogate-pair escapes).
fn payload_strategy() -> impl Strategy<Value = String> {
    (
        1i64..1000,
        1i64..50,
        proptest::collection::vec(
            prop_oneof![
                Just("\"".to_owned()),
                Just("\\".to_owned()),
                Just("\n\t\u{1}".to_owned()),
                Just("é".to_owned()),
                Just("😀".to_owned()),
                "[a-z ]{0,12}",
            ],
            0..8,
        ),
    )
        .prop_map(|(execution, id, parts)| {
            serde_json::json!({
                "event_id": id,
                "execution_id": execution,
                "event_type": "step",
                "result": { "text": parts.concat() },
            })
            .to_string()
        })
}

/// `text` as a JSON string with every non-ASCII character escaped (`\uXXXX`, surrogate
/// pairs above the BMP): the other form a writer may use.
fn ascii_escaped(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the payloads and however the bytes are split, the reader hands over the
    /// events `Event::from_json` makes of the payloads, in order.
    #[test]
    fn records_decode_as_their_payloads_do(
        payloads in proptest::collection::vec(payload_strategy(), 0..6),
        capacity in prop_oneof![Just(1usize), Just(7), Just(64 << 10)],
        escape_all in any::<bool>(),
    ) {
        let records: Vec<LogRecord> = payloads.iter().enumerate().map(|(n, payload)| {
            let event = Event::from_json(payload.as_bytes()).unwrap();
            LogRecord {
                global_sequence: n as u64 + 1,
                execution_id: event.execution_id().to_string(),
                payload: payload.clone(),
            }
        }).collect();
        let bytes = if escape_all {
            let body: Vec<String> = records.iter().map(|r| format!(
                r#"{{"global_sequence":{},"execution_id":"{}","transaction_id":"t","payload":{}}}"#,
                r.global_sequence, r.execution_id, ascii_escaped(&r.payload)
            )).collect();
            frame(format!("[{}]", body.join(",")).as_bytes())
        } else {
            frame_of(&records)
        };
        let (items, _, error) = read_all(&bytes, capacity, Limits::default());
        prop_assert!(error.is_none());
        let expected: Vec<(u64, Vec<u8>)> = records.iter().map(|r| {
            (r.global_sequence, Event::from_json(r.payload.as_bytes()).unwrap().payload().to_vec())
        }).collect();
        prop_assert_eq!(good(&items), expected);
    }
}

#[test]
fn a_length_prefix_over_the_cap_is_an_error_before_anything_is_read() {
    // A 4 GiB − 1 prefix with nothing behind it: an attempt to allocate or read it would
    // fail differently (out of memory, or an unexpected end).
    let bytes = u32::MAX.to_be_bytes();
    let (items, _, error) = read_all(&bytes, 64 << 10, Limits::default());
    assert!(items.is_empty());
    assert!(matches!(
        error,
        Some(FeedError::FrameTooLarge {
            len: 4_294_967_295,
            ..
        })
    ));
    let small = Limits {
        max_frame_bytes: 10,
        ..Limits::default()
    };
    let (_, _, error) = read_all(&frame_of(&[LogRecord::event(1, 7, 1, None)]), 64, small);
    assert!(matches!(
        error,
        Some(FeedError::FrameTooLarge { max: 10, .. })
    ));
}

#[test]
fn a_frame_that_is_not_json_is_skipped_and_the_next_frame_is_read() {
    let mut bytes = frame(b"this is not json");
    bytes.extend(frame_of(&[LogRecord::event(3, 7, 1, None)]));
    let (items, frames, error) = read_all(&bytes, 5, Limits::default());
    assert!(error.is_none());
    assert!(frames[0].abandoned && !frames[1].abandoned);
    assert_eq!(good(&items).len(), 1);
    assert_eq!(bad_reasons(&items).len(), 1);
    assert!(
        bad_reasons(&items)[0].contains("not a JSON array"),
        "{:?}",
        bad_reasons(&items)
    );
}

#[test]
fn the_records_before_a_break_are_kept() {
    let good_record = serde_json::to_string(&LogRecord::event(1, 7, 1, None).json()).unwrap();
    let bytes = frame(format!("[{good_record}, }}]").as_bytes());
    let (items, frames, error) = read_all(&bytes, 3, Limits::default());
    assert!(error.is_none());
    assert!(frames[0].abandoned);
    assert_eq!(good(&items).len(), 1);
    assert_eq!(
        items[1].position, 1,
        "a bad item keeps the log order of the last good one"
    );
}

#[test]
fn an_array_of_non_records_is_one_bad_record_each() {
    let good_record = serde_json::to_string(&LogRecord::event(4, 7, 1, None).json()).unwrap();
    let bytes = frame(
        format!(r#"[1, "x", null, [2, {{"a": [true]}}], {{}}, {{"global_sequence": -1}}, {good_record}]"#)
            .as_bytes(),
    );
    let (items, frames, error) = read_all(&bytes, 64 << 10, Limits::default());
    assert!(error.is_none() && !frames[0].abandoned);
    assert_eq!(bad_reasons(&items).len(), 6, "{:?}", bad_reasons(&items));
    assert_eq!(
        good(&items),
        vec![(
            4,
            Event::from_json(LogRecord::event(4, 7, 1, None).payload.as_bytes())
                .unwrap()
                .payload()
                .to_vec()
        )]
    );
}

#[test]
fn bad_payloads_and_envelopes_are_bad_records_with_their_reason() {
    let record = |execution_id: &str, payload: &str| {
        format!(
            r#"{{"global_sequence":9,"execution_id":"{execution_id}","transaction_id":"t","payload":{payload}}}"#
        )
    };
    let cases = [
        (record("7", r#""not an event""#), "not valid JSON"),
        (record("7", r#""[1,2]""#), "not an object"),
        (
            record("8", r#""{\"event_id\":1,\"execution_id\":7}""#),
            "disagrees",
        ),
        (
            record("seven", r#""{\"event_id\":1,\"execution_id\":7}""#),
            "not an integer",
        ),
        (record("7", "42"), "not a string"),
        // A lone surrogate in the frame's string itself...
        (
            record(
                "7",
                r#""{\"event_id\":1,\"execution_id\":7,\"x\":\"\ud800\"}""#,
            ),
            "lone surrogate",
        ),
        // ... and one escaped inside the payload's JSON text.
        (
            record(
                "7",
                r#""{\"event_id\":1,\"execution_id\":7,\"x\":\"\\ud800\"}""#,
            ),
            "lone surrogate",
        ),
        (
            r#"{"execution_id":"7","payload":"{}"}"#.to_owned(),
            "no `global_sequence`",
        ),
        (
            r#"{"global_sequence":3,"payload":"{}"}"#.to_owned(),
            "no `execution_id`",
        ),
    ];
    for (record, reason) in cases {
        let bytes = frame(format!("[{record}]").as_bytes());
        let (items, frames, error) = read_all(&bytes, 4, Limits::default());
        assert!(error.is_none() && !frames[0].abandoned, "{record}");
        assert_eq!(items.len(), 1, "{record}");
        let why = items[0].event.as_ref().expect_err(&record).to_string();
        assert!(why.contains(reason), "{record}: {why}");
        if reason == "lone surrogate" && record.contains(r"\\ud800") {
            assert!(
                matches!(items[0].event, Err(RecordError::Event(_))),
                "{record}"
            );
        }
    }
}

#[test]
fn a_payload_over_its_cap_is_a_bad_record_and_is_not_kept() {
    let big = LogRecord {
        global_sequence: 1,
        execution_id: "7".into(),
        payload: format!(
            r#"{{"event_id":1,"execution_id":7,"pad":"{}"}}"#,
            "x".repeat(10_000)
        ),
    };
    let limits = Limits {
        max_payload_bytes: 1000,
        ..Limits::default()
    };
    let (items, _, error) = read_all(
        &frame_of(&[big, LogRecord::event(2, 7, 2, None)]),
        512,
        limits,
    );
    assert!(error.is_none());
    assert!(bad_reasons(&items)[0].contains("longer than the cap"));
    assert_eq!(good(&items).len(), 1);
}

#[test]
fn values_nested_past_the_limit_abandon_the_frame_without_deep_recursion() {
    let bomb = format!("[{}{}]", "[".repeat(100_000), "]".repeat(100_000));
    let (items, frames, error) = read_all(&frame(bomb.as_bytes()), 64 << 10, Limits::default());
    assert!(error.is_none());
    assert!(frames[0].abandoned);
    assert!(bad_reasons(&items)[0].contains("nest too deep"));
}

#[test]
fn a_connection_cut_mid_frame_is_an_io_error_after_the_records_already_read() {
    let records = [
        LogRecord::event(1, 7, 1, None),
        LogRecord::event(2, 7, 2, Some(1)),
    ];
    let bytes = frame_of(&records);
    let cut = &bytes[..bytes.len() - 3];
    let (items, _, error) = read_all(cut, 16, Limits::default());
    assert_eq!(
        good(&items).len(),
        1,
        "the first record was handed over before the cut"
    );
    assert!(
        matches!(error, Some(FeedError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof)
    );
}
