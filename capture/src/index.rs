//! `index.jsonl`: one [`IndexEntry`] JSON line per rolled file, in writing
//! order. The daemon rewrites it whole (a temporary file renamed over it)
//! whenever it changes, so a reader sees an old or a new index, never a
//! torn one; a line that does not parse (edited by hand, from another
//! version) is skipped and counted, never fatal. The retention rule reads
//! it too ([`expired`]).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::names::{INDEX_NAME, RolledName};

/// A machine seen in a file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IndexMachine {
    /// Perfetto machine id (0 = the host).
    pub raw_id: u32,
    pub name: Option<String>,
}

/// One line of `index.jsonl`. Only `name` is required of a line read: a
/// reader takes what a line has (the daemon writes every field).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// File name, relative to the capture directory.
    pub name: String,
    /// Trace time (host BOOTTIME ns) of the first and last packet written
    /// after the preamble; null if none (or unknown: files found without an
    /// index line).
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Machines with packets in the file, by raw id.
    #[serde(default)]
    pub machines: Vec<IndexMachine>,
    /// File length and packet count, preamble included.
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub packets: u64,
    /// Length and packet count of the preamble at the file's start (a
    /// reader that read the previous file skips these). No count: unknown
    /// (a file found without its index line, or an index older than the
    /// count): a reader tells the replayed packets by their content.
    #[serde(default)]
    pub preamble_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preamble_packets: Option<u64>,
    /// No more packets will be written to the file.
    #[serde(default)]
    pub complete: bool,
}

impl IndexEntry {
    /// An entry for a file with nothing known but its length.
    pub fn found(name: String, bytes: u64) -> Self {
        Self {
            name,
            first_ts: None,
            last_ts: None,
            machines: Vec::new(),
            bytes,
            packets: 0,
            preamble_bytes: 0,
            preamble_packets: None,
            complete: true,
        }
    }

    /// The file's sequence number (0 if the name is not a rolled file's).
    pub fn seq(&self) -> u64 {
        RolledName::parse(&self.name).map_or(0, |n| n.seq)
    }

    /// Whether the name stays inside the directory: a plain name, not
    /// hidden (an index is data; it must not point a reader elsewhere).
    pub fn is_plain_name(&self) -> bool {
        !self.name.is_empty() && !self.name.contains('/') && !self.name.starts_with('.')
    }
}

/// An index as read: its entries in file order and how many lines were
/// skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Index {
    pub entries: Vec<IndexEntry>,
    pub bad_lines: u64,
}

impl Index {
    /// The index of `text`; lines that do not parse are counted.
    pub fn parse(text: &str) -> Self {
        let mut index = Self::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<IndexEntry>(line) {
                Ok(e) => index.entries.push(e),
                Err(_) => index.bad_lines += 1,
            }
        }
        index
    }

    /// Reads `dir`'s index as a reader does: a missing one is empty. (The
    /// daemon reads its own through its link-refusing file layer.)
    pub fn read(dir: &Path) -> io::Result<Self> {
        match std::fs::read_to_string(dir.join(INDEX_NAME)) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// The entry of file `name`, the last one if several name it.
    pub fn entry(&self, name: &str) -> Option<&IndexEntry> {
        self.entries.iter().rev().find(|e| e.name == name)
    }

    /// Machine names by raw id; a later file's name wins (a machine keeps
    /// its name, so they agree unless the index was edited).
    pub fn machine_names(&self) -> Vec<(u32, String)> {
        machine_names(&self.entries)
    }
}

/// Machine names `entries` give, by raw id; a later file's name wins.
pub fn machine_names(entries: &[IndexEntry]) -> Vec<(u32, String)> {
    let mut names = BTreeMap::new();
    for entry in entries {
        for m in &entry.machines {
            if let Some(name) = &m.name {
                names.insert(m.raw_id, name.clone());
            }
        }
    }
    names.into_iter().collect()
}

/// The whole index text of `entries`, one line each.
pub fn encode(entries: &[IndexEntry]) -> serde_json::Result<Vec<u8>> {
    let mut text = Vec::new();
    for e in entries {
        serde_json::to_writer(&mut text, e)?;
        text.push(b'\n');
    }
    Ok(text)
}

/// Retention limits.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    pub max_bytes: u64,
    /// Zero: no age limit.
    pub max_age: Duration,
}

