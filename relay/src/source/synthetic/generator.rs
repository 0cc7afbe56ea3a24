//! [`Generator`]: the synthetic sequences and what they write, packet by
//! packet: descriptor packets when a sequence's state is (re)started, then
//! a begin / counter / end cycle of TrackEvents, some carrying the
//! identity annotations.

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::perfetto::{
    CounterDescriptor, EventName, InternedData, TracePacket, TrackDescriptor, trace_packet,
    track_event,
};
use tracesync_protocol::scan::{SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE};

use super::encode::{Constant, Event, encode_event, put_string_annotation};
use super::{ANNOTATION_PAD, ANNOTATION_SRC, CLEAR_EVERY};
use crate::identity::fnv1a64;

/// Slice names, interned with iids 1..=8 on every sequence.
const EVENT_NAMES: [&str; 8] = [
    "compute",
    "io_wait",
    "render_frame",
    "gc",
    "rpc_call",
    "parse",
    "encode",
    "flush",
];

/// With a tiny `size=`, at least every this many TrackEvents one carries
/// the identity annotations.
pub(super) const MAX_IDENTITY_EVERY: u64 = 64;

/// One synthetic sequence.
#[derive(Clone, Debug)]
struct Sequence {
    relay_id: u32,
    name: String,
    slice_track: u64,
    counter_track: u64,
    /// Position in the begin / counter / end cycle.
    step: u64,
    /// Packets since the last clear; None before the first.
    since_clear: Option<u64>,
}

/// The generator's state (sans-IO): sequences, the next counter, and
/// reused encoding buffers.
///
/// The TrackEvent packets (the hot path) are written field by field with
/// the protocol's wire helpers, several times faster than prost's encoder;
/// the tests decode them with prost. Descriptor packets, rare, are built
/// with prost.
#[derive(Debug)]
pub struct Generator {
    sequences: Vec<Sequence>,
    next: usize,
    counter: u64,
    /// The constant `tracesync_src` annotation, as a TrackEvent field.
    pub(super) src_annotation: Vec<u8>,
    /// The constant pad annotation (empty without `size=`).
    pub(super) pad_annotation: Vec<u8>,
    /// Every this many TrackEvents one carries the identity (1: all).
    identity_every: u64,
    /// TrackEvents written (for `identity_every`).
    events: u64,
    /// Packets being written: a batch's packets end to end, cut into
    /// `Bytes` slices of one buffer when the batch is done.
    pub(super) packet: Vec<u8>,
    /// Buffers of recent batches: one whose packets are all dropped (the
    /// spool has written them) is taken back, so the generator writes to
    /// memory that is already mapped.
    recent: std::collections::VecDeque<Bytes>,
    /// Bytes per TrackEvent in the last batch (to reserve for the next).
    bytes_per_event: usize,
}

/// Buffers of recent batches kept for reuse.
const RECENT_BUFFERS: usize = 4;

impl Generator {
    /// `src` = `"<machine name>/<source index>"`; `relay_ids` one per
    /// sequence; `next_counter` the first `tracesync_n`.
    pub fn new(src: &str, relay_ids: &[u32], next_counter: u64, size: Option<usize>) -> Self {
        let sequences = relay_ids
            .iter()
            .enumerate()
            .map(|(k, &relay_id)| Sequence {
                relay_id,
                name: format!("{src} seq {k}"),
                slice_track: fnv1a64(format!("tracesync/{src}/{k}/slices").as_bytes()),
                counter_track: fnv1a64(format!("tracesync/{src}/{k}/load").as_bytes()),
                step: 0,
                since_clear: None,
            })
            .collect();
        let mut src_annotation = Vec::new();
        put_string_annotation(&mut src_annotation, ANNOTATION_SRC, src);
        let mut generator = Self {
            sequences,
            next: 0,
            counter: next_counter,
            src_annotation,
            pad_annotation: Vec::new(),
            identity_every: 1,
            events: 0,
            packet: Vec::new(),
            recent: std::collections::VecDeque::new(),
            bytes_per_event: 128,
        };
        if let Some(size) = size {
            generator.pad_to(size);
        }
        generator
    }

