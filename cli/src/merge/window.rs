//! `--since TIME --until TIME` of `tracesync merge` on a capture. TIME is
//! trace-time ns (`123456789`), an RFC 3339 UTC time
//! (`2026-11-25T22:14:00Z`, fractions allowed), or `-DURATION` before the
//! capture's end (`-30s`, `-5m`, `-1h`, `-250ms`, `-10us`, `-7ns`).

use tracesync_common::exit;
use tracesync_protocol::clock_ids::{BOOTTIME, REALTIME};
use tracesync_protocol::perfetto::ClockSnapshot;
use tracesync_protocol::scan::scan_packet;

use super::capture::{Capture, CaptureError, CapturePackets};

/// A TIME as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    /// Trace time (host BOOTTIME), ns.
    Trace(i64),
    /// Wall-clock time, ns since the Unix epoch (UTC).
    Wall(i128),
    /// This long (ns) before the capture's last packet.
    BeforeEnd(u64),
}

/// Parses a TIME; the error says what is accepted.
pub fn parse_time(s: &str) -> Result<TimeSpec, String> {
    let bad = || {
        format!(
            "{s:?}: not a TIME; give trace-time ns (123456789), an RFC 3339 UTC time (2026-11-25T22:14:00Z) or -DURATION before the end (-30s, -5m, -1h, -250ms)"
        )
    };
    if let Some(d) = s.strip_prefix('-') {
        let split = d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len());
        let (n, unit) = d.split_at(split);
        let n: u64 = n.parse().map_err(|_| bad())?;
        let scale: u64 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        return n
            .checked_mul(scale)
            .map(TimeSpec::BeforeEnd)
            .ok_or_else(bad);
    }
    if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
        return s.parse().map(TimeSpec::Trace).map_err(|_| bad());
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|_| bad())?;
    Ok(TimeSpec::Wall(t.unix_timestamp_nanos()))
}

/// A window in trace time, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub since: i64,
    pub until: i64,
}

impl Window {
    pub fn contains(&self, ts: i64) -> bool {
        self.since <= ts && ts <= self.until
    }
}

/// What resolving TIMEs needs from the capture, read only if needed.
#[derive(Debug, Default)]
struct Facts {
    end: Option<i64>,
    /// Host REALTIME minus host BOOTTIME (ns), from the host's snapshots.
    wall_minus_boot: Option<i128>,
}

fn read_facts(capture: &Capture, need_end: bool, need_wall: bool) -> Result<Facts, CaptureError> {
    let mut facts = Facts {
        end: capture.indexed_end(),
        ..Facts::default()
    };
    let need_end = need_end && facts.end.is_none();
    if !need_end && !need_wall {
        return Ok(facts);
    }
    let mut packets = CapturePackets::new(capture);
    while let Some(p) = packets.next_packet()? {
        if need_end {
            facts.end = Some(facts.end.map_or(p.ts, |e| e.max(p.ts)));
        }
        if need_wall
            && facts.wall_minus_boot.is_none()
            && p.machine_raw_id == 0
            && let Ok(fields) = scan_packet(&packets.bytes)
            && let Some(snapshot) = fields.clock_snapshot
            && let Ok(snapshot) = <ClockSnapshot as prost::Message>::decode(snapshot)
        {
            let at = |id: u32| {
                snapshot
                    .clocks
                    .iter()
                    .find(|c| c.clock_id == Some(id))
                    .and_then(|c| c.timestamp)
            };
            if let (Some(wall), Some(boot)) = (at(REALTIME), at(BOOTTIME)) {
                facts.wall_minus_boot = Some(i128::from(wall) - i128::from(boot));
                if !need_end {
                    break;
                }
            }
        }
    }
    Ok(facts)
}

/// The trace-time window of `since` and `until` (either may be absent).
pub fn resolve(
    capture: &Capture,
    since: Option<TimeSpec>,
    until: Option<TimeSpec>,
) -> Result<Window, CaptureError> {
    let specs = [since, until];
    let need_end = specs
        .iter()
        .any(|s| matches!(s, Some(TimeSpec::BeforeEnd(_))));
    let need_wall = specs.iter().any(|s| matches!(s, Some(TimeSpec::Wall(_))));
    let facts = read_facts(capture, need_end, need_wall)?;
    let at = |spec: TimeSpec| -> Result<i64, CaptureError> {
        match spec {
            TimeSpec::Trace(ns) => Ok(ns),
            TimeSpec::BeforeEnd(d) => {
                let end = facts.end.ok_or_else(|| CaptureError {
                    line: "the capture has no timed packet: -DURATION has no end to count from; give trace-time ns".into(),
                    code: exit::DATAERR,
                })?;
                Ok(end.saturating_sub(i64::try_from(d).unwrap_or(i64::MAX)))
            }
            TimeSpec::Wall(w) => {
                let delta = facts.wall_minus_boot.ok_or_else(|| CaptureError {
                    line: "the capture has no host ClockSnapshot with REALTIME: an RFC 3339 TIME cannot be placed; give trace-time ns".into(),
                    code: exit::DATAERR,
                })?;
                Ok(i64::try_from((w - delta).max(0)).unwrap_or(i64::MAX))
            }
        }
    };
    let window = Window {
        since: since.map(at).transpose()?.unwrap_or(i64::MIN),
        until: until.map(at).transpose()?.unwrap_or(i64::MAX),
    };
    if window.since > window.until {
        return Err(CaptureError {
            line: format!(
                "--since ({}) is after --until ({}) in trace time; swap them",
                window.since, window.until
            ),
            code: exit::USAGE,
        });
    }
    Ok(window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("123"), Ok(TimeSpec::Trace(123)));
        assert_eq!(parse_time("-30s"), Ok(TimeSpec::BeforeEnd(30_000_000_000)));
        assert_eq!(parse_time("-5m"), Ok(TimeSpec::BeforeEnd(300_000_000_000)));
        assert_eq!(parse_time("-250ms"), Ok(TimeSpec::BeforeEnd(250_000_000)));
        assert_eq!(
            parse_time("1970-01-01T00:00:01.5Z"),
            Ok(TimeSpec::Wall(1_500_000_000))
        );
        for bad in ["", "-", "-5x", "yesterday", "-s", "12ab"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
