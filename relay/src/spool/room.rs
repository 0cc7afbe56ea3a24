//! The spool's disk budget: rolling segments, deleting the acked ones,
//! waiting or dropping the oldest when full, and the lazy sync of the
//! segment closed last.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::record::{self, RecordKind, SEGMENT_MAGIC};
use super::segments::{SegmentFile, segment_path};
use super::types::io_error;
use super::{Spool, SpoolError, WhenFull, sequence_of};

impl Spool {
    /// Syncs the segment closed last if it still holds unacked batches
    /// (an acked one is deleted by the next reclaim: its bytes need never
    /// reach the disk).
    pub(super) fn sync_rolled(&mut self) -> Result<(), SpoolError> {
        let Some((number, file)) = self.rolled.take() else {
            return Ok(());
        };
        if self.batches.front().is_some_and(|b| b.at.segment <= number) {
            let path = segment_path(&self.config.dir, number);
            if let Err(error) = file.sync_data() {
                self.rolled = Some((number, file));
                return Err(io_error(&path, "sync")(error));
            }
            self.stats.segments_synced += 1;
        }
        Ok(())
    }

    /// Makes room for `len` more bytes on disk: false if the block policy
    /// says wait. `force` writes regardless (shutdown).
    pub(super) fn make_room(&mut self, len: u64, force: bool) -> Result<bool, SpoolError> {
        if self.active_has_batches
            && self
                .segments
                .back()
                .is_some_and(|s| s.bytes + len > self.config.segment_bytes())
        {
            self.roll()?;
        }
        loop {
            self.reclaim()?;
            if force || self.disk_bytes + len <= self.config.disk_bytes {
                return Ok(true);
            }
            let active_unacked = self
                .batches
                .back()
                .zip(self.segments.back())
                .is_some_and(|(batch, segment)| batch.at.segment == segment.number);
            if self.active_has_batches && !active_unacked {
                // Only acked batches in the active segment: start a new one
                // so the reclaim frees it.
                self.roll()?;
                continue;
            }
            match self.config.when_full {
                WhenFull::Block => return Ok(self.batches.is_empty()),
                WhenFull::DropOldest if self.segments.len() > 1 => self.drop_oldest_segment(),
                WhenFull::DropOldest if self.active_has_batches => self.roll()?,
                // A limit below one record: write it anyway rather than stall.
                WhenFull::DropOldest => return Ok(true),
            }
        }
    }

    /// Deletes the oldest segments that hold no unacked batch.
    pub(super) fn reclaim(&mut self) -> Result<(), SpoolError> {
        while self.segments.len() > 1 {
            let Some(oldest) = self.segments.front() else {
                break;
            };
            if self
                .batches
                .front()
                .is_some_and(|b| b.at.segment <= oldest.number)
            {
                break;
            }
            if self
                .rolled
                .as_ref()
                .is_some_and(|(n, _)| *n == oldest.number)
            {
                // Closed before it is deleted: its dirty pages are dropped.
                self.rolled = None;
            }
            fs::remove_file(&oldest.path).map_err(io_error(&oldest.path, "delete"))?;
            self.disk_bytes -= oldest.bytes;
            self.segments.pop_front();
        }
        Ok(())
    }

    /// drop-oldest: gives up the unacked batches of the oldest segment.
    pub(super) fn drop_oldest_segment(&mut self) {
        let Some(number) = self.segments.front().map(|s| s.number) else {
            return;
        };
        while let Some(batch) = self.batches.front() {
            if batch.at.segment != number {
                break;
            }
            let wire = self.load_wire(0).unwrap_or_default();
            let packets = record::wire_packets(&wire).unwrap_or_default();
            self.needs_mark
                .extend(packets.iter().filter_map(|p| sequence_of(p)));
            if let Some(batch) = self.batches.pop_front() {
                self.stats.batches_dropped += 1;
                self.stats.packets_dropped += u64::from(batch.at.packet_count);
                if let Some(cached) = batch.cached {
                    self.cached_bytes -= batch.at.payload_bytes;
                    self.recycle(cached);
                }
            }
        }
        tracing::warn!(
            "spool full: dropped the oldest unacked batches (through seq {}); {} batches dropped so far",
            self.oldest_unacked().saturating_sub(1),
            self.stats.batches_dropped
        );
    }

    /// Closes the active segment and starts a new one with a checkpoint.
    ///
    /// The closed segment is not synced now but when the next one closes,
    /// and only if it still holds unacked batches then: at the rates where
    /// segments roll often, acks have freed it by then and its bytes never
    /// go to the disk (they would double the disk traffic of a host that
    /// also writes the daemon's output). A power loss can so take the
    /// unacked batches of the active segment and of the one before it; a
    /// relay killed or restarted loses nothing (the page cache keeps them).
    pub(super) fn roll(&mut self) -> Result<(), SpoolError> {
        self.sync_rolled()?;
        let number = self.segments.back().map_or(1, |s| s.number + 1);
        let path = segment_path(&self.config.dir, number);
        let mut file = OpenOptions::new()
            .mode(0o600)
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io_error(&path, "create"))?;
        file.write_all(SEGMENT_MAGIC)
            .map_err(io_error(&path, "write"))?;
        let magic_len = SEGMENT_MAGIC.len() as u64;
        self.segments.push_back(SegmentFile {
            number,
            path,
            bytes: magic_len,
        });
        self.disk_bytes += magic_len;
        let closed = std::mem::replace(&mut self.active, file);
        if let Some(segment) = self.segments.iter().rev().nth(1) {
            self.rolled = Some((segment.number, closed));
        }
        self.active_has_batches = false;
        self.append(RecordKind::Checkpoint, &[], &BTreeMap::new())
    }
}
