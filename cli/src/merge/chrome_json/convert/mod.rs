//! Chrome JSON events as Perfetto TrackEvent packets, the way the trace
//! processor's JSON importer places them: B/E and X slices and thread-scoped
//! instants on the thread's track, process and global instants on a
//! process track and a global track, one counter track per `C` event name
//! and args key ("name key", "name id: ID key" with an id), b/e/n async
//! slices on a track per process, name and id, process and thread names
//! and sort indexes of `M` events, `bind_id` flows and v1 flow events
//! ([`super::flows`]), thread time ([`super::thread_time`]).
//!
//! Invariants: descriptors are written as soon as a pid or tid is first
//! seen (untimed: they take their place in the input's order); timed
//! packets wait in the window ([`super::window`]) of at most
//! [`WINDOW_BYTES`] and leave it in the trace processor's order for JSON
//! events, so a file whose events are out of order by less than half the
//! window comes out sorted.
//! Track uuids and string pids are hashes of the input's name and the
//! event's fields: the same in both merge passes.

use serde_json::Value;
use tracesync_protocol::perfetto::trace_packet::Data;
use tracesync_protocol::perfetto::{
    CounterDescriptor, ProcessDescriptor, ThreadDescriptor, TrackDescriptor, TrackEvent,
    track_event,
};

use super::JsonStats;
use super::args::annotations;
use super::event::{Id, Ident, JsonEvent, Scope};
use super::fast_hash::{FastMap, FastSet};
use super::framing::{frame_annotated, frame_into, packet};
use super::thread_time::ThreadTime;

mod direct;
mod releases;
use super::window::{KEY_END, KEY_OTHER, Mark, Window, key_complete};

/// Bytes of timed packets held back to put a file's events in order.
pub const WINDOW_BYTES: usize = 16 << 20;
/// Name of a slice whose event has none, as the trace processor names it.
const NO_NAME: &str = "[No name]";

/// Kinds of track, mixed into their uuids.
#[derive(Clone, Copy)]
enum TrackKind {
    Process = 1,
    Thread = 2,
    Counter = 3,
    Async = 4,
    Global = 5,
    Flow = 6,
    StringId = 7,
}

/// A track's name and sort index, as written so far.
type Named = (Option<String>, Option<i32>);

/// The state of one file's conversion.
pub struct Converter {
    salt: u64,
    window: Window,
    /// While set, events are converted and held but nothing is released
    /// ([`Converter::set_holding_only`]).
    holding_only: bool,
    thread_time: ThreadTime,
    /// The debug annotations of the event being converted, encoded by the
    /// fast path (`fast_event`); empty otherwise.
    annotations: Vec<u8>,
    /// Process names and sort indexes written so far, by pid.
    processes: FastMap<u32, (Option<String>, Option<i32>)>,
    /// Thread track uuids, names and sort indexes written so far.
    threads: FastMap<(u32, u32), (u64, Named)>,
    named_tracks: FastSet<u64>,
}

