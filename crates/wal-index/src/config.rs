//! Index and drive configuration, with the environment variables production uses.

use std::time::Duration;

use chain_fold::SpineOrder;

/// Bounded-memory policy. Every knob is off (`None`) by default, as today.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvictionPolicy {
    /// Evict least-recently-used executions until resident bytes are at most this.
    pub max_bytes: Option<usize>,
    /// Evict executions neither applied to nor built for this long.
    pub ttl: Option<Duration>,
    /// Evict least-recently-used executions until at most this many are resident.
    pub max_executions: Option<usize>,
}

impl EvictionPolicy {
    /// Whether any limit judges executions by recency (a TTL, or a byte or count ceiling,
    /// which evicts the least recently used first). Without one, the engine's builds take
    /// their recency from the newest write's reading of the clock instead of reading it
    /// themselves (at most a batch behind while the drain applies; a checkpoint records it
    /// for a pool that restores with limits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_index::config::EvictionPolicy;
    ///
    /// assert!(!EvictionPolicy::default().reads_recency());
    /// let ttl = EvictionPolicy { ttl: Some(Duration::from_secs(600)), ..Default::default() };
    /// assert!(ttl.reads_recency());
    /// ```
    pub fn reads_recency(&self) -> bool {
        self.max_bytes.is_some() || self.ttl.is_some() || self.max_executions.is_some()
    }
}

/// How an index behaves. `IndexConfig::default()` is today's default (causal order, no
/// eviction limits, full envelopes, sink gate off) plus one observation today's worker does
/// not make: a chain stalled for [`IndexConfig::DEFAULT_STALL_AFTER`] is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexConfig {
    /// Spine order of every build.
    pub order: SpineOrder,
    /// TTL, LRU and byte-ceiling limits, enforced by `enforce_limits_at` (the drain's sweep).
    pub eviction: EvictionPolicy,
    /// Store the slim projection of each payload instead of the full envelope.
    pub slim: bool,
    /// Honour `mark_pending_sink`: a marked execution is never evicted until released.
    pub sink_gate: bool,
    /// Report a hole in an execution's chain (an id its events link to and the index does
    /// not hold) still open after this long ([`crate::stall`]); `None` or zero: never. It
    /// changes nothing that is served. Default [`IndexConfig::DEFAULT_STALL_AFTER`].
    pub stall_after: Option<Duration>,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            order: SpineOrder::default(),
            eviction: EvictionPolicy::default(),
            slim: false,
            sink_gate: false,
            stall_after: Some(IndexConfig::DEFAULT_STALL_AFTER),
        }
    }
}

/// An environment variable that is set but cannot be read as its documented type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not {expected}")]
pub struct ConfigError {
    /// The variable's name.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What it should have been.
    pub expected: &'static str,
}

