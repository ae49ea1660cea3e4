//! How long one execution's read by subject takes while a large backlog sits in the stream:
//! the per-execution read a drive makes while the drain replays that backlog.
//!
//! ```sh
//! nats-server -js -p 4222 -sd /tmp/js &
//! cargo run --release -p wal-source-nats --example rehydrate_bench -- nats://127.0.0.1:4222 17803 73000
//! ```
//!
//! Publishes `EVENTS` envelopes of ~`BYTES` bytes over 660 executions of ~27 events each
//! (this crate's subject layout) into a fresh stream, then reads 20 executions one by one
//! and prints each read's time, the median and the maximum. The stream is deleted after.

use std::time::{Duration, Instant};

use bytes::Bytes;
use wal_index::ingest::DecodeMode;
use wal_source_nats::{
    JetStreamConfig, JetStreamPublisher, JetStreamRehydrate, SubjectLayout, Subjects,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let events: i64 = args.next().map_or(Ok(17_803), |a| a.parse())?;
    let bytes: usize = args.next().map_or(Ok(73_000), |a| a.parse())?;
    let executions = (events / 27).max(1);
    let stream = format!("rehydrate_bench_{}", std::process::id());
    let config = JetStreamConfig::new(url).stream(&stream);
    let mut publisher = JetStreamPublisher::connect(&config, Subjects::default(), 4)?;
    publisher.ensure_stream(&stream, Duration::from_secs(10))?;
    let filler = "x".repeat(bytes.saturating_sub(120));
    let started = Instant::now();
    for n in 0..events {
        let (execution, k) = (n % executions, n / executions + 1);
        let id = execution * 1_000 + k;
        let payload = if k == 1 {
            format!(
                r#"{{"event_id":{id},"execution_id":{execution},"event_type":"playbook_started","result":"{filler}"}}"#
            )
        } else {
            format!(
                r#"{{"event_id":{id},"execution_id":{execution},"prev_event_id":{},"event_type":"step","result":"{filler}"}}"#,
                id - 1
            )
        };
        publisher.publish(execution, Bytes::from(payload))?;
    }
    publisher.flush()?;
    println!(
        "published {events} envelopes of ~{bytes} B over {executions} executions in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let reads = JetStreamRehydrate::connect(config, SubjectLayout::default())?;
    let mut times = Vec::new();
    for execution in (0..executions)
        .step_by((executions as usize / 20).max(1))
        .take(20)
    {
        let started = Instant::now();
        let got = reads.read(execution, DecodeMode::Slim)?;
        let took = started.elapsed();
        println!(
            "execution {execution}: {} events in {:.1} ms",
            got.len(),
            took.as_secs_f64() * 1e3
        );
        times.push(took);
    }
    times.sort();
    println!(
        "reads: median {:.1} ms, max {:.1} ms ({} reads)",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        times.len()
    );
    publisher.delete_stream(&stream)?;
    Ok(())
}
