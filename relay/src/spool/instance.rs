//! The relay instance id: random, created with the spool, kept for its
//! life unless a daemon's record of it is found unusable (see
//! `Spool::renew_instance`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::SpoolError;
use super::types::io_error;

const INSTANCE_FILE: &str = "instance-id";

pub(super) fn load_or_create_instance_id(dir: &Path) -> Result<u64, SpoolError> {
    let path = dir.join(INSTANCE_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => u64::from_str_radix(text.trim(), 16)
            .ok()
            .filter(|id| *id != 0)
            .ok_or_else(|| SpoolError::Corrupt {
                path: path.clone(),
                offset: 0,
                reason:
                    "not a 16-digit hex instance id; delete it to start as a new relay instance"
                        .into(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => create_instance_id(dir),
        Err(e) => Err(io_error(&path, "read")(e)),
    }
}

/// Draws a new instance id and puts it in place of the old one (write to a
/// temporary, fsync, rename): the spool is a new relay instance from then
/// on, for every daemon.
pub(super) fn create_instance_id(dir: &Path) -> Result<u64, SpoolError> {
    let path = dir.join(INSTANCE_FILE);
    let id = random_nonzero_u64(&path)?;
    let temp = dir.join(format!("{INSTANCE_FILE}.tmp"));
    // Owner-only: in plaintext mode the id is what a daemon knows this
    // relay by.
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io_error(&temp, "create"))?;
    file.write_all(format!("{id:016x}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error(&temp, "write"))?;
    fs::rename(&temp, &path).map_err(io_error(&path, "create"))?;
    Ok(id)
}

fn random_nonzero_u64(for_path: &Path) -> Result<u64, SpoolError> {
    let mut urandom =
        File::open("/dev/urandom").map_err(io_error(for_path, "get randomness for"))?;
    loop {
        let mut bytes = [0u8; 8];
        urandom
            .read_exact(&mut bytes)
            .map_err(io_error(for_path, "get randomness for"))?;
        let id = u64::from_le_bytes(bytes);
        if id != 0 {
            return Ok(id);
        }
    }
}

/// How the instance id is shown in logs: its first 4 hex digits. The whole
/// id never appears there, so a reader of the log cannot present it.
pub fn instance_fingerprint(id: u64) -> String {
    format!("{:04x}...", id >> 48)
}
