//! Thread time (`tts`, `tdur`) as TrackEvent carries it: a thread-time
//! counter track under the thread's track (`COUNTER_THREAD_TIME_NS`, which
//! the trace processor names "thread_time"), sampled by the slice's begin
//! and end. The trace processor sets the slice's `thread_ts` from the begin
//! and `thread_dur` from the end, as its JSON importer sets them from
//! `tts` and `tdur` (or an `E` event's `tts`).
//!
//! An end with no thread time of its own after a begin that had one is
//! given the begin's: a delta of zero sets no `thread_dur`, as the JSON
//! importer leaves it unset (trace processor v52 would otherwise read the
//! missing value as 0 and store minus the begin's thread time).
//!
//! Invariants: a thread's counter track is described once, before its first
//! sample; its uuid is derived from the thread track's; the thread times of
//! open `B` slices are kept per thread, at most `MAX_OPEN` deep.

use super::fast_hash::{FastMap, FastSet};

use tracesync_protocol::perfetto::counter_descriptor::BuiltinCounterType;
use tracesync_protocol::perfetto::trace_packet::Data;
use tracesync_protocol::perfetto::{CounterDescriptor, TrackDescriptor, TrackEvent};

use super::framing::{framed, packet};

/// Open `B` slices remembered per thread; deeper ones are not.
const MAX_OPEN: usize = 1024;

/// The threads whose thread-time track has been described, and the thread
/// times of their open `B` slices.
#[derive(Default)]
pub struct ThreadTime {
    described: FastSet<u64>,
    open: FastMap<u64, Vec<Option<i64>>>,
}

/// The thread-time counter track of the thread track `thread`.
fn track_of(thread: u64) -> u64 {
    (thread ^ 0x7468_7265_6164_7473)
        .wrapping_mul(0x0100_0000_01b3)
        .max(1)
}

impl ThreadTime {
    /// Adds the thread time `ns` of thread track `thread` to `event`,
    /// describing the counter track in `out` first if needed.
    pub fn sample(&mut self, thread: u64, ns: i64, event: &mut TrackEvent, out: &mut Vec<u8>) {
        let uuid = track_of(thread);
        if self.described.insert(thread) {
            let d = TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(thread),
                counter: Some(CounterDescriptor {
                    r#type: Some(BuiltinCounterType::CounterThreadTimeNs as i32),
                    ..Default::default()
                }),
                ..Default::default()
            };
            out.extend(framed(&packet(None, Data::TrackDescriptor(d))));
        }
        event.extra_counter_track_uuids.push(uuid);
        event.extra_counter_values.push(ns);
    }

    /// A `B` slice with thread time `tts` opens on `thread`.
    pub fn open(&mut self, thread: u64, tts: Option<i64>) {
        let stack = self.open.entry(thread).or_default();
        if stack.len() < MAX_OPEN {
            stack.push(tts);
        }
    }

    /// An `E` closes the top slice of `thread`: the thread time its end is
    /// sampled at (its own `tts`, else the begin's), if any.
    pub fn close(&mut self, thread: u64, tts: Option<i64>) -> Option<i64> {
        let begun = self.open.get_mut(&thread).and_then(Vec::pop).flatten();
        tts.or(begun)
    }
}
