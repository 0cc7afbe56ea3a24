//! The common TrackEvent packets (slice begins and ends, instants,
//! counters, v1 flow events: a type, a track, a name, a category, flows,
//! a legacy event, a counter value and the fast path's encoded
//! annotations) encoded straight into the window's arena from the event's
//! borrowed fields, with no TrackEvent built (no string copied, nothing
//! allocated).
//!
//! Invariant: the bytes are those `framing::frame_annotated` writes for
//! the same TrackEvent, which are prost's: fields in the order of their
//! lowest tag (annotations 4, legacy_event 6 (phase 2, unscoped_id 6,
//! bind_to_enclosing 12), type 9, the name oneof at 10 (its `name` is
//! field 23), track_uuid 11, categories 22, the counter value oneof at 30
//! (its double is field 44), flow_ids 47, terminating flow ids 48, both
//! unpacked fixed64), then the packet's timestamp and sequence.

use prost::encoding::encoded_len_varint;
use tracesync_protocol::perfetto::track_event;

use super::super::JsonStats;
use super::super::event::Id;
use super::super::event::JsonEvent;
use super::super::flows::v1_flow_id;
use super::super::framing::SEQUENCE;
use super::super::window::{KEY_END, KEY_OTHER, Mark, Window, key_complete};
use super::{Converter, NO_NAME, TrackKind, hash_pieces};

/// One TrackEvent of the shapes this module writes.
pub struct Direct<'a> {
    pub kind: Option<i32>,
    pub track: u64,
    pub name: Option<&'a str>,
    pub category: Option<&'a str>,
    /// Encoded DebugAnnotation fields (field 4 of a TrackEvent).
    pub annotations: &'a [u8],
    pub flow: Option<u64>,
    pub terminating_flow: Option<u64>,
    pub legacy: Option<Legacy>,
    pub counter: Option<f64>,
}

/// A TrackEvent's legacy event, as a v1 flow event has it.
#[derive(Clone, Copy)]
pub struct Legacy {
    pub phase: i32,
    pub id: u64,
    pub bind_to_enclosing: Option<bool>,
}

impl Legacy {
    fn encoded_len(&self) -> usize {
        1 + encoded_len_varint(self.phase as i64 as u64)
            + 1
            + encoded_len_varint(self.id)
            + self.bind_to_enclosing.map_or(0, |_| 2)
    }
}

const TYPE: u8 = 0x48;
const TRACK_UUID: u8 = 0x58;
const LEGACY_EVENT: u8 = 0x32;
const LEGACY_PHASE: u8 = 0x10;
const LEGACY_UNSCOPED_ID: u8 = 0x30;
const LEGACY_BIND_TO_ENCLOSING: u8 = 0x60;
const DOUBLE_COUNTER_VALUE: [u8; 2] = [0xe1, 0x02];
const NAME: [u8; 2] = [0xba, 0x01];
const CATEGORY: [u8; 2] = [0xb2, 0x01];
const FLOW_ID: [u8; 2] = [0xf9, 0x02];
const TERMINATING_FLOW_ID: [u8; 2] = [0x81, 0x03];

/// A varint appended to `out` (prost's `encode_varint` goes through its
/// generic buffer trait, a byte at a time, and cost more than the rest).
#[inline]
fn put_varint(v: u64, out: &mut Vec<u8>) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        put_long_varint(v, out);
    }
}

/// [`put_varint`] of a value of two bytes or more.
fn put_long_varint(v: u64, out: &mut Vec<u8>) {
    // All ten bytes' groups at once, every one marked as followed; the
    // last one used is unmarked and those after it cut off (a copy of a
    // fixed size needs no call).
    let n = encoded_len_varint(v);
    let mut spread = 0_u64;
    for i in 0..8 {
        spread |= ((v >> (7 * i)) & 0x7f) << (8 * i);
    }
    let mut buf = [0_u8; 10];
    buf[..8].copy_from_slice(&(spread | 0x8080_8080_8080_8080).to_le_bytes());
    buf[8] = ((v >> 56) as u8 & 0x7f) | 0x80;
    buf[9] = (v >> 63) as u8;
    if let Some(last) = buf.get_mut(n - 1) {
        *last &= 0x7f;
    }
    let len = out.len();
    out.extend_from_slice(&buf);
    out.truncate(len + n);
}

fn len_field(len: usize) -> usize {
    2 + encoded_len_varint(len as u64) + len
}

