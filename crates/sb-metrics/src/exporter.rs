//! The Prometheus exporter: real histograms with the catalogue's buckets.

use std::net::SocketAddr;

pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusRecorder};

use crate::series::{
    BUILD_DURATION_BUCKETS, CHAIN_HOPS_BUCKETS, SHARD_READ_DURATION_BUCKETS, name, worker_prefix,
};

/// A builder with the catalogue's histogram buckets for `prefix` (so the histograms export
/// as Prometheus histograms, not summaries; the state-shard read's under
/// [`worker_prefix`]).
pub fn builder(prefix: &str) -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(format!("{prefix}{}", name::BUILD_DURATION_SECONDS)),
            &BUILD_DURATION_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(format!("{prefix}{}", name::CHAIN_HOPS)),
            &CHAIN_HOPS_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(format!(
                "{}{}",
                worker_prefix(prefix),
                name::STATE_SHARD_READ_DURATION_SECONDS
            )),
            &SHARD_READ_DURATION_BUCKETS,
        )
}

/// Installs the global recorder and serves `/metrics` on `addr` (plain HTTP; no TLS
/// stack is compiled in). Inside a tokio runtime the listener runs on it; otherwise the
/// exporter starts its own single-threaded runtime on a background thread.
pub fn install(addr: SocketAddr, prefix: &str) -> Result<(), BuildError> {
    builder(prefix)?.with_http_listener(addr).install()
}

/// Installs the global recorder without a listener, and returns its handle: a process that
/// serves `/metrics` itself (beside its own probes) answers it with `handle.render()`.
pub fn install_recorder(prefix: &str) -> Result<PrometheusHandle, BuildError> {
    builder(prefix)?.install_recorder()
}

/// A recorder that is not installed globally, and its handle: use it with
/// `metrics::with_local_recorder` and read the exposition text with `handle.render()`.
pub fn local(prefix: &str) -> Result<(PrometheusRecorder, PrometheusHandle), BuildError> {
    let recorder = builder(prefix)?.build_recorder();
    let handle = recorder.handle();
    Ok((recorder, handle))
}
