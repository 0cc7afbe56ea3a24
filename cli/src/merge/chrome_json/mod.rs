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
//! - The conversion is a pure function of the file's bytes and its name:
//!   both merge passes see the same packets at the same offsets (the
//!   merge converts once and spills, `inputs::spill`, but converts again
//!   when it cannot spill).
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
pub mod flows;
pub mod framing;
mod json_scan;
pub mod relaxed;
pub mod scan;
pub mod spill;
pub mod thread_time;
pub mod window;
pub mod written;

use std::io::{self, Read};

pub use crate::merge::conversion_stats::{JsonStats, StatsSlot};
use crate::merge::systrace::line_to_packet;
use convert::Converter;
use event::parse_event;
use fast_event::parse_fast;
use scan::{EventScanner, Item};

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

/// A Chrome JSON trace read as the bytes of a Perfetto protobuf trace.
pub struct ChromeJsonReader<R> {
    scanner: EventScanner<R>,
    converter: Converter,
    stats: JsonStats,
    slot: Option<StatsSlot>,
    event: Vec<u8>,
    /// The fast path's encoded args of the event being converted.
    args: Vec<u8>,
    out: Vec<u8>,
    pos: usize,
    done: bool,
    error: Option<JsonError>,
}

impl<R: Read> ChromeJsonReader<R> {
    /// Converts the JSON `inner` of the input named `display`; its counts
    /// go to `slot` when the reader is dropped.
    pub fn new(inner: R, display: &str, slot: Option<StatsSlot>) -> Self {
        let mut converter = Converter::new(display);
        converter.set_out_chunk(OUT_CHUNK);
        Self {
            scanner: EventScanner::new(inner),
            converter,
            stats: JsonStats::default(),
            slot,
            event: Vec::new(),
            args: Vec::new(),
            out: Vec::with_capacity(OUT_CHUNK * 2),
            pos: 0,
            done: false,
            error: None,
        }
    }

    /// Converts events until a chunk of output is ready or the input ends.
    fn fill(&mut self) {
        self.out.clear();
        self.pos = 0;
        while self.out.len() < OUT_CHUNK {
            // A release of the window is handed out before anything new
            // is converted: the output never holds more than a chunk.
            if self.converter.releasing() {
                self.converter.drain(&mut self.out, &mut self.stats);
                continue;
            }
            if self.done {
                break;
            }
            // Most events are read in place from the scanner's buffer.
            match self.scanner.event_in_buffer() {
                Ok(Some((_, bytes))) => {
                    if let Some((e, n)) = parse_fast(bytes, &mut self.args) {
                        self.scanner.consume_event(n);
                        self.converter.push_encoded(
                            e,
                            &mut self.args,
                            &mut self.out,
                            &mut self.stats,
                        );
                        continue;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.fail(e);
                    continue;
                }
            }
            match self.scanner.next_event(&mut self.event, &mut self.stats) {
                Ok(Some(Item::SystemLine { too_long })) => {
                    let text = std::str::from_utf8(&self.event).ok().filter(|_| !too_long);
                    match text.and_then(|t| line_to_packet(t, &mut self.stats)) {
                        Some((ts, packet)) => {
                            self.converter
                                .push_framed(ts, packet, &mut self.out, &mut self.stats);
                        }
                        None if text.is_none() => self.stats.systrace_parse_failure += 1,
                        None => {}
                    }
                }
                Ok(Some(Item::Event(at))) => {
                    let fast = parse_fast(&self.event, &mut self.args);
                    if let Some((e, _)) = fast.filter(|(_, n)| *n == self.event.len()) {
                        self.converter.push_encoded(
                            e,
                            &mut self.args,
                            &mut self.out,
                            &mut self.stats,
                        );
                        continue;
                    }
                    match parse_event(&self.event) {
                        Ok(e) => self.converter.push(e, &mut self.out, &mut self.stats),
                        Err((message, index)) => {
                            self.fail(JsonError::Event {
                                offset: at + index as u64,
                                message,
                            });
                        }
                    }
                }
                Ok(None) => {
                    self.converter.finish(&mut self.out, &mut self.stats);
                    self.done = true;
                }
                Err(e) => self.fail(e),
            }
        }
    }

    /// The events before an error are kept: the window is released first.
    fn fail(&mut self, e: JsonError) {
        self.converter.finish(&mut self.out, &mut self.stats);
        self.done = true;
        self.error = Some(e);
    }
}

impl<R: Read> Read for ChromeJsonReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.out.len() {
            if self.done && !self.converter.releasing() {
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

impl<R> Drop for ChromeJsonReader<R> {
    fn drop(&mut self) {
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
