//! Where an execution's shards live: production's key layout, its hash and its date rule
//! (noetl/worker's `src/state_locator.rs` and `src/snowflake.rs`, v5.120.0;
//! noetl/tools' `noetl-locator`).

use std::fmt;

use chain_fold::ExecutionId;

/// Which of an execution's two shards: written while it runs, or at its terminal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardKind {
    /// Rewritten while the execution runs (`open.feather`).
    Open,
    /// Written once at the terminal event (`sealed.feather`).
    Sealed,
}

impl ShardKind {
    /// The file name under the execution's `state/` folder.
    pub const fn file_name(self) -> &'static str {
        match self {
            ShardKind::Open => "open.feather",
            ShardKind::Sealed => "sealed.feather",
        }
    }

    /// The `seal` label of `shards_written_total`.
    pub const fn label(self) -> &'static str {
        match self {
            ShardKind::Open => "open",
            ShardKind::Sealed => "sealed",
        }
    }
}

/// The pool's settings that place a shard: the result cell (environment, region, cell),
/// the hash's shard count and the snowflake epoch. Reader and writer must agree on them,
/// or each looks where the other never writes.
///
/// ```
/// use state_shard::{CellSettings, ShardKind};
///
/// // The reference's first worked example: the defaults.
/// let key = CellSettings::default().key(330390737327759360, ShardKind::Sealed);
/// assert_eq!(
///     key,
///     "noetl/env=dev/region=local/cell=local-0/shard=s0254/tenant=default/project=default/\
///      date=2026-06-30/execution=330390737327759360/state/sealed.feather"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSettings {
    /// `NOETL_RESULT_CELL_ENV` (default `dev`; production `prod`).
    pub env: String,
    /// `NOETL_RESULT_CELL_REGION` (default `local`).
    pub region: String,
    /// `NOETL_RESULT_CELL` (default `local-0`).
    pub cell: String,
    /// `NOETL_RESULT_SHARD_COUNT` (default 256, at least 1).
    pub shard_count: u32,
    /// `NOETL_SNOWFLAKE_EPOCH_MS` (default [`CellSettings::DEFAULT_EPOCH_MS`]).
    pub epoch_ms: u64,
}

impl Default for CellSettings {
    fn default() -> Self {
        CellSettings {
            env: "dev".into(),
            region: "local".into(),
            cell: "local-0".into(),
            shard_count: CellSettings::DEFAULT_SHARD_COUNT,
            epoch_ms: CellSettings::DEFAULT_EPOCH_MS,
        }
    }
}

/// Tenant and project as both of production's sides name them in practice (the reader
/// always; the writer unless an event carries a `noetl://T/P/results/…` URN, which the
/// worker never mints).
const TENANT: &str = "default";
const PROJECT: &str = "default";

impl CellSettings {
    /// 2024-01-01T00:00:00Z in Unix milliseconds.
    pub const DEFAULT_EPOCH_MS: u64 = 1_704_067_200_000;
    /// The hash's default modulus.
    pub const DEFAULT_SHARD_COUNT: u32 = 256;

    /// The settings from the process environment, read as production reads them.
    pub fn from_env() -> CellSettings {
        CellSettings::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings from `lookup` (an environment), with production's parsing: the cell's
    /// three names verbatim; the shard count trimmed, 256 when unparsable, 1 when 0; the
    /// epoch untrimmed, the default when unparsable.
    ///
    /// ```
    /// use state_shard::CellSettings;
    ///
    /// let env = [("NOETL_RESULT_CELL_ENV", "prod"), ("NOETL_RESULT_SHARD_COUNT", " 0 "),
    ///            ("NOETL_SNOWFLAKE_EPOCH_MS", " 5")];
    /// let cell = CellSettings::from_lookup(|k| env.iter().find(|e| e.0 == k).map(|e| e.1.to_string()));
    /// assert_eq!((cell.env.as_str(), cell.shard_count), ("prod", 1));
    /// assert_eq!(cell.epoch_ms, CellSettings::DEFAULT_EPOCH_MS, "not trimmed: unparsable");
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> CellSettings {
        let defaults = CellSettings::default();
        let shard_count = match lookup("NOETL_RESULT_SHARD_COUNT") {
            None => defaults.shard_count,
            Some(raw) => match raw.trim().parse::<u32>() {
                Ok(0) => 1,
                Ok(n) => n,
                Err(_) => CellSettings::DEFAULT_SHARD_COUNT,
            },
        };
        let epoch_ms = lookup("NOETL_SNOWFLAKE_EPOCH_MS")
            .and_then(|raw| raw.parse::<u64>().ok())
            .unwrap_or(defaults.epoch_ms);
        CellSettings {
            env: lookup("NOETL_RESULT_CELL_ENV").unwrap_or(defaults.env),
            region: lookup("NOETL_RESULT_CELL_REGION").unwrap_or(defaults.region),
            cell: lookup("NOETL_RESULT_CELL").unwrap_or(defaults.cell),
            shard_count,
            epoch_ms,
        }
    }

    /// The hash shard an execution's objects live under: FNV-1a 64 over
    /// `tenant 0x1F project 0x1F decimal(id)`, modulo the shard count.
    pub fn hash_shard(&self, execution_id: ExecutionId) -> u64 {
        hash_shard(TENANT, PROJECT, Some(execution_id), self.shard_count)
    }

    /// The key of one of an execution's shards.
    pub fn key(&self, execution_id: ExecutionId, kind: ShardKind) -> String {
        format!("{}/{}", self.folder(execution_id), kind.file_name())
    }

    /// The folder both of an execution's shards live in (`…/execution={id}/state`).
    pub fn folder(&self, execution_id: ExecutionId) -> String {
        format!(
            "noetl/env={}/region={}/cell={}/shard=s{:04}/tenant={TENANT}/project={PROJECT}/date={}/execution={execution_id}/state",
            self.env,
            self.region,
            self.cell,
            self.hash_shard(execution_id),
            SnowflakeDate::of(execution_id, self.epoch_ms),
        )
    }
}

/// FNV-1a 64 over `tenant 0x1F project [0x1F decimal(affinity)]`, modulo `shards` (at
/// least 1): noetl-locator's hash.
pub(crate) fn hash_shard(
    tenant: &str,
    project: &str,
    affinity: Option<ExecutionId>,
    shards: u32,
) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    eat(tenant.as_bytes());
    eat(&[0x1f]);
    eat(project.as_bytes());
    if let Some(id) = affinity {
        eat(&[0x1f]);
        eat(id.to_string().as_bytes());
    }
    hash % u64::from(shards.max(1))
}

