//! Shards through an Arrow implementation that is not arrow-rs: pyarrow writes shards with
//! production's layout that the reader serves byte for byte as a WAL replay does, and
//! reads the writer's shards back (`scripts/shard-interop.py`). Skipped where python3 has
//! no pyarrow, unless `SB_REQUIRE_PYARROW` is set (CI sets it).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{FIRST, head, replayed, served_bytes, slim, temp_dir, wal};
use state_shard::{CellSettings, ShardStore, ShardWriter, StateShardReader, WriterConfig};
use wal_index::ingest::JsonLinesSource;
use wal_index::labels::{DriveLabel, ShardReadLabel};
use wal_index::{Drain, DrainConfig, DriveBudget, DriveFlow, StateIndex, WalIndex};

const EXECUTIONS: i64 = 6;
const LEN: i64 = 9;

/// Runs the interop script, or `None` (skip) where there is no pyarrow.
fn interop(command: &str, wal: &Path, dir: &Path) -> Option<()> {
    let has_pyarrow = Command::new("python3")
        .args(["-c", "import pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pyarrow {
        assert!(
            std::env::var_os("SB_REQUIRE_PYARROW").is_none(),
            "SB_REQUIRE_PYARROW is set but python3 cannot import pyarrow (pip install pyarrow)"
        );
        eprintln!("SKIP: python3 has no pyarrow");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/shard-interop.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(command)
        .arg("--wal")
        .arg(wal)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shard-interop.py {command}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

#[test]
fn shards_pyarrow_writes_serve_the_bytes_a_replay_serves() {
    let dir = temp_dir("pyarrow-writes");
    let lines = wal(EXECUTIONS, LEN);
    let wal_file = dir.join("wal.jsonl");
    std::fs::write(&wal_file, lines.join("\n") + "\n").unwrap();
    let shards = dir.join("shards");
    if interop("write", &wal_file, &shards).is_none() {
        return;
    }
    let store = ShardStore::open(shards.to_str().unwrap(), std::iter::empty()).unwrap();
    let reader = StateShardReader::new(store, CellSettings::default());
    for x in 0..EXECUTIONS {
        // A pool that never indexed the execution: the drive's step 3 serves it.
        let index = WalIndex::new(slim());
        let flow =
            DriveFlow::new(DriveBudget::new(0, std::time::Duration::ZERO)).fallbacks(&reader);
        let to = head(EXECUTIONS, LEN, x);
        let drive = index.drive(FIRST + x, Some(to), &flow);
        assert_eq!(
            drive.label,
            DriveLabel::ServedShard,
            "execution {x}: {drive:?}"
        );
        assert_eq!(drive.shard, Some(ShardReadLabel::Hit));
        assert_eq!(
            served_bytes(&drive),
            replayed(&lines, FIRST + x, to),
            "execution {x}: the shard's bytes are the replay's"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn shards_the_writer_writes_read_in_pyarrow() {
    let dir = temp_dir("pyarrow-reads");
    let lines = wal(EXECUTIONS, LEN);
    let wal_file = dir.join("wal.jsonl");
    std::fs::write(&wal_file, lines.join("\n") + "\n").unwrap();
    let shards = dir.join("shards");
    let store = ShardStore::open(shards.to_str().unwrap(), std::iter::empty()).unwrap();
    let writer =
        ShardWriter::start(store, CellSettings::default(), WriterConfig::default()).unwrap();
    let index = Arc::new(WalIndex::new(slim()));
    let mut drain = Drain::new(
        Arc::clone(&index),
        JsonLinesSource::new(std::io::BufReader::new(
            std::fs::File::open(&wal_file).unwrap(),
        )),
        DrainConfig::default(),
    )
    .on_batch(writer.feed());
    drain.run_until_closed().unwrap();
    let stats = writer.shut_down();
    assert_eq!(stats.events, (EXECUTIONS - 1) as u64 * LEN as u64 + 1);
    assert_eq!(stats.sealed_written, (EXECUTIONS as u64 - 1).div_ceil(2));
    assert_eq!(stats.dropped + stats.errors, 0, "{stats:?}");
    let _ = interop("check", &wal_file, &shards);
    std::fs::remove_dir_all(&dir).ok();
}
