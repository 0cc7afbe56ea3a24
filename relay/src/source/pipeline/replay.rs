//! The incremental state a resumed file source replays first (sans-IO,
//! bounded): see [`ReplayState`].

use std::collections::HashMap;

use bytes::Bytes;
use tracesync_protocol::incremental::{IncrementalClocks, reanchor};
use tracesync_protocol::reader::TraceReader;
use tracesync_protocol::scan::{self, field};

use super::{MAX_RECORD_BYTES, MAX_SEQUENCES_PER_STREAM, PipelineError};

/// Incremental state replayed per producer sequence when a stream resumes
/// mid-file: past it the sequence's state is not replayed (counted).
pub const REPLAY_MAX_SEQUENCE_BYTES: usize = 4 << 20;
/// Incremental state replayed over all sequences of one stream.
pub const REPLAY_MAX_TOTAL_BYTES: usize = 64 << 20;

/// TracePacket.track_descriptor: producers re-emit descriptors after each
/// clear, so they belong to the state (as in the daemon's preamble).
const TRACK_DESCRIPTOR: u32 = 60;

/// Top-level fields a replayed state packet keeps: the state, the sequence
/// that scopes it, never an event payload (it was sent before the restart)
/// nor a timestamp (the packet takes its stream's time at the daemon, and
/// needs no clock that the replay itself may define).
fn kept_in_replay(number: u32) -> bool {
    matches!(
        number,
        field::CLOCK_SNAPSHOT
            | field::TRUSTED_PACKET_SEQUENCE_ID
            | field::INTERNED_DATA
            | field::SEQUENCE_FLAGS
            | field::INCREMENTAL_STATE_CLEARED
            | field::TRACE_PACKET_DEFAULTS
            | TRACK_DESCRIPTOR
    )
}

/// The replayable part of a state packet, fields copied byte for byte.
fn strip_for_replay(packet: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(packet.len());
    for f in scan::Fields::new(packet) {
        let f = f.ok()?;
        if kept_in_replay(f.number) {
            out.extend_from_slice(&packet[f.start..f.end]);
        }
    }
    Some(out)
}

/// One producer sequence's incremental state as of some offset.
#[derive(Debug, Default)]
struct SequenceState {
    /// The default timestamp_clock_id (for incremental clocks).
    default_clock: Option<u32>,
    /// Incremental clocks its latest snapshot defines.
    incremental: Option<IncrementalClocks>,
    /// First appearance in the stream: relay sequences are allocated in
    /// this order, so the replay maps them as the first read did.
    first_seen: u64,
    /// The latest ClockSnapshot of the sequence (it may define the
    /// sequence-scoped clocks its packets and defaults name).
    snapshot: Option<Vec<u8>>,
    /// The last clearing packet and every state packet after it.
    packets: Vec<Vec<u8>>,
    bytes: usize,
    /// State past the bounds since the last clear: nothing is replayed
    /// (the trace processor then skips what needs it, and counts it,
    /// until the producer clears again) rather than a partial state.
    overflowed: bool,
}

impl SequenceState {
    fn total(&self) -> usize {
        self.bytes + self.snapshot.as_ref().map_or(0, Vec::len)
    }
}

/// Rebuilds, from a stream's bytes before a resume point, the incremental
/// state each producer sequence has there (sans-IO, bounded): per
/// sequence the latest ClockSnapshot, the last packet that cleared the
/// state and every interned-data / defaults / track-descriptor packet
/// after it, stripped to those fields. Sent ahead of the resumed packets
/// on the same relay sequences, they make the packets after the cursor
/// decodable as in the first read: a resumed relay otherwise starts mid
/// sequence, and Perfetto skips packets that need incremental state until
/// the producer clears it again.
#[derive(Debug)]
pub struct ReplayState {
    reader: TraceReader,
    sequences: HashMap<u32, SequenceState>,
    total_bytes: usize,
    /// Sequences whose state did not fit (not replayed).
    pub overflowed: u64,
}

impl Default for ReplayState {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayState {
    pub fn new() -> Self {
        Self {
            reader: TraceReader::with_max_packet_size(MAX_RECORD_BYTES),
            sequences: HashMap::new(),
            total_bytes: 0,
            overflowed: 0,
        }
    }

