//! `sb-sim shard show` and `sb-sim shard key` as an operator runs them: a good shard's
//! schema, rows and chain; bad files named with what is wrong, exit 2.

use std::process::Command;

use chain_fold::Event;
use state_shard::codec::encode;
use state_shard::{CellSettings, ShardKind, ShardRow};

fn sb_sim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sb-sim"))
        .args(args)
        .env_remove("NOETL_RESULT_CELL_ENV")
        .env_remove("NOETL_RESULT_SHARD_COUNT")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn show_a_shard_then_bad_ones() {
    let dir = std::env::temp_dir().join(format!("sb-sim-shard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let execution = 358_159_477_016_371_200;
    let events = [
        Event::minimal(1, execution, None, "playbook_started"),
        Event::minimal(2, execution, Some(1), "step.exit"),
        Event::minimal(4, execution, Some(3), "step.exit"),
    ];
    let rows: Vec<ShardRow> = events.iter().map(|e| ShardRow::from_event(e, 0)).collect();
    let whole = encode(&rows[..2]).unwrap().unwrap();
    let good = dir.join("good.feather");
    std::fs::write(&good, &whole).unwrap();
    let (code, out, _) = sb_sim(&["shard", "show", good.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("  prev_event_id: Int64\n"), "{out}");
    assert!(out.contains("  2  1  step.exit\n"), "{out}");
    assert!(
        out.contains("from its newest event 2 the chain reaches genesis (2 events)"),
        "{out}"
    );

    let gapped = dir.join("gapped.feather");
    std::fs::write(&gapped, encode(&rows).unwrap().unwrap()).unwrap();
    let (code, out, _) = sb_sim(&["shard", "show", gapped.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("does NOT reach genesis: hop to 3 is not indexed"),
        "{out}"
    );

    let cut = dir.join("cut.feather");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let (code, _, err) = sb_sim(&["shard", "show", cut.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not an Arrow IPC stream"), "{err}");

    let (code, _, err) = sb_sim(&["shard", "show", dir.to_str().unwrap(), "--execution", "7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no shard of execution 7"), "{err}");

    let (code, out, _) = sb_sim(&["shard", "key", &execution.to_string()]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&CellSettings::default().key(execution, ShardKind::Sealed)),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
