//! Decoding WAL payloads: every malformed shape gets a typed error, never a panic.

use chain_fold::{Event, EventError, Field};

fn err(json: &str) -> EventError {
    Event::from_json(json.as_bytes()).unwrap_err()
}

#[test]
fn a_full_envelope_decodes_and_keeps_its_bytes() {
    let text = r#"{"event_id":5,"execution_id":2,"prev_event_id":4,"event_type":"playbook.failed","context":{"a":[1,2]}}"#;
    let e = Event::from_json(text.as_bytes()).unwrap();
    assert_eq!((e.id(), e.execution_id(), e.prev()), (5, 2, Some(4)));
    assert!(e.is_terminal());
    // The bytes kept are the canonical form: keys sorted, as today's index serializes them.
    let canonical = r#"{"context":{"a":[1,2]},"event_id":5,"event_type":"playbook.failed","execution_id":2,"prev_event_id":4}"#;
    assert_eq!(e.payload(), canonical.as_bytes());
    let todays: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(e.payload(), serde_json::to_vec(&todays).unwrap());
}

#[test]
fn key_order_spacing_and_escapes_do_not_change_the_event() {
    let a =
        Event::from_json(br#"{"event_id":5,"execution_id":2,"event_type":"step","r":[1.0,1e2]}"#)
            .unwrap();
    let b = Event::from_json(
        br#"{ "r" : [ 1.00 , 100.0 ] ,
"execution_id":2, "event_type":"step", "event_id":5 }"#,
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.payload(), b.payload());
    assert_eq!(a.event_type(), "step");
}