/// Reads `NOETL_*` variables through a lookup function (the process environment in
/// `from_env`, a map in tests), trimming whitespace and treating an empty value as unset.
pub(crate) struct Vars<F>(pub(crate) F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    pub(crate) fn get(&self, var: &'static str) -> Option<String> {
        (self.0)(var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// A non-negative integer; `0` means "off".
    fn limit(&self, var: &'static str) -> Result<Option<u64>, ConfigError> {
        let Some(value) = self.get(var) else {
            return Ok(None);
        };
        match value.parse::<u64>() {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(ConfigError {
                var,
                value,
                expected: "a non-negative integer (0 or empty: off)",
            }),
        }
    }

    fn flag(&self, var: &'static str) -> Result<bool, ConfigError> {
        let Some(value) = self.get(var) else {
            return Ok(false);
        };
        match value.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(ConfigError {
                var,
                value,
                expected: "a boolean (1/true/yes/on or 0/false/no/off)",
            }),
        }
    }
}

impl IndexConfig {
    /// How long a hole stays open before it is reported: 30 s, thirty drive deadlines, far
    /// past any in-flight reordering a healthy WAL delivers.
    pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(30);

    /// The bound stall checks use: [`IndexConfig::stall_after`], with zero read as off.
    pub fn stall_bound(&self) -> Option<Duration> {
        self.stall_after.filter(|bound| !bound.is_zero())
    }

    /// Reads the configuration from the process environment:
    ///
    /// | variable | meaning | unset / empty |
    /// |---|---|---|
    /// | `NOETL_OFFSERVER_SPINE_ORDER` | `causal` or `event_id` | causal |
    /// | `NOETL_STATE_INDEX_MAX_BYTES` | byte ceiling | off (also `0`) |
    /// | `NOETL_STATE_INDEX_TTL_SECS` | idle TTL in seconds | off (also `0`) |
    /// | `NOETL_STATE_INDEX_MAX_EXECUTIONS` | resident execution cap | off (also `0`) |
    /// | `NOETL_STATE_INDEX_SLIM` | store the slim projection | false |
    /// | `NOETL_SINK_GATE_EVICTION` | honour the sink gate | false |
    /// | `NOETL_STATE_INDEX_STALL_SECS` | report chains stalled this long (`0`: never) | 30 |
    ///
    /// A value that is set but malformed is an error naming the variable, never a silent
    /// default.
    pub fn from_env() -> Result<IndexConfig, ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`IndexConfig::from_env`] over any lookup function.
    ///
    /// ```
    /// use wal_index::IndexConfig;
    /// let env = |var: &str| match var {
    ///     "NOETL_STATE_INDEX_TTL_SECS" => Some("900".to_owned()),
    ///     "NOETL_STATE_INDEX_MAX_BYTES" => Some("268435456".to_owned()),
    ///     _ => None,
    /// };
    /// let config = IndexConfig::from_lookup(env).unwrap();
    /// assert_eq!(config.eviction.max_bytes, Some(256 << 20));
    /// assert_eq!(config.eviction.ttl, Some(std::time::Duration::from_secs(900)));
    /// assert_eq!(config.stall_after, Some(IndexConfig::DEFAULT_STALL_AFTER));
    /// let never = IndexConfig::from_lookup(|v| (v == "NOETL_STATE_INDEX_STALL_SECS").then(|| "0".into()));
    /// assert_eq!(never.unwrap().stall_after, None);
    /// ```
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<IndexConfig, ConfigError> {
        let vars = Vars(lookup);
        let order = match vars.get("NOETL_OFFSERVER_SPINE_ORDER") {
            None => SpineOrder::Causal,
            Some(value) => SpineOrder::parse(&value).ok_or(ConfigError {
                var: "NOETL_OFFSERVER_SPINE_ORDER",
                value,
                expected: "`causal` or `event_id`",
            })?,
        };
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(IndexConfig {
            order,
            eviction: EvictionPolicy {
                max_bytes: vars.limit("NOETL_STATE_INDEX_MAX_BYTES")?.map(to_usize),
                ttl: vars
                    .limit("NOETL_STATE_INDEX_TTL_SECS")?
                    .map(Duration::from_secs),
                max_executions: vars
                    .limit("NOETL_STATE_INDEX_MAX_EXECUTIONS")?
                    .map(to_usize),
            },
            slim: vars.flag("NOETL_STATE_INDEX_SLIM")?,
            sink_gate: vars.flag("NOETL_SINK_GATE_EVICTION")?,
            stall_after: match vars.get("NOETL_STATE_INDEX_STALL_SECS") {
                None => Some(IndexConfig::DEFAULT_STALL_AFTER),
                Some(_) => vars
                    .limit("NOETL_STATE_INDEX_STALL_SECS")?
                    .map(Duration::from_secs),
            },
        })
    }
}

