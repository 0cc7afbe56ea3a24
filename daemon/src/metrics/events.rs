//! The whole-daemon counters without labels that are counted where the
//! event happens (rare events: an output error, a refused control client,
//! a lagging tail subscriber), as values: code that counts names an
//! [`Event`], and the exporter starts every one at zero from [`Event::ALL`].

use super::names::{
    CONTROL_ACCEPT_ERRORS, CONTROL_BAD_REQUESTS, CONTROL_IDLE_CLOSED, CONTROL_REFUSED,
    IDENTITY_BINDINGS_SAVE_ERRORS, OUTPUT_ERRORS, SNAPSHOT_TEMPORARIES_REMOVED, SNAPSHOTS_FAILED,
    SNAPSHOTS_WRITTEN, TAIL_LAG_NOTICES, TAIL_LAGGED_PACKETS, TRIGGERS_FIRED, TRIGGERS_REFUSED,
};

/// What is counted (one counter each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A failed output write or commit.
    OutputError,
    /// A failed write of the identity bindings file.
    IdentityBindingsSaveError,
    /// Packets a tail subscriber skipped because it lagged (added by count).
    TailLaggedPackets,
    /// A lag notice sent to a tail subscriber.
    TailLagNotice,
    /// A control client refused (too many at once).
    ControlRefused,
    /// A control client closed before its request, for a newer one.
    ControlIdleClosed,
    /// A control request that did not parse.
    ControlBadRequest,
    /// `accept()` failed on the control socket.
    ControlAcceptError,
    /// A flight-recorder trigger fired.
    TriggerFired,
    /// A trigger refused (over its name's rate limit).
    TriggerRefused,
    /// A snapshot written (or written again for a late window).
    SnapshotWritten,
    /// A snapshot that could not be written (retried).
    SnapshotFailed,
    /// A temporary snapshot file left by a crash, removed at start.
    SnapshotTemporaryRemoved,
}

impl Event {
    pub const ALL: [Event; 13] = [
        Event::OutputError,
        Event::IdentityBindingsSaveError,
        Event::TailLaggedPackets,
        Event::TailLagNotice,
        Event::ControlRefused,
        Event::ControlIdleClosed,
        Event::ControlBadRequest,
        Event::ControlAcceptError,
        Event::TriggerFired,
        Event::TriggerRefused,
        Event::SnapshotWritten,
        Event::SnapshotFailed,
        Event::SnapshotTemporaryRemoved,
    ];

    /// The counter's name.
    pub fn metric(self) -> &'static str {
        match self {
            Event::OutputError => OUTPUT_ERRORS,
            Event::IdentityBindingsSaveError => IDENTITY_BINDINGS_SAVE_ERRORS,
            Event::TailLaggedPackets => TAIL_LAGGED_PACKETS,
            Event::TailLagNotice => TAIL_LAG_NOTICES,
            Event::ControlRefused => CONTROL_REFUSED,
            Event::ControlIdleClosed => CONTROL_IDLE_CLOSED,
            Event::ControlBadRequest => CONTROL_BAD_REQUESTS,
            Event::ControlAcceptError => CONTROL_ACCEPT_ERRORS,
            Event::TriggerFired => TRIGGERS_FIRED,
            Event::TriggerRefused => TRIGGERS_REFUSED,
            Event::SnapshotWritten => SNAPSHOTS_WRITTEN,
            Event::SnapshotFailed => SNAPSHOTS_FAILED,
            Event::SnapshotTemporaryRemoved => SNAPSHOT_TEMPORARIES_REMOVED,
        }
    }

    /// Counts one.
    pub fn record(self) {
        self.add(1);
    }

    /// Counts `n`.
    pub fn add(self, n: u64) {
        metrics::counter!(self.metric()).increment(n);
    }
}
