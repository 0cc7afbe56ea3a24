//! The names in a capture directory. A rolled trace file is
//! `tracesync-<UTC start, %Y%m%dT%H%M%SZ>-<seq, at least 6 digits>.pftrace`
//! ([`RolledName`]); files are in writing order by `seq` (start times can
//! go back with the wall clock, sequence numbers never do). A flight
//! recorder's snapshot is `snapshot-<UTC of T>-<trigger name>.pftrace`
//! ([`SnapshotName`]; a name is 1-64 of `[A-Za-z0-9._-]`, not starting
//! with `.`). The UTC time is formatted and parsed by the `time` crate.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

/// Name of the index in a capture directory.
pub const INDEX_NAME: &str = "index.jsonl";
/// Name of the commit journal.
pub const JOURNAL_NAME: &str = "journal";
/// Name of the lock file the writing daemon holds.
pub const LOCK_NAME: &str = "tracesyncd.lock";
/// Name of the relays' identity bindings (under mutual TLS).
pub const BINDINGS_NAME: &str = "identity-bindings.jsonl";
/// What a trace file's name gets appended for its probe-sample sidecar.
pub const SIDECAR_SUFFIX: &str = ".sync.jsonl";

const PREFIX: &str = "tracesync-";
const SUFFIX: &str = ".pftrace";

/// `%Y%m%dT%H%M%SZ`, in UTC.
const STAMP: &[BorrowedFormatItem<'static>] =
    format_description!("[year][month][day]T[hour][minute][second]Z");

/// A rolled trace file's name: when the file was started (whole seconds,
/// UTC) and its sequence number in the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolledName {
    pub start: SystemTime,
    pub seq: u64,
}

impl RolledName {
    pub fn new(start: SystemTime, seq: u64) -> Self {
        Self { start, seq }
    }

    /// The rolled file `name` is, if it is one (a name that only looks
    /// like one, with a bad date or a short sequence, is not).
    pub fn parse(name: &str) -> Option<Self> {
        let middle = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
        let (stamp, seq) = middle.split_once('-')?;
        if seq.len() < 6 || !seq.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some(Self {
            start: parse_utc_stamp(stamp)?,
            seq: seq.parse().ok()?,
        })
    }
}

impl fmt::Display for RolledName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}-{:06}{SUFFIX}",
            utc_stamp(self.start),
            self.seq
        )
    }
}

const SNAPSHOT_PREFIX: &str = "snapshot-";
/// Longest trigger name in a snapshot's file name.
const MAX_TRIGGER_NAME: usize = 64;

/// A flight recorder snapshot's name: when its trigger fired (whole
/// seconds, UTC) and the trigger's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotName {
    pub fired: SystemTime,
    pub trigger: String,
}

impl SnapshotName {
    /// None when `trigger` cannot be part of a file name (see the module
    /// doc).
    pub fn new(fired: SystemTime, trigger: &str) -> Option<Self> {
        is_trigger_name(trigger).then(|| Self {
            fired,
            trigger: trigger.to_owned(),
        })
    }

    /// The snapshot `name` is, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        let middle = name.strip_prefix(SNAPSHOT_PREFIX)?.strip_suffix(SUFFIX)?;
        let (stamp, trigger) = middle.split_once('-')?;
        Self::new(parse_utc_stamp(stamp)?, trigger)
    }
}

impl fmt::Display for SnapshotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SNAPSHOT_PREFIX}{}-{}{SUFFIX}",
            utc_stamp(self.fired),
            self.trigger
        )
    }
}

fn is_trigger_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TRIGGER_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// The directory of the output directory where ring relays' windows are
/// staged until their snapshot is written.
pub const STAGING_DIR: &str = ".staging";

/// Whether `name` is a rolled trace file's name.
pub fn is_rolled(name: &str) -> bool {
    RolledName::parse(name).is_some()
}