fn put_str(tag: [u8; 2], s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&tag);
    put_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

impl Direct<'_> {
    fn encoded_len(&self) -> usize {
        self.annotations.len()
            + self.legacy.map_or(0, |l| {
                let len = l.encoded_len();
                1 + encoded_len_varint(len as u64) + len
            })
            // An enum is encoded as its i32 sign-extended to 64 bits.
            + self.kind.map_or(0, |k| 1 + encoded_len_varint(k as i64 as u64))
            + self.name.map_or(0, |n| len_field(n.len()))
            + 1 + encoded_len_varint(self.track)
            + self.category.map_or(0, |c| len_field(c.len()))
            + self.counter.map_or(0, |_| 10)
            + self.flow.map_or(0, |_| 10)
            + self.terminating_flow.map_or(0, |_| 10)
    }

    /// Appends the framed packet at `ts` holding this event.
    pub fn frame(&self, ts: i64, out: &mut Vec<u8>) {
        let event_len = self.encoded_len();
        let packet_len = 1
            + encoded_len_varint(event_len as u64)
            + event_len
            + 1
            + encoded_len_varint(ts as u64)
            + 1
            + encoded_len_varint(u64::from(SEQUENCE));
        out.push(0x0a);
        put_varint(packet_len as u64, out);
        out.push(0x5a);
        put_varint(event_len as u64, out);
        out.extend_from_slice(self.annotations);
        if let Some(legacy) = self.legacy {
            out.push(LEGACY_EVENT);
            put_varint(legacy.encoded_len() as u64, out);
            out.push(LEGACY_PHASE);
            put_varint(legacy.phase as i64 as u64, out);
            out.push(LEGACY_UNSCOPED_ID);
            put_varint(legacy.id, out);
            if let Some(bind) = legacy.bind_to_enclosing {
                out.extend_from_slice(&[LEGACY_BIND_TO_ENCLOSING, u8::from(bind)]);
            }
        }
        if let Some(kind) = self.kind {
            out.push(TYPE);
            put_varint(kind as i64 as u64, out);
        }
        if let Some(name) = self.name {
            put_str(NAME, name, out);
        }
        out.push(TRACK_UUID);
        put_varint(self.track, out);
        if let Some(category) = self.category {
            put_str(CATEGORY, category, out);
        }
        if let Some(value) = self.counter {
            out.extend_from_slice(&DOUBLE_COUNTER_VALUE);
            out.extend_from_slice(&value.to_le_bytes());
        }
        if let Some(flow) = self.flow {
            out.extend_from_slice(&FLOW_ID);
            out.extend_from_slice(&flow.to_le_bytes());
        }
        if let Some(flow) = self.terminating_flow {
            out.extend_from_slice(&TERMINATING_FLOW_ID);
            out.extend_from_slice(&flow.to_le_bytes());
        }
        out.push(0x40);
        put_varint(ts as u64, out);
        out.push(0x50);
        put_varint(u64::from(SEQUENCE), out);
    }
}

const SLICE_BEGIN: i32 = track_event::Type::SliceBegin as i32;
const SLICE_END: i32 = track_event::Type::SliceEnd as i32;
const INSTANT: i32 = track_event::Type::Instant as i32;
const COUNTER: i32 = track_event::Type::Counter as i32;

/// The name a slice of `e` is given.
fn name_of(e: &JsonEvent) -> &str {
    if e.name.is_empty() { NO_NAME } else { &e.name }
}

/// A [`Direct`] event of `kind` on `track` with `e`'s category and the
/// encoded `annotations`, no flows.
fn direct<'a>(
    kind: i32,
    track: u64,
    name: Option<&'a str>,
    e: &'a JsonEvent,
    annotations: &'a [u8],
) -> Direct<'a> {
    Direct {
        kind: Some(kind),
        track,
        name,
        category: (!e.cat.is_empty()).then_some(e.cat.as_str()),
        annotations,
        flow: None,
        terminating_flow: None,
        legacy: None,
        counter: None,
    }
}

