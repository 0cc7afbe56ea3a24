//! `index.jsonl`: one line per rolled file, rewritten whole (tmp + rename)
//! whenever it changes; and the retention rule over it.

use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::files::{self, Links};
use super::naming;

/// Name of the index in the output directory.
pub const INDEX_NAME: &str = "index.jsonl";

/// A machine seen in a file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IndexMachine {
    /// Perfetto machine id (0 = the host).
    pub raw_id: u32,
    pub name: Option<String>,
}

/// One line of `index.jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// File name, relative to the output directory.
    pub name: String,
    /// Trace time (host BOOTTIME ns) of the first and last packet written
    /// after the preamble; null if none (or unknown: files found without an
    /// index line).
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Machines with packets in the file, by raw id.
    pub machines: Vec<IndexMachine>,
    /// File length and packet count, preamble included.
    pub bytes: u64,
    pub packets: u64,
    /// Length and packet count of the preamble at the file's start (a
    /// follower that read the previous file skips these).
    #[serde(default)]
    pub preamble_bytes: u64,
    #[serde(default)]
    pub preamble_packets: u64,
    /// No more packets will be written to the file.
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
            preamble_packets: 0,
            complete: true,
        }
    }

    /// The file's sequence number (0 if the name is not a rolled file's).
    pub fn seq(&self) -> u64 {
        naming::parse_file_name(&self.name).map_or(0, |(_, seq)| seq)
    }
}

/// Reads an index; unparsable lines are skipped and counted. A link at
/// `path` is not followed: it reads as no index (counted in `links`; the
/// next save replaces it).
pub fn load(path: &Path, links: &Links) -> io::Result<(Vec<IndexEntry>, u64)> {
    let read = files::open_existing(path, false).and_then(|mut f| {
        let mut text = String::new();
        f.read_to_string(&mut text).map(|_| text)
    });
    let text = match read {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => return Ok((Vec::new(), 1)),
        Err(e) if files::is_link_refused(&e) => {
            links.met(path, false, "the index is read as empty and written anew");
            return Ok((Vec::new(), 0));
        }
        Err(e) => return Err(e),
    };
    let mut bad = 0;
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<IndexEntry>(line) {
            Ok(e) => entries.push(e),
            Err(_) => bad += 1,
        }
    }
    Ok((entries, bad))
}

/// Writes the index whole, atomically (a reader sees the old or the new
/// one), through a temporary file created new, never through a link
/// (`files::replace`).
pub fn save(path: &Path, entries: &[IndexEntry], links: &Links) -> io::Result<()> {
    let mut text = Vec::new();
    for e in entries {
        serde_json::to_writer(&mut text, e).map_err(io::Error::other)?;
        text.push(b'\n');
    }
    files::replace(path, &path.with_extension("jsonl.tmp"), &text, links)
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
/// `current` is never chosen.
pub fn expired(
    entries: &[IndexEntry],
    current: &str,
    limits: Retention,
    now: SystemTime,
) -> Vec<String> {
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let too_old = |e: &IndexEntry| {
        let Some((start, _)) = naming::parse_file_name(&e.name) else {
            return false;
        };
        !limits.max_age.is_zero()
            && now
                .duration_since(start)
                .is_ok_and(|age| age > limits.max_age)
    };
    let mut out = Vec::new();
    for e in entries.iter().filter(|e| e.complete && e.name != current) {
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
            ..IndexEntry::found(naming::file_name(start, seq), bytes)
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
    fn save_and_load_round_trip_skipping_bad_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(INDEX_NAME);
        let mut a = entry(1, 1000, 10, true);
        a.machines = vec![IndexMachine {
            raw_id: 3,
            name: Some("phone".into()),
        }];
        a.first_ts = Some(-5);
        let entries = vec![a, entry(2, 2000, 20, false)];
        let links = Links::default();
        save(&path, &entries, &links).expect("save");
        assert_eq!(load(&path, &links).expect("load"), (entries.clone(), 0));
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str("{not json\n");
        std::fs::write(&path, text).expect("write");
        assert_eq!(load(&path, &links).expect("load"), (entries, 1));
        assert!(!dir.path().join("index.jsonl.tmp").exists());
    }
}
