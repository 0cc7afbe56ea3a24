//! The write path: packets framed into the current file's pending bytes,
//! handed to the OS in flushes, kept until a commit makes them durable; after
//! a failed write or fsync the file is cut back to its committed length and
//! the pending bytes are written again.

use std::io::{self, Seek, SeekFrom, Write};
use std::time::SystemTime;

use tracesync_core::live::{OutPacket, RecoveredStream};

use super::{RollingWriter, at};

/// Buffered output is handed to the OS past this many bytes.
const FLUSH_BYTES: usize = 1 << 20;
/// The room of the pending bytes, taken once and never grown for packets
/// that fit: a packet that would not fit commits first (waiting for the
/// commit in flight if need be). A `Vec` grown by doubling held up to
/// 32 MiB, and the commit in flight as much again; this way the two hold
/// at most twice this.
pub(super) const BUF_BYTES: usize = 16 << 20;
/// Past this many uncommitted bytes a write commits early: half the room,
/// so the other half keeps taking packets while the disk syncs.
const MAX_UNCOMMITTED_BYTES: usize = BUF_BYTES / 2;
/// Bytes `write_framed` reserves besides the packet's (tag and length).
const FRAMING_MAX: usize = 6;

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

impl RollingWriter {
    /// Writes one packet (rotating first if the size or age limit is
    /// reached). On error the packet was not taken and nothing is torn: the
    /// caller may retry it later.
    pub fn write(&mut self, packet: &OutPacket, now: SystemTime) -> io::Result<()> {
        self.last_now = self.last_now.max(now);
        if self.vanished.is_some() {
            // A new file first (else a rotation would start two).
            self.reopen()?;
        }
        let need = packet.bytes.len() + FRAMING_MAX;
        let c = &self.current;
        if c.pending.len() >= MAX_UNCOMMITTED_BYTES || c.pending.len() + need > BUF_BYTES {
            // Bounds the bytes kept for a rewrite: commit early (durable
            // sooner is always allowed; acks still follow the caller's).
            self.commit_early(need)?;
        } else if c.pending.len() - c.flushed >= FLUSH_BYTES {
            self.flush()?;
        }
        if self.should_rotate(now) {
            self.rotate(now)?;
        }
        let c = &mut self.current;
        if c.pending.capacity() - c.pending.len() < need {
            // Exactly the room, not double what is there.
            c.pending
                .reserve_exact(BUF_BYTES.max(c.pending.len() + need) - c.pending.len());
        }
        let before = c.pending.len();
        // The packet's only copy on its way to the file.
        packet.bytes.write_framed(&mut c.pending);
        let len = (c.pending.len() - before) as u64;
        c.entry.bytes += len;
        c.entry.packets += 1;
        c.entry.first_ts = Some(c.entry.first_ts.map_or(packet.ts, |t| t.min(packet.ts)));
        c.entry.last_ts = Some(c.entry.last_ts.map_or(packet.ts, |t| t.max(packet.ts)));
        c.pending_span.add(packet.ts);
        c.data_packets += 1;
        let seen = c.machines.entry(packet.machine_raw_id).or_default();
        seen.last_packet = c.entry.packets;
        if seen.name.is_none() {
            seen.name.clone_from(&packet.machine_name);
        }
        self.stats.packets_written += 1;
        self.stats.bytes_written += len;
        self.preamble.observe_packet(
            packet.role,
            packet.machine_raw_id,
            packet.seq,
            &packet.bytes,
        );
        self.next_out_seq = self.next_out_seq.max(packet.seq.saturating_add(1));
        if let Some(o) = packet.origin {
            let key = (o.relay_instance, o.relay_sequence);
            let s = self.streams.entry(key).or_insert(RecoveredStream {
                out_seq: packet.seq,
                relay_instance: o.relay_instance,
                relay_sequence: o.relay_sequence,
                machine_raw_id: packet.machine_raw_id,
                written_through: o.index,
            });
            s.out_seq = packet.seq;
            s.machine_raw_id = packet.machine_raw_id;
            s.written_through = s.written_through.max(o.index);
            self.changed.insert(key);
        }
        Ok(())
    }

    /// Hands the pending bytes to the OS. After a failure since the last
    /// commit, first cuts the file back to its committed length and writes
    /// everything past it again.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.vanished.is_some() {
            self.reopen()?;
        }
        if self.current.suspect {
            // The commit in flight may cover bytes about to be cut.
            self.wait_in_flight()?;
        }
        let c = &mut self.current;
        if c.suspect {
            let len = c.committed_len;
            c.file
                .set_len(len)
                .and_then(|()| c.file.seek(SeekFrom::Start(len)))
                .map_err(at(&c.path, "truncate"))?;
            c.flushed = 0;
            c.suspect = false;
            self.stats.rewrites += 1;
        }
        let before = c.flushed;
        let written = write_from(&mut c.file, &c.pending, &mut c.flushed);
        if written.is_err() {
            c.suspect = true;
        }
        if let Some(writeback) = &mut self.writeback {
            writeback.wrote((c.flushed - before) as u64);
        }
        written.map_err(at(&c.path, "write"))
    }

    /// Points the background writeback at the current file (none if it
    /// cannot be opened again: the commits sync it all, as without).
    pub(super) fn open_writeback(&mut self) {
        if let Some(writeback) = &mut self.writeback
            && let Err(e) = writeback.open(&self.current.path, &self.current.file)
        {
            tracing::debug!("no early writeback of {}: {e}", self.current.path.display());
        }
    }

    /// fdatasync of the current file (if configured); a failure makes the
    /// bytes past the last commit suspect.
    pub(super) fn sync_current(&mut self) -> io::Result<()> {
        let c = &mut self.current;
        if self.config.fsync
            && let Err(e) = c.file.sync_data()
        {
            c.suspect = true;
            return Err(at(&c.path, "fsync")(e));
        }
        Ok(())
    }
}
