//! One tail subscriber's view of the merged stream: its machine filter and
//! the bytes it is sent per packet (text line, jsonl record, or Trace
//! record). Shared by the daemon's control socket and `tracesync tail DIR`.

use std::fmt::Write as _;
use std::sync::Arc;

use tracesync_protocol::scan::Kind;
use tracesync_protocol::text::{Escaped, escape_control};

use super::request::{TailFormat, TimeMode, lag_notice_record};
use crate::jsonl::{JsonlRecord, json_name, write_jsonl_record};
use crate::live::OutPacket;

/// Which machines a subscriber wants: a name, a raw id in decimal, or
/// `host` for machine 0 whatever its name (the host is named after its
/// host name). Empty: every machine.
#[derive(Clone, Debug, Default)]
pub struct MachineFilter {
    wanted: Vec<String>,
}

impl MachineFilter {
    pub fn new(machines: &[String]) -> Self {
        Self {
            wanted: machines.to_vec(),
        }
    }

    pub fn accepts(&self, raw_id: u32, name: Option<&str>) -> bool {
        if self.wanted.is_empty() {
            return true;
        }
        self.wanted.iter().any(|w| {
            name == Some(w.as_str())
                || w.parse::<u32>() == Ok(raw_id)
                || (raw_id == 0 && w == "host")
        })
    }
}

/// JSON encodings of names seen recently, keyed by the `Arc` the packets
/// share, so each name is encoded once, not per packet.
#[derive(Debug, Default)]
struct JsonNames {
    entries: Vec<(Arc<str>, String)>,
}

const MAX_CACHED_NAMES: usize = 256;

impl JsonNames {
    /// Makes room for two new names; call before [`Self::index`].
    fn trim(&mut self) {
        if self.entries.len() + 2 > MAX_CACHED_NAMES {
            self.entries.clear();
        }
    }

    fn index(&mut self, name: &Arc<str>) -> usize {
        let found = self
            .entries
            .iter()
            .position(|(k, _)| Arc::ptr_eq(k, name) || **k == **name);
        found.unwrap_or_else(|| {
            self.entries.push((Arc::clone(name), json_name(Some(name))));
            self.entries.len() - 1
        })
    }
}

/// Formats packets for one subscriber.
#[derive(Debug)]
pub struct PacketFormatter {
    format: TailFormat,
    filter: MachineFilter,
    /// False when the error bound is not known (`tail DIR`): jsonl prints
    /// `err_ns: null`, text leaves it out.
    err_known: bool,
    /// How text lines show time.
    time: TimeMode,
    /// Host REALTIME minus host BOOTTIME (ns): the latest host
    /// ClockSnapshot's, else the one given at the start.
    wall_minus_boot: Option<i64>,
    names: JsonNames,
    line: String,
}

impl PacketFormatter {
    pub fn new(format: TailFormat, filter: MachineFilter) -> Self {
        Self {
            format,
            filter,
            err_known: true,
            time: TimeMode::default(),
            wall_minus_boot: None,
            names: JsonNames::default(),
            line: String::new(),
        }
    }

    /// For packets read back from files, whose error bound is not recorded.
    pub fn without_error_bounds(mut self) -> Self {
        self.err_known = false;
        self
    }

    /// Text lines show time as `time` says; `wall_minus_boot` is the
    /// host's REALTIME minus BOOTTIME (ns) if known before the first host
    /// ClockSnapshot.
    pub fn with_time(mut self, time: TimeMode, wall_minus_boot: Option<i64>) -> Self {
        self.time = time;
        self.wall_minus_boot = wall_minus_boot;
        self
    }

    /// The host's REALTIME minus BOOTTIME in force (ns), if known.
    pub fn wall_minus_boot(&self) -> Option<i64> {
        self.wall_minus_boot
    }

