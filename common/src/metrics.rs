//! The Prometheus endpoint both binaries serve on request: the `[metrics]`
//! section and the exporter. Each binary names and publishes its own
//! metrics; without `[metrics] listen` no recorder is installed and every
//! `metrics` call is a no-op.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use serde::Deserialize;

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `http://ADDR/metrics` (any path answers); off when absent.
    pub listen: Option<SocketAddr>,
}

/// Installs the global recorder and serves it over HTTP on `addr` (on the
/// current tokio runtime); `buckets` gives histogram buckets by full metric
/// name. The listener is bound when this returns.
pub fn install(addr: SocketAddr, buckets: &[(&str, &[f64])]) -> Result<(), String> {
    let mut builder = PrometheusBuilder::new().with_http_listener(addr);
    for (name, bounds) in buckets {
        builder = builder
            .set_buckets_for_metric(Matcher::Full((*name).to_owned()), bounds)
            .map_err(|e| e.to_string())?;
    }
    builder.install().map_err(|e| e.to_string())
}