    /// Appends one TrackEvent packet to `self.packet`.
    #[inline]
    fn encode(&mut self, e: &Event) {
        let constant = Constant {
            src_annotation: &self.src_annotation,
            pad_annotation: &self.pad_annotation,
        };
        encode_event(&mut self.packet, e, constant);
    }

    /// The `tracesync_n` of the next TrackEvent.
    pub fn next_counter(&self) -> u64 {
        self.counter
    }

    /// Sets the identity spacing and the pad annotation so that packets
    /// average about `size` bytes: every TrackEvent annotated (and padded to
    /// `size`) when `size` is at least an annotated packet, else every k-th,
    /// padded so the average comes out at `size`.
    fn pad_to(&mut self, size: usize) {
        // A packet of each kind of the cycle, with values of typical size
        // (a BOOTTIME of a day or so, 7 varint bytes).
        let typical = |g: &mut Self, identity: bool, step: u64| {
            g.packet.clear();
            let (kind, name_iid, counter_value) = match step {
                0 => (track_event::Type::SliceBegin, Some(1), None),
                1 => (track_event::Type::Counter, None, Some(500)),
                _ => (track_event::Type::SliceEnd, None, None),
            };
            g.encode(&Event {
                identity,
                sequence: 1 << 12,
                ts: 1 << 46,
                n: 1 << 30,
                truth: 1 << 46,
                kind,
                track: u64::MAX / 3,
                name_iid,
                counter_value,
            });
            g.packet.len()
        };
        let bare = (0..3).map(|step| typical(self, false, step)).sum::<usize>() / 3;
        let annotated = (0..3).map(|step| typical(self, true, step)).sum::<usize>() / 3;
        let every = if size >= annotated {
            1
        } else if size > bare {
            ((annotated - bare).div_ceil(size - bare) as u64).min(MAX_IDENTITY_EVERY)
        } else {
            MAX_IDENTITY_EVERY
        };
        self.identity_every = every;
        // The annotated packet's size that makes the average `size`.
        let target = bare + every as usize * size.saturating_sub(bare);
        let mut len = 0;
        // Varint lengths make a first guess a byte or two off: refine.
        for _ in 0..4 {
            self.pad_annotation.clear();
            put_string_annotation(&mut self.pad_annotation, ANNOTATION_PAD, &"x".repeat(len));
            let got = (0..3).map(|step| typical(self, true, step)).sum::<usize>() / 3;
            if got == target {
                break;
            }
            len = (len + target).saturating_sub(got);
        }
        if target <= annotated {
            self.pad_annotation.clear(); // an annotated packet is already as large
        }
        self.packet.clear();
    }

    /// Every how many TrackEvents one carries the identity annotations.
    pub fn identity_every(&self) -> u64 {
        self.identity_every
    }

