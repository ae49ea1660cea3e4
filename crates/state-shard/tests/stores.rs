//! The reader and the writer against real stores: the S3-protocol server (`s3s-fs`,
//! required in CI), production's server path over HTTP (a loopback server of the test's
//! own), and a directory; each of the reference's reader outcomes, and the writer's
//! pacing, caps, merge and failures.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chain_fold::Event;
use common::{FIRST, replayed, served_bytes, slim, temp_dir, wal};
use sb_test_kit::s3_server::S3Server;
use state_shard::codec::encode;
use state_shard::{
    CellSettings, ShardKind, ShardRow, ShardStore, ShardWriter, StateShardReader, WriterConfig,
};
use wal_index::flow::{FallbackRead, ShardAnswer};
use wal_index::ingest::DecodeMode;
use wal_index::labels::{DriveLabel, ShardReadLabel};
use wal_index::rehydrate::RehydrateGate;
use wal_index::{DriveBudget, DriveFallbacks, DriveFlow, StateIndex, WalIndex};

const LEN: i64 = 8;

fn events(lines: &[String]) -> Vec<Event> {
    lines
        .iter()
        .map(|l| Event::from_json_slim(l.as_bytes()).unwrap())
        .collect()
}

/// Writes the shard of `events` (one execution's) at its key, as the writer would.
fn put_shard(store: &ShardStore, events: &[Event], kind: ShardKind) {
    let rows: Vec<ShardRow> = events
        .iter()
        .map(|e| ShardRow::from_event(e, 4096))
        .collect();
    let key = CellSettings::default().key(events[0].execution_id(), kind);
    futures_lite::future::block_on(store.put(&key, encode(&rows).unwrap().unwrap())).unwrap();
}

fn no_wait() -> DriveBudget {
    DriveBudget::new(0, Duration::ZERO)
}

/// A retained WAL that holds `events`.
struct Retained(Vec<Event>);

impl DriveFallbacks for Retained {
    fn retained(&self, _: chain_fold::ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
        Box::pin(std::future::ready(Some(self.0.clone())))
    }
}

/// Every outcome of the reference's reader through one store, and the drive on each.
fn each_outcome(store: &ShardStore, object_file: impl Fn(&str) -> PathBuf) {
    let lines = wal(2, LEN);
    let all = events(&lines);
    let (first, _) = all.split_at(LEN as usize);
    let reader = StateShardReader::new(store.clone(), CellSettings::default());
    let index = WalIndex::new(slim());
    let gate = RehydrateGate::default();
    let head = 1_000 + LEN;

    // Not found: both keys 404.
    assert_eq!(
        reader.read_blocking(FIRST, DecodeMode::Slim),
        ShardAnswer::NotFound
    );

    // A 404 on `sealed` with a good `open`: served from `open`.
    put_shard(store, first, ShardKind::Open);
    let flow = DriveFlow::new(no_wait()).fallbacks(&reader);
    let drive = index.drive(FIRST, Some(head), &flow);
    assert_eq!(drive.label, DriveLabel::ServedShard, "{drive:?}");
    assert_eq!(served_bytes(&drive), replayed(&lines, FIRST, head));

    // A shard that stops short of the head: `fallback`, then the retained WAL serves.
    let fresh = WalIndex::new(slim());
    let short = &first[..LEN as usize - 2];
    put_shard(store, short, ShardKind::Sealed);
    let retained = Retained(first.to_vec());
    let both = reader.clone().then_retained(retained);
    let flow = DriveFlow::new(no_wait())
        .fallbacks(&both)
        .rehydrate_gate(&gate);
    let drive = fresh.drive(FIRST, Some(head), &flow);
    assert_eq!(drive.shard, Some(ShardReadLabel::Fallback));
    assert_eq!(drive.label, DriveLabel::ServedRehydrated);

    // A truncated object: `sealed` exists but does not decode, and `open` is not tried.
    let sealed_key = CellSettings::default().key(FIRST, ShardKind::Sealed);
    let path = object_file(&sealed_key);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let answer = reader.read_blocking(FIRST, DecodeMode::Slim);
    assert!(
        matches!(&answer, ShardAnswer::Failed(why) if why.contains("Arrow")),
        "{answer:?}"
    );
    let drive = WalIndex::new(slim()).drive(FIRST, Some(head), &flow);
    assert_eq!(
        (drive.shard, drive.label),
        (Some(ShardReadLabel::Fallback), DriveLabel::ServedRehydrated)
    );

    // A stream without a `payload` column.
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "event_id",
        arrow_schema::DataType::Int64,
        true,
    )]));
    let batch = arrow_array::RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(arrow_array::Int64Array::from(vec![1_001]))],
    )
    .unwrap();
    let mut no_payload = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
    no_payload.write(&batch).unwrap();
    no_payload.finish().unwrap();
    futures_lite::future::block_on(store.put(&sealed_key, no_payload.into_inner().unwrap()))
        .unwrap();
    let answer = reader.read_blocking(FIRST, DecodeMode::Slim);
    assert!(
        matches!(&answer, ShardAnswer::Failed(why) if why.contains("payload")),
        "{answer:?}"
    );

    // A shard of another execution's events only: empty, a miss.
    put_shard(store, &all[LEN as usize..], ShardKind::Sealed);
    let key_of_second = CellSettings::default().key(FIRST + 1, ShardKind::Sealed);
    let moved = object_file(&key_of_second);
    std::fs::copy(&moved, &path).unwrap();
    assert_eq!(
        reader.read_blocking(FIRST, DecodeMode::Slim),
        ShardAnswer::Empty
    );
    let drive = WalIndex::new(slim()).drive(
        FIRST,
        Some(head),
        &DriveFlow::new(no_wait()).fallbacks(&reader),
    );
    assert_eq!(
        (drive.shard, drive.label),
        (Some(ShardReadLabel::Miss), DriveLabel::FallbackIncomplete)
    );
}