#[test]
fn an_id_that_is_not_an_i64_once_parsed_is_named_from_its_last_value() {
    assert!(matches!(
        err(r#"{"event_id":5,"event_id":"x","execution_id":1}"#),
        EventError::StringId {
            field: Field::EventId,
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"event_id":5,"event_id":1.5,"execution_id":1}"#),
        EventError::NotAnInteger {
            field: Field::EventId,
            ..
        }
    ));
    // `-0` parses as a float, as today's consumer reads it.
    assert_eq!(
        err(r#"{"execution_id":1,"event_id":-0}"#),
        EventError::NotAnInteger {
            field: Field::EventId,
            text: "-0.0".into()
        }
    );
}

#[test]
fn serde_jsons_private_tokens_are_reserved_keys() {
    for token in [
        "$serde_json::private::RawValue",
        "$serde_json::private::Number",
    ] {
        let text = format!(r#"{{"{token}":"{{}}"}}"#);
        match err(&text) {
            EventError::Json(why) => {
                assert!(why.contains("reserved") && why.contains(token), "{why}")
            }
            other => panic!("{token}: {other:?}"),
        }
    }
}

#[test]
fn a_repeated_key_keeps_its_last_value_as_todays_parser_does() {
    let e = Event::from_json(br#"{"event_id":1,"event_id":2,"execution_id":1}"#).unwrap();
    assert_eq!(e.id(), 2);
    assert_eq!(
        e.payload(),
        br#"{"event_id":2,"execution_id":1}"#.as_slice()
    );
}

#[test]
fn all_six_terminal_spellings_are_terminal() {
    // The six spellings of docs/domain.md ("Terminal types"), written out here rather than
    // read from the crate, so a misspelt constant fails.
    for ty in [
        "playbook_completed",
        "playbook_failed",
        "playbook_cancelled",
        "playbook.completed",
        "playbook.failed",
        "playbook.cancelled",
    ] {
        assert!(Event::minimal(1, 1, None, ty).is_terminal(), "{ty}");
    }
    assert_eq!(chain_fold::TERMINAL_TYPES.len(), 6);
    assert!(!Event::minimal(1, 1, None, "playbook_completedx").is_terminal());
    assert!(Event::minimal(1, 1, None, "playbook_started").is_genesis());
}

#[test]
fn payload_not_an_object() {
    assert_eq!(err("[1,2,3,4]"), EventError::NotAnObject { found: "array" });
    assert_eq!(err("\"x\""), EventError::NotAnObject { found: "string" });
    assert_eq!(err("42"), EventError::NotAnObject { found: "number" });
}

#[test]
fn missing_and_null_ids() {
    assert_eq!(
        err(r#"{"execution_id":1}"#),
        EventError::Missing {
            field: Field::EventId
        }
    );
    assert_eq!(
        err(r#"{"event_id":null,"execution_id":1}"#),
        EventError::Missing {
            field: Field::EventId
        }
    );
    assert_eq!(
        err(r#"{"event_id":1}"#),
        EventError::Missing {
            field: Field::ExecutionId
        }
    );
}

#[test]
fn string_ids_are_a_clear_error() {
    assert!(matches!(
        err(r#"{"event_id":"1","execution_id":1}"#),
        EventError::StringId {
            field: Field::EventId,
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"event_id":1,"execution_id":"1"}"#),
        EventError::StringId {
            field: Field::ExecutionId,
            ..
        }
    ));
}

/// Today's index treats a string `prev_event_id` like any other non-integer: the event is
/// indexed as a chain root (docs/domain.md, "What today's index does under its lock").
/// Rejecting it would lose an event today keeps.
#[test]
fn a_string_prev_event_id_makes_a_chain_root_as_today() {
    let event =
        chain_fold::Event::from_json(br#"{"event_id":1,"execution_id":1,"prev_event_id":"0"}"#)
            .unwrap();
    assert_eq!((event.id(), event.prev()), (1, None));
}

#[test]
fn float_and_overflowing_ids() {
    assert!(matches!(
        err(r#"{"event_id":1.5,"execution_id":1}"#),
        EventError::NotAnInteger { .. }
    ));
    assert!(matches!(
        err(r#"{"event_id":1e3,"execution_id":1}"#),
        EventError::NotAnInteger { .. }
    ));
    assert!(matches!(
        err(r#"{"event_id":9223372036854775808,"execution_id":1}"#),
        EventError::OutOfRange {
            field: Field::EventId,
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"event_id":-99999999999999999999,"execution_id":1}"#),
        EventError::OutOfRange { .. }
    ));
    assert!(matches!(
        err(r#"{"event_id":true,"execution_id":1}"#),
        EventError::WrongType {
            found: "boolean",
            ..
        }
    ));
    let e = Event::from_json(br#"{"event_id":-9223372036854775808,"execution_id":0}"#).unwrap();
    assert_eq!(e.id(), i64::MIN);
}

#[test]
fn non_integer_prev_is_a_root_as_today() {
    for prev in ["null", "1.5", "true", "{}", "[]"] {
        let text = format!(r#"{{"event_id":2,"execution_id":1,"prev_event_id":{prev}}}"#);
        assert_eq!(
            Event::from_json(text.as_bytes()).unwrap().prev(),
            None,
            "{prev}"
        );
    }
}

#[test]
fn event_type_absent_or_not_a_string_is_empty() {
    let e = Event::from_json(br#"{"event_id":1,"execution_id":1,"event_type":7}"#).unwrap();
    assert_eq!(e.event_type(), "");
    let e = Event::from_json(
        br#"{"event_id":1,"execution_id":1,"event_type":"pl\u0061ybook_started"}"#,
    )
    .unwrap();
    assert!(e.is_genesis(), "escapes are decoded before classifying");
    let huge = "x".repeat(1 << 20);
    let text = format!(r#"{{"event_id":1,"execution_id":1,"event_type":"{huge}"}}"#);
    assert_eq!(
        Event::from_json(text.as_bytes())
            .unwrap()
            .event_type()
            .len(),
        1 << 20
    );
}

#[test]
fn truncated_invalid_utf8_and_trailing_garbage_are_json_errors() {
    for bad in [
        &br#"{"event_id":1,"execution_id":1"#[..],
        b"{\"event_id\":1,\"execution_id\":1,\"x\":\"\xff\"}",
        br#"{"event_id":1,"execution_id":1} x"#,
        b"",
        b"   ",
        br#"{"event_id":1,"execution_id":1,"big":1e400}"#,
    ] {
        assert!(
            matches!(Event::from_json(bad), Err(EventError::Json(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn nesting_deeper_than_consumers_parse_is_a_typed_error_without_recursion() {
    let nested = |depth: usize| {
        format!(
            r#"{{"event_id":1,"execution_id":1,"result":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    // The envelope object is one level: 126 more are the deepest a consumer parses
    // (serde_json stops at 128 levels).
    let deepest = nested(Event::MAX_DEPTH - 2);
    assert!(serde_json::from_str::<serde_json::Value>(&deepest).is_ok());
    assert!(serde_json::from_str::<serde_json::Value>(&nested(Event::MAX_DEPTH - 1)).is_err());
    let e = Event::from_json(deepest.as_bytes()).unwrap();
    assert_eq!(e.payload().len(), deepest.len());
    assert_eq!(e.to_slim().payload().len(), deepest.len());
    for depth in [Event::MAX_DEPTH - 1, 100_000] {
        assert_eq!(
            Event::from_json(nested(depth).as_bytes()).unwrap_err(),
            EventError::TooDeep {
                limit: Event::MAX_DEPTH
            },
            "{depth} levels"
        );
    }
    // Brackets inside strings are text, not nesting.
    let text = format!(
        r#"{{"event_id":1,"execution_id":1,"note":"{}"}}"#,
        "[".repeat(500)
    );
    assert!(Event::from_json(text.as_bytes()).is_ok());
}

#[test]
fn lone_surrogate_escapes_are_a_typed_error() {
    for (escape, ok) in [
        (r"\ud800", false),
        (r"\udfff", false),
        (r"\ud800x", false),
        (r"\ud800\u0041", false),
        (r"\udc00\ud800", false),
        (r"\ud83d\ude00", true),
        (r"\u00e9\\ud800", true),
    ] {
        let text = format!(r#"{{"event_id":1,"execution_id":1,"result":"a{escape}b"}}"#);
        let decoded = Event::from_json(text.as_bytes());
        if ok {
            assert!(decoded.is_ok(), "{escape}: {decoded:?}");
        } else {
            assert!(
                matches!(decoded, Err(EventError::LoneSurrogate { .. })),
                "{escape}: {decoded:?}"
            );
        }
    }
}

#[test]
fn slim_projection_keeps_only_slim_keys_and_the_link() {
    let text = r#"{"event_id":3,"execution_id":1,"prev_event_id":2,"event_type":"step","worker_id":"w","result":{"r":1},"error":null}"#;
    let slim = Event::from_json(text.as_bytes()).unwrap().to_slim();
    assert_eq!(
        std::str::from_utf8(slim.payload()).unwrap(),
        r#"{"event_id":3,"event_type":"step","execution_id":1,"result":{"r":1}}"#
    );
    assert_eq!(slim.prev(), Some(2));
}

/// An envelope as producers write it: the fields in any order, repeated or escaped, extra
/// keys on either side of the slim ones, odd values.
fn envelope() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let value = prop_oneof![
        Just("null".to_string()),
        Just("1.5e3".to_string()),
        Just("-0".to_string()),
        Just(r#"{"b":[1,{"d":2,"c":3}],"a":"x\ny"}"#.to_string()),
        Just(r#""pla\u0079book_started""#.to_string()),
        Just(r#""playbook_completed""#.to_string()),
        Just(r#""step""#.to_string()),
        // Types whose text needs an escape; a lone quote is also found verbatim in every
        // payload (each key is quoted).
        Just(r#""\"""#.to_string()),
        Just(r#""a\\b""#.to_string()),
        Just(r#""st\"ep""#.to_string()),
        Just("12".to_string()),
        Just(r#"[{"row":1,"name":"a"},{"row":2,"name":"b"}]"#.to_string()),
    ];
    let key = prop_oneof![
        Just("event_type"),
        Just("event\\u005ftype"),
        Just("result"),
        Just("context"),
        Just("worker_id"),
        Just("prev_event_id"),
        Just("status"),
        Just("zz"),
        Just("a"),
    ];
    (
        proptest::collection::vec((key, value), 0..8),
        0i64..4,
        0usize..10,
        prop_oneof![Just(""), Just(" "), Just("\n")],
    )
        .prop_map(|(members, id, at, space)| {
            let mut members: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("\"{k}\"{space}:{space}{v}"))
                .collect();
            let at = at.min(members.len());
            members.insert(at, format!("\"event_id\":{id}"));
            members.push("\"execution_id\":9".to_string());
            format!("{{{}}}", members.join(&format!(",{space}")))
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

    /// The one-pass slim decode is the whole decode projected: the same event, the same
    /// bytes, the same resident cost; and both keep today's bytes.
    #[test]
    fn the_slim_decode_is_the_whole_decode_projected(text in envelope()) {
        let whole = Event::from_json(text.as_bytes());
        let slim = Event::from_json_slim(text.as_bytes());
        match (whole, slim) {
            (Ok(whole), Ok(slim)) => {
                let todays: serde_json::Value = serde_json::from_str(&text).unwrap();
                let todays = serde_json::to_vec(&todays).unwrap();
                proptest::prop_assert_eq!(whole.payload(), todays.as_slice());
                let projected = whole.to_slim();
                proptest::prop_assert_eq!(&slim, &projected);
                proptest::prop_assert_eq!(slim.payload(), projected.payload());
                proptest::prop_assert_eq!(slim.event_type(), whole.event_type());
                proptest::prop_assert_eq!(slim.resident_bytes(), projected.resident_bytes());
                proptest::prop_assert!(slim.to_slim().ptr_eq(&slim));
            }
            (Err(a), Err(b)) => proptest::prop_assert_eq!(a, b),
            (a, b) => proptest::prop_assert!(false, "{text}: whole {a:?}, slim {b:?}"),
        }
    }
}

/// A slim event whose type lands past where an event's header can point (64 KiB in) costs
/// what the projection of the whole event costs.
#[test]
fn a_slim_event_with_its_type_far_in_costs_what_the_projection_costs() {
    let text = format!(
        r#"{{"event_id":1,"execution_id":2,"context":"{}","event_type":"e"}}"#,
        "x".repeat(70_000)
    );
    let slim = Event::from_json_slim(text.as_bytes()).unwrap();
    let projected = Event::from_json(text.as_bytes()).unwrap().to_slim();
    assert_eq!(slim, projected);
    assert_eq!(slim.event_type(), "e");
    assert_eq!(slim.resident_bytes(), projected.resident_bytes());
}

/// An event type that needs an escape costs the slim decode what it costs the projection,
/// whether its text occurs verbatim in the slim payload (a lone quote does: every key is
/// quoted) or not.
#[test]
fn a_slim_event_with_an_escaped_type_costs_what_the_projection_costs() {
    for event_type in [r#"\""#, r#"\\"#, r#"a\"b"#, r#"\u0022"#] {
        let text =
            format!(r#"{{"event_id":1,"result":-0,"event_type":"{event_type}","execution_id":2}}"#);
        let slim = Event::from_json_slim(text.as_bytes()).unwrap();
        let projected = Event::from_json(text.as_bytes()).unwrap().to_slim();
        assert_eq!(slim, projected, "{text}");
        assert_eq!(slim.event_type(), projected.event_type(), "{text}");
        assert_eq!(slim.resident_bytes(), projected.resident_bytes(), "{text}");
    }
}

/// Today's bytes for `text`: serde_json's default parser into a `Value`, then `to_vec`.
fn todays_bytes(text: &str) -> Vec<u8> {
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    serde_json::to_vec(&value).unwrap()
}

/// docs/domain.md, "Events": the bytes are a function of the payload's text as serde_json's
/// default parser reads it, not of the JSON values: a float of more than 15 significant
/// digits is read to within one unit in the last place. Two spellings of one double give
/// different bytes, and canonical bytes decoded again can change, here exactly as today.
#[test]
fn floats_past_fifteen_digits_are_read_as_todays_parser_reads_them() {
    let payload = |x: &str| format!(r#"{{"event_id":1,"execution_id":2,"x":{x}}}"#);
    let bytes = |text: &str| {
        Event::from_json(text.as_bytes())
            .unwrap()
            .payload()
            .to_vec()
    };
    // One double, two spellings (Rust's exact parser says they are the same double).
    let (a, b) = ("0.22780213362657402", "0.22780213362657403");
    assert_eq!(a.parse::<f64>().unwrap(), b.parse::<f64>().unwrap());
    let (a, b) = (payload(a), payload(b));
    assert_eq!(bytes(&a), todays_bytes(&a));
    assert_eq!(bytes(&b), todays_bytes(&b));
    assert_ne!(
        bytes(&a),
        bytes(&b),
        "two spellings of one double, two byte strings"
    );
    // Canonical bytes decoded again: a different last digit, as today's round trip gives.
    let first = payload("0.90955061764025144");
    let once = bytes(&first);
    assert_eq!(once, todays_bytes(&first));
    let once_text = String::from_utf8(once.clone()).unwrap();
    assert!(once_text.contains("0.9095506176402515"), "{once_text}");
    let twice = bytes(&once_text);
    assert_eq!(twice, todays_bytes(&once_text));
    assert_ne!(once, twice, "decoding canonical bytes again changed them");
    // At most 15 significant digits: exact, so canonical bytes decode to themselves.
    let short = payload("0.227802133626574");
    assert_eq!(
        bytes(&String::from_utf8(bytes(&short)).unwrap()),
        bytes(&short)
    );
}
