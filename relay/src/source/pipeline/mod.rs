//! The byte -> packet path shared by file, unix and stdin sources (sans-IO).
//!
//! Trace-framed bytes go in, in chunks of any size; out come batches of
//! packets with compressed bundles expanded, producer-written trusted
//! fields stripped and the relay sequence id stamped. A producer's sequence
//! is the field-10 value it carries (as a Perfetto service writes into a
//! file), or none; each distinct value of one stream gets its own relay
//! sequence, and a new stream (connection, file restart) gets new ones.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tracesync_protocol::reader::{ReadError, TraceReader};
use tracesync_protocol::relay::MAX_FRAME_BYTES;
use tracesync_protocol::scan::{self, Stamp};

use super::SourceStats;
use super::triggers::{MAX_PER_BATCH, PacketTrigger, packet_trigger};
use crate::sequences::SequenceAllocator;

/// Most producer sequences one stream may use; packets of further ones are
/// dropped and counted (bounded memory against a hostile producer).
pub const MAX_SEQUENCES_PER_STREAM: usize = 65_536;

/// Largest expanded bundle (and record) a stream may carry.
pub const MAX_RECORD_BYTES: usize = 16 << 20;

/// Largest packet passed on: it must fit one uplink frame with room to
/// spare; larger ones are dropped and counted in `oversized_packets`.
pub const MAX_PACKET_BYTES: usize = MAX_FRAME_BYTES - (64 << 10);

/// A batch is closed at this many packets ...
pub const BATCH_MAX_PACKETS: usize = 4096;
/// ... or this many bytes, except that a compressed bundle is never split
/// (a cursor can only point between records).
pub const BATCH_MAX_BYTES: usize = 512 << 10;

/// Packets of one stream, and the stream offset just past the last record
/// they complete.
#[derive(Debug, Default, PartialEq)]
pub struct PipelineBatch {
    pub packets: Vec<Bytes>,
    /// Offset (in the stream, counting from the pipeline's base) at which
    /// reading resumes without losing or repeating a packet.
    pub end_offset: u64,
    /// Perfetto triggers among the packets (at most
    /// [`MAX_PER_BATCH`]).
    pub triggers: Vec<PacketTrigger>,
}

/// The stream cannot be read on: framing is broken at `offset`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {message}")]
pub struct PipelineError {
    pub offset: u64,
    pub message: String,
}

/// One stream's reader, sequence map and stamping buffers.
#[derive(Debug)]
pub struct Pipeline {
    reader: TraceReader,
    /// Stream offset of the reader's first byte.
    base: u64,
    allocator: Arc<SequenceAllocator>,
    /// Producer field-10 value (0 = none written) -> relay sequence id.
    sequences: HashMap<u32, u32>,
    /// End of the last record whose packets were all handed out.
    committed: u64,
}

impl Pipeline {
    /// A pipeline for a stream whose first byte is at offset `base`.
    pub fn new(allocator: Arc<SequenceAllocator>, base: u64) -> Self {
        Self {
            reader: TraceReader::with_max_packet_size(MAX_RECORD_BYTES),
            base,
            allocator,
            sequences: HashMap::new(),
            committed: base,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.reader.push(chunk);
    }

    /// Stream offset of the end of input pushed so far.
    pub fn input_end(&self) -> u64 {
        self.base + self.reader.position() + self.reader.buffered() as u64
    }

    /// Offset just past the last complete record handed out.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Relay sequences this stream uses so far.
    pub fn sequence_count(&self) -> usize {
        self.sequences.len()
    }

    /// The next batch of ready packets; an empty batch means more input is
    /// needed. Malformed packets (framing intact) are dropped and counted.
    /// A framing error comes after the packets before it were handed out.
    pub fn next_batch(&mut self, stats: &SourceStats) -> Result<PipelineBatch, PipelineError> {
        let mut body = Vec::new();
        let mut ends = Vec::new();
        let mut triggers = Vec::new();
        loop {
            let full = ends.len() >= BATCH_MAX_PACKETS || body.len() >= BATCH_MAX_BYTES;
            if full && !self.reader.bundle_pending() {
                break;
            }
            let packet = match self.reader.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(_) if !ends.is_empty() => break, // the error is sticky: next call
                Err(e) => return Err(self.error(e)),
            };
            if let Some(end) = emit(
                &mut self.sequences,
                &self.allocator,
                packet.bytes,
                stats,
                &mut body,
                Some(&mut triggers),
            ) {
                ends.push(end);
            }
            if !self.reader.bundle_pending() {
                // The record holding this packet is fully handed out.
                self.committed = self.base + self.reader.position();
            }
        }
        let packets = split_at_ends(body, ends);
        Ok(PipelineBatch {
            packets,
            end_offset: self.committed,
            triggers,
        })
    }