/// How long a drive may wait for its tip, as today's worker spends it: a **deadline** of
/// `attempts × retry` from the drive's first build, and no single wait longer than
/// `retry`.
///
/// A wake-up costs nothing: a drive woken fifty times inside its deadline keeps rebuilding
/// after each wake until it is served or the deadline passes. The default is today's
/// 5 × 200 ms = a 1 s deadline, each wait capped at 200 ms.
///
/// ```
/// use std::time::Duration;
/// use wal_index::DriveBudget;
///
/// let budget = DriveBudget::default();
/// assert_eq!(budget.deadline(), Duration::from_secs(1));
/// assert_eq!(budget.retry, Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriveBudget {
    /// `NOETL_STATE_BUILDER_DRIVE_RETRIES`: the deadline is this many `retry` periods.
    pub attempts: u32,
    /// `NOETL_STATE_BUILDER_DRIVE_RETRY_MS`: the cap on each wait, and the unit of the
    /// deadline.
    pub retry: Duration,
}

impl Default for DriveBudget {
    /// Today's default: 5 × 200 ms, a 1 s deadline.
    fn default() -> Self {
        DriveBudget {
            attempts: DriveBudget::DEFAULT_ATTEMPTS,
            retry: Duration::from_millis(DriveBudget::DEFAULT_RETRY_MS),
        }
    }
}

impl DriveBudget {
    /// Today's default number of attempts.
    pub const DEFAULT_ATTEMPTS: u32 = 5;
    /// Today's default per-wait cap, in milliseconds.
    pub const DEFAULT_RETRY_MS: u64 = 200;
    /// The range `NOETL_STATE_BUILDER_DRIVE_RETRIES` is clamped to (today's).
    pub const ATTEMPTS_RANGE: (u32, u32) = (1, 50);
    /// The range `NOETL_STATE_BUILDER_DRIVE_RETRY_MS` is clamped to (today's).
    pub const RETRY_MS_RANGE: (u64, u64) = (10, 5_000);

    /// A budget of `attempts × retry` (no clamping: tests and tools may ask for anything).
    pub const fn new(attempts: u32, retry: Duration) -> DriveBudget {
        DriveBudget { attempts, retry }
    }

    /// Reads the budget as today's worker does: `NOETL_STATE_BUILDER_DRIVE_RETRIES` (a
    /// `u32`; unset, empty or unparseable → 5; clamped to `1..=50`) and
    /// `NOETL_STATE_BUILDER_DRIVE_RETRY_MS` (a `u64`; unparseable → 200; clamped to
    /// `10..=5000`). Never an error: a malformed value falls back to the default, as today.
    pub fn from_env() -> DriveBudget {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`DriveBudget::from_env`] over any lookup function.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_index::DriveBudget;
    ///
    /// let env = |var: &str| match var {
    ///     "NOETL_STATE_BUILDER_DRIVE_RETRIES" => Some("500".to_owned()), // clamped to 50
    ///     "NOETL_STATE_BUILDER_DRIVE_RETRY_MS" => Some("soon".to_owned()), // unparseable: 200
    ///     _ => None,
    /// };
    /// let budget = DriveBudget::from_lookup(env);
    /// assert_eq!((budget.attempts, budget.retry), (50, Duration::from_millis(200)));
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> DriveBudget {
        let vars = Vars(lookup);
        // Today's rule for both: parse as the type, else the default; then clamp.
        fn setting<T: std::str::FromStr + Ord>(
            value: Option<String>,
            default: T,
            (lo, hi): (T, T),
        ) -> T {
            value
                .and_then(|v| v.parse::<T>().ok())
                .unwrap_or(default)
                .clamp(lo, hi)
        }
        let attempts = setting(
            vars.get("NOETL_STATE_BUILDER_DRIVE_RETRIES"),
            Self::DEFAULT_ATTEMPTS,
            Self::ATTEMPTS_RANGE,
        );
        let retry_ms = setting(
            vars.get("NOETL_STATE_BUILDER_DRIVE_RETRY_MS"),
            Self::DEFAULT_RETRY_MS,
            Self::RETRY_MS_RANGE,
        );
        DriveBudget {
            attempts,
            retry: Duration::from_millis(retry_ms),
        }
    }

