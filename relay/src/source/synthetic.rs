//! `synthetic:RATE[,size=BYTES][,seqs=N]`: the built-in generator.
//!
//! Writes what Perfetto's SDK writes for a few threads: per sequence, a
//! packet that clears the incremental state and carries a slice track's
//! descriptor and interned event names, a counter track's descriptor, then
//! TrackEvent slices (begin/end, interned names) and counter values; the
//! state is cleared again about every 1000 packets of a sequence. TrackEvents
//! carry identity annotations for accuracy and loss checks (docs/format.md,
//! "Synthetic source"): `tracesync_src`, `tracesync_n` (contiguous from 0
//! per source over the packets that carry it, resumed from the cursor) and
//! `tracesync_truth_ns` (ground-truth host BOOTTIME of the timestamp).
//! Every TrackEvent carries them, except with a `size=` below an annotated
//! packet's size (about 115 bytes): then every k-th TrackEvent does, k
//! chosen so packets average about `size` bytes on the wire.
//! Timestamps are relay BOOTTIME with no clock id set (BOOTTIME is
//! Perfetto's default trace clock).

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tracesync_protocol::perfetto::{
    CounterDescriptor, EventName, InternedData, TracePacket, TrackDescriptor, trace_packet,
    track_event,
};
use tracesync_protocol::scan::{
    self, FieldValue, RawField, SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE,
};
use tracesync_protocol::wire::{self, WireType, put_tag, put_varint, put_varint_field};

use super::{Cursor, SourceBatch, SourceContext, SyntheticSpec, send_batch};
use crate::identity::fnv1a64;

/// Annotation names (TrackEvent debug annotations; `debug.<name>` args in
/// the trace processor).
pub const ANNOTATION_SRC: &str = "tracesync_src";
pub const ANNOTATION_N: &str = "tracesync_n";
pub const ANNOTATION_TRUTH: &str = "tracesync_truth_ns";
pub const ANNOTATION_PAD: &str = "tracesync_pad";

/// A sequence's incremental state is cleared again after this many packets.
pub const CLEAR_EVERY: u64 = 1000;

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

/// How often the generator wakes up.
const TICK: Duration = Duration::from_millis(10);

/// Most packets per batch.
const BATCH_MAX_PACKETS: usize = 4096;
/// Most packet bytes per batch (about).
const BATCH_MAX_BYTES: usize = 512 << 10;
/// With a tiny `size=`, at least every this many TrackEvents one carries
/// the identity annotations.
const MAX_IDENTITY_EVERY: u64 = 64;

/// Packets allowed so far at `rate` per second, at most `burst` at once
/// (a stalled spool does not lead to a flood afterwards). Sans-IO.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ns: Option<u64>,
}

impl TokenBucket {
    /// Bursts are capped at 100 ms of packets (at least one).
    pub fn new(rate: f64) -> Self {
        Self {
            rate,
            burst: (rate * 0.1).max(1.0),
            tokens: 0.0,
            last_ns: None,
        }
    }

    /// Whole packets available at `now_ns` (any monotonic clock), taken.
    pub fn take(&mut self, now_ns: u64) -> u64 {
        let elapsed = self.last_ns.map_or(0, |last| now_ns.saturating_sub(last));
        self.last_ns = Some(now_ns);
        self.tokens = (self.tokens + elapsed as f64 * 1e-9 * self.rate).min(self.burst);
        let whole = self.tokens.floor();
        self.tokens -= whole;
        whole as u64
    }
}

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
    src_annotation: Vec<u8>,
    /// The constant pad annotation (empty without `size=`).
    pad_annotation: Vec<u8>,
    /// Every this many TrackEvents one carries the identity (1: all).
    identity_every: u64,
    /// TrackEvents written (for `identity_every`).
    events: u64,
    /// Packets being written: a batch's packets end to end, cut into
    /// `Bytes` slices of one buffer when the batch is done.
    packet: Vec<u8>,
    /// Buffers of recent batches: one whose packets are all dropped (the
    /// spool has written them) is taken back, so the generator writes to
    /// memory that is already mapped.
    recent: std::collections::VecDeque<Bytes>,
    /// Bytes per TrackEvent in the last batch (to reserve for the next).
    bytes_per_event: usize,
}

/// Buffers of recent batches kept for reuse.
const RECENT_BUFFERS: usize = 4;

/// The identity annotations of a synthetic TrackEvent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticIdentity {
    pub src: String,
    pub n: u64,
    pub truth_ns: u64,
}

