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

/// How an index behaves. `IndexConfig::default()` is today's default: causal order, no
/// eviction limits, full envelopes, sink gate off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexConfig {
    /// Spine order of every build.
    pub order: SpineOrder,
    /// TTL, LRU and byte-ceiling limits, enforced by `enforce_limits_at` (the drain's sweep).
    pub eviction: EvictionPolicy,
    /// Store the slim projection of each payload instead of the full envelope.
    pub slim: bool,
    /// Honour `mark_pending_sink`: a marked execution is never evicted until released.
    pub sink_gate: bool,
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
struct Vars<F>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    fn get(&self, var: &'static str) -> Option<String> {
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
        })
    }
}

/// How long a drive may wait for its tip: `waits` waits of at most `wait` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriveBudget {
    /// Waits after the first build (so a drive builds at most `waits + 1` times).
    pub waits: u32,
    /// The cap on each wait.
    pub wait: Duration,
}

impl Default for DriveBudget {
    /// Today's default: 5 waits × 200 ms = 1 s.
    fn default() -> Self {
        DriveBudget {
            waits: 5,
            wait: Duration::from_millis(200),
        }
    }
}

impl DriveBudget {
    /// The most waits `NOETL_STATE_BUILDER_DRIVE_RETRIES` can ask for.
    pub const MAX_WAITS: u32 = 50;
    /// The range `NOETL_STATE_BUILDER_DRIVE_RETRY_MS` is clamped to.
    pub const WAIT_MS_RANGE: (u64, u64) = (1, 10_000);

    /// Reads `NOETL_STATE_BUILDER_DRIVE_RETRIES` (clamped to `0..=50`) and
    /// `NOETL_STATE_BUILDER_DRIVE_RETRY_MS` (clamped to `1..=10000`); unset or empty keeps
    /// the default, a non-integer is an error.
    pub fn from_env() -> Result<DriveBudget, ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`DriveBudget::from_env`] over any lookup function.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<DriveBudget, ConfigError> {
        let vars = Vars(lookup);
        let mut budget = DriveBudget::default();
        let number = |var: &'static str| -> Result<Option<u64>, ConfigError> {
            vars.get(var)
                .map(|value| {
                    value.parse::<u64>().map_err(|_| ConfigError {
                        var,
                        value,
                        expected: "a non-negative integer",
                    })
                })
                .transpose()
        };
        if let Some(n) = number("NOETL_STATE_BUILDER_DRIVE_RETRIES")? {
            budget.waits = n.min(u64::from(Self::MAX_WAITS)) as u32;
        }
        if let Some(ms) = number("NOETL_STATE_BUILDER_DRIVE_RETRY_MS")? {
            let (lo, hi) = Self::WAIT_MS_RANGE;
            budget.wait = Duration::from_millis(ms.clamp(lo, hi));
        }
        Ok(budget)
    }

    /// The longest a drive can wait in total.
    pub fn total(&self) -> Duration {
        self.wait * self.waits
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
        assert_eq!(
            DriveBudget::from_lookup(|_| None).unwrap(),
            DriveBudget::default()
        );
        assert_eq!(DriveBudget::default().total(), Duration::from_secs(1));
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
        assert!(
            DriveBudget::from_lookup(lookup(&[("NOETL_STATE_BUILDER_DRIVE_RETRIES", "-1")]))
                .is_err()
        );
    }

    #[test]
    fn drive_budget_is_clamped() {
        let b = DriveBudget::from_lookup(lookup(&[
            ("NOETL_STATE_BUILDER_DRIVE_RETRIES", "1000"),
            ("NOETL_STATE_BUILDER_DRIVE_RETRY_MS", "0"),
        ]))
        .unwrap();
        assert_eq!(b.waits, DriveBudget::MAX_WAITS);
        assert_eq!(b.wait, Duration::from_millis(1));
    }
}