impl Converter {
    /// The flow ids of `e`'s `bind_id` on a slice begin: the flow it
    /// starts or continues (`flow_out`), else the flow it ends (`flow_in`).
    pub(super) fn flows(&self, e: &JsonEvent) -> (Option<u64>, Option<u64>) {
        let Some(id) = &e.bind_id else {
            return (None, None);
        };
        // `id_bytes`'s pieces, hashed without making them one.
        let int;
        let pieces: [&[u8]; 2] = match id {
            Id::Str(s) => [b"s", s.as_bytes()],
            Id::Int(n) => {
                int = n.to_le_bytes();
                [b"i", &int]
            }
        };
        let flow = hash_pieces(self.salt, TrackKind::Flow, &[&pieces]);
        if e.flow_out {
            (Some(flow), None)
        } else if e.flow_in {
            (None, Some(flow))
        } else {
            (None, None)
        }
    }

    /// A slice begin with no args to build and no thread time.
    pub(super) fn begin_direct(&mut self, ts: i64, thread: u64, e: &JsonEvent) {
        let (flow, terminating_flow) = self.flows(e);
        let d = Direct {
            flow,
            terminating_flow,
            ..direct(SLICE_BEGIN, thread, Some(name_of(e)), e, &self.annotations)
        };
        self.thread_time.open(thread, e.tts);
        self.window
            .hold_with(ts, KEY_OTHER, Mark::Plain, |arena| d.frame(ts, arena));
    }

    /// A slice end (`E`): encoded straight into the window unless it has
    /// args to build or a thread time to sample. A named end closes only
    /// a slice of its name (and category), as in the trace processor.
    pub(super) fn end_slice(&mut self, ts: i64, thread: u64, e: &JsonEvent, out: &mut Vec<u8>) {
        let closed = self.thread_time.close(thread, e.tts);
        if e.args.is_none() && closed.is_none() {
            let name = (!e.name.is_empty()).then_some(e.name.as_str());
            let d = direct(SLICE_END, thread, name, e, &self.annotations);
            self.window
                .hold_with(ts, KEY_END, Mark::Plain, |arena| d.frame(ts, arena));
            return;
        }
        let mut end = self.event(track_event::Type::SliceEnd, thread, e);
        if e.name.is_empty() {
            end.name_field = None;
        }
        if let Some(tts) = closed {
            self.thread_time.sample(thread, tts, &mut end, out);
        }
        self.hold_event_keyed(ts, KEY_END, end, Mark::Plain);
    }

    /// A complete event with no args to build and no thread time, its
    /// begin and end encoded straight into the window.
    pub(super) fn complete_direct(
        &mut self,
        ts: i64,
        thread: u64,
        e: &JsonEvent,
        stats: &mut JsonStats,
    ) {
        let Some((dur, end_ts)) = e.dur.and_then(|d| {
            (d >= 0)
                .then(|| ts.checked_add(d).map(|end| (d, end)))
                .flatten()
        }) else {
            stats.json_parser_failure += 1;
            return;
        };
        let (flow, terminating_flow) = self.flows(e);
        let begin = Direct {
            flow,
            terminating_flow,
            ..direct(SLICE_BEGIN, thread, Some(name_of(e)), e, &self.annotations)
        };
        let mark = Mark::CompleteBegin { thread, dur };
        let seq = self
            .window
            .hold_with(ts, key_complete(dur), mark, |arena| begin.frame(ts, arena));
        let end = Direct {
            category: None,
            ..direct(SLICE_END, thread, None, e, &[])
        };
        let mark = Mark::CompleteEnd { begin: seq };
        self.window
            .hold_with(end_ts, KEY_END, mark, |arena| end.frame(end_ts, arena));
    }
}

/// Holds `d` at `ts` with no sort key or mark of its own.
fn hold(window: &mut Window, ts: i64, d: &Direct<'_>) {
    window.hold_with(ts, KEY_OTHER, Mark::Plain, |arena| d.frame(ts, arena));
}

impl Converter {
    /// An instant with no args to build.
    pub(super) fn instant_direct(&mut self, ts: i64, track: u64, e: &JsonEvent) {
        let d = direct(INSTANT, track, Some(name_of(e)), e, &self.annotations);
        hold(&mut self.window, ts, &d);
    }

    /// A counter's `value` at `ts` on the counter track `track`.
    pub(super) fn counter_direct(&mut self, ts: i64, track: u64, value: f64) {
        let d = Direct {
            kind: Some(COUNTER),
            track,
            name: None,
            category: None,
            annotations: &[],
            flow: None,
            terminating_flow: None,
            legacy: None,
            counter: Some(value),
        };
        hold(&mut self.window, ts, &d);
    }

