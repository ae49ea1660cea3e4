//! Checkpoints: what a restored index serves, and every damaged or foreign checkpoint
//! refused with its reason (docs/checkpoint-format.md; the rule that nothing from a refused
//! checkpoint is served is the module's, `wal_index::checkpoint`).

use std::path::PathBuf;

use wal_index::checkpoint::{
    Checkpoint, DirStore, Fingerprint, LogIdentity, Position, Refusal, SourcePosition,
};
use wal_index::{Event, IndexConfig, SpineOrder, StateIndex, WalIndex};

fn log() -> LogIdentity {
    LogIdentity::new("ehdb", "127.0.0.1:7070", "shards=1")
}

/// Executions of every shape the event layout has: in-order chains, a fan-out inversion, a
/// far link, an escaped (owned) type, a redelivered rewrite, a chain without its genesis.
fn histories() -> Vec<Event> {
    let mut events = Vec::new();
    for execution in 1..=40i64 {
        events.push(Event::minimal(1, execution, None, "playbook_started"));
        for id in 2..=(execution % 7 + 3) {
            let payload = format!(
                r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{},"event_type":"step","result":{{"rows":[{execution},{id}],"note":"caf\u00e9"}},"worker_id":"w-{id}"}}"#,
                id - 1
            );
            events.push(Event::from_json(payload.as_bytes()).unwrap());
        }
    }
    // An inversion: 60 published before 50, both linking back to 3.
    events.push(Event::minimal(60, 41, Some(3), "step"));
    events.extend([1, 2, 3].map(|id| {
        Event::minimal(
            id,
            41,
            (id > 1).then(|| id - 1),
            if id == 1 { "playbook_started" } else { "step" },
        )
    }));
    events.push(Event::minimal(50, 41, Some(60), "step"));
    // A far link and an escaped type.
    events.push(Event::minimal(1, 42, None, "playbook_started"));
    events.push(Event::minimal(i64::from(i32::MAX) * 4, 42, Some(1), "step"));
    events.push(
        Event::from_json(br#"{"event_id":9,"execution_id":43,"event_type":"odd\"type"}"#).unwrap(),
    );
    // A rewrite: 2 redelivered with another link.
    events.push(Event::minimal(2, 5, Some(1), "step_again"));
    events
}

fn index_with(config: IndexConfig) -> WalIndex {
    let index = WalIndex::new(config);
    for event in histories() {
        index.apply(if config.slim { event.to_slim() } else { event });
    }
    index
}

