//! Chrome JSON traces as merge inputs: a JSON file is read as a stream
//! and converted, event by event, into a Perfetto protobuf trace that the
//! merge's passes read like any other input.
//!
//! Invariants:
//! - Memory is bounded whatever the file's size: one read buffer, one event
//!   ([`scan::MAX_EVENT_BYTES`]), the reordering window
//!   ([`convert::WINDOW_BYTES`] and a 24-byte entry per packet held), one
//!   output chunk (a window's release is handed out a chunk at a time), and
//!   one entry per process, thread and named track.
//! - While a release is handed out, events are converted ahead between its
//!   chunks (held only, at most until the window is full again; what they
//!   write straight out kept until the release is done): the reading
//!   thread need not wait for a whole release, and the bytes are those of
//!   a conversion that waits.
//! - The conversion is a pure function of the file's bytes and its name:
//!   both merge passes see the same packets at the same offsets (the
//!   merge converts once and spills, `inputs::spill`, but converts again
//!   when it cannot spill).
//! - The conversion takes two threads: the text is read on one
//!   (`reading`, in order, in bounded batches), events are encoded and
//!   ordered on the reader's; the bytes are what one thread would make.
//! - Most events are read in place by the fast path (`fast_event`); it
//!   reads an event only when the result is what the full reading
//!   (`event`) gives, so which path read an event never shows.
//! - Converted packets carry no clock id: the plan gives a JSON input the
//!   file's private clock (`TRACE_FILE`) as its default, pinned at zero to
//!   trace time unless a manifest pins it elsewhere; the ftrace events of
//!   its `systemTraceEvents` lines share it.
//! - Nothing is dropped silently: what is not converted is counted in
//!   [`JsonStats`] (Perfetto's stat names where it has one); a syntax error
//!   ends the input with its byte offset, the events before it kept.

mod args;
pub mod convert;
pub mod event;
mod fast_event;
mod fast_hash;
pub mod flows;
pub mod framing;
mod json_scan;
mod reading;
pub mod relaxed;
pub mod scan;
pub mod spill;
pub mod thread_time;
pub mod window;
pub mod written;

use std::io::{self, Read};

pub use crate::merge::conversion_stats::{JsonStats, StatsSlot};
use convert::Converter;
use reading::{Batch, Feed, Msg};
use std::thread::JoinHandle;

/// Why a JSON input could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("expected {expected}")]
    Syntax { offset: u64, expected: String },
    #[error("bad JSON in an event: {message}")]
    Event { offset: u64, message: String },
    #[error("{0}")]
    Io(io::Error),
}

impl JsonError {
    /// Byte offset in the (decompressed) JSON text.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::Syntax { offset, .. } | Self::Event { offset, .. } => Some(*offset),
            Self::Io(_) => None,
        }
    }

    fn into_io(self) -> io::Error {
        match self {
            Self::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other),
        }
    }
}

/// How much converted output is made at a time.
const OUT_CHUNK: usize = 256 << 10;
/// Items converted ahead after each chunk of a release: about what the
/// reading thread reads while a chunk goes out, so it seldom waits; the
/// window holds a few MiB more at the release's end.
const AHEAD_PER_CHUNK: usize = 1536;

/// A Chrome JSON trace read as the bytes of a Perfetto protobuf trace:
/// the text is read on a thread of its own (`reading`), the events are
/// converted and ordered here.
pub struct ChromeJsonReader {
    feed: Option<Feed>,
    thread: Option<JoinHandle<()>>,
    /// The batch being converted, from its item `at` on.
    batch: Batch,
    at: usize,
    converter: Converter,
    stats: JsonStats,
    slot: Option<StatsSlot>,
    out: Vec<u8>,
    /// Output made at a time ([`OUT_CHUNK`]).
    out_chunk: usize,
    pos: usize,
    /// What events converted during a release wrote straight out
    /// (descriptors), handed out when the release is done.
    ahead: Vec<u8>,
    /// Items converted ahead after each chunk of a release.
    ahead_per_chunk: usize,
    /// Items were converted ahead during the release under way.
    converted_ahead: bool,
    /// No item is left to convert (the window may still be releasing).
    done: bool,
    error: Option<JsonError>,
}