    /// Stamps replayed state packets ([`ReplayState::into_replay`]) as the
    /// stream's first packets: they take the relay sequences the resumed
    /// packets of their producer sequences will use. The batch ends where
    /// the stream resumes (nothing is consumed).
    pub fn replay(&mut self, replay: &Replay, stats: &SourceStats) -> PipelineBatch {
        for &producer in &replay.sequences {
            if self.sequences.len() >= MAX_SEQUENCES_PER_STREAM {
                break;
            }
            if !self.sequences.contains_key(&producer) {
                let id = self.allocator.allocate();
                self.sequences.insert(producer, id);
            }
        }
        let mut body = Vec::new();
        let mut ends = Vec::new();
        for p in &replay.packets {
            // Replayed state: never a trigger to fire again.
            let end = emit(
                &mut self.sequences,
                &self.allocator,
                p,
                stats,
                &mut body,
                None,
            );
            if let Some(end) = end {
                ends.push(end);
            }
        }
        let packets = split_at_ends(body, ends);
        PipelineBatch {
            packets,
            end_offset: self.committed,
            triggers: Vec::new(),
        }
    }

    /// Declares the end of the stream: an error if it ends inside a record.
    pub fn finish(&mut self) -> Result<(), PipelineError> {
        self.reader.finish().map_err(|e| self.error(e))
    }

    fn error(&self, e: ReadError) -> PipelineError {
        PipelineError {
            offset: self.base + e.offset,
            message: e.kind.to_string(),
        }
    }
}

mod replay;
pub use replay::{REPLAY_MAX_SEQUENCE_BYTES, REPLAY_MAX_TOTAL_BYTES, Replay, ReplayState};

/// The packets stamped back to back into `body`, ending at `ends`: slices
/// of one buffer, no copy per packet.
fn split_at_ends(body: Vec<u8>, ends: Vec<usize>) -> Vec<Bytes> {
    let body = Bytes::from(body);
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let p = body.slice(start..end);
            start = end;
            p
        })
        .collect()
}

/// Stamps one packet onto `body`; its end, or None if it was dropped. A
/// Perfetto trigger among them is noted in `triggers`.
fn emit(
    sequences: &mut HashMap<u32, u32>,
    allocator: &SequenceAllocator,
    packet: &[u8],
    stats: &SourceStats,
    body: &mut Vec<u8>,
    triggers: Option<&mut Vec<PacketTrigger>>,
) -> Option<usize> {
    if packet.len() > MAX_PACKET_BYTES {
        stats.oversized_packets.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let Ok(fields) = scan::scan_packet(packet) else {
        stats.malformed_packets.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let producer = fields.trusted_packet_sequence_id.unwrap_or(0);
    let relay = match sequences.get(&producer) {
        Some(&id) => id,
        None if sequences.len() >= MAX_SEQUENCES_PER_STREAM => {
            stats.sequence_overflow.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        None => {
            let id = allocator.allocate();
            sequences.insert(producer, id);
            id
        }
    };
    let stamp = Stamp {
        trusted_packet_sequence_id: Some(relay),
        strip_trusted: true,
        ..Stamp::default()
    };
    if let (Some(found), Some(trigger)) = (triggers, packet_trigger(packet, &fields)) {
        if found.len() < MAX_PER_BATCH {
            found.push(trigger);
        } else {
            stats.triggers_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
    let before = body.len();
    // The scan succeeded, so stamping cannot fail; drop the packet if it does.
    if scan::stamp_scanned(packet, &fields, &stamp, body).is_err() {
        body.truncate(before);
        stats.malformed_packets.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(body.len())
}

#[cfg(test)]
mod tests;
