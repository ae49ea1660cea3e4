//! Checkpoints: what a restored index serves, and every damaged or foreign checkpoint
//! refused with its reason (docs/checkpoint-format.md; the rule that nothing from a refused
//! checkpoint is served is the module's, `wal_index::checkpoint`).

use std::path::PathBuf;

use wal_index::checkpoint::{
    self, Checkpoint, CheckpointStore, DirStore, Fingerprint, LogIdentity, Position, Refusal,
    Restored, SourcePosition,
};
use wal_index::{Event, IndexConfig, SpineOrder, StateIndex, WalIndex, WalSource};

/// A new index with `config`, restored from `store`'s newest checkpoint of `log` that
/// verifies (no source to ask: every checkpoint that verifies is accepted).
fn restore(
    store: &dyn CheckpointStore,
    config: IndexConfig,
    log: &LogIdentity,
) -> (WalIndex, Restored) {
    let index = WalIndex::new(config);
    let restored = checkpoint::restore_newest(store, &index, log, |_| Ok(()));
    (index, restored)
}

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
            records: vec![
                Fingerprint::of(76, br#"{"event_id":1}"#),
                Fingerprint::of(77, br#"{"event_id":2}"#),
            ],
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
        let decoded = decode_both(&bytes).unwrap();
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

/// Both readers of a file, the one over its bytes and the one a block at a time over a
/// reader (what a restore from a directory uses), which must agree on every file.
fn decode_both(bytes: &[u8]) -> Result<Checkpoint, Refusal> {
    let whole = Checkpoint::decode(bytes);
    let streamed = Checkpoint::read_from(&mut &bytes[..]);
    assert_eq!(
        whole,
        streamed.clone().map(|(checkpoint, _)| checkpoint),
        "the two readers disagree"
    );
    if let Ok((_, read)) = streamed {
        assert_eq!(read, bytes.len() as u64);
    }
    whole
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
                let refused = decode_both(&damaged).unwrap_err();
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
        let refused = decode_both(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(refused, Refusal::Truncated { .. } | Refusal::NotACheckpoint),
            "cut at {cut}: {refused:?}"
        );
    }
    // Bytes after the trailer: refused too.
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"\x03junk");
    assert!(decode_both(&longer).is_err());
}

