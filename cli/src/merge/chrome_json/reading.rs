//! The reading half of a JSON input's conversion, on a thread of its own:
//! events are found in the text and read (in place by the fast path,
//! `fast_event`, else in full, `event`; `systemTraceEvents` lines become
//! ftrace packets) and handed in batches to the converting half
//! ([`super::ChromeJsonReader`]), which encodes and orders them. The two
//! halves share the work of one input across two cores.
//!
//! Invariants:
//! - What is read, and in what order, is what one thread would read: the
//!   batches go through one channel, in order; an error is the last item.
//! - Memory is bounded: at most [`IN_FLIGHT`] batches of at most
//!   [`BATCH_EVENTS`] events (and [`BATCH_ARGS`] bytes of encoded args,
//!   plus one event's) exist at once; their buffers are reused, and so
//!   are their events: the converting half reads events in place and
//!   hands the batch back, so an event's strings are allocated and freed
//!   on this thread, and mostly not at all.
//! - A batch's fast-path events are its own, side by side, read into
//!   again in the same order whenever the batch comes back: what the
//!   converting half reads of a batch (events, their strings, args) lies
//!   in a few runs of memory it streams through, not in events scattered
//!   over the heap (each a cache miss between the two processors).
//! - The thread ends by itself when the text ends, at an error, or when
//!   the converting half is dropped; its counts go to the input's stats
//!   slot before it ends (the converting half waits for it when dropped).

use std::io::Read;
use std::ops::Range;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use super::event::{JsonEvent, parse_event};
use super::fast_event::{Scratch, parse_fast};
use super::scan::{EventScanner, Item};
use super::{JsonError, JsonStats, StatsSlot};
use crate::merge::systrace::line_to_packet;

/// Events per batch: enough to make a hand-over rare, few enough to keep
/// a batch in the cache.
const BATCH_EVENTS: usize = 256;
/// Bytes of encoded args per batch.
const BATCH_ARGS: usize = 64 << 10;
/// Batches read ahead, and so in flight with the one being converted:
/// enough to ride out the converting half's uneven pace (a chunk of a
/// release handed out, then events converted ahead), each ~170 KiB.
const IN_FLIGHT: usize = 8;

/// One read item.
pub enum Msg {
    /// An event read by the fast path: the batch's `events` at this
    /// index, its args encoded as debug annotations at this range of the
    /// batch's `args`.
    Fast(usize, Range<usize>),
    /// An event read in full.
    Full(Box<JsonEvent>),
    /// A framed ftrace packet of a `systemTraceEvents` line, at its time.
    Line(i64, Vec<u8>),
    /// The text ended here.
    End,
    /// The reading failed here: nothing follows.
    Fail(JsonError),
}

/// Items handed over at once.
#[derive(Default)]
pub struct Batch {
    pub msgs: Vec<Msg>,
    pub args: Vec<u8>,
    /// The fast path's events (more may be left from earlier fills).
    pub events: Vec<JsonEvent>,
}

/// The converting half's ends of the channels.
pub struct Feed {
    pub batches: Receiver<Batch>,
    /// Emptied batches go back, for their buffers.
    pub spent: SyncSender<Batch>,
}

/// Starts reading `inner` on a thread; its counts go to `slot`.
pub fn spawn<R: Read + Send + 'static>(
    inner: R,
    slot: Option<StatsSlot>,
) -> (Feed, Option<std::thread::JoinHandle<()>>) {
    let (tx, batches) = sync_channel(IN_FLIGHT);
    let (spent, back) = sync_channel(IN_FLIGHT + 1);
    let mut reader = Reader {
        scanner: EventScanner::new(inner),
        stats: JsonStats::default(),
        event: Vec::new(),
        scratch: Scratch::default(),
    };
    let handle = std::thread::Builder::new()
        .name("tracesync-json".into())
        .spawn(move || {
            reader.run(&tx, &back);
            if let Some(slot) = &slot
                && let Ok(mut s) = slot.lock()
            {
                s.add(&reader.stats);
            }
        });
    match handle {
        Ok(h) => (Feed { batches, spent }, Some(h)),
        Err(e) => {
            // No thread: the converting half sees the failure as its input.
            let (tx, batches) = sync_channel(1);
            let msgs = vec![Msg::Fail(JsonError::Io(e))];
            let _ = tx.send(Batch {
                msgs,
                ..Batch::default()
            });
            (Feed { batches, spent }, None)
        }
    }
}

