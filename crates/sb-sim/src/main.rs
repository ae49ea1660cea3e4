//! `sb-sim`: run the calibrated workload (or a WAL file) through both engines and print the
//! production note's table for each.

mod shard_cli;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sb_sim::workload::{Generator, Shape, read_jsonl, write_jsonl};
use sb_sim::{Engines, GlobalMetrics, Plan, SimConfig, WalTarget};
use wal_index::IndexConfig;

/// A finite number in `lo..=hi`; clap shows the error with the flag's name.
fn number_in(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |text: &str| {
        let value: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a number"))?;
        if !value.is_finite() || value < lo || value > hi {
            return Err(format!("{text} is outside {lo}..={hi}"));
        }
        Ok(value)
    }
}

/// A share: a finite number in `0..=1`.
fn share(text: &str) -> Result<f64, String> {
    number_in(0.0, 1.0)(text)
}

/// Events per second for `simulate`: at least one every 100 s, at most 10 million.
fn events_per_second(text: &str) -> Result<f64, String> {
    number_in(0.01, 1e7)(text)
}

/// Events per second for `replay`: as above, or 0 for unpaced.
fn replay_rate(text: &str) -> Result<f64, String> {
    let value = number_in(0.0, 1e7)(text)?;
    if value > 0.0 && value < 0.01 {
        return Err(format!("{text} is below 0.01 (use 0 for unpaced)"));
    }
    Ok(value)
}

/// Seconds of live workload: more than zero, at most a day.
fn seconds(text: &str) -> Result<f64, String> {
    let value = number_in(0.0, 86_400.0)(text)?;
    if value == 0.0 {
        return Err("the duration must be more than 0 s".to_owned());
    }
    Ok(value)
}

/// The most bytes of payload a generated plan may hold in memory (the plan is built before
/// the run, so a flag must not be able to ask for more than the machine has).
const PLAN_BYTES_MAX: u128 = 4 << 30;

#[derive(Parser)]
#[command(
    name = "sb-sim",
    version,
    about = "State-builder index simulator: both engines, side by side"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded calibrated workload (the default command).
    Simulate(Simulate),
    /// Feed a JSON-lines WAL file (one event per line) through the engines.
    Replay(Replay),
    /// Write a generated workload as a JSON-lines WAL file.
    Generate(Generate),
    /// Look at a state shard, or where an execution's shards live.
    #[command(subcommand)]
    Shard(shard_cli::ShardCommand),
}

#[derive(Args, Clone)]
struct ShapeArgs {
    /// Executions running at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    executions: u32,
    /// Mean events per execution.
    #[arg(long, default_value_t = 27, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    events_per_execution: u32,
    /// Mean full-envelope size in bytes (log-normal around it; production: ~73 KiB).
    #[arg(long, default_value_t = 73_000, value_parser = clap::value_parser!(u32).range(0..=(16 << 20)))]
    payload_bytes: u32,
    /// Share of dispatches repeated at the same head (cache hits; production: 14.6% of
    /// builds).
    #[arg(long, default_value_t = 0.2, value_parser = share)]
    repeat_rate: f64,
    /// The most tail events a dispatch carries.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    tail_max: u32,
    /// Share of events arriving as a fan-out inversion (tip id below its predecessor's).
    #[arg(long, default_value_t = 0.1, value_parser = share)]
    inversion_rate: f64,
    /// Share of events that trigger a drive (production: ~5 per 27-event execution).
    #[arg(long, default_value_t = 0.185, value_parser = share)]
    drive_rate: f64,
    /// Seed: the same seed gives the same workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl ShapeArgs {
    fn shape(&self) -> Shape {
        Shape {
            concurrent_executions: self.executions as usize,
            events_per_execution: self.events_per_execution as usize,
            inversion_rate: self.inversion_rate,
            drive_rate: self.drive_rate,
            payload_bytes: self.payload_bytes as usize,
            repeat_rate: self.repeat_rate,
            tail_max: self.tail_max as usize,
            seed: self.seed,
        }
    }
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Which engines to run.
    #[arg(long, value_enum, default_value_t = Engines::All)]
    engine: Engines,
    /// Dispatches carry no tail events (today's worker attaches them by default).
    #[arg(long)]
    no_tails: bool,
    /// Where the drain runs: a task on the drives' two-worker runtime (today's shape) or
    /// its own thread (always its own thread through a broker).
    #[arg(long, value_enum, default_value_t = sb_sim::run::RunOn::Task)]
    drain_on: sb_sim::run::RunOn,
    /// Where the drives run: tasks on the two-worker runtime (today's shape) or threads of
    /// its blocking pool (blocking drives).
    #[arg(long, value_enum, default_value_t = sb_sim::run::RunOn::Task)]
    drives_on: sb_sim::run::RunOn,
    /// Concurrent rehydrate-on-miss replays (today's default 2; 0 disables rehydrate).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    rehydrate_concurrency: u32,
    /// Drives in flight at once (production: 2 concurrent commands per worker; the other
    /// dispatches queue).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    drive_concurrency: u32,
    /// Write the report as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a self-contained HTML page with plots to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Serve the sb-metrics Prometheus endpoint on ADDR while running (label `engine`).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Send the events through a NATS JetStream broker at nats://HOST:PORT (a stream per
    /// engine run, deleted afterwards) or an EHDB writer at
    /// ehdb://HOST:FEED_PORT?ingest=PORT[&shards=N] (each engine run numbers its records
    /// above the last run's) instead of an in-process channel.
    #[arg(long, value_name = "URL")]
    wal: Option<String>,
    /// Report a hole in a chain still open after this many seconds (the index's
    /// `stall_after`; default 30; 0: never, as `NOETL_STATE_INDEX_STALL_SECS`).
    #[arg(long, value_parser = number_in(0.0, 86_400.0))]
    stall_secs: Option<f64>,
    /// The engine's drain checkpoints its index every SECS seconds (into a directory of
    /// the run's own, deleted afterwards): what checkpoints cost the drain, and the
    /// `checkpoints_total` series. Off by default.
    #[arg(long, value_name = "SECS", value_parser = number_in(0.001, 86_400.0))]
    checkpoint_secs: Option<f64>,
    /// On an EHDB writer, read a miss's execution from the writer's feed (off by default:
    /// each read makes the writer prepare a whole log shard while its producers wait).
    #[arg(long)]
    ehdb_feed_reads: bool,
    /// With --roll-at: the old pool writes state shards to LOCATION (a directory, or an
    /// s3:// URL configured from the AWS_* environment) and the new pool reads them on a
    /// miss.
    #[arg(long, value_name = "LOCATION")]
    state_shards: Option<String>,
}

