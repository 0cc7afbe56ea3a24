//! The Prometheus endpoint both binaries serve on request: the `[metrics]`
//! section and the exporter. Each binary names and publishes its own
//! metrics; without `[metrics] listen` no recorder is installed and every
//! `metrics` call is a no-op.

use std::net::SocketAddr;

use metrics::{describe_counter, describe_gauge, describe_histogram};
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
/// name. The listener is bound when this returns; the address it is bound
/// to is returned (port 0 asks the kernel for a free port: one is picked by
/// binding it once, then handed to the exporter).
pub fn install(addr: SocketAddr, buckets: &[(&str, &[f64])]) -> Result<SocketAddr, ExporterError> {
    let addr = if addr.port() == 0 {
        std::net::TcpListener::bind(addr)
            .and_then(|listener| listener.local_addr())
            .map_err(ExporterError::FreePort)?
    } else {
        addr
    };
    let mut builder = PrometheusBuilder::new().with_http_listener(addr);
    for (name, bounds) in buckets {
        builder = builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), bounds)?;
    }
    builder.install()?;
    Ok(addr)
}

/// Why the metrics endpoint was not installed.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// Port 0 was asked for and no free port could be had.
    #[error("{0}")]
    FreePort(std::io::Error),
    /// The listener could not be bound, or a recorder is installed already.
    #[error("{0}")]
    Install(#[from] metrics_exporter_prometheus::BuildError),
}

/// What a metric is, for its `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric of a binary: its name, kind and `# HELP` text. Each binary
/// lists all of its metrics in one table: the exporter describes them from
/// it, and tests check the endpoint and docs/operations-metrics.md against
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

impl Spec {
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Counter,
            help,
        }
    }

    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Gauge,
            help,
        }
    }

    pub const fn histogram(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Histogram,
            help,
        }
    }
}

/// The `# HELP` lines of every metric in `specs` (after [`install`]).
pub fn describe(specs: &[Spec]) {
    for spec in specs {
        match spec.kind {
            Kind::Counter => describe_counter!(spec.name, spec.help),
            Kind::Gauge => describe_gauge!(spec.name, spec.help),
            Kind::Histogram => describe_histogram!(spec.name, spec.help),
        }
    }
}