/// The UTC date of a snowflake id's timestamp: `epoch + ((id >> 22) & (2^41 - 1))` ms.
/// `0000-00-00` when it cannot be represented (the sum overflows, or lies past the year
/// 262,142, where production's date library stops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnowflakeDate(Option<(i64, u32, u32)>);

impl SnowflakeDate {
    /// The date of `id` under `epoch_ms`.
    pub fn of(id: ExecutionId, epoch_ms: u64) -> SnowflakeDate {
        let offset = ((id as u64) >> 22) & ((1 << 41) - 1);
        let date = epoch_ms
            .checked_add(offset)
            .and_then(|ms| i64::try_from(ms / 86_400_000).ok())
            .map(civil_from_days)
            .filter(|&(year, _, _)| year <= 262_142);
        SnowflakeDate(date)
    }
}

impl fmt::Display for SnowflakeDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((y, m, d)) => write!(f, "{y:04}-{m:02}-{d:02}"),
            None => f.write_str("0000-00-00"),
        }
    }
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to a proleptic Gregorian date.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// noetl-locator's locked vectors (noetl/tools' `noetl-locator`).
    #[test]
    fn the_hash_matches_the_locators_vectors() {
        assert_eq!(hash_shard("t_acme", "p_gen", Some(325), 256), 235);
        assert_eq!(hash_shard("t_acme", "p_gen", None, 256), 244);
    }

    /// The reference's two worked examples, hash and date included.
    #[test]
    fn the_keys_match_the_worked_examples() {
        let prod = CellSettings {
            env: "prod".into(),
            region: "usc1".into(),
            cell: "usc1-a".into(),
            ..CellSettings::default()
        };
        assert_eq!(
            prod.key(358159477016371200, ShardKind::Open),
            "noetl/env=prod/region=usc1/cell=usc1-a/shard=s0068/tenant=default/project=default/date=2026-09-15/execution=358159477016371200/state/open.feather"
        );
        assert_eq!(CellSettings::default().hash_shard(330390737327759360), 254);
    }

    #[test]
    fn dates_at_the_edges() {
        assert_eq!(SnowflakeDate::of(0, 0).to_string(), "1970-01-01");
        assert_eq!(
            SnowflakeDate::of(0, CellSettings::DEFAULT_EPOCH_MS).to_string(),
            "2024-01-01"
        );
        // 2024-02-29 exists; the day after is March 1.
        let leap = (1_709_164_800_000u64 - CellSettings::DEFAULT_EPOCH_MS) << 22;
        assert_eq!(
            SnowflakeDate::of(leap as i64, CellSettings::DEFAULT_EPOCH_MS).to_string(),
            "2024-02-29"
        );
        assert_eq!(SnowflakeDate::of(-1, u64::MAX).to_string(), "0000-00-00");
        assert_eq!(SnowflakeDate::of(0, u64::MAX / 2).to_string(), "0000-00-00");
        // Shard numbers pad to four digits and grow past them.
        let wide = CellSettings {
            shard_count: 100_000,
            ..CellSettings::default()
        };
        assert!(wide.key(1, ShardKind::Open).contains("/shard=s"));
        let narrow = CellSettings {
            shard_count: 1,
            ..CellSettings::default()
        };
        assert!(narrow.key(1, ShardKind::Open).contains("/shard=s0000/"));
    }
}
