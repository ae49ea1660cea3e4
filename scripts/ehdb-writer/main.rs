//! A test harness around EHDB's writer (noetl/ehdb's `ehdb-l0` engine and `ehdb-feed`
//! faces), for this repository's tests and benchmarks only. It is built by
//! `scripts/ehdb-writer.sh` against the EHDB source tree that `EHDB_SRC` names.
//!
//! ```text
//! ehdb-writer --dir DIR [--feed ADDR] [--ingest ADDR] [--shards N] [--load FILE]
//! ```
//!
//! Opens (or reopens) the D1 event log in `DIR` (its hot tier and a local-filesystem
//! substrate), loads `FILE` if given (one event envelope per line, each appended as a
//! record with the next global sequence, its execution id read from the envelope), then
//! serves the feed face and the ingest face and prints one line,
//! `ready feed=ADDR ingest=ADDR tip=N`, once both listen. It runs until killed; killed and
//! restarted on the same `DIR`, it serves every record it acknowledged.

use std::io::BufRead;
use std::sync::Arc;

use ehdb_feed::{FeedWriter, serve, serve_ingest};
use ehdb_l0::{D1EventLog, EventRecord, L0Config, L0Engine, LocalFsSubstrate};

struct Args {
    dir: std::path::PathBuf,
    feed: String,
    ingest: String,
    shards: u32,
    load: Option<std::path::PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        dir: std::path::PathBuf::new(),
        feed: "127.0.0.1:0".into(),
        ingest: "127.0.0.1:0".into(),
        shards: 1,
        load: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => args.dir = value()?.into(),
            "--feed" => args.feed = value()?,
            "--ingest" => args.ingest = value()?,
            "--shards" => args.shards = value()?.parse().map_err(|e| format!("--shards: {e}"))?,
            "--load" => args.load = Some(value()?.into()),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err("--dir is required".into());
    }
    Ok(args)
}

/// The execution id of an envelope, as the feed's records carry it (its decimal text).
fn execution_of(envelope: &str) -> Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_str(envelope).map_err(|e| format!("not JSON: {e}"))?;
    match &value["execution_id"] {
        serde_json::Value::Number(n) => Ok(n.to_string()),
        serde_json::Value::String(s) => Ok(s.clone()),
        other => Err(format!("execution_id is {other}")),
    }
}

fn main() {
    if let Err(error) = run() {
        eprintln!("ehdb-writer: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args = args()?;
    let mut config = L0Config::d1(args.dir.join("hot"));
    config.shard_count = args.shards.max(1);
    let substrate = LocalFsSubstrate::new(args.dir.join("substrate")).map_err(|e| e.to_string())?;
    let engine =
        L0Engine::<D1EventLog>::open(config, Arc::new(substrate)).map_err(|e| e.to_string())?;
    let writer = Arc::new(FeedWriter::new(engine));
    if let Some(path) = &args.load {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut sequence = writer.engine().lock().unwrap().global_sequence();
        for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| e.to_string())?;
            if line.trim().is_empty() {
                continue;
            }
            let execution_id = execution_of(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
            sequence += 1;
            writer
                // `new`, not a struct literal: newer EHDB records carry more fields
                // (`event_id`), and this harness must build against them too.
                .append(EventRecord::new(
                    sequence,
                    execution_id,
                    format!("load-{sequence}"),
                    line,
                ))
                .map_err(|e| e.to_string())?;
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let feed = tokio::net::TcpListener::bind(&args.feed)
            .await
            .map_err(|e| format!("feed {}: {e}", args.feed))?;
        let ingest = tokio::net::TcpListener::bind(&args.ingest)
            .await
            .map_err(|e| format!("ingest {}: {e}", args.ingest))?;
        let tip = writer.engine().lock().unwrap().global_sequence();
        println!(
            "ready feed={} ingest={} tip={tip}",
            feed.local_addr().map_err(|e| e.to_string())?,
            ingest.local_addr().map_err(|e| e.to_string())?
        );
        let feed_writer = Arc::clone(&writer);
        let feed_task = tokio::spawn(async move { serve(feed_writer, feed).await });
        let ingest_task = tokio::spawn(async move { serve_ingest(ingest, writer).await });
        let (feed, ingest) = tokio::join!(feed_task, ingest_task);
        Err(format!("the faces stopped: feed {feed:?}, ingest {ingest:?}"))
    })
}
