//! What a control client sends, and the one out-of-band record of a perfetto
//! stream.

use serde::{Deserialize, Serialize};
use tracesync_protocol::wire;

/// Longest request line the daemon reads.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// Packets the daemon holds at most for a new tail's `-n`/`--since`.
pub const HISTORY_PACKETS: usize = 4096;

/// One JSON line from the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// One [`StatusReport`](crate::status::StatusReport) line, then the daemon closes.
    Status,
    /// The live merged stream until the client or the daemon goes away.
    Tail {
        #[serde(default)]
        format: TailFormat,
        /// Only these machines (name, or raw id in decimal; `host` for
        /// machine 0). Empty: all.
        #[serde(default)]
        machines: Vec<String>,
        /// How text lines show time (jsonl always has `ts` in trace ns).
        #[serde(default)]
        time: TimeMode,
        /// Start with the last N records the daemon holds (matching the
        /// machine filter and `since`), then follow.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<u64>,
        /// Start with the held records at or after this time, then follow.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<Since>,
    },
    /// Fire a flight-recorder trigger named `name` now: every machine's
    /// window [now - before, now + after] goes into one snapshot. One line
    /// answers: a [`TriggerAnswer`], or `{"error":...}` (a bad name or
    /// span, or over the name's rate limit).
    Trigger {
        name: String,
        before_ns: u64,
        after_ns: u64,
    },
}

/// The daemon's answer to a trigger that fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerAnswer {
    /// Names the trigger in the relays' windows (unique per daemon run).
    pub id: u64,
    pub name: String,
    /// Host time T (trace time, host BOOTTIME ns) it fired at.
    pub host_time_ns: u64,
    pub before_ns: u64,
    pub after_ns: u64,
    /// Relays in ring mode connected now, each sent the trigger once its
    /// clock estimate maps the window.
    pub ring_relays: usize,
    /// The snapshot's file name in the output directory
    /// (`snapshot-<UTC>-<NAME>.pftrace`), written once every window is in.
    pub snapshot: String,
}

/// How a text line shows a packet's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum TimeMode {
    /// UTC wall clock, RFC 3339 with microseconds (journalctl -o
    /// short-iso-precise --utc), through the host's BOOTTIME to REALTIME
    /// relation.
    #[default]
    Wall,
    /// Host BOOTTIME in seconds with nanoseconds.
    Boot,
    /// Trace time in ns, as written (the jsonl `ts`).
    Trace,
}

/// A `--since` TIME as the client parsed it; the daemon places it on its
/// own clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Since {
    /// Trace time (host BOOTTIME), ns.
    TraceNs(i64),
    /// UTC wall clock, ns since the Unix epoch.
    WallNs(i64),
    /// This long (ns) before now.
    AgoNs(u64),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum TailFormat {
    /// One human-readable line per packet.
    #[default]
    Text,
    /// One JSON record per packet (the fields of `merge --format jsonl`).
    Jsonl,
    /// A Perfetto Trace byte stream (save it, open it in Perfetto UI).
    Perfetto,
}

/// Field number of the record that ends a perfetto stream early, carrying a
/// JSON notice such as `{"lagged":N}`. Trace defines only field 1 (packet),
/// so the record is never mistaken for a packet; `tracesync tail` strips it
/// and reports it on stderr.
pub const NOTICE_FIELD: u32 = 2;

/// The notice record ending a perfetto stream whose client lagged by `skipped`.
pub fn lag_notice_record(skipped: u64) -> Vec<u8> {
    let body = format!("{{\"lagged\":{skipped}}}");
    let mut out = Vec::with_capacity(body.len() + 4);
    wire::put_len_field(&mut out, NOTICE_FIELD, body.as_bytes());
    out
}

/// The line refusing a request.
pub fn error_line(message: &str) -> String {
    let mut line = serde_json::json!({ "error": message }).to_string();
    line.push('\n');
    line
}
