//! When each ring batch was cut, on disk (`ring-times` in the spool
//! directory), so a restarted relay in ring mode still knows which of its
//! spooled batches a window needs.
//!
//! The file is `RING_TIMES_MAGIC`, the kernel boot id's length (u16) and
//! bytes, then 16-byte records: batch seq and its cut BOOTTIME (u64 each,
//! little-endian). Records are appended without fsync (the page cache
//! outlives a killed relay; after a power loss, or on another boot, whose
//! BOOTTIME means nothing here, the times are dropped and the batches
//! count as cut at the start). A torn last record is ignored; records
//! whose seq does not grow are dropped. The file is rewritten whole
//! (atomically) when it holds more than twice the records still needed.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{SpoolError, types::io_error};

const NAME: &str = "ring-times";
const RING_TIMES_MAGIC: &[u8; 8] = b"TSRTIME1";
const RECORD: usize = 16;
/// Records always allowed before a rewrite is considered.
const SLACK_RECORDS: usize = 4096;

#[derive(Debug)]
pub struct RingTimes {
    path: PathBuf,
    boot_id: String,
    file: File,
    records: usize,
}

impl RingTimes {
    /// Opens (creating) the file; returns it and the times it holds for
    /// this boot (seq -> cut BOOTTIME).
    pub fn open(spool_dir: &Path, boot_id: &str) -> Result<(Self, BTreeMap<u64, u64>), SpoolError> {
        let path = spool_dir.join(NAME);
        let times = match fs::read(&path) {
            Ok(bytes) => parse(&bytes, boot_id),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(io_error(&path, "read")(e)),
        };
        let times_file = Self {
            file: rewrite(&path, boot_id, &times)?,
            path,
            boot_id: boot_id.to_owned(),
            records: times.len(),
        };
        Ok((times_file, times))
    }

    /// Batch `seq` was cut at `cut_at_ns`.
    pub fn note(&mut self, seq: u64, cut_at_ns: u64) -> Result<(), SpoolError> {
        let mut record = [0u8; RECORD];
        record[..8].copy_from_slice(&seq.to_le_bytes());
        record[8..].copy_from_slice(&cut_at_ns.to_le_bytes());
        self.file
            .write_all(&record)
            .map_err(io_error(&self.path, "append"))?;
        self.records += 1;
        Ok(())
    }

    /// Whether the file holds well over the `held` records still needed.
    pub fn wants_compaction(&self, held: usize) -> bool {
        self.records > 2 * held + SLACK_RECORDS
    }

    /// Rewrites the file with only `held`.
    pub fn compact(&mut self, held: &BTreeMap<u64, u64>) -> Result<(), SpoolError> {
        self.file = rewrite(&self.path, &self.boot_id, held)?;
        self.records = held.len();
        Ok(())
    }
}

/// Writes the file whole (atomically) and opens it for appending.
fn rewrite(path: &Path, boot_id: &str, times: &BTreeMap<u64, u64>) -> Result<File, SpoolError> {
    let boot = boot_id.as_bytes();
    let boot_len = u16::try_from(boot.len()).unwrap_or(0);
    let boot = boot.get(..usize::from(boot_len)).unwrap_or_default();
    let mut bytes = Vec::with_capacity(10 + boot.len() + times.len() * RECORD);
    bytes.extend_from_slice(RING_TIMES_MAGIC);
    bytes.extend_from_slice(&boot_len.to_le_bytes());
    bytes.extend_from_slice(boot);
    for (seq, at) in times {
        bytes.extend_from_slice(&seq.to_le_bytes());
        bytes.extend_from_slice(&at.to_le_bytes());
    }
    tracesync_common::files::replace(path, &bytes, 0o600).map_err(io_error(path, "write"))?;
    OpenOptions::new()
        .append(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io_error(path, "open"))
}

/// The times of a file written on boot `boot_id`; none from another boot
/// or a file that is not one.
fn parse(bytes: &[u8], boot_id: &str) -> BTreeMap<u64, u64> {
    let mut times = BTreeMap::new();
    let Some(rest) = bytes.strip_prefix(RING_TIMES_MAGIC.as_slice()) else {
        return times;
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return times;
    };
    let len = usize::from(u16::from_le_bytes(*len));
    let (Some(boot), Some(records)) = (rest.get(..len), rest.get(len..)) else {
        return times;
    };
    if boot != boot_id.as_bytes() {
        return times;
    }
    let mut last_seq = 0;
    for record in records.chunks_exact(RECORD) {
        let (seq, at) = record.split_at(8);
        let seq = u64::from_le_bytes(seq.try_into().unwrap_or_default());
        let at = u64::from_le_bytes(at.try_into().unwrap_or_default());
        if seq > last_seq {
            times.insert(seq, at);
            last_seq = seq;
        }
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_survive_a_reopen_on_the_same_boot_only() -> Result<(), SpoolError> {
        let dir = tempfile::tempdir().map_err(io_error(Path::new("tmp"), "create"))?;
        let (mut times, found) = RingTimes::open(dir.path(), "boot-a")?;
        assert!(found.is_empty());
        times.note(1, 100)?;
        times.note(2, 200)?;
        times.note(2, 250)?; // not growing: dropped on read
        drop(times);
        // A torn record at the end is ignored.
        let path = dir.path().join(NAME);
        let mut file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_error(&path, "open"))?;
        file.write_all(&[3, 0, 0])
            .map_err(io_error(&path, "append"))?;
        drop(file);
        let (mut times, found) = RingTimes::open(dir.path(), "boot-a")?;
        assert_eq!(found, BTreeMap::from([(1, 100), (2, 200)]));
        times.note(3, 300)?;
        drop(times);
        let (_, found) = RingTimes::open(dir.path(), "boot-a")?;
        assert_eq!(found.len(), 3);
        let (_, other_boot) = RingTimes::open(dir.path(), "boot-b")?;
        assert!(other_boot.is_empty());
        let (_, after) = RingTimes::open(dir.path(), "boot-a")?;
        assert!(after.is_empty(), "another boot's open forgot them");
        Ok(())
    }

    #[test]
    fn compaction_keeps_what_is_held() -> Result<(), SpoolError> {
        let dir = tempfile::tempdir().map_err(io_error(Path::new("tmp"), "create"))?;
        let (mut times, _) = RingTimes::open(dir.path(), "b")?;
        for seq in 1..=(SLACK_RECORDS as u64 + 10) {
            times.note(seq, seq * 10)?;
        }
        let held = BTreeMap::from([(4000, 40_000), (4001, 40_010)]);
        assert!(times.wants_compaction(held.len()));
        times.compact(&held)?;
        drop(times);
        let (_, found) = RingTimes::open(dir.path(), "b")?;
        assert_eq!(found, held);
        Ok(())
    }
}
