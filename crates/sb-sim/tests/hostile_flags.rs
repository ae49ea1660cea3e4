//! No flag value or input file can make the tool panic, abort or allocate without bound:
//! each is refused with a message that names the flag, the path or the address.

use std::process::{Command, Output};

fn sb_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sb-sim"))
        .args(args)
        .output()
        .expect("sb-sim runs")
}

/// Refused cleanly: a usage error (2) or a reported failure (1), never a panic (101) or a
/// signal, and the message contains `needle`.
fn refused(args: &[&str], needle: &str) {
    let out = sb_sim(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?}: exit {:?}\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: {needle:?} not in\n{stderr}"
    );
}

#[test]
fn numeric_flags_are_validated() {
    refused(
        &["replay", "x.jsonl", "--drive-rate", "NaN"],
        "--drive-rate",
    );
    refused(&["replay", "x.jsonl", "--rate", "1e-30"], "--rate");
    refused(&["replay", "x.jsonl", "--rate=-5"], "--rate");
    refused(&["simulate", "--rate", "NaN"], "--rate");
    refused(&["simulate", "--rate", "inf"], "--rate");
    refused(&["simulate", "--duration", "1e12"], "--duration");
    refused(&["simulate", "--duration", "0"], "--duration");
    refused(&["simulate", "--inversion-rate", "1.5"], "--inversion-rate");
    refused(&["simulate", "--executions", "0"], "--executions");
    refused(
        &["simulate", "--drive-concurrency", "0"],
        "--drive-concurrency",
    );
    refused(
        &["simulate", "--payload-bytes", "99999999999"],
        "--payload-bytes",
    );
    refused(&["generate", "--events=-1"], "--events");
}

#[test]
fn a_plan_larger_than_memory_is_refused_before_it_is_built() {
    refused(
        &["simulate", "--rate", "10000000", "--duration", "86400"],
        "lower --rate, --duration",
    );
}

#[test]
fn paths_are_named_in_file_errors() {
    let dir = std::env::temp_dir();
    let dir = dir.to_str().unwrap();
    refused(&["replay", dir], &format!("{dir} is a directory"));
    refused(
        &["replay", "/nonexistent/wal.jsonl"],
        "/nonexistent/wal.jsonl",
    );
    refused(
        &[
            "generate",
            "--events",
            "1",
            "--out",
            "/nonexistent/dir/out.jsonl",
        ],
        "/nonexistent/dir/out.jsonl",
    );
}