struct Reader<R> {
    scanner: EventScanner<R>,
    stats: JsonStats,
    /// An event copied out of the read buffer (cut by its end, or one the
    /// fast path left).
    event: Vec<u8>,
    scratch: Scratch,
}

impl<R: Read> Reader<R> {
    fn run(&mut self, tx: &SyncSender<Batch>, back: &Receiver<Batch>) {
        loop {
            let mut batch = back.try_recv().unwrap_or_default();
            batch.msgs.clear();
            batch.args.clear();
            let last = self.fill(&mut batch);
            if tx.send(batch).is_err() || last {
                return;
            }
        }
    }

    /// Reads into `batch` until it is full; true when it holds the last
    /// item (the end, or a failure).
    fn fill(&mut self, batch: &mut Batch) -> bool {
        // The batch's next event to read into.
        let mut next = 0;
        while batch.msgs.len() < BATCH_EVENTS && batch.args.len() < BATCH_ARGS {
            if next == batch.events.len() {
                batch.events.push(JsonEvent::default());
            }
            // Most events are read in place from the scanner's buffer.
            match self.scanner.event_in_buffer() {
                Ok(Some((_, bytes))) => {
                    let at = batch.args.len();
                    let e = &mut batch.events[next];
                    if let Some(n) = parse_fast(bytes, e, &mut batch.args, &mut self.scratch) {
                        self.scanner.consume_event(n);
                        push_fast(batch, &mut next, at);
                        continue;
                    }
                    batch.args.truncate(at);
                }
                Ok(None) => {}
                Err(e) => {
                    batch.msgs.push(Msg::Fail(e));
                    return true;
                }
            }
            match self.scanner.next_event(&mut self.event, &mut self.stats) {
                Ok(Some(Item::SystemLine { too_long })) => {
                    let text = std::str::from_utf8(&self.event).ok().filter(|_| !too_long);
                    match text.and_then(|t| line_to_packet(t, &mut self.stats)) {
                        Some((ts, packet)) => batch.msgs.push(Msg::Line(ts, packet)),
                        None if text.is_none() => self.stats.systrace_parse_failure += 1,
                        None => {}
                    }
                }
                Ok(Some(Item::Event(at))) => {
                    let args_at = batch.args.len();
                    let e = &mut batch.events[next];
                    let fast = parse_fast(&self.event, e, &mut batch.args, &mut self.scratch);
                    if fast == Some(self.event.len()) {
                        push_fast(batch, &mut next, args_at);
                        continue;
                    }
                    batch.args.truncate(args_at);
                    match parse_event(&self.event) {
                        Ok(e) => batch.msgs.push(Msg::Full(Box::new(e))),
                        Err((message, index)) => {
                            batch.msgs.push(Msg::Fail(JsonError::Event {
                                offset: at + index as u64,
                                message,
                            }));
                            return true;
                        }
                    }
                }
                Ok(None) => {
                    batch.msgs.push(Msg::End);
                    return true;
                }
                Err(e) => {
                    batch.msgs.push(Msg::Fail(e));
                    return true;
                }
            }
        }
        false
    }
}

/// Hands over the batch's event `next`, just read by the fast path, its
/// args encoded at the batch's `args` from `at` on.
fn push_fast(batch: &mut Batch, next: &mut usize, at: usize) {
    batch.msgs.push(Msg::Fast(*next, at..batch.args.len()));
    *next += 1;
}