    /// Learns the host's REALTIME to BOOTTIME relation from a host
    /// ClockSnapshot; every packet passes here, shown or not.
    pub fn observe(&mut self, packet: &OutPacket) {
        if self.time != TimeMode::Wall
            || packet.machine_raw_id != 0
            || packet.data_field != Some(CLOCK_SNAPSHOT_FIELD)
        {
            return;
        }
        if let Some(delta) = wall_minus_boot_of(&packet.bytes.to_vec()) {
            self.wall_minus_boot = Some(delta);
        }
    }

    pub fn format(&self) -> TailFormat {
        self.format
    }

    pub fn accepts(&self, packet: &OutPacket) -> bool {
        self.filter
            .accepts(packet.machine_raw_id, packet.machine_name.as_deref())
    }

    /// Appends a Trace record of raw packet bytes (a preamble packet of
    /// machine `raw_id`) to `out` if the filter accepts it; perfetto only.
    pub fn write_raw(&self, raw_id: u32, name: Option<&str>, bytes: &[u8], out: &mut Vec<u8>) {
        if self.format == TailFormat::Perfetto && self.filter.accepts(raw_id, name) {
            tracesync_protocol::wire::put_len_field(out, 1, bytes);
        }
    }

    /// Appends `packet` to `out` if the filter accepts it; returns whether it did.
    pub fn write(&mut self, packet: &OutPacket, out: &mut Vec<u8>) -> bool {
        self.observe(packet);
        if !self.accepts(packet) {
            return false;
        }
        match self.format {
            TailFormat::Perfetto => packet.bytes.write_framed(out),
            TailFormat::Jsonl => {
                self.line.clear();
                self.names.trim();
                let machine = packet.machine_name.as_ref().map(|n| self.names.index(n));
                let src = self.names.index(&packet.src);
                let machine_json = machine.map_or("null", |i| self.names.entries[i].1.as_str());
                let src_json = &self.names.entries[src].1;
                write_jsonl_record(
                    &mut self.line,
                    &JsonlRecord {
                        ts: packet.ts,
                        machine_json,
                        raw_id: u64::from(packet.machine_raw_id),
                        // Clock id 0 (UNKNOWN) marks a packet without timestamp.
                        clock: (packet.clock != 0).then_some((packet.clock, packet.clock_ts)),
                        seq: packet.seq,
                        src_json,
                        kind: Kind(packet.data_field),
                        size: packet.bytes.len(),
                        err_ns: self.err_known.then_some(packet.err_ns),
                    },
                );
                out.extend_from_slice(self.line.as_bytes());
            }
            TailFormat::Text => {
                self.line.clear();
                let stamp = TimeStamp {
                    mode: self.time,
                    wall_minus_boot: self.wall_minus_boot,
                };
                text_line(&mut self.line, packet, self.err_known, stamp);
                out.extend_from_slice(self.line.as_bytes());
            }
        }
        true
    }

    /// Appends the notice that `skipped` packets were lost to lag: a comment
    /// line in text, `{"lagged":N}` in jsonl, the ending notice record in
    /// perfetto (after which the stream must end).
    pub fn lag_notice(&self, skipped: u64, out: &mut Vec<u8>) {
        match self.format {
            TailFormat::Text => out.extend_from_slice(
                format!("# tracesync: lagged, {skipped} packets skipped\n").as_bytes(),
            ),
            TailFormat::Jsonl => {
                out.extend_from_slice(format!("{{\"lagged\":{skipped}}}\n").as_bytes())
            }
            TailFormat::Perfetto => out.extend_from_slice(&lag_notice_record(skipped)),
        }
    }
}

/// TracePacket field of a ClockSnapshot.
const CLOCK_SNAPSHOT_FIELD: u32 = 6;

