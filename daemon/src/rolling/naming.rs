//! File names of the rolling output: `tracesync-<UTC start>-<seq>.pftrace`,
//! the UTC time formatted and parsed by the `time` crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

/// Prefix and suffix of every rolled trace file.
const PREFIX: &str = "tracesync-";
const SUFFIX: &str = ".pftrace";
/// Suffix appended to a trace file's name for its raw probe samples.
pub const SYNC_SIDECAR_SUFFIX: &str = ".sync.jsonl";

/// `%Y%m%dT%H%M%SZ`, in UTC.
const STAMP: &[BorrowedFormatItem<'static>] =
    format_description!("[year][month][day]T[hour][minute][second]Z");

/// Seconds since the Unix epoch (negative before it).
fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs_f64().ceil() as u64).unwrap_or(i64::MAX),
    }
}

/// `%Y%m%dT%H%M%SZ` of a time, in UTC (the epoch for a time the calendar
/// cannot hold).
pub fn utc_stamp(t: SystemTime) -> String {
    OffsetDateTime::from_unix_timestamp(unix_seconds(t))
        .ok()
        .and_then(|utc| utc.format(STAMP).ok())
        .unwrap_or_else(|| "19700101T000000Z".to_owned())
}

/// Parses a `%Y%m%dT%H%M%SZ` stamp back into a time.
pub fn parse_utc_stamp(s: &str) -> Option<SystemTime> {
    if s.len() != 16 || !s.bytes().take(8).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let utc = PrimitiveDateTime::parse(s, STAMP).ok()?.assume_utc();
    let secs = u64::try_from(utc.unix_timestamp()).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Name of the trace file number `seq` started at `start`.
pub fn file_name(start: SystemTime, seq: u64) -> String {
    format!("{PREFIX}{}-{seq:06}{SUFFIX}", utc_stamp(start))
}

/// A rolled file's start time and sequence number, if `name` is one.
pub fn parse_file_name(name: &str) -> Option<(SystemTime, u64)> {
    let middle = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (stamp, seq) = middle.split_once('-')?;
    if seq.len() < 6 || !seq.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((parse_utc_stamp(stamp)?, seq.parse().ok()?))
}

/// Name of a trace file's probe-sample sidecar.
pub fn sidecar_name(file_name: &str) -> String {
    format!("{file_name}{SYNC_SIDECAR_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_of_leap_days_and_centuries() {
        let day = |d: u64| UNIX_EPOCH + Duration::from_secs(d * 86_400);
        // 2000-02-29: a leap day in a year divisible by 400.
        assert_eq!(utc_stamp(day(11_016)), "20000229T000000Z");
        assert_eq!(utc_stamp(day(11_017)), "20000301T000000Z");
        // 2100 is not a leap year: Feb 28 is followed by Mar 1.
        assert_eq!(utc_stamp(day(47_540)), "21000228T000000Z");
        assert_eq!(utc_stamp(day(47_541)), "21000301T000000Z");
        for d in [0, 59, 11_016, 19_723, 47_541, 2_932_896] {
            assert_eq!(parse_utc_stamp(&utc_stamp(day(d))), Some(day(d)), "{d}");
        }
        assert_eq!(parse_utc_stamp("20230229T000000Z"), None, "not a leap year");
    }

    #[test]
    fn stamps_and_names() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(utc_stamp(t), "20231114T221320Z");
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        let name = file_name(t, 42);
        assert_eq!(name, "tracesync-20231114T221320Z-000042.pftrace");
        assert_eq!(parse_file_name(&name), Some((t, 42)));
        assert_eq!(
            parse_file_name("tracesync-20231114T221320Z-1234567.pftrace"),
            Some((t, 1_234_567))
        );
        for bad in [
            "tracesync-20231114T221320Z-42.pftrace",
            "tracesync-20231314T221320Z-000042.pftrace",
            "tracesync-20231114T221320Z-000042.pftrace.sync.jsonl",
            "tracesync-2023111XT221320Z-000042.pftrace",
            "index.jsonl",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
        assert_eq!(sidecar_name(&name), format!("{name}.sync.jsonl"));
    }
}
