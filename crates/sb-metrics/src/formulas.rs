//! The production note's formulas, computed from Prometheus exposition text.
//!
//! ```text
//! mean lock wait = index_lock_wait_seconds_total{o} / builds_total{o}
//! mean work      = build_duration_seconds_sum{o} / build_duration_seconds_count{o} - mean lock wait
//! wait share     = mean lock wait / mean build
//! ```

use std::collections::BTreeMap;

use crate::series::{BUILD_OUTCOMES, name};

/// One row of the production note's table.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WaitShare {
    /// `builds_total{outcome}`.
    pub builds: f64,
    /// Mean build duration, seconds.
    pub mean_build: f64,
    /// Mean time blocked before the index could be read, seconds.
    pub mean_lock_wait: f64,
    /// `mean_build - mean_lock_wait`, seconds.
    pub mean_work: f64,
    /// `mean_lock_wait / mean_build` (0 when there were no builds).
    pub wait_share: f64,
}

/// Reads `name{labels} value` samples of one series from exposition text, keyed by the
/// `outcome` label (empty key when unlabelled).
fn samples(text: &str, series: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, labels) = match key.split_once('{') {
            Some((metric, labels)) => (metric, labels.trim_end_matches('}')),
            None => (key, ""),
        };
        if metric != series {
            continue;
        }
        let outcome = labels
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == "outcome")
            .map(|(_, v)| v.trim_matches('"').to_owned())
            .unwrap_or_default();
        if let Ok(value) = value.parse::<f64>() {
            out.insert(outcome, value);
        }
    }
    out
}

/// The table per build outcome, from one scrape.
pub fn wait_shares(text: &str, prefix: &str) -> BTreeMap<&'static str, WaitShare> {
    let builds = samples(text, &format!("{prefix}{}", name::BUILDS_TOTAL));
    let sum = samples(
        text,
        &format!("{prefix}{}_sum", name::BUILD_DURATION_SECONDS),
    );
    let count = samples(
        text,
        &format!("{prefix}{}_count", name::BUILD_DURATION_SECONDS),
    );
    let wait = samples(
        text,
        &format!("{prefix}{}", name::INDEX_LOCK_WAIT_SECONDS_TOTAL),
    );
    BUILD_OUTCOMES
        .iter()
        .map(|&outcome| {
            let get = |m: &BTreeMap<String, f64>| m.get(outcome).copied().unwrap_or(0.0);
            let n = get(&builds);
            let mean_build = if get(&count) > 0.0 {
                get(&sum) / get(&count)
            } else {
                0.0
            };
            let mean_lock_wait = if n > 0.0 { get(&wait) / n } else { 0.0 };
            let row = WaitShare {
                builds: n,
                mean_build,
                mean_lock_wait,
                mean_work: mean_build - mean_lock_wait,
                wait_share: if mean_build > 0.0 {
                    mean_lock_wait / mean_build
                } else {
                    0.0
                },
            };
            (outcome, row)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_production_note_row_is_reproduced() {
        // The fresh-pod figures: 4107 incomplete builds, 381.6 µs mean, 376.6 µs wait.
        let text = "\
# TYPE p_builds_total counter
p_builds_total{outcome=\"incomplete\"} 4107
p_build_duration_seconds_sum{outcome=\"incomplete\"} 1.5672312
p_build_duration_seconds_count{outcome=\"incomplete\"} 4107
p_index_lock_wait_seconds_total{outcome=\"incomplete\"} 1.5466962
";
        let rows = wait_shares(text, "p_");
        let row = rows["incomplete"];
        assert_eq!(row.builds, 4107.0);
        assert!((row.mean_build * 1e6 - 381.6).abs() < 0.1);
        assert!((row.mean_lock_wait * 1e6 - 376.6).abs() < 0.1);
        assert!((row.wait_share - 0.987).abs() < 0.001);
        assert_eq!(rows["cache_hit"], WaitShare::default());
    }
}