/// REALTIME minus BOOTTIME (ns) of a ClockSnapshot packet holding both.
pub fn wall_minus_boot_of(packet: &[u8]) -> Option<i64> {
    use tracesync_protocol::clock_ids::{BOOTTIME, REALTIME};
    let fields = tracesync_protocol::scan::scan_packet(packet).ok()?;
    let snapshot = fields.clock_snapshot?;
    let snapshot =
        <tracesync_protocol::perfetto::ClockSnapshot as prost::Message>::decode(snapshot).ok()?;
    let at = |id: u32| {
        snapshot
            .clocks
            .iter()
            .find(|c| c.clock_id == Some(id))
            .and_then(|c| c.timestamp)
    };
    let (wall, boot) = (at(REALTIME)?, at(BOOTTIME)?);
    i64::try_from(i128::from(wall) - i128::from(boot)).ok()
}

/// How a text line's time is shown.
#[derive(Clone, Copy, Debug)]
struct TimeStamp {
    mode: TimeMode,
    wall_minus_boot: Option<i64>,
}

/// RFC 3339 UTC with microseconds, as `journalctl -o short-iso-precise
/// --utc` prints: `2026-11-26T01:07:51.123456+00:00`.
const WALL_FORMAT: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]+00:00"
);

/// `ts` as `stamp` says. Wall time with no relation known yet (no host
/// ClockSnapshot seen) is shown as BOOTTIME seconds with a `boot:` prefix.
pub fn write_time(line: &mut String, ts: i64, mode: TimeMode, wall_minus_boot: Option<i64>) {
    let boot = |line: &mut String, ts: i64| {
        let ts = ts.max(0);
        let _ = write!(line, "{}.{:09}", ts / 1_000_000_000, ts % 1_000_000_000);
    };
    match (mode, wall_minus_boot) {
        (TimeMode::Trace, _) => {
            let _ = write!(line, "{ts}");
        }
        (TimeMode::Boot, _) => boot(line, ts),
        (TimeMode::Wall, Some(delta)) => {
            let wall = i128::from(ts) + i128::from(delta);
            match time::OffsetDateTime::from_unix_timestamp_nanos(wall)
                .ok()
                .and_then(|t| t.format(WALL_FORMAT).ok())
            {
                Some(text) => line.push_str(&text),
                None => boot(line, ts),
            }
        }
        (TimeMode::Wall, None) => {
            line.push_str("boot:");
            boot(line, ts);
        }
    }
}

/// `<time> <machine> seq=<id> <kind> <size> B [±<bound>] <src>`
fn text_line(line: &mut String, p: &OutPacket, err_known: bool, stamp: TimeStamp) {
    let machine = match (&p.machine_name, p.machine_raw_id) {
        // Relays chose their names: control characters escaped.
        (Some(name), _) => escape_control(name).into_owned(),
        (None, 0) => "host".to_owned(),
        (None, id) => format!("#{id}"),
    };
    // Writing to a String cannot fail.
    write_time(line, p.ts, stamp.mode, stamp.wall_minus_boot);
    let _ = write!(
        line,
        " {:<12} seq={:<5} {:<20} {:>7} B",
        machine,
        p.seq,
        Kind(p.data_field).to_string(),
        p.bytes.len(),
    );
    if err_known {
        let _ = write!(line, "  ±{}", human_ns(p.err_ns));
    }
    let _ = writeln!(line, "  {}", Escaped(&p.src));
}

/// A duration in the unit that reads best: 850ns, 12.3us, 4.56ms, 1.234s.
pub fn human_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.3}s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_machine_0_whatever_its_name() {
        let host = MachineFilter::new(&["host".to_owned()]);
        assert!(host.accepts(0, Some("build-server-7")), "a named host");
        assert!(host.accepts(0, None));
        assert!(!host.accepts(3, Some("phone")));
        // A machine may still be named "host" by its relay: by name too.
        assert!(host.accepts(5, Some("host")));
        let phone = MachineFilter::new(&["phone".to_owned(), "9".to_owned()]);
        assert!(phone.accepts(3, Some("phone")) && phone.accepts(9, None));
        assert!(!phone.accepts(0, Some("build-server-7")));
        assert!(MachineFilter::default().accepts(42, None), "no filter: all");
    }
}