impl RunArgs {
    fn wal(&self) -> Result<WalTarget, String> {
        WalTarget::parse(self.wal.as_deref())
    }

    /// The run's configuration at `rate`.
    fn config(&self, rate: f64) -> Result<SimConfig, String> {
        Ok(SimConfig {
            rate,
            drive_concurrency: self.drive_concurrency as usize,
            tails: !self.no_tails,
            drain_on: self.drain_on,
            drives_on: self.drives_on,
            rehydrate_concurrency: self.rehydrate_concurrency as usize,
            wal: self.wal()?,
            index: IndexConfig {
                stall_after: match self.stall_secs {
                    None => Some(IndexConfig::DEFAULT_STALL_AFTER),
                    Some(0.0) => None,
                    Some(secs) => Some(Duration::from_secs_f64(secs)),
                },
                ..SimConfig::production_index()
            },
            checkpoint_every: self.checkpoint_secs.map(Duration::from_secs_f64),
            ehdb_feed_reads: self.ehdb_feed_reads,
            state_shards: self.state_shards.clone(),
            ..SimConfig::default()
        })
    }
}

#[derive(Args)]
struct Simulate {
    #[command(flatten)]
    shape: ShapeArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Seconds of live workload per engine.
    #[arg(long, default_value_t = 15.0, value_parser = seconds)]
    duration: f64,
    /// Events per second the producer publishes.
    #[arg(long, default_value_t = 50.0, value_parser = events_per_second)]
    rate: f64,
    /// Events already in the WAL when the drain starts (a restart mid-flight: the live
    /// phase continues these executions); 0 disables.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(0..=50_000_000))]
    cold_start: u32,
    /// Roll the pool SECS into the live phase: it is stopped and a new one starts (with
    /// `Drain::warm_start`) while the producer keeps publishing. Runs four rolls side by
    /// side (the engine shut down gracefully, its last checkpoint restored; the engine
    /// dropped without a goodbye, its newest checkpoint, taken every `--checkpoint-secs`
    /// (default 5), restored; the engine replaying from 0; today's design replaying from 0)
    /// instead of the engines' report.
    #[arg(long, value_name = "SECS", value_parser = number_in(0.001, 86_400.0))]
    roll_at: Option<f64>,
    /// Live events the WAL loses from the middle of their chains (acknowledged, never
    /// delivered, in no retained history or tail), spread over the live phase: the engine
    /// reports each hole `--stall-secs` after its first check saw it.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    lose_events: u32,
}

