//! The ingest loop's status report and metrics, published at every status
//! tick, and its output failures: counted, logged once per episode (see
//! `ingest.rs`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tracesync_core::status::StatusReport;
use tracing::{debug, error};

use super::{Ingest, unix_ms};
use crate::server::engine::{Core, Fanout, Writer};

impl<C, W> Ingest<C, W>
where
    C: Core,
    W: Writer<C::SyncUpdate>,
{
    /// The status report, and the metrics from it and the core's and
    /// writer's counters (one tick, not per packet).
    pub(super) fn publish_status(
        &mut self,
        status: &watch::Sender<Arc<StatusReport>>,
        packets: &impl Fanout,
    ) {
        let report = StatusReport {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            data_addr: self.settings.data_addr.clone(),
            sync_addr: self.settings.sync_addr.clone(),
            current_file: self.current_file(),
            host_boottime_ns: tracesync_common::clock::boottime_ns(),
            machines: crate::sync::registry::with_sync(
                self.core.status(),
                self.settings.probes.as_ref(),
            ),
            sync: self.settings.probes.as_ref().map(|p| p.stats()),
            relays_refused: self
                .settings
                .server_counters
                .as_ref()
                .map(|c| c.refusals())
                .unwrap_or_default(),
            handshake_failures: self
                .settings
                .server_counters
                .as_ref()
                .map(|c| c.handshake_failures())
                .unwrap_or_default(),
            output: self.writer.output_status(self.output.clone()),
        };
        self.core.record_metrics();
        self.writer.record_metrics();
        self.metrics
            .publish(&report, self.sessions.len(), packets.subscribers());
        status.send_replace(Arc::new(report));
    }

    pub(super) fn failed(&mut self, what: &str, e: &io::Error) {
        self.summary.write_errors += 1;
        self.output.errors += 1;
        crate::metrics::Event::OutputError.record();
        let first = !self.failing;
        if first {
            self.failing = true;
            self.output.failing = true;
            self.output.episodes += 1;
            self.output.failing_since_unix_ms = Some(unix_ms());
            self.output.last_error = Some(format!("cannot {what}: {e}"));
        }
        if crate::rolling::is_vanished(e) {
            // Found once per vanished file (the retries fail otherwise):
            // one line, whether or not the output was failing already.
            error!(
                "cannot {what} the output: {e}; what was written since the last commit is not \
                 acknowledged: the daemon makes the directory again (with its mode at start) if \
                 it is gone and writes that data to a new file there, and relays are \
                 acknowledged once it is durable; what was acknowledged before is gone with the \
                 old file (stop tracesyncd before moving or deleting its output directory)"
            );
        } else if first {
            let file = self.current_file().unwrap_or_default();
            error!(
                "cannot {what} the output {file}: {e}; relays are not acknowledged and wait \
                 until it succeeds (free space in the output directory)"
            );
        } else {
            debug!("output {what} still failing: {e}");
        }
    }

    pub(super) fn current_file(&self) -> Option<String> {
        self.writer
            .current_path()
            .map(|p: PathBuf| p.display().to_string())
    }
}