    /// Reads the next bytes of the stream (from its start, in order).
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), PipelineError> {
        self.reader.push(chunk);
        loop {
            let packet = match self.reader.next_packet() {
                Ok(Some(p)) => p.bytes.to_vec(),
                Ok(None) => return Ok(()),
                Err(e) => {
                    return Err(PipelineError {
                        offset: e.offset,
                        message: e.kind.to_string(),
                    });
                }
            };
            self.observe(&packet);
        }
    }

    fn observe(&mut self, packet: &[u8]) {
        let Ok(fields) = scan::scan_packet(packet) else {
            return; // dropped by the pipeline too
        };
        let producer = fields.trusted_packet_sequence_id.unwrap_or(0);
        if !self.sequences.contains_key(&producer) {
            if self.sequences.len() >= MAX_SEQUENCES_PER_STREAM {
                return; // its packets are dropped by the pipeline too
            }
            let first_seen = self.sequences.len() as u64;
            self.sequences.insert(
                producer,
                SequenceState {
                    first_seen,
                    ..SequenceState::default()
                },
            );
        }
        if let Some(s) = self.sequences.get_mut(&producer) {
            if let Some(snapshot) = fields.clock_snapshot {
                s.incremental = IncrementalClocks::from_snapshot(snapshot, s.default_clock);
            } else {
                if fields.clears_incremental_state() {
                    s.default_clock = None;
                }
                if let Some(d) = fields.trace_packet_defaults {
                    s.default_clock = scan::defaults_timestamp_clock_id(d)
                        .ok()
                        .flatten()
                        .filter(|&c| c != 0);
                }
                if let Some(inc) = s.incremental.as_mut() {
                    inc.advance(&fields);
                }
            }
        }
        let clears = fields.clears_incremental_state();
        let state_packet = fields.has_interned_data
            || fields.trace_packet_defaults.is_some()
            || fields.data_field == Some(TRACK_DESCRIPTOR);
        if !clears && fields.clock_snapshot.is_none() && !state_packet {
            return;
        }
        let Some(stripped) = strip_for_replay(packet) else {
            return;
        };
        let Some(s) = self.sequences.get_mut(&producer) else {
            return;
        };
        let before = s.total();
        if clears {
            s.packets.clear();
            s.bytes = 0;
            s.overflowed = false;
        } else if fields.clock_snapshot.is_some() {
            let others = self.total_bytes - before;
            let old = s.snapshot.replace(stripped);
            if others + s.total() > REPLAY_MAX_TOTAL_BYTES {
                s.snapshot = old;
                self.overflowed += 1;
            }
            self.total_bytes = others + s.total();
            return;
        } else if s.overflowed {
            return;
        }
        let len = stripped.len();
        let others = self.total_bytes - before;
        if s.total() + len > REPLAY_MAX_SEQUENCE_BYTES
            || others + s.total() + len > REPLAY_MAX_TOTAL_BYTES
        {
            s.overflowed = true;
            s.packets = Vec::new();
            s.bytes = 0;
            self.overflowed += 1;
        } else {
            s.packets.push(stripped);
            s.bytes += len;
        }
        self.total_bytes = others + s.total();
    }

    /// Producer sequences with state to replay.
    pub fn sequences(&self) -> usize {
        self.sequences
            .values()
            .filter(|s| s.snapshot.is_some() || !s.packets.is_empty())
            .count()
    }

    /// What to send first: see [`Replay`].
    pub fn into_replay(self) -> Replay {
        let mut sequences: Vec<(u32, SequenceState)> = self.sequences.into_iter().collect();
        sequences.sort_unstable_by_key(|(_, s)| s.first_seen);
        let mut replay = Replay::default();
        for (producer, s) in sequences {
            replay.sequences.push(producer);
            let snapshot = match (s.snapshot, &s.incremental) {
                (Some(snap), Some(inc)) => Some(reanchor(&snap, inc).unwrap_or(snap)),
                (snap, _) => snap,
            };
            replay.packets.extend(snapshot.map(Bytes::from));
            replay
                .packets
                .extend(s.packets.into_iter().map(Bytes::from));
        }
        replay
    }
}

/// A resumed stream's replayed state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replay {
    /// Producer sequences of the stream before the resume point, in order
    /// of first appearance (stateless ones too): relay sequences are
    /// allocated in this order, as when the stream was first read.
    pub sequences: Vec<u32>,
    /// Sequence by sequence: its latest snapshot, then its state in stream
    /// order (unstamped producer packets).
    pub packets: Vec<Bytes>,
}
