//! The daemon's status report (`tracesync status`), built by the ingest
//! loop and served on the control socket.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub struct StatusReport {
    /// Daemon version.
    pub version: String,
    /// Addresses actually bound (useful with port 0).
    pub data_addr: Option<String>,
    pub sync_addr: Option<String>,
    /// Rolling file being written.
    pub current_file: Option<String>,
    /// Host BOOTTIME when the report was made (ns).
    pub host_boottime_ns: u64,
    pub machines: Vec<MachineStatus>,
    /// Counters of the clock-sync prober (probes, rejections by reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<crate::sync::ProberStats>,
    /// Relay connections refused or closed by the daemon, by
    /// `Refused.code` (bad_frame, frame_too_large, unexpected_frame, ...).
    #[serde(default)]
    pub relays_refused: BTreeMap<String, u64>,
    /// Relay connections whose TLS handshake failed, by reason
    /// (plaintext_relay, no_client_certificate, unknown_client_ca, ...).
    #[serde(default)]
    pub handshake_failures: BTreeMap<String, u64>,
    /// Whether the output can be written (disk full, I/O errors).
    #[serde(default)]
    pub output: OutputStatus,
}

/// The rolling output's health. While `failing`, nothing is acknowledged:
/// relays keep their data spooled and the daemon retries every commit tick.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub struct OutputStatus {
    /// A write or commit failed and none has succeeded since.
    pub failing: bool,
    /// Failed writes and commits since start (every retry counts).
    pub errors: u64,
    /// Episodes of failure since start (each ends with a good commit).
    pub episodes: u64,
    /// When the current episode began (Unix ms).
    pub failing_since_unix_ms: Option<u64>,
    /// The first error of the last episode.
    pub last_error: Option<String>,
    /// Times a commit found the output file or the journal no longer at
    /// its path (the output directory removed or renamed, the file
    /// replaced); each time the data not yet durable went to a new file.
    #[serde(default)]
    pub vanished: u64,
    /// Symbolic links met at names the rolling writer wanted (never
    /// followed; each counted once while it stays).
    #[serde(default)]
    pub symlinks_refused: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub struct MachineStatus {
    pub name: Option<String>,
    /// Perfetto machine id (0 = the host).
    pub raw_id: u32,
    pub connected: bool,
    pub packets: u64,
    pub bytes: u64,
    /// Drops by reason (Perfetto stat names where they exist).
    pub drops: BTreeMap<String, u64>,
    /// Packets written after later ones had already gone out (e.g. data
    /// that arrived before the machine's first sync); not dropped.
    #[serde(default)]
    pub late_packets: u64,
    /// Packets written before any probe sample taken after them had been
    /// checked (a clock step just before them could not be seen yet; their
    /// bound assumes none): the merge window is shorter than the probe
    /// interval, or probes are lost. Not dropped.
    #[serde(default)]
    pub unprobed_packets: u64,
    /// Packets whose mapping on arrival a later probe sample showed wrong
    /// beyond its bound (the relay's clock stepped), written with the
    /// corrected mapping. Not dropped.
    #[serde(default)]
    pub remapped_packets: u64,
    /// Times the machine's relay stopped holding the merge watermark
    /// because its clock had not advanced for the stall grace (stopped,
    /// suspended, cut off, idle without heartbeats, or lying); it holds
    /// again once its clock advances. Its later packets are written, late
    /// where older than what was written meanwhile. Not drops.
    #[serde(default)]
    pub clock_stalls: u64,
    /// Relay clocks (Hello, Batch, Heartbeat) refused for the watermark:
    /// earlier than its last accepted clock, past host time beyond the sync
    /// estimate's bound, or a session's first clock far before host time.
    /// Not drops (its packets are written by their own timestamps).
    #[serde(default)]
    pub clocks_refused: u64,
    /// Packets dated past host now by more than their error bound plus
    /// 1 s: written at once, apart from the merge, so that no relay's
    /// timestamps from the future hold the others' packets or make them
    /// late. Not drops.
    #[serde(default)]
    pub future_packets: u64,
    /// Largest error bound of any packet written for this machine: every
    /// written packet's time is within this of the truth if the bounds hold.
    #[serde(default)]
    pub max_err_ns: u64,
    /// Packets waiting for a resolvable clock.
    pub pending: u64,
    /// Client-minus-host offset at the latest sync (ns), None before sync.
    pub offset_ns: Option<i64>,
    pub drift_ppm: Option<f64>,
    pub error_bound_ns: Option<u64>,
    pub rtt_ns: Option<u64>,
    /// Wall clock of the last frame from this machine (Unix ms).
    pub last_seen_unix_ms: Option<u64>,
    /// The machine's probe session: estimator state, probe counters, route
    /// and rate (None for the host and for relays without a session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<crate::sync::sessions::MachineSync>,
    /// Its relay's sources as its last Heartbeat reported them (none for
    /// the host, and for relays that report none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceStatus>,
    /// How its relay ships (`stream` or `ring`, from its last Hello); None
    /// for the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// A ring relay's fill as its last Heartbeat reported it (None: the
    /// host, stream relays, relays of before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingStatus>,
}

/// How full a ring relay's ring is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingStatus {
    /// Packet bytes and packets held.
    pub bytes_held: u64,
    pub packets_held: u64,
    /// Its bounds (`--ring-bytes`, `--ring-seconds`).
    pub bytes_limit: u64,
    pub seconds_limit: u64,
    /// The oldest packet time held on the host's clock (host BOOTTIME ns,
    /// through the relay's estimate; None before the first estimate or
    /// while the ring is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_host_ns: Option<u64>,
    /// How long before the report that was (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_age_ns: Option<u64>,
    /// Trigger windows it owes the daemon.
    pub windows_owed: u32,
}

impl RingStatus {
    /// Bytes held as a share of the bound, 0-100.
    pub fn percent(&self) -> f64 {
        if self.bytes_limit == 0 {
            return 0.0;
        }
        (self.bytes_held as f64 * 100.0 / self.bytes_limit as f64).min(100.0)
    }
}

/// One source of a relay, as its last Heartbeat reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// The source as given to the relay (`file:PATH`, `stdin`, ...).
    pub spec: String,
    /// `reading`, `waiting`, `ended` or `failed` (as the relay said it).
    pub state: String,
    /// What a person needs to know, in a line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl SourceStatus {
    /// A source reads its input (`reading`), or will once it comes.
    pub fn is_reading(&self) -> bool {
        self.state == "reading"
    }
}