#[test]
fn every_reader_outcome_in_a_directory() {
    let dir = temp_dir("outcomes");
    let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty()).unwrap();
    each_outcome(&store, |key| dir.join(key));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_reader_outcome_on_an_s3_protocol_server() {
    let Some(server) = S3Server::start("shard-outcomes") else {
        return;
    };
    let store = ShardStore::open("s3://sbix/shards", server.url_options()).unwrap();
    each_outcome(&store, |key| server.object_file(&format!("shards/{key}")));
}

/// A loopback HTTP server answering `GET /api/internal/objects/{key}` from a directory, as
/// production's server does (404 when absent), recording each request's path.
struct ObjectServer {
    port: u16,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ObjectServer {
    fn start(root: PathBuf) -> ObjectServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&paths);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    continue;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                }
                let path = request.split(' ').nth(1).unwrap_or("").to_owned();
                seen.lock().unwrap().push(path.clone());
                let key = percent_decode(path.trim_start_matches("/api/internal/objects/"));
                let reply = match std::fs::read(root.join(&key)) {
                    Ok(body) if path.starts_with("/api/internal/objects/") => {
                        let mut reply = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.apache.arrow.feather\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        reply.extend(body);
                        reply
                    }
                    _ => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = stream.write_all(&reply);
            }
        });
        ObjectServer { port, paths }
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn the_reader_reads_through_productions_server_path() {
    let dir = temp_dir("http");
    let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty()).unwrap();
    let lines = wal(2, LEN);
    let all = events(&lines);
    put_shard(&store, &all[..LEN as usize], ShardKind::Sealed);
    let server = ObjectServer::start(dir.clone());
    let base = format!("http://127.0.0.1:{}/api/internal/objects", server.port);
    let over_http = ShardStore::open(&base, std::iter::empty()).unwrap();
    let reader = StateShardReader::new(over_http, CellSettings::default());
    let head = 1_000 + LEN;
    let drive = WalIndex::new(slim()).drive(
        FIRST,
        Some(head),
        &DriveFlow::new(no_wait()).fallbacks(&reader),
    );
    assert_eq!(drive.label, DriveLabel::ServedShard, "{drive:?}");
    assert_eq!(served_bytes(&drive), replayed(&lines, FIRST, head));
    let paths = server.paths.lock().unwrap().clone();
    let sealed = format!(
        "/api/internal/objects/{}",
        CellSettings::default().key(FIRST, ShardKind::Sealed)
    );
    assert_eq!(
        paths,
        [sealed],
        "the key raw in the path, `open` not asked for"
    );
    // The second execution has no shard: both keys asked for, both 404.
    assert_eq!(
        reader.read_blocking(FIRST + 1, DecodeMode::Slim),
        ShardAnswer::NotFound
    );
    assert_eq!(server.paths.lock().unwrap().len(), 3);
    std::fs::remove_dir_all(&dir).ok();
}