    /// Appends `n` TrackEvents (plus the descriptor packets of any
    /// sequence whose state is cleared) with timestamps spread evenly over
    /// `(from_ts, to_ts]`; `truth` maps a timestamp to host BOOTTIME. The
    /// packets are written end to end into one buffer and handed out as
    /// slices of it (one allocation and no copy per packet).
    pub fn generate(
        &mut self,
        n: usize,
        from_ts: u64,
        to_ts: u64,
        truth: &dyn Fn(u64) -> u64,
        out: &mut Vec<Bytes>,
    ) {
        let span = to_ts.saturating_sub(from_ts);
        let step_of = |i: u64| match span.checked_mul(i) {
            Some(x) => x / n as u64,
            None => (u128::from(span) * u128::from(i) / n as u128) as u64,
        };
        self.packet.clear();
        if let Some(k) = self.recent.iter().position(Bytes::is_unique)
            && let Some(old) = self.recent.remove(k)
            && let Ok(mut old) = old.try_into_mut()
        {
            old.clear();
            self.packet = Vec::from(old);
        }
        self.packet.reserve(n * self.bytes_per_event + 1024);
        let mut ends = Vec::with_capacity(n + 2 * self.sequences.len());
        for i in 0..n as u64 {
            let ts = from_ts + step_of(i + 1);
            let k = self.next;
            self.next = (self.next + 1) % self.sequences.len().max(1);
            let Some(seq) = self.sequences.get_mut(k) else {
                break; // no sequences: nothing to write
            };
            if seq.step % 3 == 0 && seq.since_clear.is_none_or(|c| c >= CLEAR_EVERY) {
                seq.since_clear = Some(0);
                for p in descriptor_packets(seq, ts) {
                    // A Vec grows as needed: encoding cannot fail.
                    let _ = p.encode(&mut self.packet);
                    ends.push(self.packet.len());
                }
            }
            let step = seq.step;
            seq.step += 1;
            seq.since_clear = seq.since_clear.map(|c| c + 1);
            let identity = self.events.is_multiple_of(self.identity_every);
            self.events += 1;
            let counter = self.counter;
            if identity {
                self.counter += 1;
            }
            let mut event = Event {
                identity,
                sequence: seq.relay_id,
                ts,
                n: counter,
                truth: if identity { truth(ts) } else { 0 },
                kind: track_event::Type::SliceEnd,
                track: seq.slice_track,
                name_iid: None,
                counter_value: None,
            };
            match step % 3 {
                0 => {
                    event.kind = track_event::Type::SliceBegin;
                    event.name_iid = Some((step / 3) % EVENT_NAMES.len() as u64 + 1);
                }
                1 => {
                    event.kind = track_event::Type::Counter;
                    event.track = seq.counter_track;
                    event.counter_value = Some((counter.wrapping_mul(37) % 1000) as i64);
                }
                _ => {}
            }
            self.encode(&event);
            ends.push(self.packet.len());
        }
        if ends.is_empty() {
            return;
        }
        self.bytes_per_event = (self.packet.len() / n.max(1)).max(16);
        let buffer = Bytes::from(std::mem::take(&mut self.packet));
        if self.recent.len() >= RECENT_BUFFERS {
            self.recent.pop_front();
        }
        self.recent.push_back(buffer.clone());
        let mut start = 0;
        out.extend(ends.into_iter().map(|end| {
            let packet = buffer.slice(start..end);
            start = end;
            packet
        }));
    }
}

/// The packets that (re)start a sequence's state: the clearing packet with
/// the slice track and half the names, then the counter track with the rest.
fn descriptor_packets(seq: &Sequence, ts: u64) -> [TracePacket; 2] {
    let names = |range: std::ops::Range<usize>| InternedData {
        event_names: range
            .map(|i| EventName {
                iid: Some(i as u64 + 1),
                name: Some(EVENT_NAMES[i].to_owned()),
            })
            .collect(),
    };
    let half = EVENT_NAMES.len() / 2;
    let packet = |flags, descriptor, interned| TracePacket {
        timestamp: Some(ts),
        sequence_flags: Some(flags),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq.relay_id),
        ),
        data: Some(trace_packet::Data::TrackDescriptor(descriptor)),
        interned_data: Some(interned),
        ..Default::default()
    };
    [
        packet(
            SEQ_INCREMENTAL_STATE_CLEARED,
            TrackDescriptor {
                uuid: Some(seq.slice_track),
                name: Some(seq.name.clone()),
                ..Default::default()
            },
            names(0..half),
        ),
        packet(
            SEQ_NEEDS_INCREMENTAL_STATE,
            TrackDescriptor {
                uuid: Some(seq.counter_track),
                name: Some(format!("{} load", seq.name)),
                counter: Some(CounterDescriptor::default()),
                ..Default::default()
            },
            names(half..EVENT_NAMES.len()),
        ),
    ]
}