impl ChromeJsonReader {
    /// Converts the JSON `inner` of the input named `display`; its counts
    /// go to `slot` when the reader is dropped.
    pub fn new<R: Read + Send + 'static>(inner: R, display: &str, slot: Option<StatsSlot>) -> Self {
        let converter = Converter::new(display);
        Self::with_converter(inner, converter, slot, OUT_CHUNK, AHEAD_PER_CHUNK)
    }

    /// [`ChromeJsonReader::new`] with `converter`, handing out `out_chunk`
    /// bytes at a time and converting `ahead` items after each chunk of a
    /// release.
    fn with_converter<R: Read + Send + 'static>(
        inner: R,
        mut converter: Converter,
        slot: Option<StatsSlot>,
        out_chunk: usize,
        ahead: usize,
    ) -> Self {
        let (feed, thread) = reading::spawn(inner, slot.clone());
        converter.set_out_chunk(out_chunk);
        Self {
            feed: Some(feed),
            thread,
            batch: Batch::default(),
            at: 0,
            converter,
            stats: JsonStats::default(),
            slot,
            out: Vec::with_capacity(out_chunk.saturating_mul(2).min(OUT_CHUNK * 2)),
            out_chunk,
            pos: 0,
            ahead: Vec::new(),
            ahead_per_chunk: ahead,
            converted_ahead: false,
            done: false,
            error: None,
        }
    }

    /// Hands the spent batch back and takes the next one; a reading
    /// thread that went away ends the input.
    fn next_batch(&mut self) {
        let spent = std::mem::take(&mut self.batch);
        self.at = 0;
        let next = self.feed.as_ref().map(|feed| {
            // Its buffers (and events) are reused, unless the reader has enough.
            let _ = feed.spent.try_send(spent);
            feed.batches.recv()
        });
        let why = match next {
            Some(Ok(b)) if !b.msgs.is_empty() => {
                self.batch = b;
                return;
            }
            None => {
                self.batch.msgs.push(Msg::End);
                return;
            }
            Some(Ok(_)) => "the JSON reading thread handed over nothing",
            Some(Err(_)) => "the JSON reading thread ended early",
        };
        let e = JsonError::Io(io::Error::other(why));
        self.batch.msgs.push(Msg::Fail(e));
    }

    /// Converts events until a chunk of output is ready or the input ends.
    fn fill(&mut self) {
        self.out.clear();
        self.pos = 0;
        while self.out.len() < self.out_chunk {
            // A release of the window is handed out before anything new
            // is written: the output never holds more than a chunk.
            if self.converter.releasing() {
                self.converter.drain(&mut self.out, &mut self.stats);
                if self.converter.releasing() {
                    self.convert_ahead();
                }
                continue;
            }
            if self.converted_ahead {
                // What the events converted during the release wrote
                // straight out, where it would be had they waited for it,
                // then the release the last of them called for.
                self.converted_ahead = false;
                self.out.append(&mut self.ahead);
                self.converter
                    .release_if_full(&mut self.out, &mut self.stats);
                continue;
            }
            if self.done {
                break;
            }
            if !self.convert_next(false) {
                let Some(msg) = self.batch.msgs.get_mut(self.at) else {
                    continue;
                };
                self.at += 1;
                let (out, stats) = (&mut self.out, &mut self.stats);
                match msg {
                    Msg::End => {
                        self.converter.finish(out, stats);
                        self.done = true;
                    }
                    Msg::Fail(_) => {
                        if let Msg::Fail(e) = std::mem::replace(msg, Msg::End) {
                            self.fail(e);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Converts the next item if it is an event (or a line), taking the
    /// next batch when this one is spent; false (nothing taken) at the
    /// end or a failure. `ahead`: during a release, held only, what the
    /// event writes straight out kept in `ahead`.
    fn convert_next(&mut self, ahead: bool) -> bool {
        if self.at == self.batch.msgs.len() {
            self.next_batch();
        }
        // Items are read in place: the batch goes back whole, its events
        // to be read into again on the reading thread.
        let Some(msg) = self.batch.msgs.get(self.at) else {
            return false;
        };
        let out = if ahead {
            &mut self.ahead
        } else {
            &mut self.out
        };
        let stats = &mut self.stats;
        match msg {
            Msg::Fast(i, range) => {
                let args = self.batch.args.get(range.clone()).unwrap_or_default();
                if let Some(e) = self.batch.events.get(*i) {
                    self.converter.push_encoded(e, args, out, stats);
                }
            }
            Msg::Full(e) => self.converter.push(e, out, stats),
            Msg::Line(ts, packet) => self.converter.push_framed(*ts, packet, out, stats),
            Msg::End | Msg::Fail(_) => return false,
        }
        self.at += 1;
        true
    }

    /// While a release is handed out, converts up to `ahead_per_chunk`
    /// ([`AHEAD_PER_CHUNK`]) items after each chunk of it, held until the
    /// next release: the reading thread goes on reading instead of
    /// waiting for the whole release to go out. The bytes are the same:
    /// nothing is released meanwhile, and what the events write straight
    /// out follows the release, as it would have.
    fn convert_ahead(&mut self) {
        if self.done {
            return;
        }
        self.converter.set_holding_only(true);
        for _ in 0..self.ahead_per_chunk {
            // An event that fills the window ends it: the next release
            // must start right after the one under way, as it would have
            // after that event.
            if self.converter.full_after_release() || !self.convert_next(true) {
                break;
            }
            self.converted_ahead = true;
        }
        self.converter.set_holding_only(false);
    }

    /// The events before an error are kept: the window is released first.
    fn fail(&mut self, e: JsonError) {
        self.converter.finish(&mut self.out, &mut self.stats);
        self.done = true;
        self.error = Some(e);
    }
}

impl Read for ChromeJsonReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.out.len() {
            if self.done && !self.converter.releasing() && !self.converted_ahead {
                return match self.error.take() {
                    Some(e) => Err(e.into_io()),
                    None => Ok(0),
                };
            }
            self.fill();
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        if n == 0 && !buf.is_empty() {
            // `fill` made nothing (only skipped events): try again.
            return self.read(buf);
        }
        Ok(n)
    }
}

impl Drop for ChromeJsonReader {
    fn drop(&mut self) {
        // The reading thread stops at its next hand-over and leaves its
        // counts in the slot first.
        self.feed = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(slot) = &self.slot
            && let Ok(mut s) = slot.lock()
        {
            s.add(&self.stats);
        }
    }
}

/// The JSON error inside an I/O error of a converted input, if it is one.
pub fn json_error_of(e: &io::Error) -> Option<&JsonError> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<JsonError>())
}

#[cfg(test)]
mod tests;
