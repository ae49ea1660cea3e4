//! The canonical writers against today's bytes and against each other.

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

/// Odd producer text: keys out of order at every level, repeats, spacing, every kind of
/// escape, numbers at the integer limits and in float spellings, non-objects.
const ODD_CASES: [&str; 9] = [
    r#"{"b":1,"a":{"d":[1,2,{"z":null,"y":true}],"c":"x"}}"#,
    "{ \"a\" : 1 ,\n \"a\": 2 }",
    r#"{"s":"\u00e9\/\"\\\n\t\u0001\u007f","é":1,"e":2,"\u0065":3}"#,
    r#"[1e2, -0, 0.1, 1.5e300, 18446744073709551615, -9223372036854775808, 18446744073709551616, 1E-7, -1.0]"#,
    r#"{"emoji":"\ud83d\ude00","":""}"#,
    "  \"top\"  ",
    "123",
    "[]",
    "{}",
];

#[test]
fn matches_todays_serialization_on_the_odd_cases() {
    for json in ODD_CASES {
        assert_eq!(canonical(json), todays(json), "{json}");
    }
}

/// JSON text as producers may write it: random whitespace, keys in any order and
/// repeated, strings with any escape a producer may choose, numbers in any spelling.
fn producer_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let space = prop_oneof![Just(""), Just(""), Just(" "), Just("\n\t ")];
    let char_text = prop_oneof![
        any::<char>(),
        prop_oneof![
            Just('"'),
            Just('\\'),
            Just('/'),
            Just('\u{1}'),
            Just('\n'),
            Just('\u{7f}'),
            Just('é'),
            Just('😀')
        ],
    ];
    let string = proptest::collection::vec((char_text, 0u8..4), 0..6).prop_map(|chars| {
        let mut out = String::from("\"");
        for (c, how) in chars {
            match (c, how) {
                ('"', _) => out.push_str("\\\""),
                ('\\', _) => out.push_str("\\\\"),
                (c, _) if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                ('/', 0) => out.push_str("\\/"),
                (c, 1) if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04X}", c as u32)),
                (c, 2) if (c as u32) >= 0x10000 => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                (c, _) => out.push(c),
            }
        }
        out.push('"');
        out
    });
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        Just("-0".to_string()),
        Just("1E2".to_string()),
        Just("100000000000000000000".to_string()),
        Just("0.30000000000000004".to_string()),
    ];
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        number,
        string.clone(),
    ];
    let key = prop_oneof![
        Just("\"a\"".to_string()),
        Just("\"b\"".to_string()),
        Just("\"\\u0061\"".to_string()),
        Just("\"aa\"".to_string()),
        Just("\"A\"".to_string()),
        Just("\"\"".to_string()),
        Just("\"é\"".to_string()),
        string,
    ];
    leaf.prop_recursive(4, 48, 5, move |inner| {
        let space = space.clone();
        prop_oneof![
            (
                proptest::collection::vec(inner.clone(), 0..5),
                space.clone()
            )
                .prop_map(|(items, s)| { format!("[{s}{}{s}]", items.join(&format!("{s},{s}"))) }),
            (proptest::collection::vec((key.clone(), inner), 0..5), space).prop_map(
                |(members, s)| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("{s}{k}{s}:{s}{v}{s}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }
            ),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// The canonical bytes are today's bytes, whatever the producer wrote.
    #[test]
    fn canonical_bytes_are_a_value_round_trip(text in producer_text()) {
        let todays = serde_json::from_str::<serde_json::Value>(&text)
            .map(|value| serde_json::to_string(&value).unwrap());
        let ours = canonical_json(text.as_bytes())
            .map(|bytes| String::from_utf8(bytes).unwrap());
        match (todays, ours) {
            (Ok(todays), Ok(ours)) => proptest::prop_assert_eq!(ours, todays, "{}", text),
            (Err(_), Err(_)) => {}
            (todays, ours) => proptest::prop_assert!(false, "{text}: today {todays:?}, ours {ours:?}"),
        }
    }
}

/// What the hand-written pass says of `json`, beside what the serde_json-driven writer
/// says: the pass may give up on anything, but whenever it writes bytes they are the
/// other writer's, and it never accepts what the other writer rejects.
fn passes_agree(json: &[u8]) -> Result<bool, String> {
    let mut written = Vec::new();
    let top = super::fast::write(json, &mut written);
    let accepted = top.is_some();
    let fast = top.map_or_else(Vec::new, |top| super::with_top_in_key_order(&written, top));
    match (accepted, super::canonical_json_with_serde(json)) {
        (true, Ok(serde)) if fast == serde => Ok(true),
        (true, Ok(serde)) => Err(format!(
            "{:?}: the pass wrote {:?}, serde {:?}",
            String::from_utf8_lossy(json),
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&serde)
        )),
        (true, Err(e)) => Err(format!(
            "{:?}: the pass accepted what serde rejects ({e})",
            String::from_utf8_lossy(json)
        )),
        (false, _) => Ok(false),
    }
}

#[test]
fn the_hand_written_pass_writes_what_producers_send_itself() {
    let envelope = r#"{"event_id":3,"execution_id":1,"prev_event_id":2,"result":{"rows":[{"row":0,"name":"item-0","ok":true}]}}"#;
    for json in ODD_CASES.into_iter().chain([envelope]) {
        assert_eq!(passes_agree(json.as_bytes()), Ok(true), "{json}");
    }
}

/// A float spelled as producers spell them: up to 17 significant digits, a decimal
/// point anywhere, an exponent or none, either sign.
fn float_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    (
        (1u32..=17).prop_flat_map(|n| 10u64.pow(n - 1)..10u64.pow(n)),
        0usize..18,
        prop_oneof![Just(None), (-30i32..30).prop_map(Some)],
        any::<bool>(),
        prop_oneof![Just("e"), Just("E"), Just("e+")],
    )
        .prop_map(|(mantissa, point, exponent, negative, e)| {
            let digits = mantissa.to_string();
            let point = point.min(digits.len() - 1);
            let (int, frac) = digits.split_at(digits.len() - point);
            let mut text = String::new();
            if negative {
                text.push('-');
            }
            text.push_str(int);
            if !frac.is_empty() {
                text.push('.');
                text.push_str(frac);
            }
            if let Some(exponent) = exponent {
                let e = if exponent < 0 { "e" } else { e };
                text.push_str(&format!("{e}{exponent}"));
            }
            text
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]

    /// Floats the pass reads itself are written as serde's parse and serialization
    /// write them, and the rest are left to serde.
    #[test]
    fn floats_are_read_as_serde_reads_them(text in float_text()) {
        let json = format!("[{text},{{\"b\":{text},\"a\":1}}]");
        if let Err(why) = passes_agree(json.as_bytes()) {
            proptest::prop_assert!(false, "{}", why);
        }
    }
}

#[test]
fn floats_at_the_edges_of_what_the_pass_reads() {
    for text in [
        "0.1",
        "0.30000000000000004",
        "1e22",
        "1e23",
        "-1e-22",
        "1e-23",
        "123456789012345e-22",
        "1234567890123456e-22",
        "9007199254740993.0",
        "4.35",
        "2.675",
        "1.0",
        "-0.0",
        "0e0",
        "0.0000001",
        "1e+0",
        "1E-0",
        "5e-324",
        "1.7976931348623157e308",
        "1e0005",
        "999999999999999e22",
        "0.000000000000000000001",
        "100000000000000000000000.0",
    ] {
        let json = format!("[{text}]");
        assert!(
            passes_agree(json.as_bytes()).is_ok(),
            "{text}: {:?}",
            passes_agree(json.as_bytes())
        );
        assert_eq!(canonical(&json), todays(&json), "{text}");
    }
    // These are read by the pass itself, not left to serde.
    for text in [
        "0.1",
        "4.35",
        "1e22",
        "-1e-22",
        "123456789012345e-22",
        "0e0",
    ] {
        let json = format!("[{text}]");
        assert_eq!(passes_agree(json.as_bytes()), Ok(true), "{text}");
    }
}

/// Rows one after the other reuse the last row's key order only when their keys are the
/// same: same words but other lengths, other keys, repeats, long keys and escaped keys
/// in between.
#[test]
fn rows_in_a_row_are_written_in_their_own_key_order() {
    let rows = [
        r#"{"row":1,"name":"a","qty":2}"#,
        r#"{"row":2,"name":"b","qty":3}"#,
        r#"{"row":3,"name":"c","qty":4,"qty":5}"#,
        r#"{"row":4,"name":"d","qt":6}"#,
        r#"{"ro":5,"name":"e","qty":7}"#,
        r#"{"row":6,"name":"f","qty":8}"#,
        r#"{"row\u0000":7,"name":"g","qty":9}"#,
        r#"{"row":8,"name":"h","quantity_long":10,"quantity_lo":11}"#,
        r#"{"row":9,"name":"i","quantity_long":12,"quantity_lo":13}"#,
        r#"{"\u0072ow":10,"name":"j","qty":14}"#,
        r#"{"row":11,"name":"k","qty":15,"row":16}"#,
        r#"{"row":12,"name":"l","qty":17,"row":18}"#,
        r#"{"row":13,"name":"m","qty":19}"#,
        r#"{"z":0,"quantity_b":1,"quantity_a":2}"#,
        r#"{"z":0,"quantity_a":1,"quantity_b":2}"#,
        r#"{"z":0,"b":1,"a":2}"#,
        r#"{"z":0,"a":1,"b":2}"#,
    ];
    let json = format!("[{}]", rows.join(","));
    assert_eq!(passes_agree(json.as_bytes()), Ok(true), "{json}");
    assert_eq!(canonical(&json), todays(&json));
}

#[test]
fn the_hand_written_pass_leaves_every_error_to_serde() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let mut cases: Vec<Vec<u8>> = [
        "",
        " ",
        "{",
        "}",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{\"a\":}",
        "{1:2}",
        "01",
        "-01",
        "1.",
        ".5",
        "-",
        "1e",
        "1e+",
        "1e400",
        "-1e400",
        "+1",
        "tru",
        "nul",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\x\"",
        "\"\\u12\"",
        "\"open",
        "{\"a\":1} x",
        "[1] [2]",
        "\u{feff}{}",
        r#"{"$serde_json::private::RawValue":"7"}"#,
        r#"{"$serde_json::private::Number":"7"}"#,
        r#"{"x":{"$serde_json::private::RawValue":"[2, 1]"}}"#,
    ]
    .iter()
    .map(|text| text.as_bytes().to_vec())
    .collect();
    cases.push(b"\"a\x01b\"".to_vec());
    cases.push(b"\"\xff\"".to_vec());
    cases.push(b"{\"\xc3\":1}".to_vec());
    cases.push(b"\"\xed\xa0\x80\"".to_vec());
    for n in [95, 96, 97, 126, 127, 128, 129, 300] {
        cases.push(deep(n).into_bytes());
    }
    for json in cases {
        assert!(
            passes_agree(&json).is_ok(),
            "{}",
            passes_agree(&json).unwrap_err()
        );
    }
    // And the whole decode gives serde_json's answer for each of them.
    assert!(canonical_json(deep(128).as_bytes()).is_err());
    assert!(canonical_json(deep(127).as_bytes()).is_ok());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

    /// Whatever producers write, and whatever a byte flipped or a cut makes of it, the
    /// hand-written pass writes serde's bytes or gives up.
    #[test]
    fn the_hand_written_pass_agrees_with_serde(
        text in producer_text(),
        at in proptest::prelude::any::<proptest::sample::Index>(),
        byte in proptest::prelude::any::<u8>(),
        how in 0u8..3,
    ) {
        let mut json = text.into_bytes();
        if !json.is_empty() {
            let at = at.index(json.len());
            match how {
                0 => {}
                1 => json[at] = byte,
                _ => json.truncate(at),
            }
        }
        if let Err(why) = passes_agree(&json) {
            proptest::prop_assert!(false, "{}", why);
        }
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

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// The in-place reorder writes what the plain one (every member copied aside and back
    /// in order) writes, whichever member is largest, wherever it lands, with ties and with
    /// members left out (a repeated key's earlier values): any subset of the members in
    /// any order.
    #[test]
    fn the_in_place_reorder_writes_what_copying_every_member_writes(
        lengths in proptest::collection::vec(1usize..40, 1..7),
        picks in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 1..7),
        prefix in 0usize..4,
    ) {
        use super::{Member, rewrite_sorted};
        // An object's members in arrival order after `prefix` bytes and its `{`: member
        // `k` is `lengths[k]` bytes of the letter `a + k`, one comma between each two.
        let mut out = vec![b'x'; prefix];
        out.push(b'{');
        let mut members = Vec::new();
        for (k, &len) in lengths.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            let start = out.len();
            out.extend(std::iter::repeat_n(b'a' + k as u8, len));
            members.push(Member { key: std::borrow::Cow::Borrowed(b"k"), prefix: 0, start, value: start, end: out.len() });
        }
        // Distinct members in any order.
        let mut order: Vec<usize> = Vec::new();
        for pick in &picks {
            let at = pick.index(members.len());
            if !order.contains(&at) {
                order.push(at);
            }
        }
        let mut expected = out[..=prefix].to_vec();
        for (k, &at) in order.iter().enumerate() {
            if k > 0 {
                expected.push(b',');
            }
            expected.extend_from_slice(&out[members[at].start..members[at].end]);
        }
        rewrite_sorted(&mut out, prefix, (&members, &order), &mut Vec::new());
        proptest::prop_assert_eq!(out, expected);
    }
}
