//! `sb-sim shard`: a state shard as an operator looks at it (`show`), and where an
//! execution's shards live (`key`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chain_fold::{Chain, Event, ExecutionId};
use clap::{Args, Subcommand};
use state_shard::codec::{DecodedShard, decode};
use state_shard::{CellSettings, ShardKind, ShardStore, StateShardReader};

/// `sb-sim shard …`.
#[derive(Subcommand)]
pub(crate) enum ShardCommand {
    /// Print a shard's schema, its rows (id, link, type) and whether each execution's chain
    /// reaches genesis from its newest event.
    Show(Show),
    /// Print the keys an execution's shards live under, with the pool's settings
    /// (`NOETL_RESULT_CELL_ENV`, `_REGION`, `NOETL_RESULT_CELL`, `NOETL_RESULT_SHARD_COUNT`,
    /// `NOETL_SNOWFLAKE_EPOCH_MS`).
    Key(Key),
}

#[derive(Args)]
pub(crate) struct Show {
    /// A shard file, an object's URL (`s3://bucket/…/sealed.feather`, `http://…`), or with
    /// `--execution` a store (a directory or a bucket URL) to look the execution's shard up
    /// in (`sealed`, then `open`). Cloud credentials come from the environment.
    source: String,
    /// Only this execution's rows; with a store, the execution whose shard to read.
    #[arg(long)]
    execution: Option<ExecutionId>,
}

#[derive(Args)]
pub(crate) struct Key {
    /// The execution id.
    id: ExecutionId,
}

/// A shard that cannot be shown: exit 2, as for any bad input.
#[derive(Debug)]
pub(crate) struct BadShard(pub(crate) String);

/// The largest shard `show` reads (production's are kilobytes).
const MAX_BYTES: u64 = 256 << 20;

/// Runs one `shard` command, printing to standard output.
pub(crate) fn run(command: ShardCommand) -> Result<(), BadShard> {
    match command {
        ShardCommand::Key(key) => {
            print!("{}", keys(&CellSettings::from_env(), key.id));
            Ok(())
        }
        ShardCommand::Show(show) => {
            let (place, bytes) = fetch(&show)?;
            let shard = decode(&bytes).map_err(|e| BadShard(format!("{place}: {e}")))?;
            let text = describe(&place, bytes.len(), &shard, show.execution)
                .map_err(|e| BadShard(format!("{place}: {e}")))?;
            print!("{text}");
            Ok(())
        }
    }
}

/// Where an execution's shards live, with the hash shard and the date they are under.
fn keys(cell: &CellSettings, id: ExecutionId) -> String {
    format!(
        "execution {id}: hash shard {} of {}, date {}\nsealed: {}\nopen:   {}\n",
        cell.hash_shard(id),
        cell.shard_count,
        state_shard::key::SnowflakeDate::of(id, cell.epoch_ms),
        cell.key(id, ShardKind::Sealed),
        cell.key(id, ShardKind::Open),
    )
}

/// The shard's bytes and where they came from.
fn fetch(show: &Show) -> Result<(String, Vec<u8>), BadShard> {
    let source = show.source.as_str();
    let is_store = !source.ends_with(".feather") && show.execution.is_some();
    let local = std::path::Path::new(source);
    if !(source.contains("://") || (is_store && local.is_dir())) {
        let bytes = std::fs::read(local).map_err(|e| BadShard(format!("{source}: {e}")))?;
        return Ok((source.to_owned(), bytes));
    }
    let bad = |e: String| BadShard(format!("{source}: {e}"));
    let (store_at, key) = if is_store {
        (source.to_owned(), None)
    } else {
        let (dir, file) = source
            .rsplit_once('/')
            .ok_or_else(|| bad("not an object URL".into()))?;
        (dir.to_owned(), Some(file.to_owned()))
    };
    let store = ShardStore::open(&store_at, std::env::vars()).map_err(|e| bad(e.to_string()))?;
    let key = match (key, show.execution) {
        (Some(key), _) => key,
        (None, Some(id)) => find_key(&store, id)?,
        (None, None) => return Err(bad("a store needs --execution".into())),
    };
    let got = futures_lite::future::block_on(store.get(&key, MAX_BYTES))
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad(format!("{key}: not found")))?;
    Ok((format!("{store_at}/{key}"), got.to_vec()))
}

/// The key of the execution's `sealed` shard if it exists, else of its `open` one.
fn find_key(store: &ShardStore, id: ExecutionId) -> Result<String, BadShard> {
    let cell = StateShardReader::new(store.clone(), CellSettings::from_env())
        .cell()
        .clone();
    for kind in [ShardKind::Sealed, ShardKind::Open] {
        let key = cell.key(id, kind);
        let found = futures_lite::future::block_on(store.get(&key, MAX_BYTES))
            .map_err(|e| BadShard(format!("{key}: {e}")))?;
        if found.is_some() {
            return Ok(key);
        }
    }
    Err(BadShard(format!(
        "no shard of execution {id} under {} ({})",
        store.location(),
        cell.key(id, ShardKind::Sealed)
    )))
}

/// The schema, the rows and each execution's chain, as text.
fn describe(
    place: &str,
    bytes: usize,
    shard: &DecodedShard,
    only: Option<ExecutionId>,
) -> Result<String, state_shard::ShardError> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{place}: {bytes} bytes, {} rows in {} batches",
        shard.rows(),
        shard.batches.len()
    );
    out.push_str("schema:\n");
    for field in shard.schema.fields() {
        let nullable = if field.is_nullable() {
            ""
        } else {
            ", not null"
        };
        let _ = writeln!(out, "  {}: {}{nullable}", field.name(), field.data_type());
    }
    let mut chains: BTreeMap<ExecutionId, Chain> = BTreeMap::new();
    out.push_str("rows (event_id  prev_event_id  event_type):\n");
    let mut bad = 0usize;
    for payload in shard.payloads()? {
        let Ok(event) = Event::from_json(payload.as_bytes()) else {
            bad += 1;
            continue;
        };
        if only.is_some_and(|id| id != event.execution_id()) {
            continue;
        }
        let prev = event.prev().map_or("-".to_owned(), |p| p.to_string());
        let _ = writeln!(out, "  {}  {prev}  {}", event.id(), event.event_type());
        chains
            .entry(event.execution_id())
            .or_insert_with(|| Chain::new(wal_index::IndexConfig::default().order))
            .apply(event);
    }
    if bad > 0 {
        let _ = writeln!(
            out,
            "{bad} payload cells are not events (null cells are not counted)"
        );
    }
    for (id, chain) in &chains {
        let newest = chain.max_id().unwrap_or_default();
        let _ = match chain.walk_from(newest) {
            Ok(spine) => writeln!(
                out,
                "execution {id}: from its newest event {newest} the chain reaches genesis ({} events)",
                spine.len()
            ),
            Err(why) => writeln!(
                out,
                "execution {id}: from its newest event {newest} the chain does NOT reach genesis: {why}"
            ),
        };
    }
    if chains.is_empty() {
        out.push_str("no event rows\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_references_worked_example() {
        let text = keys(&CellSettings::default(), 330390737327759360);
        assert!(
            text.contains("hash shard 254 of 256, date 2026-06-30"),
            "{text}"
        );
        assert!(text.contains("sealed: noetl/env=dev/region=local/cell=local-0/shard=s0254/tenant=default/project=default/date=2026-06-30/execution=330390737327759360/state/sealed.feather"));
    }
}