fn position() -> SourcePosition {
    SourcePosition {
        log: log(),
        positions: vec![Position {
            partition: "shard 0".to_owned(),
            last: Fingerprint::of(77, br#"{"event_id":2}"#),
            before: Some(Fingerprint::of(76, br#"{"event_id":1}"#)),
        }],
    }
}

/// Every execution's served bytes at every id it holds, and its resident id list.
fn served(index: &WalIndex) -> Vec<(i64, i64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for execution in index.execution_ids() {
        let chain = index.chain(execution).unwrap();
        let mut ids: Vec<i64> = chain.iter().map(Event::id).collect();
        ids.sort_unstable();
        for id in ids {
            let build = index.build(execution, Some(id));
            out.push((
                execution,
                id,
                build.spine.map(|s| s.json_array().to_bytes().to_vec()),
            ));
        }
    }
    out
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sbix-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_restored_index_serves_the_same_bytes_as_the_one_captured() {
    for config in [
        IndexConfig::default(),
        IndexConfig {
            slim: true,
            ..IndexConfig::default()
        },
        IndexConfig {
            order: SpineOrder::EventId,
            ..IndexConfig::default()
        },
    ] {
        let original = index_with(config);
        let checkpoint = Checkpoint::capture(&original, position());
        let bytes = checkpoint.encode();
        let decoded = Checkpoint::decode(&bytes).unwrap();
        assert_eq!(decoded, checkpoint);
        decoded.check(&config, &log()).unwrap();
        let restored = WalIndex::new(config);
        decoded.restore_into(&restored);
        assert_eq!(restored.execution_ids(), original.execution_ids());
        assert_eq!(served(&restored), served(&original), "{config:?}");
        assert_eq!(restored.stats().events, original.stats().events);
    }
}

/// Where each block of `bytes` starts (after the 12-byte magic and version).
fn block_starts(bytes: &[u8]) -> Vec<usize> {
    let mut at = 12;
    let mut starts = Vec::new();
    while at < bytes.len() {
        starts.push(at);
        let len = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        at += 9 + len;
    }
    starts
}

#[test]
fn a_flipped_bit_in_any_block_fails_its_checksum() {
    let bytes = Checkpoint::capture(&index_with(IndexConfig::default()), position()).encode();
    let starts = block_starts(&bytes);
    assert!(starts.len() >= 3, "header, executions, trailer");
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
        // The kind, the length, the checksum itself, and bytes across the body.
        let mut at_positions = vec![start, start + 2, start + 6];
        at_positions.extend((start + 9..end).step_by(((end - start) / 13).max(1)));
        for at in at_positions {
            for bit in [0, 3, 7] {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                let refused = Checkpoint::decode(&damaged).unwrap_err();
                assert!(
                    matches!(
                        refused,
                        Refusal::Checksum { .. }
                            | Refusal::Truncated { .. }
                            | Refusal::Malformed { .. }
                    ),
                    "byte {at} bit {bit}: {refused:?}"
                );
            }
        }
    }
}

#[test]
fn a_file_cut_anywhere_is_refused_as_torn() {
    let bytes = Checkpoint::capture(&index_with(IndexConfig::default()), position()).encode();
    let mut cuts: Vec<usize> = block_starts(&bytes);
    cuts.extend((0..bytes.len()).step_by(97));
    cuts.extend([0, 7, 11, 12, bytes.len() - 1]);
    for cut in cuts {
        let refused = Checkpoint::decode(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(refused, Refusal::Truncated { .. } | Refusal::NotACheckpoint),
            "cut at {cut}: {refused:?}"
        );
    }
    // Bytes after the trailer: refused too.
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"\x03junk");
    assert!(Checkpoint::decode(&longer).is_err());
}

#[test]
fn another_version_shape_or_log_is_refused_with_its_reason() {
    let config = IndexConfig::default();
    let checkpoint = Checkpoint::capture(&index_with(config), position());
    let mut newer = checkpoint.encode();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(
        Checkpoint::decode(&newer).unwrap_err(),
        Refusal::FormatVersion {
            found: 2,
            supported: 1
        }
    );
    let mut not_ours = checkpoint.encode();
    not_ours[0] = b'X';
    assert_eq!(
        Checkpoint::decode(&not_ours).unwrap_err(),
        Refusal::NotACheckpoint
    );
    let slim = IndexConfig {
        slim: true,
        ..config
    };
    assert!(matches!(
        checkpoint.check(&slim, &log()),
        Err(Refusal::Shape { .. })
    ));
    let other = LogIdentity::new("ehdb", "127.0.0.1:7070", "shards=4");
    let refused = checkpoint.check(&config, &other).unwrap_err();
    assert!(matches!(refused, Refusal::OtherLog { .. }));
    assert_eq!(refused.label(), "other_log");
}

#[test]
fn the_store_keeps_the_newest_and_falls_back_past_a_damaged_one() {
    let dir = temp_dir("fallback");
    let store = DirStore::open(&dir, 2).unwrap();
    let config = IndexConfig::default();
    let older_index = WalIndex::new(config);
    older_index.apply(Event::minimal(1, 7, None, "playbook_started"));
    store
        .write(&Checkpoint::capture(&older_index, position()).encode())
        .unwrap();
    let newer_index = index_with(config);
    for _ in 0..3 {
        store
            .write(&Checkpoint::capture(&newer_index, position()).encode())
            .unwrap();
    }
    let kept = store.newest_first().unwrap();
    assert_eq!(kept.len(), 2, "the newest two are kept");

    // The newest is damaged (a flipped bit), and a dead writer left a temporary file: the
    // next newest is used, the damaged one reported, the temporary file never read.
    let mut damaged = std::fs::read(&kept[0]).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    std::fs::write(&kept[0], &damaged).unwrap();
    std::fs::write(
        dir.join("checkpoint-99999999999999999999-000000.sbix.tmp"),
        b"half",
    )
    .unwrap();
    let restored = store.restore_newest(config, &log());
    assert_eq!(restored.used.as_ref(), Some(&kept[1]));
    assert_eq!(restored.refused.len(), 1);
    assert!(matches!(restored.refused[0].1, Refusal::Checksum { .. }));
    assert_eq!(restored.positions, Some(position().positions));
    assert_eq!(served(&restored.index), served(&newer_index));

    // Every checkpoint refused: an empty index, and no position (replay from 0).
    std::fs::write(&kept[1], &damaged[..100]).unwrap();
    let restored = store.restore_newest(config, &log());
    assert_eq!(restored.used, None);
    assert_eq!(restored.positions, None);
    assert_eq!(restored.refused.len(), 2);
    assert!(restored.index.execution_ids().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_of_another_log_is_never_served() {
    let dir = temp_dir("other-log");
    let store = DirStore::open(&dir, 3).unwrap();
    store
        .write(&Checkpoint::capture(&index_with(IndexConfig::default()), position()).encode())
        .unwrap();
    let restored = store.restore_newest(
        IndexConfig::default(),
        &LogIdentity::new("jetstream", "noetl_events", "created=1"),
    );
    assert!(restored.index.execution_ids().is_empty());
    assert_eq!(restored.refused[0].1.label(), "other_log");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A JSON-lines WAL of `executions` executions of `events` events each, interleaved.
fn wal_file(dir: &std::path::Path, executions: i64, events: i64) -> PathBuf {
    let mut text = String::new();
    for id in 1..=events {
        for execution in 1..=executions {
            let ty = if id == 1 { "playbook_started" } else { "step" };
            let prev = if id == 1 {
                String::new()
            } else {
                format!(r#","prev_event_id":{}"#, id - 1)
            };
            text.push_str(&format!(
                r#"{{"event_id":{id},"execution_id":{execution}{prev},"event_type":"{ty}","result":{{"n":{id},"pad":"{}"}}}}"#,
                "x".repeat(200)
            ));
            text.push('\n');
        }
    }
    let path = dir.join("wal.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

fn drain_config() -> wal_index::DrainConfig {
    wal_index::DrainConfig {
        batch_max: 50,
        ..wal_index::DrainConfig::default()
    }
}

#[test]
fn a_pool_restarted_from_its_checkpoint_replays_only_the_rest_and_serves_what_a_replay_from_zero_serves()
 {
    use std::sync::Arc;
    use wal_index::Drain;
    use wal_index::ingest::{Checkpointing, JsonLinesSource};

    let dir = temp_dir("resume");
    std::fs::create_dir_all(&dir).unwrap();
    let wal = wal_file(&dir, 20, 30); // 600 records
    let store = DirStore::open(dir.join("checkpoints"), 3).unwrap();
    let config = IndexConfig::default();

    // The first pool drains 8 batches of 50, checkpointing after every batch, then dies.
    let source = JsonLinesSource::open(&wal).unwrap();
    let log = source.log().clone();
    let first = Arc::new(WalIndex::new(config));
    let checkpoints = Checkpointing::new(DirStore::open(store.dir(), 3).unwrap())
        .every(std::time::Duration::ZERO);
    let mut drain = Drain::new(Arc::clone(&first), source, drain_config())
        .checkpoint_to(checkpoints)
        .unwrap();
    for _ in 0..8 {
        drain.step().unwrap();
    }
    drop(drain); // the write in flight finishes; nothing else is said

    // The second pool restores the newest checkpoint and resumes the file after it.
    let restored = store.restore_newest(config, &log);
    assert!(restored.refused.is_empty(), "{:?}", restored.refused);
    let positions = restored.positions.expect("a checkpoint was used");
    let held = restored.index.stats().events;
    assert!(
        held >= 50,
        "the checkpoint holds at least one batch ({held})"
    );
    let source = JsonLinesSource::open(&wal)
        .unwrap()
        .resume(&positions[0])
        .unwrap();
    let second = Arc::new(restored.index);
    let mut drain = Drain::new(Arc::clone(&second), source, drain_config());
    let replayed = drain.run_until_closed().unwrap().events;
    assert_eq!(
        replayed as usize + positions[0].last.sequence as usize,
        600,
        "nothing applied twice, nothing skipped"
    );

    // What it serves is what a pool that replayed the whole file serves.
    let scratch = Arc::new(WalIndex::new(config));
    Drain::new(
        Arc::clone(&scratch),
        JsonLinesSource::open(&wal).unwrap(),
        drain_config(),
    )
    .run_until_closed()
    .unwrap();
    assert_eq!(served(&second), served(&scratch));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_log_rewritten_under_the_checkpoints_position_is_refused() {
    use wal_index::WalSource;
    use wal_index::ingest::JsonLinesSource;

    let dir = temp_dir("rewritten");
    std::fs::create_dir_all(&dir).unwrap();
    let wal = wal_file(&dir, 2, 10);
    let mut source = JsonLinesSource::open(&wal).unwrap();
    source.pull(7, std::time::Duration::ZERO).unwrap();
    let position = source.position().unwrap().positions.remove(0);
    assert_eq!(position.last.sequence, 7);
    // The same file resumes.
    assert!(
        JsonLinesSource::open(&wal)
            .unwrap()
            .resume(&position)
            .is_ok()
    );
    // A log that lost its tail and was written again with other records under the same
    // line numbers: refused, so the pool replays from the beginning.
    let text = std::fs::read_to_string(&wal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut rewritten = lines[..6].join("\n");
    rewritten.push_str("\n{\"event_id\":99,\"execution_id\":1}\n");
    std::fs::write(&wal, rewritten).unwrap();
    let refused = JsonLinesSource::open(&wal)
        .unwrap()
        .resume(&position)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    // Shorter than the position: refused too.
    std::fs::write(&wal, lines[..3].join("\n")).unwrap();
    let refused = JsonLinesSource::open(&wal)
        .unwrap()
        .resume(&position)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_that_cannot_be_written_is_reported_and_the_drain_keeps_applying() {
    use std::sync::Arc;
    use wal_index::Drain;
    use wal_index::ingest::{Checkpointing, JsonLinesSource};

    let dir = temp_dir("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    let wal = wal_file(&dir, 5, 20);
    let checkpoints_dir = dir.join("checkpoints");
    let checkpoints = Checkpointing::new(DirStore::open(&checkpoints_dir, 3).unwrap())
        .every(std::time::Duration::ZERO);
    // The directory goes away and a file takes its name: every write fails.
    std::fs::remove_dir_all(&checkpoints_dir).unwrap();
    std::fs::write(&checkpoints_dir, b"not a directory").unwrap();
    let index = Arc::new(WalIndex::new(IndexConfig::default()));
    let mut drain = Drain::new(
        Arc::clone(&index),
        JsonLinesSource::open(&wal).unwrap(),
        drain_config(),
    )
    .checkpoint_to(checkpoints)
    .unwrap();
    let mut report = drain.run_until_closed().unwrap().clone();
    // The last hand-off's outcome arrives on the writer's thread: wait for it.
    for _ in 0..200 {
        if report.checkpoints.failed > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        drain.step().unwrap();
        report = drain.report().clone();
    }
    assert_eq!(report.events, 100, "every record applied");
    assert!(report.checkpoints.captured > 0);
    assert_eq!(report.checkpoints.written, 0);
    assert!(report.checkpoints.failed > 0, "{:?}", report.checkpoints);
    assert!(report.checkpoints.last_error.is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The child of `a_writer_killed_at_any_point_leaves_only_whole_checkpoints`: writes
/// checkpoints of `index_with(default)` into `SBIX_KILL_DIR` until it is killed. A no-op
/// when run on its own.
#[test]
fn checkpoint_writer_child() {
    let Ok(dir) = std::env::var("SBIX_KILL_DIR") else {
        return;
    };
    let store = DirStore::open(&dir, 2).unwrap();
    let bytes = Checkpoint::capture(&index_with(IndexConfig::default()), position()).encode();
    loop {
        store.write(&bytes).unwrap();
    }
}

#[test]
fn a_writer_killed_at_any_point_leaves_only_whole_checkpoints() {
    let dir = temp_dir("killed");
    let expected = served(&index_with(IndexConfig::default()));
    let exe = std::env::current_exe().unwrap();
    let mut restored_some = 0;
    for round in 0..12u64 {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "checkpoint_writer_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("SBIX_KILL_DIR", &dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Kill it somewhere in its loop: before its first checkpoint, mid-write, between.
        std::thread::sleep(std::time::Duration::from_millis(5 + round * 7 % 60));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let store = DirStore::open(&dir, 2).unwrap();
        let restored = store.restore_newest(IndexConfig::default(), &log());
        assert!(
            restored.refused.is_empty(),
            "round {round}: {:?}",
            restored.refused
        );
        if restored.used.is_some() {
            restored_some += 1;
            assert_eq!(served(&restored.index), expected, "round {round}");
        } else {
            assert!(restored.index.execution_ids().is_empty());
        }
    }
    assert!(
        restored_some > 0,
        "some child lived long enough to write one"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
