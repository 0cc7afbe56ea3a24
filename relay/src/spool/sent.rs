//! The highest batch this relay instance ever put on the wire, kept across
//! restarts in the spool's `sent-through` file: the most any daemon may
//! acknowledge. Batches spooled while no daemon was reachable were never
//! sent, so a Welcome that acknowledges them is a lie, whatever run it
//! comes in.
//!
//! Invariant: the file's value is written (to the page cache) before the
//! batch it names is queued for the socket, so a relay killed at any point
//! never knows less than it sent. The file is synced with the spool's
//! segments (a power loss can take both, and then the daemon's honest ack
//! may exceed it: the session recovers from that, see `crate::session`).
//!
//! Format: 16 bytes, the value and its check (the value's bitwise NOT),
//! little-endian, rewritten in place with one `pwrite`. A file that is
//! missing (a spool of an older relay) or fails its check says nothing:
//! the caller falls back to the spool's last batch.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::SpoolError;
use super::types::io_error;

const SENT_FILE: &str = "sent-through";
const RECORD_BYTES: usize = 16;

#[derive(Debug)]
pub(super) struct SentMark {
    file: File,
    path: PathBuf,
    /// What the file says (None: it said nothing valid when opened, and
    /// nothing was sent since).
    value: Option<u64>,
}

impl SentMark {
    /// Opens (creating, owner-only) the mark of the spool in `dir`.
    /// `fresh`: the spool holds no batch yet, so nothing was ever sent and
    /// a new file starts at 0 (a new file beside an older relay's batches
    /// knows nothing).
    pub fn open(dir: &Path, fresh: bool) -> Result<Self, SpoolError> {
        let path = dir.join(SENT_FILE);
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        let (file, created) = match created {
            Ok(file) => (file, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io_error(&path, "open"))?;
                (file, false)
            }
            Err(e) => return Err(io_error(&path, "create")(e)),
        };
        let mut record = [0u8; RECORD_BYTES];
        let value = match file.read_exact_at(&mut record, 0) {
            Ok(()) => decode(&record),
            Err(_) => None,
        };
        let mut mark = Self { file, path, value };
        if created && fresh {
            mark.write(0)?;
        }
        Ok(mark)
    }

    /// The highest batch ever sent, if the file knows it.
    pub fn value(&self) -> Option<u64> {
        self.value
    }

    /// Batch `seq` is about to go on the wire: raise the mark first.
    pub fn note(&mut self, seq: u64) -> Result<(), SpoolError> {
        if self.value.is_some_and(|v| v >= seq) {
            return Ok(());
        }
        self.write(seq)
    }

    fn write(&mut self, seq: u64) -> Result<(), SpoolError> {
        let mut record = [0u8; RECORD_BYTES];
        record[..8].copy_from_slice(&seq.to_le_bytes());
        record[8..].copy_from_slice(&(!seq).to_le_bytes());
        self.file
            .write_all_at(&record, 0)
            .map_err(io_error(&self.path, "write"))?;
        self.value = Some(seq);
        Ok(())
    }

    /// Makes the mark durable (with the segments).
    pub fn sync(&self) -> Result<(), SpoolError> {
        self.file.sync_data().map_err(io_error(&self.path, "sync"))
    }
}

fn decode(record: &[u8; RECORD_BYTES]) -> Option<u64> {
    let (value, check) = record.split_at(8);
    let value = u64::from_le_bytes(value.try_into().ok()?);
    let check = u64::from_le_bytes(check.try_into().ok()?);
    (check == !value).then_some(value)
}
