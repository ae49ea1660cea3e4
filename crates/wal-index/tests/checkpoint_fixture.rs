//! The checkpoint format is stable: files written by this version, checked in under
//! `tests/fixtures/`, are read by every later build for as long as their format version is
//! read, and the bytes a checkpoint of the same index is written as do not change.
//!
//! The event images in a checkpoint come from chain-fold's event layout
//! (`Event::write_image`): a change to the event header that changed an image would change
//! these bytes, and fails here unless the format version moves (docs/checkpoint-format.md,
//! "Versioning"). Moving the version refuses these files
//! (`format_version`): replace them with files of the new version, made with
//! `SB_BLESS_FIXTURES=1 cargo test -p wal-index --test checkpoint_fixture`, and keep a test
//! of the old files for as long as the old version is read.

use std::path::PathBuf;

use wal_index::checkpoint::{Checkpoint, Fingerprint, LogIdentity, Position, SourcePosition};
use wal_index::{Event, IndexConfig, StateIndex, WalIndex};

/// Executions of every shape the layout has: payload fields beyond the envelope, an escaped
/// type and string, a far link, a chain without its genesis, an inversion (a child
/// published before its parent), a terminal event.
fn payloads() -> Vec<&'static str> {
    vec![
        r#"{"event_id":1,"execution_id":7,"event_type":"playbook_started","catalog_id":3}"#,
        r#"{"event_id":2,"execution_id":7,"prev_event_id":1,"event_type":"step","result":{"rows":[1,2],"note":"caf\u00e9"},"worker_id":"w-2"}"#,
        r#"{"event_id":3,"execution_id":7,"prev_event_id":2,"event_type":"odd\"type","meta":null}"#,
        r#"{"event_id":8589934588,"execution_id":7,"prev_event_id":3,"event_type":"step"}"#,
        r#"{"event_id":5,"execution_id":11,"prev_event_id":4,"event_type":"step"}"#,
        r#"{"event_id":60,"execution_id":12,"prev_event_id":3,"event_type":"step"}"#,
        r#"{"event_id":1,"execution_id":12,"event_type":"playbook_started"}"#,
        r#"{"event_id":2,"execution_id":12,"prev_event_id":1,"event_type":"step"}"#,
        r#"{"event_id":3,"execution_id":12,"prev_event_id":2,"event_type":"step"}"#,
        r#"{"event_id":1,"execution_id":13,"event_type":"playbook_started"}"#,
        r#"{"event_id":2,"execution_id":13,"prev_event_id":1,"event_type":"playbook_completed"}"#,
    ]
}

/// A checkpoint of an index holding `payloads()`, with the moment-dependent fields fixed.
fn checkpoint(slim: bool) -> Checkpoint {
    let config = IndexConfig {
        slim,
        ..IndexConfig::default()
    };
    let index = WalIndex::new(config);
    for payload in payloads() {
        let event = Event::from_json(payload.as_bytes()).unwrap();
        // One at a time, as a replay: the terminal execution is kept whole by a rehydrate.
        index.rehydrate(event.execution_id(), [event]);
    }
    let log = LogIdentity::new("ehdb", "10.0.0.7:7070", "shards=0,1");
    let at = SourcePosition {
        log,
        positions: vec![
            Position {
                partition: "shard 0".to_owned(),
                records: vec![
                    Fingerprint::of(41, payloads()[0].as_bytes()),
                    Fingerprint::of(42, payloads()[1].as_bytes()),
                ],
            },
            Position {
                partition: "shard 1".to_owned(),
                records: vec![Fingerprint::of(9, payloads()[4].as_bytes())],
            },
        ],
    };
    let mut checkpoint = Checkpoint::capture(&index, at);
    checkpoint.created_unix_ms = 1_796_400_000_000;
    for (n, execution) in checkpoint.executions.iter_mut().enumerate() {
        execution.idle_ms = 1_000 * n as u64;
    }
    checkpoint
}

fn fixture(slim: bool) -> PathBuf {
    let name = if slim {
        "checkpoint-v2-slim.sbix"
    } else {
        "checkpoint-v2-whole.sbix"
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn the_checked_in_files_read_back_and_a_checkpoint_of_the_same_index_writes_the_same_bytes() {
    for slim in [false, true] {
        let ours = checkpoint(slim);
        let path = fixture(slim);
        if std::env::var_os("SB_BLESS_FIXTURES").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, ours.encode()).unwrap();
        }
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Read by this build: every block verifies, and it holds what was captured.
        let read = Checkpoint::decode(&bytes).unwrap_or_else(|why| {
            panic!(
                "{} no longer reads ({why}): a format change needs a new version and new fixtures",
                path.display()
            )
        });
        assert_eq!(
            read,
            ours,
            "{}: the file reads back as captured",
            path.display()
        );
        assert_eq!(
            read.executions
                .iter()
                .map(|e| e.execution_id)
                .collect::<Vec<_>>(),
            vec![7, 11, 12, 13]
        );
        // Written by this build: the same bytes, event images included.
        assert!(
            ours.encode() == bytes,
            "{}: this build writes other bytes for the same checkpoint (an event image or the \
             layout changed): move the format version and bless new fixtures",
            path.display()
        );
    }
}

#[test]
fn a_file_read_back_serves_what_the_index_it_was_taken_from_serves() {
    for slim in [false, true] {
        let config = IndexConfig {
            slim,
            ..IndexConfig::default()
        };
        let bytes = std::fs::read(fixture(slim)).unwrap();
        let restored = WalIndex::new(config);
        Checkpoint::decode(&bytes).unwrap().restore_into(&restored);
        let spine = restored.build(7, Some(8_589_934_588)).spine.unwrap();
        assert_eq!(spine.ids(), vec![1, 2, 3, 8_589_934_588]);
        let expected: Vec<u8> = {
            let mut out = b"[".to_vec();
            for (n, payload) in payloads()[..4].iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                let event = Event::from_json(payload.as_bytes()).unwrap();
                let event = if slim { event.to_slim() } else { event };
                out.extend_from_slice(event.payload());
            }
            out.push(b']');
            out
        };
        assert_eq!(spine.json_array().to_bytes().to_vec(), expected);
        // The inversion: 60 links back to 3, published before it.
        assert_eq!(
            restored.build(12, Some(60)).spine.unwrap().ids(),
            vec![1, 2, 3, 60]
        );
    }
}
