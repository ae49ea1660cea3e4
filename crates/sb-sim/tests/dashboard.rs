//! The Grafana dashboard (docs/dashboards/state-builder.json) against the series
//! catalogue: every series it queries is one sb-metrics exports (with the suffixes its type
//! has), every exported series has a panel, and the panels the production note reads are
//! there. `scripts/prometheus-e2e.sh` checks the other half: each query returns data from a
//! real Prometheus scraping a running simulation.

use std::collections::BTreeSet;

use sb_metrics::series::{DEFAULT_PREFIX, Kind, SERIES};
use serde_json::Value;

const DASHBOARD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/dashboards/state-builder.json"
));

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("the dashboard is valid JSON")
}

fn panels(dashboard: &Value) -> Vec<&Value> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

/// Every `noetl_worker_state_builder_*` name in a PromQL expression.
fn series_names(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(DEFAULT_PREFIX) {
        let tail = &rest[at + DEFAULT_PREFIX.len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        names.push(&tail[..end]);
        rest = &tail[end..];
    }
    names
}

/// The catalogue series a queried name belongs to, if the suffix fits its type.
fn catalogue_series(name: &str) -> Option<&'static str> {
    SERIES.iter().find_map(|s| {
        let fits = match s.kind {
            Kind::Histogram => ["_sum", "_count", "_bucket"]
                .iter()
                .any(|suffix| name.strip_suffix(suffix) == Some(s.name)),
            Kind::Counter | Kind::Gauge => name == s.name,
        };
        fits.then_some(s.name)
    })
}

#[test]
fn every_query_names_an_exported_series_and_every_series_has_a_panel() {
    let dashboard = dashboard();
    let mut covered = BTreeSet::new();
    for panel in panels(&dashboard) {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            let names = series_names(expr);
            assert!(!names.is_empty(), "{expr} queries no state-builder series");
            for name in names {
                let series = catalogue_series(name).unwrap_or_else(|| {
                    panic!(
                        "{} queries {DEFAULT_PREFIX}{name}, which sb-metrics does not export",
                        panel["title"]
                    )
                });
                covered.insert(series);
            }
        }
    }
    let exported: BTreeSet<&str> = SERIES.iter().map(|s| s.name).collect();
    let missing: Vec<_> = exported.difference(&covered).collect();
    assert!(missing.is_empty(), "series without a panel: {missing:?}");
}

#[test]
fn the_panels_the_production_note_reads_are_there() {
    let dashboard = dashboard();
    let titles: BTreeSet<&str> = panels(&dashboard)
        .iter()
        .map(|p| p["title"].as_str().expect("title"))
        .collect();
    for needed in [
        "Builds by outcome",
        "Mean lock wait vs mean work, by outcome",
        "Drive outcomes",
        "Wait outcomes",
        "Resident executions",
        "Resident events",
        "Resident bytes",
        "Evictions by reason",
        "Drain health",
        "WAL rate",
    ] {
        assert!(titles.contains(needed), "no panel {needed:?}: {titles:?}");
    }
}

#[test]
fn the_note_formulas_are_the_ones_the_lock_wait_panel_plots() {
    let dashboard = dashboard();
    let panel = panels(&dashboard)
        .into_iter()
        .find(|p| p["title"] == "Mean lock wait vs mean work, by outcome")
        .expect("the lock-wait panel");
    let exprs: Vec<&str> = panel["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["expr"].as_str().expect("expr"))
        .collect();
    // mean lock wait = index_lock_wait_seconds_total{o} / builds_total{o}
    let wait = exprs[0];
    assert_eq!(
        series_names(wait),
        ["index_lock_wait_seconds_total", "builds_total"]
    );
    assert!(wait.contains(") / sum"), "{wait}");
    // mean work = build_duration_seconds_sum{o} / _count{o} − mean lock wait
    let work = exprs[1];
    assert_eq!(
        series_names(work),
        [
            "build_duration_seconds_sum",
            "build_duration_seconds_count",
            "index_lock_wait_seconds_total",
            "builds_total"
        ]
    );
    assert!(work.contains(") - ("), "{work}");
    for expr in exprs {
        assert!(expr.contains("by (engine, outcome)"), "per outcome: {expr}");
    }
}

#[test]
fn the_dashboard_imports_as_is() {
    let dashboard = dashboard();
    // A datasource variable instead of a fixed uid, so the JSON imports into any Grafana.
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    assert!(
        variables
            .iter()
            .any(|v| v["type"] == "datasource" && v["query"] == "prometheus")
    );
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "duplicate id"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (
            grid["x"].as_u64().expect("x"),
            grid["w"].as_u64().expect("w"),
        );
        assert!(x + w <= 24, "{} overflows the grid", panel["title"]);
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}");
        }
    }
}