/// Whether `name` is one of a capture directory's own files: a rolled
/// file, its sidecar, a snapshot (or its temporary copy), the staging
/// directory of ring windows, the index, the journal, the lock, the identity
/// bindings, or a temporary or set-aside copy of one of them (the
/// writer's `index.jsonl.tmp`, `journal.tmp`, ...). A directory holding
/// anything else is not (only) a capture.
pub fn is_capture_file(name: &str) -> bool {
    let plain = name.strip_prefix('.').unwrap_or(name);
    let rolled = |n: &str| is_rolled(n) || n.strip_suffix(SIDECAR_SUFFIX).is_some_and(is_rolled);
    let fixed_or_its_copy = |fixed: &&str| {
        plain
            .strip_prefix(*fixed)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    // A snapshot, its temporary copy, and the staging of ring windows.
    let snapshot = SnapshotName::parse(name).is_some()
        || plain
            .strip_suffix(".tmp")
            .is_some_and(|n| SnapshotName::parse(n).is_some())
        || name == STAGING_DIR;
    rolled(name)
        || snapshot
        || [INDEX_NAME, JOURNAL_NAME, LOCK_NAME, BINDINGS_NAME]
            .iter()
            .any(fixed_or_its_copy)
}

/// The key that puts a directory's trace files in writing order: rolled
/// files by sequence number, then any other name after them, by name.
pub fn writing_order(name: &str) -> (u64, &str) {
    (RolledName::parse(name).map_or(u64::MAX, |n| n.seq), name)
}

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
    fn rolled_names_are_written_and_read_back() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(utc_stamp(t), "20231114T221320Z");
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        let name = RolledName::new(t, 42).to_string();
        assert_eq!(name, "tracesync-20231114T221320Z-000042.pftrace");
        assert_eq!(RolledName::parse(&name), Some(RolledName::new(t, 42)));
        assert_eq!(
            RolledName::parse("tracesync-20231114T221320Z-1234567.pftrace"),
            Some(RolledName::new(t, 1_234_567))
        );
        for bad in [
            "tracesync-20231114T221320Z-42.pftrace",
            "tracesync-20231314T221320Z-000042.pftrace",
            "tracesync-20231114T221320Z-000042.pftrace.sync.jsonl",
            "tracesync-2023111XT221320Z-000042.pftrace",
            INDEX_NAME,
            JOURNAL_NAME,
            LOCK_NAME,
        ] {
            assert_eq!(RolledName::parse(bad), None, "{bad}");
            assert!(!is_rolled(bad), "{bad}");
        }
    }

    #[test]
    fn snapshot_names_are_written_and_read_back() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let name = SnapshotName::new(t, "oom-kill_2").map(|n| n.to_string());
        assert_eq!(
            name.as_deref(),
            Some("snapshot-20231114T221320Z-oom-kill_2.pftrace")
        );
        assert_eq!(
            name.as_deref().and_then(SnapshotName::parse),
            SnapshotName::new(t, "oom-kill_2")
        );
        for bad in ["", ".x", "a/b", "a b", &"x".repeat(65)] {
            assert_eq!(SnapshotName::new(t, bad), None, "{bad:?}");
        }
        for bad in [
            "snapshot-20231114T221320Z-.pftrace",
            "snapshot-2023111XT221320Z-crash.pftrace",
            "snapshot-20231114T221320Z-crash.pftrace.tmp",
            "tracesync-20231114T221320Z-000042.pftrace",
        ] {
            assert_eq!(SnapshotName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_capture_files_are_told_from_others() {
        let rolled = RolledName::new(UNIX_EPOCH, 3).to_string();
        for name in [
            rolled.as_str(),
            &format!("{rolled}.sync.jsonl"),
            INDEX_NAME,
            "index.jsonl.tmp",
            JOURNAL_NAME,
            "journal.tmp",
            LOCK_NAME,
            BINDINGS_NAME,
            ".identity-bindings.jsonl.tmp",
            "identity-bindings.jsonl.corrupt",
            "snapshot-20261202T152402Z-crash.pftrace",
            ".snapshot-20261202T152402Z-crash.pftrace.tmp",
            STAGING_DIR,
        ] {
            assert!(is_capture_file(name), "{name}");
        }
        for name in [
            "phone.pftrace",
            "notes.txt",
            "tracesync-x-000001.pftrace",
            "journal-old",
        ] {
            assert!(!is_capture_file(name), "{name}");
        }
    }

    #[test]
    fn writing_order_is_by_sequence_then_other_names() {
        let t = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        // A later file may carry an earlier start (the wall clock went back).
        let mut names = vec![
            "other.pftrace".to_owned(),
            RolledName::new(t(50), 10).to_string(),
            RolledName::new(t(900), 9).to_string(),
        ];
        names.sort_by(|a, b| writing_order(a).cmp(&writing_order(b)));
        assert_eq!(
            names,
            [
                RolledName::new(t(900), 9).to_string(),
                RolledName::new(t(50), 10).to_string(),
                "other.pftrace".to_owned(),
            ]
        );
    }
}