/// Field numbers of the hand-written TrackEvent packets (Perfetto's).
mod fields {
    pub const PACKET_TIMESTAMP: u32 = 8;
    pub const PACKET_SEQUENCE_ID: u32 = 10;
    pub const PACKET_TRACK_EVENT: u32 = 11;
    pub const PACKET_SEQUENCE_FLAGS: u32 = 13;
    pub const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
    pub const EVENT_TYPE: u32 = 9;
    pub const EVENT_NAME_IID: u32 = 10;
    pub const EVENT_TRACK_UUID: u32 = 11;
    pub const EVENT_COUNTER_VALUE: u32 = 30;
    pub const ANNOTATION_NAME: u32 = 10;
    pub const ANNOTATION_UINT: u32 = 3;
    pub const ANNOTATION_STRING: u32 = 6;
}

/// Appends a DebugAnnotation {name, string_value} as a TrackEvent field.
fn put_string_annotation(out: &mut Vec<u8>, name: &str, value: &str) {
    let mut body = Vec::with_capacity(name.len() + value.len() + 8);
    wire::put_len_field(&mut body, fields::ANNOTATION_NAME, name.as_bytes());
    wire::put_len_field(&mut body, fields::ANNOTATION_STRING, value.as_bytes());
    wire::put_len_field(out, fields::EVENT_DEBUG_ANNOTATIONS, &body);
}

#[inline]
fn tag_len(field: u32) -> usize {
    wire::varint_len(u64::from(field) << 3)
}

/// Body length of a DebugAnnotation {name, uint_value}.
#[inline]
fn uint_annotation_body_len(name: &str, value: u64) -> usize {
    let name_len = tag_len(fields::ANNOTATION_NAME) + wire::varint_len(name.len() as u64);
    name_len + name.len() + tag_len(fields::ANNOTATION_UINT) + wire::varint_len(value)
}

/// Length of a DebugAnnotation {name, uint_value} as a TrackEvent field.
#[inline]
fn uint_annotation_len(name: &str, value: u64) -> usize {
    let body = uint_annotation_body_len(name, value);
    tag_len(fields::EVENT_DEBUG_ANNOTATIONS) + wire::varint_len(body as u64) + body
}

/// Appends a DebugAnnotation {name, uint_value} as a TrackEvent field.
#[inline]
fn put_uint_annotation(out: &mut Vec<u8>, name: &str, value: u64) {
    let body_len = uint_annotation_body_len(name, value);
    put_tag(out, fields::EVENT_DEBUG_ANNOTATIONS, WireType::Len);
    put_varint(out, body_len as u64);
    wire::put_len_field(out, fields::ANNOTATION_NAME, name.as_bytes());
    put_varint_field(out, fields::ANNOTATION_UINT, value);
}

/// One TrackEvent's varying parts.
#[derive(Clone, Copy, Debug)]
struct Event {
    /// Carries the identity (and pad) annotations.
    identity: bool,
    sequence: u32,
    ts: u64,
    n: u64,
    truth: u64,
    kind: track_event::Type,
    track: u64,
    name_iid: Option<u64>,
    counter_value: Option<i64>,
}

impl Generator {
    /// `src` = "<machine name>/<source index>"; `relay_ids` one per
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

    /// Appends one TrackEvent packet to `self.packet`, in one pass: the
    /// TrackEvent's length is computed first, so its bytes go straight in.
    #[inline]
    fn encode(&mut self, e: &Event) {
        let varint_field_len = |field: u32, v: u64| tag_len(field) + wire::varint_len(v);
        let annotations_len = if e.identity {
            self.src_annotation.len()
                + uint_annotation_len(ANNOTATION_N, e.n)
                + uint_annotation_len(ANNOTATION_TRUTH, e.truth)
                + self.pad_annotation.len()
        } else {
            0
        };
        let event_len = annotations_len
            + varint_field_len(fields::EVENT_TYPE, e.kind as u64)
            + e.name_iid
                .map_or(0, |iid| varint_field_len(fields::EVENT_NAME_IID, iid))
            + varint_field_len(fields::EVENT_TRACK_UUID, e.track)
            + e.counter_value.map_or(0, |v| {
                varint_field_len(fields::EVENT_COUNTER_VALUE, v as u64)
            });
        let p = &mut self.packet;
        put_varint_field(p, fields::PACKET_TIMESTAMP, e.ts);
        put_tag(p, fields::PACKET_TRACK_EVENT, WireType::Len);
        put_varint(p, event_len as u64);
        let event_start = p.len();
        if e.identity {
            p.extend_from_slice(&self.src_annotation);
            put_uint_annotation(p, ANNOTATION_N, e.n);
            put_uint_annotation(p, ANNOTATION_TRUTH, e.truth);
            p.extend_from_slice(&self.pad_annotation);
        }
        put_varint_field(p, fields::EVENT_TYPE, e.kind as u64);
        if let Some(iid) = e.name_iid {
            put_varint_field(p, fields::EVENT_NAME_IID, iid);
        }
        put_varint_field(p, fields::EVENT_TRACK_UUID, e.track);
        if let Some(v) = e.counter_value {
            put_varint_field(p, fields::EVENT_COUNTER_VALUE, v as u64);
        }
        debug_assert_eq!(p.len() - event_start, event_len);
        put_varint_field(p, fields::PACKET_SEQUENCE_ID, u64::from(e.sequence));
        let flags = u64::from(SEQ_NEEDS_INCREMENTAL_STATE);
        put_varint_field(p, fields::PACKET_SEQUENCE_FLAGS, flags);
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
                counter: Some(CounterDescriptor {}),
                ..Default::default()
            },
            names(half..EVENT_NAMES.len()),
        ),
    ]
}