/// The writer's pacing: the first `open` write at once, later ones at most once per
/// interval, written by the timer when no event comes; `sealed` at the terminal event.
#[test]
fn the_writer_paces_open_shards_and_seals_at_the_end() {
    let dir = temp_dir("pacing");
    let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty()).unwrap();
    let config = WriterConfig {
        open_min_interval: Duration::from_millis(400),
        tick: Duration::from_millis(20),
        ..WriterConfig::default()
    };
    let writer = ShardWriter::start(store.clone(), CellSettings::default(), config).unwrap();
    let mut feed = writer.feed();
    let lines = wal(3, LEN);
    let all = events(&lines);
    let first = &all[..LEN as usize];
    feed(&first[..2]);
    let wait_for = |what: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(Instant::now() < deadline, "{:?}", writer.stats());
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(&|| writer.stats().open_written == 1);
    let started = Instant::now();
    feed(&first[2..4]);
    wait_for(&|| writer.stats().open_written == 2);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "rewritten only after the interval: {:?}",
        started.elapsed()
    );
    let reader = StateShardReader::new(store.clone(), CellSettings::default());
    let ShardAnswer::Events(held) = reader.read_blocking(FIRST, DecodeMode::Slim) else {
        panic!()
    };
    assert_eq!(held.len(), 4, "the timer wrote the throttled rows");
    feed(&first[4..]);
    // Execution 0 ends with its terminal event: sealed at once.
    wait_for(&|| writer.stats().sealed_written == 1);
    let sealed = CellSettings::default().key(FIRST, ShardKind::Sealed);
    assert!(dir.join(sealed).exists());
    let stats = writer.shut_down();
    assert_eq!(
        (stats.events, stats.rows, stats.errors),
        (LEN as u64, 2 + 4 + LEN as u64, 0)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A writer's whole life: started, fed `events`, shut down.
fn write_once(store: &ShardStore, events: &[Event]) -> state_shard::WriterStats {
    let writer = ShardWriter::start(
        store.clone(),
        CellSettings::default(),
        WriterConfig::default(),
    )
    .unwrap();
    let mut feed = writer.feed();
    feed(events);
    writer.shut_down()
}

/// A shard is never replaced by a partial chain: a writer that sees an execution only
/// from the middle (a restarted pool) merges the store's shard first; one that cannot
/// read the store's shard writes nothing for it.
#[test]
fn the_writer_merges_instead_of_replacing_a_longer_shard() {
    let dir = temp_dir("merge");
    let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty()).unwrap();
    let lines = wal(3, LEN);
    let all = events(&lines);
    let second = &all[LEN as usize..2 * LEN as usize];
    let (before, after) = second.split_at(5);
    let run = |events: &[Event]| write_once(&store, events);
    run(before);
    let stats = run(after);
    assert_eq!(stats.merged, 1, "{stats:?}");
    let reader = StateShardReader::new(store.clone(), CellSettings::default());
    let head = 2_000 + LEN;
    let drive = WalIndex::new(slim()).drive(
        FIRST + 1,
        Some(head),
        &DriveFlow::new(no_wait()).fallbacks(&reader),
    );
    assert_eq!(drive.label, DriveLabel::ServedShard, "{drive:?}");
    assert_eq!(served_bytes(&drive), replayed(&lines, FIRST + 1, head));

    // The store's shard is damaged: the writer leaves it rather than replace it.
    let open = dir.join(CellSettings::default().key(FIRST + 1, ShardKind::Open));
    std::fs::write(&open, b"not arrow").unwrap();
    let stats = run(&after[1..]);
    assert_eq!((stats.errors, stats.open_written), (1, 0), "{stats:?}");
    assert_eq!(std::fs::read(&open).unwrap(), b"not arrow");
    std::fs::remove_dir_all(&dir).ok();
}

