//! The series with fixed label sets, registered at zero when the exporter
//! is installed (so a dashboard sees them before the first event).

use metrics::{counter, gauge};

use super::names;

/// Series with fixed label sets start at zero, so a scrape shows them
/// before the first event (and rate() works from the start).
pub(super) fn register_fixed() {
    use names::*;
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for reason in REFUSED_REASONS {
        counter!(CONNECTIONS_REFUSED, "reason" => reason).absolute(0);
    }
    for reason in FAILED_REASONS {
        counter!(CONNECTIONS_FAILED, "reason" => reason).absolute(0);
    }
    for name in [
        CONNECTIONS_ACCEPTED,
        SESSIONS_WELCOMED,
        ACCEPT_ERRORS,
        OUTPUT_ERRORS,
        TAIL_LAGGED_PACKETS,
        TAIL_LAG_NOTICES,
        CONTROL_REFUSED,
        CONTROL_BAD_REQUESTS,
        CONTROL_ACCEPT_ERRORS,
        IDENTITY_BINDINGS_SAVE_ERRORS,
    ] {
        counter!(name).absolute(0);
    }
    gauge!(RELAYS_CONNECTED).set(0.0);
    gauge!(TAIL_SUBSCRIBERS).set(0.0);
    gauge!(IDENTITY_BINDINGS_IGNORED_LINES).set(0.0);
}