#[derive(Args)]
struct Replay {
    /// The WAL: a file with one JSON event per line, `nats://HOST:PORT` to read the events
    /// retained by a JetStream stream (`--stream`, `--filter`), or
    /// `ehdb://HOST:FEED_PORT[?shards=N]` to read what an EHDB writer retains (`--shard`).
    file: PathBuf,
    /// With an `ehdb://` source: only this shard (default: every shard, in
    /// `global_sequence` order).
    #[arg(long)]
    shard: Option<u32>,
    /// With a `nats://` source: the stream to read.
    #[arg(long, default_value = wal_source_nats::DEFAULT_STREAM)]
    stream: String,
    /// With a `nats://` source: only subjects matching this filter.
    #[arg(long)]
    filter: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Events per second to replay at (0: as fast as possible; then the drain can apply
    /// a terminal event, and evict its execution, before that execution's drives run).
    #[arg(long, default_value_t = 2000.0, value_parser = replay_rate)]
    rate: f64,
    /// Share of events that trigger a drive.
    #[arg(long, default_value_t = 0.185, value_parser = share)]
    drive_rate: f64,
    /// Seed for choosing which events trigger drives.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
struct Generate {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Events to write.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(0..=50_000_000))]
    events: u32,
    /// Undecodable lines to mix in (to exercise bad-record handling).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    bad_lines: u32,
    /// Output file (`-` for standard output).
    #[arg(long, default_value = "-")]
    out: PathBuf,
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sb-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let command = cli
        .command
        .unwrap_or_else(|| Command::Simulate(Simulate::parse_from_default()));
    match command {
        Command::Shard(shard) => {
            if let Err(shard_cli::BadShard(why)) = shard_cli::run(shard) {
                eprintln!("sb-sim: {why}");
                // Bad input, as clap's own usage errors: exit 2.
                std::process::exit(2);
            }
            Ok(())
        }
        Command::Simulate(sim) => simulate(sim),
        Command::Replay(replay) => replay_wal(replay),
        Command::Generate(generate) => generate_wal(generate),
    }
}

/// `sb-sim simulate`: a generated workload, its size checked before it is generated.
fn simulate(sim: Simulate) -> Result<(), Box<dyn std::error::Error>> {
    if sim.run.state_shards.is_some() && sim.roll_at.is_none() {
        return Err(
            "--state-shards is a roll's (the old pool writes, the new one reads): add --roll-at"
                .into(),
        );
    }
    let shape = sim.shape.shape();
    // Both flags are bounded, so the product is finite; the plan holds every event
    // in memory, so its size is checked before anything is generated.
    let live = (sim.rate * sim.duration).round() as u64;
    let events = live + u64::from(sim.cold_start);
    let bytes = u128::from(events) * (u128::from(sim.shape.payload_bytes) + 256);
    if bytes > PLAN_BYTES_MAX {
        return Err(format!(
            "the plan would hold {events} events of ~{} B ({:.1} GiB; at most {} GiB): \
             lower --rate, --duration, --cold-start or --payload-bytes",
            sim.shape.payload_bytes + 256,
            bytes as f64 / f64::from(1u32 << 30),
            PLAN_BYTES_MAX >> 30
        )
        .into());
    }
    let live = live as usize;
    let cold_start = sim.cold_start as usize;
    let mut plan = Plan::generate(&shape, cold_start, live);
    let lost = plan.lose(sim.lose_events as usize);
    let config = sim.run.config(sim.rate)?;
    let workload = format!(
        "simulate via {wal}: restart mid-flight with {cold_start} events in the WAL, then {live} live events at {} ev/s ({lost} lost by the WAL, {} drives, {:.0}% repeated, tails {}, drain as a {:?}, drives as {:?}s); {} concurrent executions of ~{} events, envelopes ~{} B mean (slim stored), {:.0}% inversions, seed {}",
        sim.rate,
        plan.drives(),
        shape.repeat_rate * 100.0,
        if config.tails { "on" } else { "off" },
        config.drain_on,
        config.drives_on,
        shape.concurrent_executions,
        shape.events_per_execution,
        shape.payload_bytes,
        shape.inversion_rate * 100.0,
        shape.seed,
        wal = config.wal.describe(),
    );
    if let Some(at) = sim.roll_at {
        return roll(&plan, &config, at, workload);
    }
    finish(&plan, &config, &sim.run, workload)
}

/// `simulate --roll-at`: the four rolls' report.
fn roll(
    plan: &Plan,
    config: &SimConfig,
    at: f64,
    workload: String,
) -> Result<(), Box<dyn std::error::Error>> {
    let roll = sb_sim::roll::Roll {
        at: Duration::from_secs_f64(at),
        every: config.checkpoint_every.unwrap_or(Duration::from_secs(5)),
    };
    let report = sb_sim::roll::run_rolls(plan, config, roll, workload)?;
    print!("{}", report.to_text());
    Ok(())
}

