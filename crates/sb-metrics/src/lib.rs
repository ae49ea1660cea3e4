//! The `noetl_worker_state_builder_*` series of the state-builder index.
//!
//! Operators diagnose drive latency from these series, and their names are in dashboards
//! already, so names, label values, units and buckets are constants here ([`series`]),
//! matching docs/domain.md exactly. [`StateBuilderMetrics`] implements
//! `wal_index::IndexObserver`: give it to either engine and every build, drive, wait,
//! eviction, rehydration and residency change is recorded through the
//! [`metrics`](https://docs.rs/metrics) facade.
//!
//! This crate depends on the facade only for recording; it installs a recorder only when
//! you call [`exporter::install`] (Prometheus, real histograms with the catalogue's
//! buckets, plain HTTP). [`formulas`] computes the production note's table (mean lock wait,
//! mean work, wait share per outcome) from exposition text.
//!
//! ```
//! use sb_metrics::{StateBuilderMetrics, exporter, formulas, series::DEFAULT_PREFIX};
//! use wal_index::{IndexConfig, StateIndex, WalIndex};
//!
//! let (recorder, handle) = exporter::local(DEFAULT_PREFIX).unwrap();
//! let metrics = metrics::with_local_recorder(&recorder, StateBuilderMetrics::register);
//! let index = WalIndex::with_observer(IndexConfig::default(), metrics);
//! index.apply(chain_fold::Event::minimal(1, 7, None, "playbook_started"));
//! index.build(7, Some(1));
//! index.build(7, Some(2));
//!
//! let text = handle.render();
//! assert!(text.contains(r#"noetl_worker_state_builder_builds_total{outcome="cold_rebuild"} 1"#));
//! let rows = formulas::wait_shares(&text, DEFAULT_PREFIX);
//! assert_eq!(rows["incomplete"].builds, 1.0);
//! assert_eq!(rows["incomplete"].wait_share, 0.0); // the engine never blocks a build
//! ```

pub mod exporter;
pub mod formulas;
mod recorder;
pub mod series;

pub use recorder::{StateBuilderMetrics, describe};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
