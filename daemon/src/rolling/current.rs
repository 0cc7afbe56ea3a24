//! The file being written ([`Current`]): packets framed into its pending
//! bytes, handed to the OS in flushes, kept until a commit makes them
//! durable; after a failed write or fsync the file is cut back to its
//! committed length and the pending bytes are written again. Its index
//! line and its `.sync.jsonl` sidecar of probe samples are its own too.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tracesync_capture::index::{IndexEntry, IndexMachine};
use tracesync_capture::sidecar::{self, ProbeSample, sidecar_name};
use tracesync_core::live::OutPacket;

use super::at;
use super::files::{self, Found, Links};
use super::writer_writeback::Writeback;

/// Buffered output is handed to the OS past this many bytes.
pub(super) const FLUSH_BYTES: usize = 1 << 20;
/// The room of the pending bytes, taken once and never grown for packets
/// that fit: a packet that would not fit commits first (waiting for the
/// commit in flight if need be). A `Vec` grown by doubling held up to
/// 32 MiB, and the commit in flight as much again; this way the two hold
/// at most twice this.
pub(super) const BUF_BYTES: usize = 16 << 20;
/// Past this many uncommitted bytes a write commits early: half the room,
/// so the other half keeps taking packets while the disk syncs.
pub(super) const MAX_UNCOMMITTED_BYTES: usize = BUF_BYTES / 2;
/// Bytes `write_framed` reserves besides the packet's (tag and length).
pub(super) const FRAMING_MAX: usize = 6;