/// The merge does not depend on seeing the genesis: a writer that gets an execution's
/// genesis again (a redelivery after a restart) among later events still merges with the
/// store's longer shard before it writes.
#[test]
fn a_redelivered_genesis_does_not_skip_the_merge() {
    let dir = temp_dir("redelivered");
    let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty()).unwrap();
    let lines = wal(3, LEN);
    let all = events(&lines);
    let second = &all[LEN as usize..2 * LEN as usize];
    let run = |events: &[Event]| write_once(&store, events);
    // The execution up to its last event but one, then a restarted writer given two late
    // events and the genesis, redelivered.
    run(&second[..LEN as usize - 1]);
    let stats = run(&[second[5].clone(), second[6].clone(), second[0].clone()]);
    assert_eq!((stats.merged, stats.errors), (1, 0), "{stats:?}");
    let reader = StateShardReader::new(store.clone(), CellSettings::default());
    let ShardAnswer::Events(held) = reader.read_blocking(FIRST + 1, DecodeMode::Slim) else {
        panic!()
    };
    assert_eq!(held.len(), LEN as usize - 1, "no row lost");
    std::fs::remove_dir_all(&dir).ok();
}

/// Over the cap the least recently active execution is written and dropped; past the TTL
/// an idle one is.
#[test]
fn the_writer_caps_what_it_holds() {
    let dir = temp_dir("caps");
    let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty()).unwrap();
    let config = WriterConfig {
        max_open: 1,
        open_ttl: Duration::from_millis(200),
        tick: Duration::from_millis(20),
        open_min_interval: Duration::from_secs(3600),
        ..WriterConfig::default()
    };
    let writer = ShardWriter::start(store, CellSettings::default(), config).unwrap();
    let mut feed = writer.feed();
    let lines = wal(4, LEN);
    let all = events(&lines);
    // Execution 1 (no terminal event: odd) and execution 3 (one genesis event).
    feed(&all[LEN as usize..LEN as usize + 2]);
    std::thread::sleep(Duration::from_millis(50));
    feed(&all[3 * LEN as usize..]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while writer.stats().evicted_idle < 1 {
        assert!(Instant::now() < deadline, "{:?}", writer.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = writer.shut_down();
    assert_eq!(
        (stats.evicted_max_open, stats.evicted_idle),
        (1, 1),
        "{stats:?}"
    );
    assert_eq!(
        stats.open_written, 2,
        "each written once, at its first batch"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The S3-protocol server killed while the writer writes: the writes that fail are
/// counted; after the restart the next writes carry every row the writer holds, and each
/// execution's shard serves the replay's bytes.
#[test]
fn the_writer_survives_its_store_going_away() {
    let Some(mut server) = S3Server::start("shard-writer-outage") else {
        return;
    };
    let store = ShardStore::open("s3://sbix/shards", server.url_options()).unwrap();
    let config = WriterConfig {
        open_min_interval: Duration::ZERO,
        tick: Duration::from_millis(20),
        ..WriterConfig::default()
    };
    let writer = ShardWriter::start(store.clone(), CellSettings::default(), config).unwrap();
    let mut feed = writer.feed();
    let executions = 5;
    let lines = wal(executions, LEN);
    let all = events(&lines);
    let by_execution: Vec<&[Event]> = all.chunks(LEN as usize).collect();
    let fed = AtomicUsize::new(0);
    let mut feed_step = |step: usize| {
        for events in &by_execution {
            if let Some(event) = events.get(step) {
                feed(std::slice::from_ref(event));
                fed.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    };
    feed_step(0);
    feed_step(1);
    server.kill();
    feed_step(2);
    feed_step(3);
    let deadline = Instant::now() + Duration::from_secs(30);
    while writer.stats().errors == 0 {
        assert!(Instant::now() < deadline, "{:?}", writer.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    server.restart();
    for step in 4..LEN as usize {
        feed_step(step);
    }
    let stats = writer.shut_down();
    assert!(stats.errors > 0 && stats.dropped == 0, "{stats:?}");
    let reader = StateShardReader::new(store, CellSettings::default());
    for x in 0..executions - 1 {
        let head = 1_000 * (x + 1) + LEN;
        let drive = WalIndex::new(slim()).drive(
            FIRST + x,
            Some(head),
            &DriveFlow::new(no_wait()).fallbacks(&reader),
        );
        assert_eq!(
            drive.label,
            DriveLabel::ServedShard,
            "execution {x}: {drive:?}"
        );
        assert_eq!(served_bytes(&drive), replayed(&lines, FIRST + x, head));
    }
}