/// FNV-1a over `parts`, never 0 (a uuid of 0 means none).
fn hash(salt: u64, kind: TrackKind, parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ salt ^ kind as u64;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// [`hash`] of parts each made of `pieces` (one part's bytes in pieces).
fn hash_pieces(salt: u64, kind: TrackKind, parts: &[&[&[u8]]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ salt ^ kind as u64;
    for pieces in parts {
        for &b in pieces.iter().copied().flatten() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

fn id_bytes(id: &Id) -> Vec<u8> {
    match id {
        Id::Str(s) => [b"s", s.as_bytes()].concat(),
        Id::Int(n) => [b"i".as_slice(), &n.to_le_bytes()].concat(),
    }
}

/// A counter value as Perfetto reads it: a number, or a string holding one.
fn counter_value(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

impl Converter {
    /// A conversion of the input named `display` (the salt of its uuids).
    pub fn new(display: &str) -> Self {
        Self::with_window(display, WINDOW_BYTES)
    }

    /// A converter whose window holds `window_bytes` (tests use a small
    /// one to make many releases).
    pub fn with_window(display: &str, window_bytes: usize) -> Self {
        Self {
            salt: hash(0, TrackKind::Global, &[display.as_bytes()]),
            window: Window::new(window_bytes),
            holding_only: false,
            thread_time: ThreadTime::default(),
            annotations: Vec::new(),
            processes: FastMap::default(),
            threads: FastMap::default(),
            named_tracks: FastSet::default(),
        }
    }

    /// A string pid or tid as a number, as the trace processor gives it
    /// one of its own (the string becomes its name).
    fn string_id(&self, s: &str) -> u32 {
        // Above the kernel's pid range (2^22), below i32's sign bit.
        (1 << 30) | (hash(self.salt, TrackKind::StringId, &[s.as_bytes()]) as u32 & 0x3fff_ffff)
    }

    fn track_uuid(&self, kind: TrackKind, parts: &[&[u8]]) -> u64 {
        hash(self.salt, kind, parts)
    }

    fn process_uuid(&self, pid: u32) -> u64 {
        self.track_uuid(TrackKind::Process, &[&pid.to_le_bytes()])
    }

    fn thread_uuid(&self, pid: u32, tid: u32) -> u64 {
        self.track_uuid(TrackKind::Thread, &[&pid.to_le_bytes(), &tid.to_le_bytes()])
    }

    /// Writes (or rewrites, with a new name or sort index) the process's
    /// descriptor.
    fn process(&mut self, pid: u32, name: Option<String>, sort: Option<i32>, out: &mut Vec<u8>) {
        // The common case, nothing new for a known process: no clone.
        if name.is_none() && sort.is_none() && self.processes.contains_key(&pid) {
            return;
        }
        let known = self.processes.get(&pid).cloned();
        let merged = match &known {
            Some((n, s)) => (name.or_else(|| n.clone()), sort.or(*s)),
            None => (name, sort),
        };
        if known.as_ref() == Some(&merged) {
            return;
        }
        let d = TrackDescriptor {
            uuid: Some(self.process_uuid(pid)),
            process: Some(ProcessDescriptor {
                pid: Some(pid as i32),
                process_name: merged.0.clone(),
                legacy_sort_index: merged.1,
            }),
            ..Default::default()
        };
        frame_into(&packet(None, Data::TrackDescriptor(d)), out);
        self.processes.insert(pid, merged);
    }

    fn thread(
        &mut self,
        (pid, tid): (u32, u32),
        name: Option<String>,
        sort: Option<i32>,
        out: &mut Vec<u8>,
    ) -> u64 {
        // The common case, a known thread (its process known too).
        if name.is_none()
            && sort.is_none()
            && let Some((uuid, _)) = self.threads.get(&(pid, tid))
        {
            return *uuid;
        }
        self.process(pid, None, None, out);
        let uuid = self.thread_uuid(pid, tid);
        let known = self.threads.get(&(pid, tid)).map(|(_, k)| k.clone());
        let merged = match &known {
            Some((n, s)) => (name.or_else(|| n.clone()), sort.or(*s)),
            None => (name, sort),
        };
        if known.as_ref() != Some(&merged) {
            let d = TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(self.process_uuid(pid)),
                thread: Some(ThreadDescriptor {
                    pid: Some(pid as i32),
                    tid: Some(i64::from(tid)),
                    thread_name: merged.0.clone(),
                    legacy_sort_index: merged.1,
                }),
                ..Default::default()
            };
            frame_into(&packet(None, Data::TrackDescriptor(d)), out);
            self.threads.insert((pid, tid), (uuid, merged));
        }
        uuid
    }

    /// A named track (counter, async, global) written once.
    fn named_track(
        &mut self,
        uuid: u64,
        name: &str,
        parent: Option<u64>,
        counter: bool,
        out: &mut Vec<u8>,
    ) {
        if !self.named_tracks.insert(uuid) {
            return;
        }
        let d = TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.to_owned()),
            parent_uuid: parent,
            counter: counter.then(CounterDescriptor::default),
            ..Default::default()
        };
        frame_into(&packet(None, Data::TrackDescriptor(d)), out);
    }

    /// Holds a TrackEvent made by [`Converter::event`]: with the event's
    /// annotations if the fast path encoded them.
    fn hold_event(&mut self, ts: i64, event: TrackEvent) {
        self.hold_event_keyed(ts, KEY_OTHER, event, Mark::Plain);
    }

    /// Holds an event with the sort key and mark of its phase, with no
    /// annotations but its own.
    fn hold_keyed(&mut self, ts: i64, key: i64, event: TrackEvent, mark: Mark) -> u64 {
        let p = packet(Some(ts), Data::TrackEvent(event));
        self.window
            .hold_with(ts, key, mark, |arena| frame_into(&p, arena))
    }

    /// [`Converter::hold_keyed`] of an event made by [`Converter::event`]:
    /// with the event's annotations if the fast path encoded them.
    fn hold_event_keyed(&mut self, ts: i64, key: i64, event: TrackEvent, mark: Mark) -> u64 {
        if self.annotations.is_empty() {
            return self.hold_keyed(ts, key, event, mark);
        }
        let annotations = &self.annotations;
        self.window.hold_with(ts, key, mark, |arena| {
            frame_annotated(ts, &event, annotations, arena)
        })
    }

    /// Holds a framed packet made elsewhere (a `systemTraceEvents` line)
    /// in the window, then releases what overflows it.
    pub fn push_framed(&mut self, ts: i64, bytes: &[u8], out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.window.hold_with(ts, KEY_OTHER, Mark::Plain, |arena| {
            arena.extend_from_slice(bytes)
        });
        if !self.holding_only {
            self.window.release_if_full(out, stats);
        }
    }

    /// [`Converter::push`] of an event read by the fast path, its args
    /// already encoded as debug annotations (`annotations`).
    pub fn push_encoded(
        &mut self,
        e: &JsonEvent,
        annotations: &[u8],
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) {
        self.annotations.clear();
        self.annotations.extend_from_slice(annotations);
        self.push(e, out, stats);
        self.annotations.clear();
    }

    /// Converts one event: descriptors straight into `out`, timed packets
    /// into the window (released into `out` as it fills).
    pub fn push(&mut self, e: &JsonEvent, out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.convert(e, out, stats);
        if !self.holding_only {
            self.window.release_if_full(out, stats);
        }
    }

    fn convert(&mut self, e: &JsonEvent, out: &mut Vec<u8>, stats: &mut JsonStats) {
        if e.phase == 0 {
            // An empty `{}` is a common filler; anything else lacks "ph".
            if e.any_field {
                stats.json_tokenizer_failure += 1;
            }
            return;
        }
        // A metadata event needs no time: a bad `ts` does not drop it.
        let bad_ts_only =
            e.phase == b'M' && e.bad_field.as_deref().is_some_and(|f| f.starts_with("ts:"));
        if (e.bad_field.is_some() && !bad_ts_only) || (e.ts.is_none() && e.phase != b'M') {
            stats.json_tokenizer_failure += 1;
            return;
        }
        let ts = if e.phase == b'M' {
            0
        } else {
            e.ts.unwrap_or(0)
        };
        if ts < 0 {
            stats.json_negative_timestamp_dropped += 1;
            return;
        }
        let ids = |s: &str| self.string_id(s);
        let pid = e.pid_number(&ids);
        let tid = e.tid_number(&ids);
        // A string pid or tid names its process or thread.
        let pid_name = match &e.pid {
            Some(Ident::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let tid_name = match &e.tid {
            Some(Ident::Str(s)) => Some(s.clone()),
            _ => None,
        };
        if pid_name.is_some() {
            self.process(pid, pid_name, None, out);
        }
        match e.phase {
            b'B' | b'E' | b'X' | b'i' | b'I' | b'R' | b'C' | b'M' | b'b' | b'e' | b'n' | b's'
            | b't' | b'f' => {}
            _ => {
                stats.json_events_not_converted += 1;
                return;
            }
        }
        let thread = self.thread((pid, tid), tid_name, None, out);
        match e.phase {
            // Without args to build or thread time to sample, slices are
            // encoded straight into the window (`direct`).
            b'B' if e.args.is_none() && e.tts.is_none() => self.begin_direct(ts, thread, e),
            b'B' => {
                let begin = self.begin_event(thread, e, out);
                self.thread_time.open(thread, e.tts);
                self.hold_event(ts, begin);
            }
            b'E' => self.end_slice(ts, thread, e, out),
            b'X' if e.args.is_none() && e.tts.is_none() => {
                self.complete_direct(ts, thread, e, stats)
            }
            b'X' => match e.dur.and_then(|d| {
                (d >= 0)
                    .then(|| ts.checked_add(d).map(|end| (d, end)))
                    .flatten()
            }) {
                Some((dur, end_ts)) => {
                    let begin = self.begin_event(thread, e, out);
                    let mark = Mark::CompleteBegin { thread, dur };
                    let seq = self.hold_event_keyed(ts, key_complete(dur), begin, mark);
                    let mut end = TrackEvent {
                        r#type: Some(track_event::Type::SliceEnd as i32),
                        track_uuid: Some(thread),
                        ..Default::default()
                    };
                    // No `tdur`: the begin's thread time (no thread_dur).
                    let end_tts = e.tts.map(|t| t.saturating_add(e.tdur.unwrap_or(0)));
                    if let Some(end_tts) = end_tts {
                        self.thread_time.sample(thread, end_tts, &mut end, out);
                    }
                    self.hold_keyed(end_ts, KEY_END, end, Mark::CompleteEnd { begin: seq });
                }
                None => stats.json_parser_failure += 1,
            },
            b'i' | b'I' | b'R' => self.instant(ts, (pid, thread), e, out, stats),
            b'C' => self.counter(ts, pid, e, out, stats),
            b'M' => self.metadata((pid, tid), e, out, stats),
            b's' | b't' | b'f' => self.flow_direct(ts, thread, e, stats),
            _ => self.async_event(ts, pid, e, out, stats),
        }
    }

    /// A TrackEvent of `kind` on `track` with the event's name (or the
    /// trace processor's placeholder), category and args.
    fn event(&self, kind: track_event::Type, track: u64, e: &JsonEvent) -> TrackEvent {
        let name = if e.name.is_empty() { NO_NAME } else { &e.name };
        TrackEvent {
            r#type: Some(kind as i32),
            track_uuid: Some(track),
            name_field: Some(track_event::NameField::Name(name.to_owned())),
            categories: if e.cat.is_empty() {
                Vec::new()
            } else {
                vec![e.cat.clone()]
            },
            debug_annotations: annotations(e.args.as_ref()),
            ..Default::default()
        }
    }

    /// A slice begin on `track` with the event's flows and thread time.
    fn begin_event(&mut self, track: u64, e: &JsonEvent, out: &mut Vec<u8>) -> TrackEvent {
        let mut begin = self.event(track_event::Type::SliceBegin, track, e);
        self.add_flow(&mut begin, e);
        if let Some(tts) = e.tts {
            self.thread_time.sample(track, tts, &mut begin, out);
        }
        begin
    }

    /// `bind_id` with `flow_out` starts or continues a flow at this slice,
    /// with only `flow_in` ends it here.
    fn add_flow(&self, ev: &mut TrackEvent, e: &JsonEvent) {
        let (flow, terminating) = self.flows(e);
        ev.flow_ids.extend(flow);
        ev.terminating_flow_ids.extend(terminating);
    }

    fn instant(
        &mut self,
        ts: i64,
        (pid, thread): (u32, u64),
        e: &JsonEvent,
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) {
        let track = match e.scope {
            Some(Scope::Global) => {
                let uuid = self.track_uuid(TrackKind::Global, &[]);
                self.named_track(uuid, "Global instants", None, false, out);
                uuid
            }
            Some(Scope::Process) if e.pid.is_some() => self.process_uuid(pid),
            None | Some(Scope::Thread) if e.tid.is_some() => thread,
            _ => {
                stats.json_parser_failure += 1;
                return;
            }
        };
        if e.args.is_none() {
            return self.instant_direct(ts, track, e);
        }
        let instant = self.event(track_event::Type::Instant, track, e);
        self.hold_event(ts, instant);
    }

    fn counter(
        &mut self,
        ts: i64,
        pid: u32,
        e: &JsonEvent,
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) {
        let Some(args) = &e.args else {
            stats.json_parser_failure += 1;
            return;
        };
        // The uuid is hashed from the name's pieces, made only for a new track.
        let id = match &e.id {
            Some(Id::Str(id)) => Some(id.as_str()),
            _ => None,
        };
        let pid_bytes = pid.to_le_bytes();
        let parent = self.process_uuid(pid);
        for (key, value) in args {
            let Some(v) = counter_value(value) else {
                stats.json_parser_failure += 1;
                continue;
            };
            let (name, key) = (e.name.as_bytes(), key.as_bytes());
            let name_pieces: &[&[u8]] = match id {
                Some(id) => &[name, b" id: ", id.as_bytes(), b" ", key],
                None => &[name, b" ", key],
            };
            let uuid = hash_pieces(self.salt, TrackKind::Counter, &[&[&pid_bytes], name_pieces]);
            if !self.named_tracks.contains(&uuid) {
                let name = String::from_utf8_lossy(&name_pieces.concat()).into_owned();
                self.named_track(uuid, &name, Some(parent), true, out);
            }
            self.counter_direct(ts, uuid, v);
        }
    }

    fn metadata(
        &mut self,
        (pid, tid): (u32, u32),
        e: &JsonEvent,
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) {
        let Some(args) = &e.args else {
            return;
        };
        match e.name.as_str() {
            "process_name" | "thread_name" => {
                let Some(name) = args
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                else {
                    if args.contains_key("name") {
                        stats.json_parser_failure += 1;
                    }
                    return;
                };
                if e.name == "process_name" {
                    self.process(pid, Some(name.to_owned()), None, out);
                } else {
                    self.thread((pid, tid), Some(name.to_owned()), None, out);
                }
            }
            "process_sort_index" | "thread_sort_index" => {
                let Some(v) = args.get("sort_index") else {
                    return;
                };
                let Some(index) = v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)) else {
                    stats.json_parser_failure += 1;
                    return;
                };
                let index = index as i32;
                if e.name == "process_sort_index" {
                    self.process(pid, None, Some(index), out);
                } else {
                    self.thread((pid, tid), None, Some(index), out);
                }
            }
            _ => {}
        }
    }

    fn async_event(
        &mut self,
        ts: i64,
        pid: u32,
        e: &JsonEvent,
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) {
        // The async id: `id`, else `id2.global`, else `id2.local`, with the
        // category (Perfetto's cookie). Only an `id2.local` is scoped to
        // its process: the others name a track of the whole trace.
        let (id, local) = match (&e.id, &e.id2_global, &e.id2_local) {
            (Some(id), _, _) | (None, Some(id), _) => (Some(id), false),
            (None, None, local) => (local.as_ref(), true),
        };
        let (Some(id), true) = (id, e.pid.is_some()) else {
            stats.json_parser_failure += 1;
            return;
        };
        let name = if e.name.is_empty() { NO_NAME } else { &e.name };
        let pid_bytes = pid.to_le_bytes();
        let scope: &[u8] = if local { &pid_bytes } else { b"global" };
        let uuid = self.track_uuid(
            TrackKind::Async,
            &[scope, e.cat.as_bytes(), &id_bytes(id), name.as_bytes()],
        );
        let parent = local.then(|| self.process_uuid(pid));
        self.named_track(uuid, name, parent, false, out);
        let ev = match e.phase {
            b'b' => {
                let mut begin = self.event(track_event::Type::SliceBegin, uuid, e);
                self.add_flow(&mut begin, e);
                begin
            }
            b'e' => {
                let mut end = self.event(track_event::Type::SliceEnd, uuid, e);
                end.name_field = None;
                end
            }
            _ => self.event(track_event::Type::Instant, uuid, e),
        };
        self.hold_event(ts, ev);
    }
}