/// `sb-sim replay`: a JSON-lines WAL file or a JetStream stream, as the live phase.
fn replay_wal(replay: Replay) -> Result<(), Box<dyn std::error::Error>> {
    let source = replay.file.to_string_lossy().into_owned();
    let items = if source.starts_with("ehdb://") {
        let target = sb_sim::wal::EhdbTarget::parse(&source, false)?;
        sb_sim::wal::read_writer(&target, replay.shard, replay.drive_rate, replay.seed)?
    } else if source.starts_with("nats://") {
        sb_sim::wal::read_stream(
            &source,
            &replay.stream,
            replay.filter.as_deref(),
            replay.drive_rate,
            replay.seed,
        )?
    } else {
        let path = replay.file.display();
        if replay.file.is_dir() {
            return Err(format!("{path} is a directory, not a WAL file").into());
        }
        let file =
            std::fs::File::open(&replay.file).map_err(|e| format!("cannot open {path}: {e}"))?;
        read_jsonl(
            std::io::BufReader::new(file),
            replay.drive_rate,
            replay.seed,
        )
        .map_err(|e| format!("cannot read {path}: {e}"))?
    };
    let plan = Plan {
        live: items,
        ..Plan::default()
    };
    let config = replay.run.config(replay.rate)?;
    let workload = format!(
        "replay {} via {}: {} records ({} undecodable), {} drives, rate {}",
        replay.file.display(),
        config.wal.describe(),
        plan.live.len(),
        plan.live.iter().filter(|i| i.ids.is_none()).count(),
        plan.drives(),
        if replay.rate > 0.0 {
            format!("{} ev/s", replay.rate)
        } else {
            "unpaced".to_owned()
        }
    );
    finish(&plan, &config, &replay.run, workload)
}

/// `sb-sim generate`: a workload written as a JSON-lines WAL, with bad lines spread in it.
fn generate_wal(generate: Generate) -> Result<(), Box<dyn std::error::Error>> {
    let mut items = Generator::new(generate.shape.shape()).take(generate.events as usize);
    let bad_lines = generate.bad_lines as usize;
    // Spread the bad lines evenly so valid events surround each.
    let stride = (items.len() / (bad_lines + 1)).max(1);
    for k in (1..=bad_lines).rev() {
        let at = (k * stride).min(items.len());
        items.insert(
            at,
            sb_sim::workload::Item {
                payload: bytes::Bytes::from(format!(
                    "{{\"event_id\":\"bad-{k}\",\"execution_id\":1}}"
                )),
                ids: None,
                triggers: false,
                tail: Vec::new(),
                repeat: false,
            },
        );
    }
    if generate.out.as_os_str() == "-" {
        write_jsonl(&items, std::io::stdout().lock())?;
    } else {
        let path = generate.out.display();
        let file = std::fs::File::create(&generate.out)
            .map_err(|e| format!("cannot create {path}: {e}"))?;
        write_jsonl(&items, std::io::BufWriter::new(file))
            .map_err(|e| format!("cannot write {path}: {e}"))?;
        eprintln!("wrote {} lines to {}", items.len(), generate.out.display());
    }
    Ok(())
}

impl Simulate {
    fn parse_from_default() -> Simulate {
        match Cli::parse_from(["sb-sim", "simulate"]).command {
            Some(Command::Simulate(sim)) => sim,
            _ => unreachable!("`simulate` parses as Simulate"),
        }
    }
}

fn finish(
    plan: &Plan,
    config: &SimConfig,
    args: &RunArgs,
    workload: String,
) -> Result<(), Box<dyn std::error::Error>> {
    let global = match args.metrics_addr {
        Some(addr) => {
            let prefix = sb_metrics::series::DEFAULT_PREFIX;
            sb_metrics::exporter::install(addr, prefix)?;
            eprintln!("serving metrics on http://{addr}/metrics");
            Some(GlobalMetrics::register(prefix))
        }
        None => None,
    };
    let report = sb_sim::run(plan, config, args.engine, global.as_ref(), workload)?;
    print!("{}", report.to_text());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        if path.as_os_str() == "-" {
            let mut out = std::io::stdout().lock();
            out.write_all(json.as_bytes())?;
            out.write_all(b"\n")?;
        } else {
            std::fs::write(path, json)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &args.html {
        std::fs::write(path, sb_sim::html::render(&report))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if args.metrics_addr.is_some() {
        // Leave the endpoint up briefly so a scraper catches the final values.
        std::thread::sleep(Duration::from_secs(2));
    }
    Ok(())
}
