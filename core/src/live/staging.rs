//! The ingest scratch: the staging of an ingested batch's resolved
//! packets, and how they are queued for the watermark: as slices of their
//! frame when those cover it, else out of one staging buffer per batch (see
//! `ingest.rs`).

use std::ops::Range;

use bytes::Bytes;

use super::packet::{Role, Stamped};
use super::queued::Queued;

/// A staged batch buffer with more unused room than 1/this of its length
/// is shrunk before its packets are queued; a frame whose sliced packets
/// would count less than its length by more than 1/this of theirs is
/// copied instead.
const SLACK_DIVISOR: usize = 16;

/// Staging buffer room kept between batches.
const STAGED_BUF_KEEP: usize = 64 << 10;

/// Staged packets whose room is kept between batches.
const STAGED_KEEP: usize = 16_384;

/// What ingest reuses from one batch to the next: the staging buffer, and
/// whether the batch being ingested hit `max_sequences_per_relay`.
#[derive(Debug, Default)]
pub(super) struct IngestScratch {
    /// Reused staging buffer of the batch being ingested (taken out while
    /// it is in use).
    staged: Staged,
    sequence_limit_hit: bool,
}

impl IngestScratch {
    /// The staging buffer, to give back with [`Self::put_staged`].
    pub fn take_staged(&mut self) -> Staged {
        std::mem::take(&mut self.staged)
    }

    pub fn put_staged(&mut self, staged: Staged) {
        self.staged = staged;
    }

    /// A packet of the batch would have opened a sequence past the limit.
    pub fn hit_sequence_limit(&mut self) {
        self.sequence_limit_hit = true;
    }

    /// Whether the batch hit the sequence limit (cleared for the next).
    #[must_use]
    pub fn take_sequence_limit_hit(&mut self) -> bool {
        std::mem::take(&mut self.sequence_limit_hit)
    }
}

/// Resolved packets of the batch being ingested: stamped into `buf` (with
/// their range), or stamped as slices of their frame (no range).
#[derive(Debug, Default)]
pub(super) struct Staged {
    buf: Vec<u8>,
    packets: Vec<(Queued, Option<Range<usize>>)>,
    /// Stamped length of the packets staged as slices.
    sliced: usize,
    /// About the bytes the rest of the batch would take in `buf`.
    left: usize,
}

impl Staged {
    /// The rest of the batch would take about `bytes` in the buffer.
    pub fn expect(&mut self, bytes: usize) {
        self.left = bytes;
    }

    /// A packet expected to take about `bytes` was ingested.
    pub fn took(&mut self, bytes: usize) {
        self.left = self.left.saturating_sub(bytes);
    }

    /// Stages a packet stamped as a slice of its frame, its bytes set by
    /// `set` where they are staged.
    pub fn push_slice(&mut self, queued: Queued, set: impl FnOnce(&mut Stamped)) {
        self.packets.push((queued, None));
        if let Some((staged, _)) = self.packets.last_mut() {
            set(&mut staged.bytes);
            self.sliced += staged.bytes.len();
        }
    }

    /// Stamps a packet into the buffer with `write`: its range there, or
    /// `write`'s error (nothing written). `data_room`: a data packet's
    /// stamped length at most; with less room than that, room for the
    /// rest of the batch is reserved at once (its other packets, written
    /// alike, likely need the buffer too), not a growing buffer copied as
    /// it grows.
    pub fn stamp<E>(
        &mut self,
        data_room: Option<usize>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Range<usize>, E> {
        if let Some(room) = data_room
            && self.buf.capacity() - self.buf.len() < room
        {
            self.buf.reserve(self.left.max(room));
        }
        let start = self.buf.len();
        if let Err(e) = write(&mut self.buf) {
            self.buf.truncate(start);
            return Err(e);
        }
        Ok(start..self.buf.len())
    }

    /// Stages a packet stamped into the buffer at `range`.
    pub fn push_stamped(&mut self, queued: Queued, range: Range<usize>) {
        self.packets.push((queued, Some(range)));
    }

    /// So many packets are staged that they should be queued now (a retry
    /// of a long pending queue is queued in slices, so it is not staged,
    /// and its room kept, all at once).
    pub fn is_full(&self) -> bool {
        self.packets.len() >= STAGED_KEEP
    }

    /// Queues the staged packets with `push`. `frame_len`: the length of
    /// the frame the sliced ones are slices of (None: each is a slice of a
    /// copy of its own, a pending packet's).
    pub fn queue(&mut self, frame_len: Option<usize>, mut push: impl FnMut(Queued)) {
        let sliced = std::mem::take(&mut self.sliced);
        if self.packets.is_empty() {
            self.buf.clear();
            return;
        }
        if let Some(frame_len) = frame_len
            && frame_len.saturating_sub(sliced) > sliced / SLACK_DIVISOR
        {
            // Too little of the frame queued (the rest dropped, pending or
            // copied): copy the slices too, so the frame is freed now.
            let heads: usize = self
                .packets
                .iter()
                .filter(|(_, r)| r.is_none())
                .map(|(q, _)| q.bytes.head().len())
                .sum();
            self.buf.reserve(heads);
            for (queued, range) in &mut self.packets {
                if range.is_none() {
                    let start = self.buf.len();
                    self.buf.extend_from_slice(queued.bytes.head());
                    *range = Some(start..self.buf.len());
                }
            }
        }
        // Whether a packet keeps a slice of the buffer: if none does, the
        // buffer is kept for the next batch (the others copy their bytes
        // out of it); else it is shared by the slices, with no unused room
        // behind them (packets of the batch that went pending or were
        // dropped, growth slack): the queue counts only their bytes.
        let shared = self
            .packets
            .iter()
            .any(|(q, r)| r.is_some() && q.role == Role::Data)
            .then(|| {
                let mut buf = std::mem::take(&mut self.buf);
                if buf.capacity() - buf.len() > buf.len() / SLACK_DIVISOR {
                    buf.shrink_to_fit();
                }
                Bytes::from(buf)
            });
        // One loop, so `push` is called in one place (and inlined).
        for (mut queued, range) in self.packets.drain(..) {
            if let Some(range) = range {
                let head = match &shared {
                    Some(buf) if queued.role == Role::Data => buf.slice(range),
                    // Kept for file preambles and tail subscribers long
                    // after the batch is written: an own copy, so it does
                    // not pin the batch's whole buffer.
                    Some(buf) => Bytes::copy_from_slice(&buf[range]),
                    None => Bytes::copy_from_slice(&self.buf[range]),
                };
                // The tail of a slice copied above, else none.
                queued.bytes = queued.bytes.with_head(head);
            }
            push(queued);
        }
        if shared.is_none() {
            self.buf.clear();
            if self.buf.capacity() > STAGED_BUF_KEEP {
                self.buf = Vec::new();
            }
        }
        // A retry of a long pending queue stages it all at once: that
        // burst's room is not kept for the next batch.
        if self.packets.capacity() > STAGED_KEEP {
            self.packets.shrink_to(STAGED_KEEP);
        }
    }
}
