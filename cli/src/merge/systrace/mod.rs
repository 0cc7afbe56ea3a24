//! Systrace (ftrace text: the `# tracer:` form, atrace's `TRACE:` output,
//! trace-cmd's `cpus=` text, headerless event lines, HTML systrace) as a
//! merge input: read line by line ([`sections`] says which lines hold
//! events) and converted into a Perfetto protobuf trace of ftrace events
//! ([`encode`]) that the merge's passes read like any other input.
//!
//! Invariants:
//! - Memory is bounded: one read buffer and one line (longer lines are
//!   skipped and counted).
//! - The conversion is a pure function of the file's bytes: both merge
//!   passes see the same packets at the same offsets.
//! - Converted packets carry no clock id: the plan gives a systrace input
//!   the MONOTONIC clock of its machine (Perfetto's clock for the format);
//!   the same lines inside a JSON file's `systemTraceEvents`
//!   ([`line_to_packet`]) take that file's private clock instead.
//! - Nothing is dropped silently: lines that are no event and events not
//!   converted are counted in [`JsonStats`].

pub mod encode;
pub mod line;
pub mod sections;

use std::io::{self, BufRead, BufReader, Read};

use crate::merge::conversion_stats::{JsonStats, StatsSlot};
use encode::{Skip, line_packet};
use line::parse_line;
pub use sections::looks_like_systrace;
use sections::{Sections, Use, is_cpus_line, marker_end};

/// Longest line kept; longer ones are counted as unparsable.
const MAX_LINE: usize = encode::MAX_ARGS + 4096;
/// How much converted output is made at a time.
const OUT_CHUNK: usize = 256 << 10;

/// The framed packet of one line of text and its time; None for headers
/// and blank lines (skipped) and for lines not converted (counted).
pub fn line_to_packet(text: &str, stats: &mut JsonStats) -> Option<(i64, Vec<u8>)> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "TRACE:" {
        return None;
    }
    let Some(line) = parse_line(text).filter(|l| l.ts >= 0) else {
        stats.systrace_parse_failure += 1;
        return None;
    };
    match line_packet(&line) {
        Ok(packet) => Some((line.ts, packet)),
        Err(Skip::Unsupported) => {
            stats.systrace_events_not_converted += 1;
            None
        }
        Err(Skip::BadArgs) => {
            stats.systrace_parse_failure += 1;
            None
        }
    }
}

/// A systrace text read as the bytes of a Perfetto protobuf trace.
pub struct SystraceReader<R> {
    inner: BufReader<R>,
    stats: JsonStats,
    slot: Option<StatsSlot>,
    line: Vec<u8>,
    out: Vec<u8>,
    pos: usize,
    done: bool,
    /// None until the start of the text has been looked at.
    sections: Option<Sections>,
}

impl<R: Read> SystraceReader<R> {
    /// Converts the text `inner`; its counts go to `slot` when the reader
    /// is dropped.
    pub fn new(inner: R, slot: Option<StatsSlot>) -> Self {
        Self {
            inner: BufReader::with_capacity(64 << 10, inner),
            stats: JsonStats::default(),
            slot,
            line: Vec::new(),
            out: Vec::with_capacity(OUT_CHUNK * 2),
            pos: 0,
            done: false,
            sections: None,
        }
    }

    /// Skips what Perfetto skips before the first line (an atrace marker,
    /// trace-cmd's `cpus=` line) and sees whether the text is HTML.
    fn start(&mut self) -> io::Result<Sections> {
        let skip = marker_end(self.inner.fill_buf()?);
        self.inner.consume(skip);
        let head = self.inner.fill_buf()?;
        if let Some(nl) = head.iter().position(|&b| b == b'\n')
            && std::str::from_utf8(&head[..nl]).is_ok_and(is_cpus_line)
        {
            self.inner.consume(nl + 1);
        }
        let first = self.inner.fill_buf()?.first().copied();
        Ok(Sections::new(first))
    }

    /// Converts lines until a chunk of output is ready or the text ends.
    fn fill(&mut self) -> io::Result<()> {
        self.out.clear();
        self.pos = 0;
        let mut sections = match self.sections.take() {
            Some(s) => s,
            None => self.start()?,
        };
        while !self.done && self.out.len() < OUT_CHUNK {
            self.line.clear();
            let n = (&mut self.inner)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut self.line)?;
            if n == 0 {
                self.done = true;
                break;
            }
            if n == MAX_LINE && self.line.last() != Some(&b'\n') {
                // The rest of an overlong line is skipped, not kept.
                self.inner.skip_until(b'\n')?;
                self.stats.systrace_parse_failure += 1;
                continue;
            }
            match std::str::from_utf8(&self.line) {
                Ok(text) => match sections.line(text) {
                    Use::Event => {
                        if let Some((_, packet)) = line_to_packet(text, &mut self.stats) {
                            self.out.extend_from_slice(&packet);
                        }
                    }
                    Use::Skip => {}
                    Use::End => self.done = true,
                },
                Err(_) => self.stats.systrace_parse_failure += 1,
            }
        }
        self.sections = Some(sections);
        Ok(())
    }
}

impl<R: Read> Read for SystraceReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.out.len() {
            if self.done {
                return Ok(0);
            }
            self.fill()?;
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl<R> Drop for SystraceReader<R> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot
            && let Ok(mut s) = slot.lock()
        {
            s.add(&self.stats);
        }
    }
}

#[cfg(test)]
mod tests;