    /// How long after its first build a drive stops waiting: `attempts × retry`.
    pub fn deadline(&self) -> Duration {
        self.retry.saturating_mul(self.attempts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |var| {
            pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        assert_eq!(
            IndexConfig::from_lookup(|_| None).unwrap(),
            IndexConfig::default()
        );
        assert_eq!(DriveBudget::from_lookup(|_| None), DriveBudget::default());
        assert_eq!(DriveBudget::default().deadline(), Duration::from_secs(1));
    }

    #[test]
    fn production_settings_parse() {
        let config = IndexConfig::from_lookup(lookup(&[
            ("NOETL_OFFSERVER_SPINE_ORDER", " EVENT_ID "),
            ("NOETL_STATE_INDEX_TTL_SECS", "900"),
            ("NOETL_STATE_INDEX_MAX_BYTES", "268435456"),
            ("NOETL_STATE_INDEX_MAX_EXECUTIONS", "0"),
            ("NOETL_STATE_INDEX_SLIM", "true"),
            ("NOETL_SINK_GATE_EVICTION", "1"),
        ]))
        .unwrap();
        assert_eq!(config.order, SpineOrder::EventId);
        assert_eq!(config.eviction.ttl, Some(Duration::from_secs(900)));
        assert_eq!(config.eviction.max_bytes, Some(268_435_456));
        assert_eq!(config.eviction.max_executions, None, "0 means off");
        assert!(config.slim && config.sink_gate);
    }

    #[test]
    fn malformed_values_are_errors_naming_the_variable() {
        let err =
            IndexConfig::from_lookup(lookup(&[("NOETL_STATE_INDEX_TTL_SECS", "15m")])).unwrap_err();
        assert_eq!(err.var, "NOETL_STATE_INDEX_TTL_SECS");
        let err =
            IndexConfig::from_lookup(lookup(&[("NOETL_SINK_GATE_EVICTION", "maybe")])).unwrap_err();
        assert_eq!(err.var, "NOETL_SINK_GATE_EVICTION");
        let err = IndexConfig::from_lookup(lookup(&[("NOETL_OFFSERVER_SPINE_ORDER", "max")]))
            .unwrap_err();
        assert!(err.to_string().contains("causal"));
    }

    /// Today's parsing: a value that does not parse as its type is the default, never an
    /// error (docs/domain.md, "The drive").
    #[test]
    fn unparseable_drive_settings_fall_back_to_todays_defaults() {
        for (retries, retry_ms) in [("-1", "-5"), ("five", "1.5"), ("1e3", "0x10")] {
            let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
                ("NOETL_STATE_BUILDER_DRIVE_RETRIES", retries),
                ("NOETL_STATE_BUILDER_DRIVE_RETRY_MS", retry_ms),
            ]));
            assert_eq!(
                DriveBudget::from_lookup(lookup(pairs)),
                DriveBudget::default()
            );
        }
    }

    #[test]
    fn drive_budget_is_clamped_to_todays_ranges() {
        let b = DriveBudget::from_lookup(lookup(&[
            ("NOETL_STATE_BUILDER_DRIVE_RETRIES", "1000"),
            ("NOETL_STATE_BUILDER_DRIVE_RETRY_MS", "0"),
        ]));
        assert_eq!((b.attempts, b.retry), (50, Duration::from_millis(10)));
        let b = DriveBudget::from_lookup(lookup(&[
            ("NOETL_STATE_BUILDER_DRIVE_RETRIES", "0"),
            ("NOETL_STATE_BUILDER_DRIVE_RETRY_MS", "99999"),
        ]));
        assert_eq!((b.attempts, b.retry), (1, Duration::from_millis(5_000)));
    }
}
