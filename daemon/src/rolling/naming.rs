//! File names of the rolling output: `tracesync-<UTC start>-<seq>.pftrace`,
//! with the UTC time formatted here from `SystemTime` (no calendar crate).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Prefix and suffix of every rolled trace file.
const PREFIX: &str = "tracesync-";
const SUFFIX: &str = ".pftrace";
/// Suffix appended to a trace file's name for its raw probe samples.
pub const SYNC_SIDECAR_SUFFIX: &str = ".sync.jsonl";

/// A civil (proleptic Gregorian) date from days since 1970-01-01.
///
/// Eras of 400 years repeat exactly (146097 days); within an era, years are
/// counted from March so the leap day falls at the end.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date (inverse of [`civil_from_days`]).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Seconds since the Unix epoch (negative before it).
fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs_f64().ceil() as u64).unwrap_or(i64::MAX),
    }
}

/// `%Y%m%dT%H%M%SZ` of a time, in UTC.
pub fn utc_stamp(t: SystemTime) -> String {
    let secs = unix_seconds(t);
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let of_day = secs.rem_euclid(86_400);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// Parses a `%Y%m%dT%H%M%SZ` stamp back into a time.
pub fn parse_utc_stamp(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    let secs = u64::try_from(secs).ok()?;
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
    fn civil_dates_known_values() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        // 2000-02-29: a leap day in a year divisible by 400.
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        // 2100 is not a leap year.
        assert_eq!(
            civil_from_days(days_from_civil(2100, 2, 28) + 1),
            (2100, 3, 1)
        );
        assert_eq!(days_from_civil(2024, 1, 1), 19_723);
    }

    #[test]
    fn civil_round_trip_over_centuries() {
        let mut previous = civil_from_days(-800_000);
        for days in -799_999..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
            // Consecutive days: either the next day, or the 1st of a new month.
            assert!(
                (y, m, d) > previous && (d == previous.2 + 1 || d == 1),
                "{previous:?} -> {:?}",
                (y, m, d)
            );
            previous = (y, m, d);
        }
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