/// Writes `buf[*done..]` to `file`, advancing `done` by what was written,
/// also on error.
pub(super) fn write_from<W: Write>(file: &mut W, buf: &[u8], done: &mut usize) -> io::Result<()> {
    loop {
        if *done >= buf.len() {
            return Ok(());
        }
        match file.write(&buf[*done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Where the packets past the last commit start and end, and how many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Span {
    pub packets: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

impl Span {
    pub fn add(&mut self, ts: i64) {
        self.packets += 1;
        self.first_ts = Some(self.first_ts.map_or(ts, |t| t.min(ts)));
        self.last_ts = Some(self.last_ts.map_or(ts, |t| t.max(ts)));
    }

    /// Both spans (`self` written first).
    pub fn then(self, later: Span) -> Span {
        let min = |a: Option<i64>, b: Option<i64>| a.into_iter().chain(b).min();
        let max = |a: Option<i64>, b: Option<i64>| a.into_iter().chain(b).max();
        Span {
            packets: self.packets + later.packets,
            first_ts: min(self.first_ts, later.first_ts),
            last_ts: max(self.last_ts, later.last_ts),
        }
    }
}

/// A machine with packets in the current file.
#[derive(Clone, Debug, Default)]
pub(super) struct Seen {
    pub name: Option<Arc<str>>,
    /// `entry.packets` after its last packet (which commit covers it).
    pub last_packet: u64,
}

/// The file being written.
#[derive(Debug)]
pub(super) struct Current {
    pub path: PathBuf,
    pub file: File,
    pub start: SystemTime,
    /// `start` plus the age limit (None past the calendar's end): checked
    /// per packet, so the sum is kept, not the age taken each time.
    pub old_at: Option<SystemTime>,
    /// Framed packets past `committed_len`, kept until a commit makes them
    /// durable: after a failed write or fsync they are written again, since
    /// the kernel may have dropped dirty pages it could not write back.
    pub pending: Vec<u8>,
    /// Bytes of `pending` handed to the OS.
    pub flushed: usize,
    /// A write or fsync failed since the last commit: the file is cut back
    /// to `committed_len` and `pending` written again before committing.
    pub suspect: bool,
    /// Packets written after the preamble.
    pub data_packets: u64,
    pub machines: BTreeMap<u32, Seen>,
    pub entry: IndexEntry,
    /// Length named by the last journal record.
    pub committed_len: u64,
    /// `entry.packets` at that length.
    pub committed_packets: u64,
    /// The packets in `pending` (the commit in flight has its own).
    pub pending_span: Span,
    pub sidecar: Option<File>,
}

impl Current {
    /// Whether `need` more bytes ask for a commit first: the pending bytes
    /// are over half their room, or would not fit.
    pub fn needs_commit(&self, need: usize) -> bool {
        self.pending.len() >= MAX_UNCOMMITTED_BYTES || self.pending.len() + need > BUF_BYTES
    }

    /// Whether enough is pending to hand it to the OS.
    pub fn needs_flush(&self) -> bool {
        self.pending.len() - self.flushed >= FLUSH_BYTES
    }

    /// Frames `packet` into the pending bytes and notes it in the file's
    /// index line; the bytes it took.
    #[inline]
    pub fn append(&mut self, packet: &OutPacket, need: usize) -> u64 {
        if self.pending.capacity() - self.pending.len() < need {
            // Exactly the room, not double what is there.
            self.pending
                .reserve_exact(BUF_BYTES.max(self.pending.len() + need) - self.pending.len());
        }
        let before = self.pending.len();
        // The packet's only copy on its way to the file.
        packet.bytes.write_framed(&mut self.pending);
        let len = (self.pending.len() - before) as u64;
        let e = &mut self.entry;
        e.bytes += len;
        e.packets += 1;
        e.first_ts = Some(e.first_ts.map_or(packet.ts, |t| t.min(packet.ts)));
        e.last_ts = Some(e.last_ts.map_or(packet.ts, |t| t.max(packet.ts)));
        self.pending_span.add(packet.ts);
        self.data_packets += 1;
        let seen = self.machines.entry(packet.machine_raw_id).or_default();
        seen.last_packet = self.entry.packets;
        if seen.name.is_none() {
            seen.name.clone_from(&packet.machine_name);
        }
        len
    }

    /// Hands the pending bytes to the OS; after a failure since the last
    /// commit, first cuts the file back to its committed length and writes
    /// everything past it again (whether it did is returned). The commit in
    /// flight must not cover bytes about to be cut: the caller waits for
    /// it first when the file is suspect.
    pub fn flush(&mut self, writeback: Option<&mut Writeback>) -> io::Result<bool> {
        let mut rewrote = false;
        if self.suspect {
            let len = self.committed_len;
            self.file
                .set_len(len)
                .and_then(|()| self.file.seek(SeekFrom::Start(len)))
                .map_err(at(&self.path, "truncate"))?;
            self.flushed = 0;
            self.suspect = false;
            rewrote = true;
        }
        let before = self.flushed;
        let written = write_from(&mut self.file, &self.pending, &mut self.flushed);
        if written.is_err() {
            self.suspect = true;
        }
        if let Some(writeback) = writeback {
            writeback.wrote((self.flushed - before) as u64);
        }
        written.map_err(at(&self.path, "write"))?;
        Ok(rewrote)
    }

    /// fdatasync of the file (if `fsync`); a failure makes the bytes past
    /// the last commit suspect.
    pub fn sync_data(&mut self, fsync: bool) -> io::Result<()> {
        if fsync && let Err(e) = self.file.sync_data() {
            self.suspect = true;
            return Err(at(&self.path, "fsync")(e));
        }
        Ok(())
    }

    /// The file's index line as it stands, its machines included.
    pub fn index_entry(&self) -> IndexEntry {
        IndexEntry {
            machines: self.index_machines(),
            ..self.entry.clone()
        }
    }

    /// Marks the index line complete, with its machines.
    pub fn finish_entry(&mut self) {
        self.entry.complete = true;
        self.entry.machines = self.index_machines();
    }

    fn index_machines(&self) -> Vec<IndexMachine> {
        self.machines
            .iter()
            .map(|(&raw_id, seen)| IndexMachine {
                raw_id,
                name: seen.name.as_deref().map(str::to_owned),
            })
            .collect()
    }

    /// Appends raw probe samples, one a line, to the file's `.sync.jsonl`
    /// sidecar in `dir`, created with the first of them.
    pub fn write_samples(
        &mut self,
        dir: &Path,
        samples: &[ProbeSample],
        links: &Links,
    ) -> io::Result<()> {
        let mut lines = Vec::new();
        for s in samples {
            sidecar::encode_line(s, &mut lines).map_err(io::Error::other)?;
        }
        let path = self.sidecar_path(dir);
        if self.sidecar.is_none() {
            // New with its file: created, never opened through a link (a
            // link, or a file not ours, at the name: this file's samples
            // are not written).
            let f = files::create_new(&path, true).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists
                    && files::look(&path).is_ok_and(|f| f == Found::Link)
                {
                    links.met(
                        &path,
                        false,
                        "the samples of this file are not written (the next file has its own)",
                    );
                    return files::LinkRefused::error(&path);
                }
                at(&path, "create")(e)
            })?;
            self.sidecar = Some(f);
        }
        match &mut self.sidecar {
            Some(f) => f.write_all(&lines).map_err(at(&path, "write")),
            None => Ok(()),
        }
    }

    fn sidecar_path(&self, dir: &Path) -> PathBuf {
        dir.join(sidecar_name(&self.entry.name))
    }
}
