//! One row of the feed benchmark (`scripts/ehdb-bench.sh` runs every row against a real
//! writer loaded with production's retained volume, each row in a process of its own so
//! its peak RSS is its own). Prints one JSON line.
//!
//! ```text
//! feed_bench --feed HOST:PORT --records N --mode engine|engine-slim|today|floor [--cut-at-half]
//! ```
//!
//! - `engine`: the writer's feed through `EhdbSource` and the drain into a `WalIndex`
//!   (default configuration: full envelopes, no eviction policy; a terminal event evicts
//!   its execution, as in production). Caught up once the drain consumed every record.
//! - `today`: today's decode: the whole frame read into memory, deserialized into records
//!   with `String` payloads, then each payload parsed into a `serde_json::Value` (dropped
//!   once parsed: the decode path alone, not today's index).
//! - `floor`: the same frame read and discarded.
//!
//! With `--cut-at-half` a proxy cuts the first connection halfway through the first frame:
//! the engine resumes from its cursor; today's client, which parses nothing before the
//! frame is whole, subscribes from 0 again.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wal_index::{Drain, DrainConfig, IndexConfig, IndexObserver, StateIndex, WalIndex};
use wal_source_ehdb::frame::frame;
use wal_source_ehdb::test_writer::{Cut, CutProxy};
use wal_source_ehdb::{EhdbConfig, EhdbSource};

struct Args {
    feed: String,
    mode: String,
    cut_at_half: bool,
    /// The records the writer holds: the engine is caught up once it indexed them all.
    records: usize,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        feed: String::new(),
        mode: String::new(),
        cut_at_half: false,
        records: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--feed" => args.feed = it.next().ok_or("--feed needs HOST:PORT")?,
            "--mode" => {
                args.mode = it
                    .next()
                    .ok_or("--mode needs engine|engine-slim|today|floor")?
            }
            "--cut-at-half" => args.cut_at_half = true,
            "--records" => {
                args.records = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--records needs a count")?;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.feed.is_empty()
        || args.records == 0
        || !["engine", "engine-slim", "today", "floor"].contains(&args.mode.as_str())
    {
        return Err(
            "usage: feed_bench --feed HOST:PORT --records N --mode engine|engine-slim|today|floor [--cut-at-half]"
                .into(),
        );
    }
    Ok(args)
}

/// What one row measured, seconds from the first subscription.
#[derive(Default)]
struct Row {
    first_byte_s: Option<f64>,
    first_event_s: Option<f64>,
    caught_up_s: f64,
    records: u64,
    frame_bytes: u64,
    /// The index's peak bytes (its byte ledger) while it caught up (engine only).
    held_bytes: u64,
}

fn main() {
    let args = match args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("feed_bench: {error}");
            std::process::exit(2);
        }
    };
    // Every row reads through the same proxy (so every row pays its hop), which counts the
    // bytes and the subscriptions, and cuts when asked to.
    let cut = if args.cut_at_half {
        Cut::HalfOfFirstFrame
    } else {
        Cut::Never
    };
    let proxy = CutProxy::start(&args.feed, vec![cut]).expect("the proxy starts");
    let mut row = match args.mode.as_str() {
        "engine" => engine(&proxy.addr, args.records, false),
        "engine-slim" => engine(&proxy.addr, args.records, true),
        "today" => today(&proxy.addr),
        _ => floor(&proxy.addr),
    };
    row.frame_bytes = proxy.bytes_from_writer();
    let subscriptions = proxy.cursors().len();
    let opt = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.3}"));
    println!(
        "{{\"mode\":\"{}\",\"cut_at_half\":{},\"first_byte_s\":{},\"first_event_s\":{},\"caught_up_s\":{:.3},\"records\":{},\"frame_bytes\":{},\"mb_per_s\":{:.1},\"peak_rss_mb\":{:.0},\"held_mb\":{:.0},\"subscriptions\":{}}}",
        args.mode,
        args.cut_at_half,
        opt(row.first_byte_s),
        opt(row.first_event_s),
        row.caught_up_s,
        row.records,
        row.frame_bytes,
        row.frame_bytes as f64 / 1e6 / row.caught_up_s,
        peak_rss_bytes() as f64 / (1 << 20) as f64,
        row.held_bytes as f64 / (1 << 20) as f64,
        subscriptions,
    );
}