    /// A v1 flow event (`s`, `t`, `f`) on the thread track `thread`, as
    /// a legacy event ([`super::super::flows`]); dropped (counted) when
    /// its id is not one.
    pub(super) fn flow_direct(
        &mut self,
        ts: i64,
        thread: u64,
        e: &JsonEvent,
        stats: &mut JsonStats,
    ) {
        let Some(id) = v1_flow_id(e, stats) else {
            return;
        };
        let d = Direct {
            kind: None,
            name: (!e.name.is_empty()).then_some(e.name.as_str()),
            // A flow event's args are not kept.
            annotations: &[],
            legacy: Some(Legacy {
                phase: i32::from(e.phase),
                id,
                bind_to_enclosing: (e.phase == b'f').then_some(e.bind_enclosing),
            }),
            ..direct(0, thread, None, e, &[])
        };
        hold(&mut self.window, ts, &d);
    }
}

#[cfg(test)]
mod tests {
    use tracesync_protocol::perfetto::TrackEvent;

    use super::super::super::framing::{frame_annotated, frame_into, packet};
    use super::*;
    use tracesync_protocol::perfetto::trace_packet::Data;

    fn prost_bytes(ts: i64, d: &Direct<'_>) -> Vec<u8> {
        let e = TrackEvent {
            r#type: d.kind,
            track_uuid: Some(d.track),
            legacy_event: d.legacy.map(|l| track_event::LegacyEvent {
                phase: Some(l.phase),
                unscoped_id: Some(l.id),
                bind_to_enclosing: l.bind_to_enclosing,
            }),
            counter_value_field: d
                .counter
                .map(track_event::CounterValueField::DoubleCounterValue),
            name_field: d.name.map(|n| track_event::NameField::Name(n.to_owned())),
            categories: d.category.iter().map(|c| (*c).to_owned()).collect(),
            flow_ids: d.flow.into_iter().collect(),
            terminating_flow_ids: d.terminating_flow.into_iter().collect(),
            ..Default::default()
        };
        let mut out = Vec::new();
        frame_annotated(ts, &e, d.annotations, &mut out);
        if d.annotations.is_empty() {
            let mut plain = Vec::new();
            frame_into(&packet(Some(ts), Data::TrackEvent(e)), &mut plain);
            assert_eq!(out, plain);
        }
        out
    }

    #[test]
    fn same_bytes_as_prost() {
        let long = "x".repeat(300);
        let annotations = [0x22, 0x04, 0x52, 0x01, b'k', 0x10];
        for kind in [1, 2, 3] {
            for name in [None, Some(""), Some("slice"), Some(long.as_str())] {
                for category in [None, Some("cat"), Some(long.as_str())] {
                    for (flow, terminating) in
                        [(None, None), (Some(7), None), (None, Some(u64::MAX))]
                    {
                        for (ts, track) in [(0, 1), (1 << 40, u64::MAX)] {
                            for annotations in [&[][..], &annotations[..]] {
                                let d = Direct {
                                    kind: Some(kind),
                                    track,
                                    name,
                                    category,
                                    annotations,
                                    flow,
                                    terminating_flow: terminating,
                                    legacy: None,
                                    counter: None,
                                };
                                let mut out = Vec::new();
                                d.frame(ts, &mut out);
                                assert_eq!(out, prost_bytes(ts, &d));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn counters_and_flows_same_bytes_as_prost() {
        let legacies = [
            None,
            Some(Legacy {
                phase: i32::from(b's'),
                id: 0,
                bind_to_enclosing: None,
            }),
            Some(Legacy {
                phase: i32::from(b'f'),
                id: u64::MAX,
                bind_to_enclosing: Some(true),
            }),
            Some(Legacy {
                phase: -1,
                id: 300,
                bind_to_enclosing: Some(false),
            }),
        ];
        for kind in [None, Some(4)] {
            for legacy in legacies {
                for counter in [None, Some(0.0), Some(-1.5e300)] {
                    for name in [None, Some("flow")] {
                        let d = Direct {
                            kind,
                            track: 1 << 50,
                            name,
                            category: Some("cat"),
                            annotations: &[],
                            flow: None,
                            terminating_flow: None,
                            legacy,
                            counter,
                        };
                        let mut out = Vec::new();
                        d.frame(7, &mut out);
                        assert_eq!(out, prost_bytes(7, &d));
                    }
                }
            }
        }
    }
}
