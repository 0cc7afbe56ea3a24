//! The staging of an ingested batch's resolved packets, and how they are
//! queued for the watermark: as slices of their frame when those cover it,
//! else out of one staging buffer per batch (see `ingest.rs`).

use std::ops::Range;

use bytes::Bytes;

use super::core::LiveCore;
use super::order::{Queued, StreamId};
use super::packet::Role;

/// A staged batch buffer with more unused room than 1/this of its length
/// is shrunk before its packets are queued; a frame whose sliced packets
/// would count less than its length by more than 1/this of theirs is
/// copied instead.
const SLACK_DIVISOR: usize = 16;

/// Staging buffer room kept between batches.
const STAGED_BUF_KEEP: usize = 64 << 10;

/// Staged packets whose room is kept between batches.
pub(super) const STAGED_KEEP: usize = 16_384;

/// Resolved packets of the batch being ingested: stamped into `buf` (with
/// their range), or stamped as slices of their frame (no range).
#[derive(Debug, Default)]
pub(super) struct Staged {
    pub(super) buf: Vec<u8>,
    pub(super) packets: Vec<(StreamId, Queued, Option<Range<usize>>)>,
    /// Stamped length of the packets staged as slices.
    pub(super) sliced: usize,
    /// About the bytes the rest of the batch would take in `buf`.
    pub(super) left: usize,
}

impl LiveCore {
    /// Queues the staged packets. `frame_len`: the length of the frame the
    /// sliced ones are slices of (None: each is a slice of a copy of its
    /// own, a pending packet's).
    pub(super) fn queue_staged(&mut self, staged: &mut Staged, frame_len: Option<usize>) {
        let sliced = std::mem::take(&mut staged.sliced);
        if staged.packets.is_empty() {
            staged.buf.clear();
            return;
        }
        if let Some(frame_len) = frame_len
            && frame_len.saturating_sub(sliced) > sliced / SLACK_DIVISOR
        {
            // Too little of the frame queued (the rest dropped, pending or
            // copied): copy the slices too, so the frame is freed now.
            let heads: usize = staged
                .packets
                .iter()
                .filter(|(_, _, r)| r.is_none())
                .map(|(_, q, _)| q.packet.bytes.head().len())
                .sum();
            staged.buf.reserve(heads);
            for (_, queued, range) in &mut staged.packets {
                if range.is_none() {
                    let start = staged.buf.len();
                    staged.buf.extend_from_slice(queued.packet.bytes.head());
                    *range = Some(start..staged.buf.len());
                }
            }
        }
        if staged
            .packets
            .iter()
            .all(|(_, q, r)| r.is_none() || q.packet.role != Role::Data)
        {
            // No packet keeps a slice of the buffer: it is kept for the
            // next batch.
            for (stream, mut queued, range) in staged.packets.drain(..) {
                if let Some(range) = range {
                    let head = Bytes::copy_from_slice(&staged.buf[range]);
                    queued.packet.bytes = queued.packet.bytes.with_head(head);
                }
                self.order.push(stream, queued);
            }
            staged.buf.clear();
            if staged.buf.capacity() > STAGED_BUF_KEEP {
                staged.buf = Vec::new();
            }
        } else {
            self.queue_from_buffer(staged);
        }
        // A retry of a long pending queue stages it all at once: that
        // burst's room is not kept for the next batch.
        if staged.packets.capacity() > STAGED_KEEP {
            staged.packets.shrink_to(STAGED_KEEP);
        }
    }

    /// Queues the staged packets, those in the staging buffer as slices of
    /// it (data) or copies (the roles kept for preambles).
    fn queue_from_buffer(&mut self, staged: &mut Staged) {
        let mut buf = std::mem::take(&mut staged.buf);
        // The queued slices keep the whole allocation alive, and the queue
        // counts only their bytes: no unused room behind them (packets of
        // the batch that went pending or were dropped, growth slack).
        if buf.capacity() - buf.len() > buf.len() / SLACK_DIVISOR {
            buf.shrink_to_fit();
        }
        let buf = Bytes::from(buf);
        for (stream, mut queued, range) in staged.packets.drain(..) {
            if let Some(range) = range {
                let head = if queued.packet.role == Role::Data {
                    buf.slice(range)
                } else {
                    // Kept for file preambles and tail subscribers long
                    // after the batch is written: an own copy, so it does
                    // not pin the batch's whole buffer.
                    Bytes::copy_from_slice(&buf[range])
                };
                // The tail of a slice copied above, else none.
                queued.packet.bytes = queued.packet.bytes.with_head(head);
            }
            self.order.push(stream, queued);
        }
    }
}