/// Names of the files to delete, oldest first: complete files, from the
/// oldest, while the total exceeds `max_bytes` or the file is older than
/// `max_age` (by the start time in its name). `entries` is in file order;
/// `current` is never chosen. Only rolled files are counted and chosen:
/// snapshots are kept (a user asked for each; their number is bounded by
/// the trigger limit) until the user deletes them.
pub fn expired(
    entries: &[IndexEntry],
    current: &str,
    limits: Retention,
    now: SystemTime,
) -> Vec<String> {
    let rolled = |e: &&IndexEntry| RolledName::parse(&e.name).is_some();
    let mut total: u64 = entries.iter().filter(rolled).map(|e| e.bytes).sum();
    let too_old = |e: &IndexEntry| {
        let Some(name) = RolledName::parse(&e.name) else {
            return false;
        };
        !limits.max_age.is_zero()
            && now
                .duration_since(name.start)
                .is_ok_and(|age| age > limits.max_age)
    };
    let mut out = Vec::new();
    for e in entries
        .iter()
        .filter(rolled)
        .filter(|e| e.complete && e.name != current)
    {
        if total <= limits.max_bytes && !too_old(e) {
            break;
        }
        total -= e.bytes;
        out.push(e.name.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn entry(seq: u64, start_secs: u64, bytes: u64, complete: bool) -> IndexEntry {
        let start = UNIX_EPOCH + Duration::from_secs(start_secs);
        IndexEntry {
            complete,
            ..IndexEntry::found(RolledName::new(start, seq).to_string(), bytes)
        }
    }

    #[test]
    fn retention_by_bytes_and_age() {
        let entries = vec![
            entry(1, 1000, 100, true),
            entry(2, 2000, 100, true),
            entry(3, 3000, 100, true),
            entry(4, 4000, 100, false),
        ];
        let current = entries[3].name.clone();
        let now = UNIX_EPOCH + Duration::from_secs(5000);
        let names = |v: &[usize]| {
            v.iter()
                .map(|&i| entries[i].name.clone())
                .collect::<Vec<_>>()
        };
        let by_bytes = Retention {
            max_bytes: 250,
            max_age: Duration::ZERO,
        };
        assert_eq!(expired(&entries, &current, by_bytes, now), names(&[0, 1]));
        let by_age = Retention {
            max_bytes: u64::MAX,
            max_age: Duration::from_secs(2500),
        };
        assert_eq!(expired(&entries, &current, by_age, now), names(&[0, 1]));
        // Never the current file, even when it alone is over the limit.
        let tiny = Retention {
            max_bytes: 0,
            max_age: Duration::from_secs(1),
        };
        assert_eq!(expired(&entries, &current, tiny, now), names(&[0, 1, 2]));
    }

    #[test]
    fn retention_keeps_snapshots_and_does_not_count_them() {
        let snapshot = IndexEntry {
            complete: true,
            ..IndexEntry::found("snapshot-19700101T000100Z-crash.pftrace".into(), 1000)
        };
        let entries = vec![
            snapshot.clone(),
            entry(1, 1000, 100, true),
            entry(2, 2000, 100, false),
        ];
        let now = UNIX_EPOCH + Duration::from_secs(5000);
        let limits = Retention {
            max_bytes: 150,
            max_age: Duration::from_secs(10),
        };
        assert_eq!(
            expired(&entries, &entries[2].name, limits, now),
            [entries[1].name.clone()]
        );
        let roomy = Retention {
            max_bytes: 200,
            max_age: Duration::ZERO,
        };
        assert!(expired(&entries, &entries[2].name, roomy, now).is_empty());
    }

    #[test]
    fn an_index_reads_back_skipping_bad_lines() {
        let mut a = entry(1, 1000, 10, true);
        a.machines = vec![
            IndexMachine {
                raw_id: 3,
                name: Some("phone".into()),
            },
            IndexMachine {
                raw_id: 0,
                name: None,
            },
        ];
        a.first_ts = Some(-5);
        let mut b = entry(2, 2000, 20, false);
        b.machines = vec![IndexMachine {
            raw_id: 3,
            name: Some("phone-renamed".into()),
        }];
        let entries = vec![a, b];
        let mut text = String::from_utf8(encode(&entries).expect("encode")).expect("utf-8");
        assert_eq!(
            Index::parse(&text),
            Index {
                entries: entries.clone(),
                bad_lines: 0
            }
        );
        text.push_str("{not json\n\n{\"machines\":[]}\n");
        let index = Index::parse(&text);
        assert_eq!(
            (index.entries.len(), index.bad_lines),
            (2, 2),
            "no name: bad"
        );
        // A reader takes what a line has.
        let minimal = Index::parse("{\"name\":\"a.pftrace\",\"complete\":true}");
        assert_eq!(minimal.entries[0].preamble_packets, None);
        assert!(minimal.entries[0].complete);
        assert_eq!(index.machine_names(), [(3, "phone-renamed".to_owned())]);
        assert_eq!(index.entry(&entries[1].name), Some(&entries[1]));
        assert_eq!(entries[1].seq(), 2);
    }

    #[test]
    fn names_that_leave_the_directory_are_not_plain() {
        for (name, plain) in [
            ("tracesync-20250101T000000Z-000001.pftrace", true),
            ("../etc/passwd", false),
            ("a/b.pftrace", false),
            (".hidden.pftrace", false),
            ("", false),
        ] {
            assert_eq!(
                IndexEntry::found(name.into(), 0).is_plain_name(),
                plain,
                "{name}"
            );
        }
    }
}
