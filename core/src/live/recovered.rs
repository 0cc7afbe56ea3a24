//! What the rolling writer recovered from a previous run, handed to
//! [`crate::live::LiveCore::new`]: how far each relay stream is durably
//! written, the output sequence ids in use, and each output sequence's
//! resolution state, so a restarted daemon neither writes a resent packet
//! twice nor resolves a resumed stream differently.

use serde::{Deserialize, Serialize};

use crate::hash::IdMap;

/// De-duplication state of one relay sequence, as last committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveredStream {
    /// Output trusted_packet_sequence_id the stream was written with.
    pub out_seq: u32,
    pub relay_instance: u64,
    pub relay_sequence: u32,
    pub machine_raw_id: u32,
    /// Origin.index of the stream's last packet written and committed.
    pub written_through: u64,
}

/// Sequence state of one output sequence that the live core resolves
/// packets with, recovered from what the new file's preamble replays (so
/// any journal recovers it): packets of a resumed stream keep being
/// resolved and stamped as before the restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredSequence {
    pub out_seq: u32,
    /// trace_packet_defaults.timestamp_clock_id in effect.
    pub default_clock: Option<u32>,
    /// The latest ClockSnapshot payload (TracePacket field 6) written on
    /// the sequence, if it defines sequence-scoped clocks (ids 64..127):
    /// the producer does not send it again.
    pub clock_snapshots: Vec<Vec<u8>>,
}

impl RecoveredSequence {
    pub fn new(out_seq: u32) -> Self {
        Self {
            out_seq,
            ..Self::default()
        }
    }
}

/// What `open` recovered from a previous run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub streams: Vec<RecoveredStream>,
    /// Output sequence ids below this are used in the carried-over state:
    /// allocate new ones from here (1 when nothing was recovered).
    pub next_out_seq: u32,
    /// Per machine raw id, the client BOOTTIME of the last sync point the
    /// new file's preamble replays: sync points written after a restart must
    /// not go below it (Perfetto rejects a RemoteClockSync that goes back).
    pub sync_floors: Vec<(u32, u64)>,
    /// Default clock and snapshots of the output sequences (see
    /// [`RecoveredSequence`]), by `out_seq`.
    pub sequences: Vec<RecoveredSequence>,
    /// Names of remote machines the output already gave them (index.jsonl's
    /// `machines`), by raw id: status names a recovered relay before its
    /// next Hello, and a machine keeps its name across a restart.
    pub names: Vec<(u32, String)>,
}

/// Recovered ClockSnapshot payloads per relay instance, (relay sequence,
/// payload): fed to its clock graph when it connects.
pub(super) type RecoveredClocks = IdMap<u64, Vec<(u32, Vec<u8>)>>;