#[test]
fn another_version_shape_or_log_is_refused_with_its_reason() {
    let config = IndexConfig::default();
    let checkpoint = Checkpoint::capture(&index_with(config), position());
    let mut newer = checkpoint.encode();
    newer[8..12].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        Checkpoint::decode(&newer).unwrap_err(),
        Refusal::FormatVersion {
            found: 3,
            supported: 2
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

/// Writes a checkpoint of a one-event index, then three of `index_with(config)`, which it
/// returns.
fn one_older_then_three_newer(store: &dyn CheckpointStore, config: IndexConfig) -> WalIndex {
    let older = WalIndex::new(config);
    older.apply(Event::minimal(1, 7, None, "playbook_started"));
    store
        .write(&Checkpoint::capture(&older, position()).encode())
        .unwrap();
    let newer = index_with(config);
    for _ in 0..3 {
        store
            .write(&Checkpoint::capture(&newer, position()).encode())
            .unwrap();
    }
    newer
}

#[test]
fn the_store_keeps_the_newest_and_falls_back_past_a_damaged_one() {
    let dir = temp_dir("fallback");
    let store = DirStore::open(&dir, 2).unwrap();
    let config = IndexConfig::default();
    let newer_index = one_older_then_three_newer(&store, config);
    let kept = store.newest_first().unwrap();
    assert_eq!(kept.len(), 2, "the newest two are kept");

    // The newest is damaged (a flipped bit), and a dead writer left a temporary file: the
    // next newest is used, the damaged one reported, the temporary file never read.
    let paths: Vec<PathBuf> = kept.iter().map(|name| store.path_of(name)).collect();
    let mut damaged = std::fs::read(&paths[0]).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    std::fs::write(&paths[0], &damaged).unwrap();
    std::fs::write(
        dir.join("checkpoint-99999999999999999999-000000.sbix.tmp"),
        b"half",
    )
    .unwrap();
    let (index, restored) = restore(&store, config, &log());
    assert_eq!(restored.used.as_ref(), Some(&kept[1]));
    assert_eq!(restored.refused.len(), 1);
    assert!(matches!(restored.refused[0].1, Refusal::Checksum { .. }));
    assert_eq!(restored.positions, Some(position().positions));
    assert_eq!(served(&index), served(&newer_index));

    // Every checkpoint refused: an empty index, and no position (replay from 0).
    std::fs::write(&paths[1], &damaged[..100]).unwrap();
    let (index, restored) = restore(&store, config, &log());
    assert_eq!(restored.used, None);
    assert_eq!(restored.positions, None);
    assert_eq!(restored.refused.len(), 2);
    assert!(index.execution_ids().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_of_another_log_is_never_served() {
    let dir = temp_dir("other-log");
    let store = DirStore::open(&dir, 3).unwrap();
    store
        .write(&Checkpoint::capture(&index_with(IndexConfig::default()), position()).encode())
        .unwrap();
    let (index, restored) = restore(
        &store,
        IndexConfig::default(),
        &LogIdentity::new("jetstream", "noetl_events", "created=1"),
    );
    assert!(index.execution_ids().is_empty());
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
    use wal_index::checkpoint::Checkpointing;
    use wal_index::ingest::JsonLinesSource;

    let dir = temp_dir("resume");
    std::fs::create_dir_all(&dir).unwrap();
    let wal = wal_file(&dir, 20, 30); // 600 records
    let store = DirStore::open(dir.join("checkpoints"), 3).unwrap();
    let config = IndexConfig::default();
    let checkpoints = || {
        Checkpointing::new(DirStore::open(store.dir(), 3).unwrap()).every(std::time::Duration::ZERO)
    };

    // The first pool drains 8 batches of 50, checkpointing after every batch, then dies.
    let first = Arc::new(WalIndex::new(config));
    let (mut drain, start) = Drain::warm_start(
        Arc::clone(&first),
        Some(checkpoints()),
        || JsonLinesSource::open(&wal),
        drain_config(),
    )
    .unwrap();
    assert!(start.checkpoint.is_none() && start.refused.is_empty());
    for _ in 0..8 {
        drain.step().unwrap();
    }
    drop(drain); // the write in flight finishes; nothing else is said

    // The second pool restores the newest checkpoint and resumes the file after it.
    let second = Arc::new(WalIndex::new(config));
    let (mut drain, start) = Drain::warm_start(
        Arc::clone(&second),
        Some(checkpoints()),
        || JsonLinesSource::open(&wal),
        drain_config(),
    )
    .unwrap();
    assert!(start.refused.is_empty(), "{:?}", start.refused);
    assert_eq!(
        start.checkpoint,
        store.newest_first().unwrap().first().cloned()
    );
    let positions = start.resumed_at.expect("a checkpoint was used");
    let held = second.stats().events;
    assert!(
        held >= 50,
        "the checkpoint holds at least one batch ({held})"
    );
    let replayed = drain.run_until_closed().unwrap().events;
    assert_eq!(
        replayed as usize + positions[0].last().sequence as usize,
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
    assert_eq!(position.last().sequence, 7);
    let resume = |position: &Position| {
        let positions = [position.clone()];
        JsonLinesSource::open(&wal)
            .unwrap()
            .resume(&positions, std::time::Duration::ZERO)
    };
    // The same file resumes.
    assert!(resume(&position).is_ok());
    // A log that lost its tail and was written again with other records under the same
    // line numbers: refused, so the pool replays from the beginning.
    let text = std::fs::read_to_string(&wal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut rewritten = lines[..6].join("\n");
    rewritten.push_str("\n{\"event_id\":99,\"execution_id\":1}\n");
    std::fs::write(&wal, rewritten).unwrap();
    let refused = resume(&position).unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    // Shorter than the position: refused too.
    std::fs::write(&wal, lines[..3].join("\n")).unwrap();
    let refused = resume(&position).unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_that_cannot_be_written_is_reported_and_the_drain_keeps_applying() {
    use std::sync::Arc;
    use wal_index::Drain;
    use wal_index::checkpoint::Checkpointing;
    use wal_index::ingest::JsonLinesSource;

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

/// A full disk, for real: `SBIX_SMALL_TMPFS` names an empty directory on a small tmpfs
/// (CI mounts one of 256 KiB where it may; without it the test says so and passes, or with
/// `SB_REQUIRE_TMPFS` set, fails).
#[test]
fn a_full_disk_fails_the_write_and_the_previous_checkpoint_is_used() {
    use std::sync::Arc;
    use wal_index::Drain;
    use wal_index::checkpoint::Checkpointing;
    use wal_index::ingest::JsonLinesSource;

    let Some(small) = std::env::var_os("SBIX_SMALL_TMPFS").map(PathBuf::from) else {
        assert!(
            std::env::var_os("SB_REQUIRE_TMPFS").is_none(),
            "SB_REQUIRE_TMPFS is set but SBIX_SMALL_TMPFS is not"
        );
        eprintln!("SKIP: no small tmpfs (SBIX_SMALL_TMPFS)");
        return;
    };
    let dir = temp_dir("disk-full");
    std::fs::create_dir_all(&dir).unwrap();
    let wal = wal_file(&dir, 20, 30); // 600 records, ~180 KB of payload
    let checkpoints_dir = small.join(format!("checkpoints-{}", std::process::id()));
    let store = DirStore::open(&checkpoints_dir, 3).unwrap();
    let checkpoints = Checkpointing::new(DirStore::open(&checkpoints_dir, 3).unwrap())
        .every(std::time::Duration::ZERO);
    let mut source = JsonLinesSource::open(&wal).unwrap();
    let log = source.log().unwrap().unwrap();
    let config = IndexConfig::default();
    let index = Arc::new(WalIndex::new(config));
    let mut drain = Drain::new(Arc::clone(&index), source, drain_config())
        .checkpoint_to(checkpoints)
        .unwrap();
    // A batch every 5 ms, so the writer keeps up: the checkpoints grow with the index
    // until two no longer fit beside each other.
    loop {
        let more = drain.step().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        if !more
            && drain.report().checkpoints.captured
                == drain.report().checkpoints.written + drain.report().checkpoints.failed
        {
            break;
        }
    }
    let report = drain.report().clone();
    assert_eq!(report.events, 600, "every record applied");
    assert!(report.checkpoints.written > 0, "{:?}", report.checkpoints);
    assert!(report.checkpoints.failed > 0, "{:?}", report.checkpoints);
    let error = report.checkpoints.last_error.clone().unwrap_or_default();
    assert!(error.contains("No space left"), "{error}");
    drop(drain);
    // No temporary file is left taking the space; the newest whole checkpoint is used.
    let leftovers: Vec<_> = std::fs::read_dir(&checkpoints_dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let mut resumed = JsonLinesSource::open(&wal).unwrap();
    let second = Arc::new(WalIndex::new(config));
    let restored = checkpoint::restore_newest(&store, &*second, &log, |checkpoint| {
        resumed.resume(&checkpoint.positions, std::time::Duration::ZERO)
    });
    assert!(restored.refused.is_empty(), "{:?}", restored.refused);
    let positions = restored.positions.expect("a checkpoint was used");
    assert!(
        positions[0].last().sequence < 600,
        "the last one did not fit"
    );
    Drain::new(Arc::clone(&second), resumed, drain_config())
        .run_until_closed()
        .unwrap();
    assert_eq!(served(&second), served(&index));
    std::fs::remove_dir_all(&checkpoints_dir).unwrap();
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
        let (index, restored) = restore(&store, IndexConfig::default(), &log());
        assert!(
            restored.refused.is_empty(),
            "round {round}: {:?}",
            restored.refused
        );
        if restored.used.is_some() {
            restored_some += 1;
            assert_eq!(served(&index), expected, "round {round}");
        } else {
            assert!(index.execution_ids().is_empty());
        }
    }
    assert!(
        restored_some > 0,
        "some child lived long enough to write one"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Checkpoints in a bucket: against `object_store`'s in-memory store (conditional puts under
/// contention) and against a real S3-protocol server on loopback (`s3s-fs`, started by the
/// test: `S3S_FS` names its binary; with `SB_REQUIRE_S3` set a missing one is a failure).
#[cfg(feature = "object-store-aws")]
mod bucket {
    use super::*;
    use object_store::ObjectStore;
    use sb_test_kit::s3_server::S3Server;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use wal_index::checkpoint::BucketStore;

    /// A client for the server's bucket that gives up on a request after a second (so a
    /// stopped server fails writes quickly).
    fn client(server: &S3Server) -> Arc<dyn ObjectStore> {
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(server.endpoint())
            .with_allow_http(true)
            .with_bucket_name(S3Server::BUCKET)
            .with_region("us-east-1")
            .with_access_key_id(S3Server::ACCESS_KEY)
            .with_secret_access_key(S3Server::SECRET_KEY)
            .with_retry(object_store::RetryConfig {
                max_retries: 1,
                retry_timeout: Duration::from_secs(1),
                ..object_store::RetryConfig::default()
            })
            .build()
            .unwrap();
        Arc::new(store)
    }

    #[test]
    fn a_bucket_keeps_the_newest_and_restores_past_a_damaged_one() {
        let Some(server) = S3Server::start("s3-fallback") else {
            return;
        };
        let store = BucketStore::new(client(&server), "pool-a", 2).unwrap();
        let config = IndexConfig::default();
        let newer = one_older_then_three_newer(&store, config);
        let kept = store.newest_first().unwrap();
        assert_eq!(kept.len(), 2, "the pointer names the newest two");
        let bodies = std::fs::read_dir(server.object_file("pool-a"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".sbix"))
            .count();
        assert_eq!(
            bodies, 2,
            "the bodies pushed out of the pointer are deleted"
        );

        // The newest body rots on the server: the next newest is used, the newest refused.
        let file = server.object_file(&format!("pool-a/{}", kept[0]));
        let mut damaged = std::fs::read(&file).unwrap();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x10;
        std::fs::write(&file, &damaged).unwrap();
        let (index, restored) = restore(&store, config, &log());
        assert_eq!(restored.used.as_ref(), Some(&kept[1]));
        assert!(matches!(restored.refused[0].1, Refusal::Checksum { .. }));
        assert_eq!(served(&index), served(&newer));

        // A pool on another node (a new client, a new store) finds the same.
        let elsewhere = BucketStore::new(client(&server), "pool-a", 2).unwrap();
        assert_eq!(elsewhere.newest_first().unwrap(), kept);
        // Another pool's prefix holds nothing: a replay from the beginning.
        let other = BucketStore::new(client(&server), "pool-b", 2).unwrap();
        let (_, restored) = restore(&other, config, &log());
        assert_eq!(restored.used, None);
        assert!(restored.refused.is_empty());
    }

    #[test]
    fn a_body_above_the_part_size_goes_up_in_parts_and_reads_back_whole() {
        let Some(server) = S3Server::start("s3-parts") else {
            return;
        };
        let store = BucketStore::new(client(&server), "pool", 2).unwrap();
        // 70 MiB: three parts of 32 MiB, the last one short.
        let body: Vec<u8> = (0..70u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let name = store.write(&body).unwrap();
        assert!(
            store.read(&name).unwrap() == body,
            "the body reads back byte for byte"
        );
    }

    #[test]
    fn a_server_stopped_mid_upload_keeps_the_previous_checkpoint_and_the_drain_applying() {
        use wal_index::Drain;
        use wal_index::checkpoint::Checkpointing;
        use wal_index::ingest::JsonLinesSource;

        let Some(mut server) = S3Server::start("s3-outage") else {
            return;
        };
        let dir = temp_dir("s3-outage-wal");
        std::fs::create_dir_all(&dir).unwrap();
        let wal = wal_file(&dir, 40, 60); // 2,400 records of ~300 bytes
        let config = IndexConfig::default();
        let store = BucketStore::new(client(&server), "pool", 3).unwrap();
        let checkpoints = Checkpointing::new(BucketStore::new(client(&server), "pool", 3).unwrap())
            .every(Duration::ZERO);
        let mut source = JsonLinesSource::open(&wal).unwrap();
        let log = source.log().unwrap().unwrap();
        let index = Arc::new(WalIndex::new(config));
        let mut drain = Drain::new(Arc::clone(&index), source, drain_config())
            .checkpoint_to(checkpoints)
            .unwrap();
        // Some checkpoints land; then the server dies under whatever upload is in flight.
        // (A batch every 10 ms: the 48 batches outlast the first writes.)
        let deadline = Instant::now() + Duration::from_secs(60);
        while drain.report().checkpoints.written < 2 {
            assert!(
                Instant::now() < deadline,
                "{:?}",
                drain.report().checkpoints
            );
            drain.step().unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        server.kill();
        let before = drain.report().clone();
        assert!(before.events <= 1_500, "{before:?}");
        for _ in 0..10 {
            drain.step().unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        let report = drain.report().clone();
        assert!(report.checkpoints.failed > 0, "{:?}", report.checkpoints);
        assert!(report.checkpoints.last_error.is_some());
        assert!(
            report.events >= before.events + 400,
            "the drain kept applying"
        );
        // At most the write in flight at the kill landed.
        assert!(report.checkpoints.written <= before.checkpoints.written + 1);

        // The server comes back on the same port and directory: checkpoints land again, and
        // a restarted pool restores the newest and serves what a replay from zero serves.
        server.restart();
        let written_during = drain.report().checkpoints.written;
        drain.run_until_closed().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while drain.report().checkpoints.written <= written_during {
            assert!(
                Instant::now() < deadline,
                "{:?}",
                drain.report().checkpoints
            );
            std::thread::sleep(Duration::from_millis(20));
            drain.step().unwrap();
        }
        drop(drain);
        let mut resumed = JsonLinesSource::open(&wal).unwrap();
        let second = Arc::new(WalIndex::new(config));
        let restored = checkpoint::restore_newest(&store, &*second, &log, |checkpoint| {
            resumed.resume(&checkpoint.positions, Duration::ZERO)
        });
        assert!(restored.refused.is_empty(), "{:?}", restored.refused);
        assert!(restored.positions.is_some(), "a checkpoint was used");
        Drain::new(Arc::clone(&second), resumed, drain_config())
            .run_until_closed()
            .unwrap();
        assert_eq!(served(&second), served(&index));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A Kubernetes roll on one bucket prefix: the old pod keeps draining and checkpointing
    /// while the new one starts from the old one's newest checkpoint and checkpoints too;
    /// the old one is shut down (its last checkpoint), the new one finishes the log and is
    /// shut down. The pod after them restores the newest, which holds the whole log, and
    /// serves what a replay from zero serves: neither pod's writes lost the other's.
    #[test]
    fn two_pods_of_one_pool_checkpointing_to_one_prefix_through_a_roll_lose_nothing() {
        use wal_index::checkpoint::{Checkpointing, LastCheckpoint};
        use wal_index::ingest::JsonLinesSource;
        use wal_index::{Drain, DrainConfig};

        let Some(server) = S3Server::start("s3-roll") else {
            return;
        };
        let dir = temp_dir("s3-roll-wal");
        std::fs::create_dir_all(&dir).unwrap();
        let wal = wal_file(&dir, 30, 40); // 1,200 records
        let checkpoints = || {
            Checkpointing::new(BucketStore::new(client(&server), "pool", 3).unwrap())
                .every(Duration::ZERO)
        };
        let source = || JsonLinesSource::open(&wal);
        let batches = || DrainConfig {
            batch_max: 20,
            ..DrainConfig::default()
        };
        // The old pod, a batch every 2 ms, until it has written two checkpoints.
        let old_index = Arc::new(WalIndex::new(IndexConfig::default()));
        let (mut old, start) = Drain::warm_start(
            Arc::clone(&old_index),
            Some(checkpoints()),
            source,
            batches(),
        )
        .unwrap();
        assert!(start.checkpoint.is_none());
        while old.report().checkpoints.written < 2 {
            old.step().unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        // The roll: the new pod starts from the old one's newest while the old one drains on.
        let old = std::thread::spawn(move || {
            for _ in 0..15 {
                old.step().unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            let last = old.shut_down();
            (old.report().clone(), last)
        });
        let new_index = Arc::new(WalIndex::new(IndexConfig::default()));
        let (mut new, start) = Drain::warm_start(
            Arc::clone(&new_index),
            Some(checkpoints()),
            source,
            batches(),
        )
        .unwrap();
        assert!(start.checkpoint.is_some(), "{:?}", start.refused);
        assert!(start.refused.is_empty(), "{:?}", start.refused);
        while new.step().unwrap() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (old_report, old_last) = old.join().unwrap();
        // Its last batch may already be in the checkpoint it took after it (every batch's).
        assert!(
            matches!(
                old_last,
                Some(LastCheckpoint::Written { .. } | LastCheckpoint::UpToDate)
            ),
            "{old_last:?}"
        );
        let new_last = new.shut_down();
        assert!(
            matches!(
                new_last,
                Some(LastCheckpoint::Written { .. } | LastCheckpoint::UpToDate)
            ),
            "{new_last:?}"
        );
        let new_report = new.report().clone();
        drop(new);
        assert_eq!(
            old_report.checkpoints.failed, 0,
            "{:?}",
            old_report.checkpoints
        );
        assert_eq!(
            new_report.checkpoints.failed, 0,
            "{:?}",
            new_report.checkpoints
        );

        // The next pod restores the newest: the new pod's last, at the log's last record.
        let next_index = Arc::new(WalIndex::new(IndexConfig::default()));
        let (mut next, start) = Drain::warm_start(
            Arc::clone(&next_index),
            Some(checkpoints()),
            source,
            batches(),
        )
        .unwrap();
        assert!(start.refused.is_empty(), "{:?}", start.refused);
        // The newest *published*: usually the new pod's last, at the log's last record. When
        // the old pod's last publish lands after the new pod's (the two race: the old pod's
        // shutdown and the new pod's catch-up), the pointer names the old pod's first, at an
        // earlier record, and the next pod replays from there: more replay, nothing lost.
        let resumed = start.resumed_at.unwrap()[0].last().sequence;
        assert_eq!(
            next.run_until_closed().unwrap().events,
            1_200 - resumed,
            "exactly the records after the checkpoint"
        );
        drop(next);
        let scratch = Arc::new(WalIndex::new(IndexConfig::default()));
        Drain::new(Arc::clone(&scratch), source().unwrap(), batches())
            .run_until_closed()
            .unwrap();
        assert_eq!(served(&next_index), served(&scratch));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writers_publishing_at_once_never_lose_each_others_checkpoint() {
        // object_store's in-memory store applies conditional puts atomically, so it shows
        // the pointer's retry under real contention (s3s-fs checks its conditions and
        // writes in two steps, so two puts racing can both pass).
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let written = write_at_once(&memory, 1000);
        let store = BucketStore::new(memory, "pool", 1000).unwrap();
        let mut named = store.newest_first().unwrap();
        assert_eq!(named.len(), 100, "every write is in the pointer");
        named.sort();
        assert_eq!(named, written);
    }

    #[test]
    fn writers_publishing_at_once_leave_exactly_the_newest_they_keep() {
        // A lost pointer update would leave a body that no pointer names and no write
        // pushed out: one more body than the pointer keeps.
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        write_at_once(&memory, 2);
        let store = BucketStore::new(Arc::clone(&memory), "pool", 2).unwrap();
        let named = store.newest_first().unwrap();
        assert_eq!(named.len(), 2);
        for name in &named {
            assert!(store.read(name).is_ok(), "{name} is named and readable");
        }
        let prefix = object_store::path::Path::from("pool");
        let listed =
            futures_lite::future::block_on(memory.list_with_delimiter(Some(&prefix))).unwrap();
        let bodies = listed
            .objects
            .iter()
            .filter(|o| o.location.as_ref().ends_with(".sbix"))
            .count();
        assert_eq!(bodies, 2, "the bodies pushed out are deleted, none leaked");
    }

    /// Four stores on one prefix, 25 writes each at once; the names written, sorted.
    fn write_at_once(memory: &Arc<dyn ObjectStore>, keep: usize) -> Vec<String> {
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let store = BucketStore::new(Arc::clone(memory), "pool", keep).unwrap();
                std::thread::spawn(move || {
                    (0..25)
                        .map(|i| store.write(format!("body {i}").as_bytes()).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut written: Vec<String> = writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        written.sort();
        written
    }

    #[test]
    fn a_store_dropped_inside_async_code_does_not_panic() {
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = BucketStore::new(memory, "pool", 2).unwrap();
            store.write(b"body").unwrap();
            drop(store);
        });
    }

    #[test]
    fn a_pointer_that_does_not_parse_is_replaced_and_listing_serves_meanwhile() {
        use object_store::ObjectStoreExt;
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let store = BucketStore::new(Arc::clone(&memory), "pool", 3).unwrap();
        let first = store.write(b"one").unwrap();
        let pointer = object_store::path::Path::from("pool/NEWEST");
        let garbage = object_store::PutPayload::from_static(b"sbix-newest 99\nwhat");
        futures_lite::future::block_on(memory.put(&pointer, garbage)).unwrap();
        assert_eq!(store.newest_first().unwrap(), vec![first], "listed");
        let second = store.write(b"two").unwrap();
        assert_eq!(
            store.newest_first().unwrap()[0],
            second,
            "the pointer replaced"
        );
    }
}

#[test]
fn a_file_refilled_below_the_line_before_the_position_is_refused() {
    use wal_index::WalSource;
    use wal_index::ingest::JsonLinesSource;

    let dir = temp_dir("refilled-below");
    std::fs::create_dir_all(&dir).unwrap();
    let wal = wal_file(&dir, 4, 25); // 100 lines
    let mut source = JsonLinesSource::open(&wal).unwrap();
    source.pull(90, std::time::Duration::ZERO).unwrap();
    let position = source.position().unwrap().positions.remove(0);
    assert_eq!(position.last().sequence, 90);
    // The file lost its lines from 41 on and was written again: line 41 is another record,
    // lines 89 and 90 (the last two the checkpoint applied) are the same as before.
    let text = std::fs::read_to_string(&wal).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[40] = r#"{"event_id":7,"execution_id":999,"event_type":"playbook_started"}"#.to_owned();
    std::fs::write(&wal, lines.join("\n") + "\n").unwrap();
    let refused = JsonLinesSource::open(&wal)
        .unwrap()
        .resume(std::slice::from_ref(&position), std::time::Duration::ZERO)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    // A line added between two the checkpoint applied (an extra record where the log
    // held none) is refused too.
    lines[40] = text.lines().nth(40).unwrap().to_owned();
    lines.insert(60, r#"{"event_id":1,"execution_id":998}"#.to_owned());
    std::fs::write(&wal, lines.join("\n") + "\n").unwrap();
    let refused = JsonLinesSource::open(&wal)
        .unwrap()
        .resume(std::slice::from_ref(&position), std::time::Duration::ZERO)
        .unwrap_err();
    assert_eq!(refused.label(), "fingerprint", "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reader that fails once after `fail_after` bytes, then reads on.
struct FailsOnce {
    bytes: std::io::Cursor<Vec<u8>>,
    fail_after: u64,
    failed: bool,
}

impl std::io::Read for FailsOnce {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let at = self.bytes.position();
        if !self.failed && at >= self.fail_after {
            self.failed = true;
            return Err(std::io::Error::other("the disk hiccupped"));
        }
        let room = if self.failed {
            buf.len()
        } else {
            buf.len().min((self.fail_after - at) as usize)
        };
        self.bytes.read(&mut buf[..room])
    }
}

#[test]
fn a_read_error_keeps_the_lines_read_before_it_and_the_position_moves_only_with_them() {
    use std::io::BufReader;
    use wal_index::WalSource;
    use wal_index::ingest::{JsonLinesSource, Pull};

    let lines: Vec<String> = (1..=10)
        .map(|id| format!(r#"{{"event_id":{id},"execution_id":1}}"#))
        .collect();
    let text = lines.join("\n") + "\n";
    // The error comes in the middle of line 5.
    let fail_after = (lines[..4].iter().map(|l| l.len() + 1).sum::<usize>() + 7) as u64;
    let reader = FailsOnce {
        bytes: std::io::Cursor::new(text.into_bytes()),
        fail_after,
        failed: false,
    };
    let mut source = JsonLinesSource::new(BufReader::with_capacity(8, reader));
    let Pull::Records(first) = source.pull(100, std::time::Duration::ZERO).unwrap() else {
        panic!("the lines before the error are returned");
    };
    assert_eq!(first.len(), 4);
    assert_eq!(
        source.position().unwrap().positions[0].last().sequence,
        4,
        "the position names the lines returned"
    );
    assert!(
        source.pull(100, std::time::Duration::ZERO).is_err(),
        "then the error"
    );
    let Pull::Records(rest) = source.pull(100, std::time::Duration::ZERO).unwrap() else {
        panic!("then the rest, line 5 whole");
    };
    let got: Vec<&[u8]> = rest.iter().map(|r| &r.payload[..]).collect();
    let want: Vec<&[u8]> = lines[4..].iter().map(String::as_bytes).collect();
    assert_eq!(got, want);
    assert_eq!(rest[0].position, 5);
}

#[test]
fn a_restore_keeps_recency_and_honours_the_restoring_index_caps() {
    use std::time::{Duration, Instant};
    use wal_index::config::EvictionPolicy;

    // Ten executions, used in the order 10, 9, ..., 1: execution 1 is the most recent.
    let old = WalIndex::default();
    for execution in (1..=10i64).rev() {
        old.apply(Event::minimal(1, execution, None, "playbook_started"));
        old.apply(Event::minimal(2, execution, Some(1), "step"));
        std::thread::sleep(Duration::from_millis(3));
    }
    let checkpoint = Checkpoint::decode(&Checkpoint::capture(&old, position()).encode()).unwrap();
    let idle: Vec<u64> = checkpoint.executions.iter().map(|e| e.idle_ms).collect();
    assert!(idle[0] < idle[9], "recency is carried: {idle:?}");

    // An execution cap of 4: the four most recent are restored, the rest left out.
    let capped = IndexConfig {
        eviction: EvictionPolicy {
            max_executions: Some(4),
            ..EvictionPolicy::default()
        },
        ..IndexConfig::default()
    };
    let index = WalIndex::new(capped);
    let report = checkpoint.restore_into(&index);
    assert_eq!((report.restored, report.over_caps), (4, 6));
    assert_eq!(index.execution_ids(), vec![1, 2, 3, 4]);
    // The LRU order is the old pool's: one more over the cap evicts the least recent (4).
    index.apply(Event::minimal(1, 11, None, "playbook_started"));
    index.enforce_limits_at(Instant::now());
    assert_eq!(index.execution_ids(), vec![1, 2, 3, 11]);

    // A byte ceiling: the restored index is within it by its own ledger.
    let one = old.resident_bytes(1).unwrap();
    let ceiling = IndexConfig {
        eviction: EvictionPolicy {
            max_bytes: Some(one * 3),
            ..EvictionPolicy::default()
        },
        ..IndexConfig::default()
    };
    let index = WalIndex::new(ceiling);
    checkpoint.restore_into(&index);
    assert!(index.stats().bytes <= one * 3, "{:?}", index.stats());
    assert!(
        index.execution_ids().contains(&1),
        "the most recent is kept"
    );
    assert!(
        !index.execution_ids().contains(&10),
        "the least recent is not"
    );
}

/// An index without eviction limits reads no clock in its builds, but a build still
/// refreshes its execution's recency (from the newest write's reading), so a checkpoint
/// carries a read-mostly execution as recent to a pool that restores it with limits.
#[test]
fn a_build_without_limits_still_refreshes_the_recency_a_checkpoint_carries() {
    use std::time::Duration;

    let old = WalIndex::default();
    for execution in 1..=3 {
        old.apply(Event::minimal(1, execution, None, "playbook_started"));
        std::thread::sleep(Duration::from_millis(5));
    }
    // Execution 1, written first, is built after the last write.
    assert!(old.build(1, Some(1)).spine.is_some());
    let checkpoint = Checkpoint::capture(&old, position());
    let idle = |execution: i64| {
        checkpoint
            .executions
            .iter()
            .find(|e| e.execution_id == execution)
            .map(|e| e.idle_ms)
            .unwrap()
    };
    assert!(
        idle(1) <= idle(3) && idle(1) < idle(2),
        "built after execution 3 was written: 1 idle {} ms, 2 idle {} ms, 3 idle {} ms",
        idle(1),
        idle(2),
        idle(3)
    );
}

#[test]
fn a_finished_execution_in_a_checkpoint_is_evicted_at_restore_as_a_replay_evicts_it() {
    let config = IndexConfig {
        sink_gate: true,
        ..IndexConfig::default()
    };
    let old = WalIndex::new(config);
    old.mark_pending_sink(7);
    old.apply_batch(vec![
        Event::minimal(1, 7, None, "playbook_started"),
        Event::minimal(2, 7, Some(1), "playbook_completed"),
    ]);
    old.apply(Event::minimal(1, 8, None, "playbook_started"));
    assert_eq!(old.execution_ids(), vec![7, 8], "the sink gate holds 7");
    let checkpoint = Checkpoint::capture(&old, position());

    // A replay into a new pool (no marks: its sink has not been asked yet) evicts 7.
    let replayed = WalIndex::new(config);
    replayed.apply_batch(vec![
        Event::minimal(1, 7, None, "playbook_started"),
        Event::minimal(2, 7, Some(1), "playbook_completed"),
    ]);
    replayed.apply(Event::minimal(1, 8, None, "playbook_started"));

    let restored = WalIndex::new(config);
    let report = checkpoint.restore_into(&restored);
    assert_eq!((report.restored, report.finished), (1, 1));
    assert_eq!(restored.execution_ids(), replayed.execution_ids());
    assert_eq!(restored.execution_ids(), vec![8]);
}

#[test]
fn a_stray_file_with_a_checkpoint_name_is_neither_listed_nor_kept_over_the_stores_own() {
    let dir = temp_dir("stray");
    let store = DirStore::open(&dir, 1).unwrap();
    // Another tool's file, and a name of another width, both sorting above the store's.
    std::fs::write(dir.join("checkpoint-zz-notes.sbix"), b"not ours").unwrap();
    std::fs::write(dir.join("checkpoint-99999999999999999999999-1.sbix"), b"x").unwrap();
    let reopened = DirStore::open(&dir, 1).unwrap();
    for body in [&b"one"[..], b"two", b"three"] {
        let name = reopened.write(body).unwrap();
        assert_eq!(
            reopened.newest_first().unwrap(),
            vec![name.clone()],
            "the new checkpoint is kept"
        );
        assert_eq!(reopened.read(&name).unwrap(), body);
    }
    assert!(
        dir.join("checkpoint-zz-notes.sbix").exists(),
        "never pruned"
    );
    // Names are ordered as numbers: a count past six digits still sorts above.
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