/// Counts the records the drain consumed.
#[derive(Default)]
struct Consumed(AtomicU64);

impl IndexObserver for Consumed {
    fn wal_events(&self, count: u64) {
        // Relaxed: a progress counter the main thread polls; it pairs with nothing.
        self.0.fetch_add(count, Ordering::Relaxed);
    }
}

/// The engine: the source and the drain into a `WalIndex` storing whole or (production's
/// setting) slim events, watched from here.
fn engine(feed: &str, records: usize, slim: bool) -> Row {
    let started = Instant::now();
    let consumed = Arc::new(Consumed::default());
    let index = Arc::new(WalIndex::with_observer(
        IndexConfig {
            slim,
            ..IndexConfig::default()
        },
        Arc::clone(&consumed) as Arc<dyn IndexObserver>,
    ));
    let source = EhdbSource::connect(EhdbConfig::new(feed)).expect("the source starts");
    let drain = Drain::new(Arc::clone(&index), source, DrainConfig::default()).spawn();
    let mut row = Row::default();
    // Caught up: the drain consumed every record the writer holds.
    let deadline = started + Duration::from_secs(900);
    let mut peak_held = 0;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let stats = index.stats();
        peak_held = peak_held.max(stats.bytes as u64);
        if stats.events > 0 && row.first_event_s.is_none() {
            row.first_event_s = Some(started.elapsed().as_secs_f64());
        }
        if consumed.0.load(Ordering::Relaxed) >= records as u64 || Instant::now() >= deadline {
            row.caught_up_s = started.elapsed().as_secs_f64();
            break;
        }
    }
    row.records = consumed.0.load(Ordering::Relaxed);
    row.held_bytes = peak_held;
    let report = drain.stop().expect("the drain stops");
    assert_eq!(report.bad, 0, "the benchmark's log has no bad record");
    row
}

/// Today's decode: frame → records with `String` payloads → `serde_json::Value`s.
fn today(feed: &str) -> Row {
    #[derive(serde::Deserialize)]
    struct Record {
        #[allow(dead_code)]
        global_sequence: u64,
        execution_id: String,
        #[allow(dead_code)]
        transaction_id: String,
        payload: String,
    }
    let started = Instant::now();
    let mut row = Row::default();
    let body = loop {
        // Today's worker subscribes from 0 on every connect.
        let mut stream = subscribe(feed);
        let mut prefix = [0u8; 4];
        if stream.read_exact(&mut prefix).is_err() {
            continue;
        }
        row.first_byte_s
            .get_or_insert(started.elapsed().as_secs_f64());
        let len = u32::from_be_bytes(prefix) as usize;
        let mut body = vec![0u8; len];
        if stream.read_exact(&mut body).is_ok() {
            break body;
        }
    };
    let records: Vec<Record> = serde_json::from_slice(&body).expect("a frame of records");
    for record in &records {
        let value: serde_json::Value =
            serde_json::from_str(&record.payload).expect("an event envelope");
        row.first_event_s
            .get_or_insert(started.elapsed().as_secs_f64());
        std::hint::black_box((&record.execution_id, value));
    }
    row.caught_up_s = started.elapsed().as_secs_f64();
    row.records = records.len() as u64;
    row
}

/// The floor: the frame read and discarded.
fn floor(feed: &str) -> Row {
    let started = Instant::now();
    let mut row = Row::default();
    loop {
        let mut stream = BufReader::with_capacity(256 << 10, subscribe(feed));
        let mut prefix = [0u8; 4];
        if stream.read_exact(&mut prefix).is_err() {
            continue;
        }
        row.first_byte_s
            .get_or_insert(started.elapsed().as_secs_f64());
        let len = u64::from(u32::from_be_bytes(prefix));
        let copied = std::io::copy(&mut (&mut stream).take(len), &mut std::io::sink()).unwrap_or(0);
        if copied == len {
            break;
        }
    }
    row.caught_up_s = started.elapsed().as_secs_f64();
    row
}

fn subscribe(feed: &str) -> TcpStream {
    let mut stream = TcpStream::connect(feed).expect("the feed face");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .write_all(&frame(br#"{"shard":0,"cursor":0}"#))
        .expect("the subscription");
    stream
}

/// The process's peak resident set (Linux's `VmHWM`), 0 where unknown.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
