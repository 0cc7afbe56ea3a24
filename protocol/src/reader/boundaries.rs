//! Record boundaries of a plain (not gzip'd) Trace stream, found by walking
//! the record headers alone: a piece of a file read from one of them (with
//! [`TraceReader::set_position`] and [`TraceFile::plain`]) yields the
//! packets, offsets and errors the whole file's reader yields for the same
//! bytes, so pieces of one file can be read on threads of their own.
//!
//! [`TraceReader::set_position`]: super::TraceReader::set_position
//! [`TraceFile::plain`]: super::TraceFile::plain

use std::io::{self, Read};

use super::framing::{Header, record_header};

/// Bytes read per call.
const CHUNK: usize = 1 << 20;

/// The longest record header: two 10-byte varints.
const MAX_HEADER: usize = 20;

/// The first record start at or after each of `targets` (ascending), for
/// the stream `r` read from its first byte, with the reader's framing and
/// packet limit `max_packet_size`. The walk stops at the first record it
/// cannot frame and at the end of input; the boundaries found before are
/// returned, each strictly inside the stream (a record header begins
/// there) and strictly ascending.
pub fn record_boundaries<R: Read + ?Sized>(
    r: &mut R,
    targets: &[u64],
    max_packet_size: usize,
) -> io::Result<Vec<u64>> {
    let mut window = Window::new();
    let mut found: Vec<u64> = Vec::with_capacity(targets.len());
    // Offset of the next record header.
    let mut pos = 0u64;
    for &target in targets {
        loop {
            let avail = window.at(r, pos)?;
            if avail.is_empty() {
                return Ok(found);
            }
            if pos >= target {
                if found.last().is_none_or(|&b| b < pos) {
                    found.push(pos);
                }
                break;
            }
            match record_header(avail, max_packet_size) {
                Ok(Header::Complete(h, len)) => pos = pos.saturating_add(h as u64 + len),
                // A header cut by the end of input, or one the reader
                // fails on: the piece holding it reports it.
                Ok(Header::Incomplete) | Err(_) => return Ok(found),
            }
        }
    }
    Ok(found)
}

/// How many whole records `bytes` (a stream's first bytes) begins with,
/// and how many bytes they take: the mean record size of a sample.
pub fn leading_records(bytes: &[u8], max_packet_size: usize) -> (u64, u64) {
    let (mut records, mut pos) = (0u64, 0usize);
    while let Ok(Header::Complete(h, len)) = record_header(&bytes[pos..], max_packet_size) {
        let end = (pos + h).saturating_add(len as usize);
        if end > bytes.len() {
            break;
        }
        records += 1;
        pos = end;
    }
    (records, pos as u64)
}

/// The bytes of the stream from `base` on, read as needed:
/// `buf[..len]` (the rest is room, zeroed once).
struct Window {
    buf: Vec<u8>,
    len: usize,
    base: u64,
    eof: bool,
}

impl Window {
    fn new() -> Self {
        Self {
            buf: vec![0; CHUNK],
            len: 0,
            base: 0,
            eof: false,
        }
    }

    /// The buffered bytes from stream offset `pos` (never before `base`)
    /// on: at least a whole record header's worth unless the stream ends
    /// first (empty at or past its end). Bytes before `pos` are dropped
    /// when more are read.
    fn at<R: Read + ?Sized>(&mut self, r: &mut R, pos: u64) -> io::Result<&[u8]> {
        loop {
            let end = self.base + self.len as u64;
            if pos.saturating_add(MAX_HEADER as u64) <= end || (self.eof && pos >= self.base) {
                let from = (pos - self.base).min(self.len as u64) as usize;
                return Ok(&self.buf[from..self.len]);
            }
            if pos >= end {
                // Past everything read (a large record's body): drop it all.
                self.len = 0;
                self.base = end;
            } else {
                let from = (pos - self.base) as usize;
                self.buf.copy_within(from..self.len, 0);
                self.len -= from;
                self.base = pos;
            }
            self.fill(r)?;
        }
    }

    fn fill<R: Read + ?Sized>(&mut self, r: &mut R) -> io::Result<()> {
        loop {
            match r.read(&mut self.buf[self.len..]) {
                Ok(n) => {
                    self.len += n;
                    self.eof = n == 0;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
#[path = "boundaries_tests.rs"]
mod tests;
