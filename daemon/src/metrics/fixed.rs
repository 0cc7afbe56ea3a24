//! The series with fixed label sets, registered at zero when the exporter
//! is installed (so a dashboard sees them before the first event):
//! docs/operations-metrics.md promises every one from startup. Each list
//! here is the enum or publisher the counting code uses, never a copy.

use metrics::gauge;

use super::connections::Counter;
use super::events::Event;
use super::names;

/// Series with fixed label sets start at zero, so a scrape shows them
/// before the first event (and rate() works from the start).
pub(super) fn register_fixed() {
    gauge!(names::BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for counter in Counter::all() {
        counter.add(0);
    }
    for event in Event::ALL {
        event.add(0);
    }
    // The status tick's publishers, before the ingest loop's first tick.
    super::record_live(&tracesync_core::live::LiveStats::default(), 0);
    super::record_output(&crate::rolling::RollingStats::default(), 0, 0);
    for name in [
        names::RELAYS_CONNECTED,
        names::TAIL_SUBSCRIBERS,
        names::IDENTITY_BINDINGS_IGNORED_LINES,
    ] {
        gauge!(name).set(0.0);
    }
}