/// Reads the identity annotations of a synthetic TrackEvent packet by
/// scanning its bytes (no decoding); None for any other packet.
pub fn read_identity(packet: &[u8]) -> Option<SyntheticIdentity> {
    let event = scan::Fields::new(packet).find_map(|f| match f {
        Ok(RawField {
            number: 11,
            value: FieldValue::Len(b),
            ..
        }) => Some(b),
        _ => None,
    })?;
    let (mut src, mut n, mut truth_ns) = (None, None, None);
    for f in scan::Fields::new(event) {
        let RawField {
            number: 4,
            value: FieldValue::Len(annotation),
            ..
        } = f.ok()?
        else {
            continue;
        };
        let (mut name, mut uint, mut string) = (None, None, None);
        for g in scan::Fields::new(annotation) {
            match g.ok()?.value {
                FieldValue::Len(b) if g.ok()?.number == 10 => name = Some(b),
                FieldValue::Varint(v) if g.ok()?.number == 3 => uint = Some(v),
                FieldValue::Len(b) if g.ok()?.number == 6 => string = Some(b),
                _ => {}
            }
        }
        match name? {
            b"tracesync_src" => src = Some(String::from_utf8_lossy(string?).into_owned()),
            b"tracesync_n" => n = uint,
            b"tracesync_truth_ns" => truth_ns = uint,
            _ => {}
        }
    }
    Some(SyntheticIdentity {
        src: src?,
        n: n?,
        truth_ns: truth_ns?,
    })
}

pub(crate) async fn run(
    spec: SyntheticSpec,
    index: u16,
    ctx: SourceContext,
    resume: Cursor,
    tx: mpsc::Sender<SourceBatch>,
) {
    let next_counter = match resume {
        Cursor::Synthetic { next_counter } => next_counter,
        _ => 0,
    };
    let relay_ids: Vec<u32> = (0..spec.seqs).map(|_| ctx.sequences.allocate()).collect();
    let src = format!("{}/{index}", ctx.machine_name);
    let mut generator = Generator::new(&src, &relay_ids, next_counter, spec.size);
    let approx_size = spec.size.unwrap_or(116).max(32);
    let batch_max = (BATCH_MAX_BYTES / approx_size).clamp(1, BATCH_MAX_PACKETS);
    let mut bucket = TokenBucket::new(spec.rate);
    let origin = Instant::now();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let clock = ctx.clock.clone();
    let truth = move |ts| clock.truth_host_boottime(ts);
    let mut last_ts = ctx.clock.boottime();
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let due = bucket.take(origin.elapsed().as_nanos() as u64) as usize;
        if due == 0 {
            continue;
        }
        let now_ts = ctx.clock.boottime().max(last_ts);
        let span = now_ts - last_ts;
        let mut done = 0;
        while done < due {
            let k = batch_max.min(due - done);
            let from = last_ts + (u128::from(span) * done as u128 / due as u128) as u64;
            let to = last_ts + (u128::from(span) * (done + k) as u128 / due as u128) as u64;
            let mut packets = Vec::with_capacity(k + 2 * relay_ids.len());
            generator.generate(k, from, to, &truth, &mut packets);
            done += k;
            let batch = SourceBatch {
                source: index,
                packets,
                cursor: Cursor::Synthetic {
                    next_counter: generator.next_counter(),
                },
            };
            if !send_batch(&tx, &ctx, batch).await {
                return;
            }
        }
        last_ts = now_ts;
    }
}

#[cfg(test)]
#[path = "synthetic_tests.rs"]
mod tests;
