//! [`TraceReader`]: a Trace stream pushed in chunks of any size, split into
//! packets, with bundles expanded as they are met.

use std::io::{self, Read};

use super::bundle::{find_compressed, inflate_bundle, validate_bundle};
use super::framing::{Header, record_header};
use super::{DEFAULT_MAX_PACKET_SIZE, Packet, ReadError, ReadErrorKind};

/// Where the next packet lies, without borrowing the reader.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loc {
    Buf {
        start: usize,
        end: usize,
        offset: u64,
    },
    Bundle {
        start: usize,
        end: usize,
    },
}

/// Splits a Trace stream, pushed in chunks of any size, into packets.
///
/// Holds at most one partial record plus the last pushed chunk: consumed
/// bytes are dropped at the next [`push`](Self::push).
#[derive(Debug)]
pub struct TraceReader {
    /// `buf[start..end]` is unread input; `buf.len()` is allocated room,
    /// kept initialised so refills need no zeroing.
    pub(super) buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Stream offset of `buf[start]`.
    offset: u64,
    max_packet_size: usize,
    expand_bundles: bool,
    /// The expanded bundle being yielded, `bundle[bundle_pos..]` unread.
    bundle: Vec<u8>,
    bundle_pos: usize,
    bundle_offset: u64,
    /// The packet last returned, until the next call that reads.
    last: Option<Loc>,
    /// A stream error is final: framing cannot be resynchronised.
    failed: Option<ReadError>,
}

impl Default for TraceReader {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceReader {
    pub fn new() -> Self {
        Self::with_max_packet_size(DEFAULT_MAX_PACKET_SIZE)
    }

    /// `max` bounds one packet and the expanded size of one bundle.
    pub fn with_max_packet_size(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            end: 0,
            offset: 0,
            max_packet_size: max,
            expand_bundles: true,
            bundle: Vec::new(),
            bundle_pos: 0,
            bundle_offset: 0,
            last: None,
            failed: None,
        }
    }

    /// Whether `compressed_packets` bundles are replaced by their inner
    /// packets (the default); if off, bundles are yielded as they are.
    pub fn set_expand_bundles(&mut self, on: bool) {
        self.expand_bundles = on;
    }

    /// Counts stream offsets from `offset`: for a reader given a stream
    /// from a record boundary on (see [`likely_record_start`]). Only before
    /// any input was pushed; ignored after.
    ///
    /// [`likely_record_start`]: super::likely_record_start
    pub fn set_position(&mut self, offset: u64) {
        if self.offset == 0 && self.end == 0 && self.failed.is_none() {
            self.offset = offset;
        }
    }

    /// Stream offset of the first byte not yet consumed.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// Whether packets of an expanded bundle remain to be yielded: while
    /// true, [`position`](Self::position) already lies past the bundle.
    pub fn bundle_pending(&self) -> bool {
        self.bundle_pos < self.bundle.len()
    }

    /// Bytes pushed but not yet consumed.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Appends input.
    pub fn push(&mut self, chunk: &[u8]) {
        self.last = None;
        let room = self.make_room(chunk.len());
        room[..chunk.len()].copy_from_slice(chunk);
        self.end += chunk.len();
    }

    /// Reads at most `max` bytes from `r` straight into the buffer (no
    /// intermediate copy). Returns how many were read; 0 means EOF.
    pub fn fill_from<R: Read + ?Sized>(&mut self, r: &mut R, max: usize) -> io::Result<usize> {
        self.last = None;
        let room = self.make_room(max);
        let n = loop {
            match r.read(&mut room[..max]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        self.end += n;
        Ok(n)
    }

    /// Drops consumed bytes and returns at least `n` bytes of room after `end`.
    fn make_room(&mut self, n: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.end + n > self.buf.len() {
            // Moves only the partial record: a record is moved at most once
            // per push that finds it incomplete after others were consumed.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end + n > self.buf.len() {
            // Geometric growth: a large record arriving in many chunks is
            // reallocated O(log n) times, not once per chunk.
            let want = (self.end + n).max(self.buf.len().saturating_mul(2));
            self.buf.resize(want, 0);
        }
        &mut self.buf[self.end..]
    }

    /// The next packet, `Ok(None)` if more input is needed.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, ReadError> {
        let loc = self.advance()?;
        Ok(loc.map(|loc| self.packet_at(loc)))
    }

    /// The packet last returned by [`next_packet`](Self::next_packet), again;
    /// None once a later call (or a push) may have moved its bytes.
    pub fn last_packet(&self) -> Option<Packet<'_>> {
        self.last.map(|loc| self.packet_at(loc))
    }

    /// Expands the `compressed_packets` bundle at `range` of the packet last
    /// returned, a packet not itself from a bundle: its inner packets are
    /// returned next, with the bundle's offset. For a reader with expansion
    /// off whose caller scans every packet anyway and so finds the bundle
    /// without the reader walking each packet a second time; errors are
    /// those of the expanding reader, and final as they are.
    pub fn expand_last(&mut self, range: (usize, usize)) -> Result<(), ReadError> {
        let Some(Loc::Buf { start, end, offset }) = self.last.take() else {
            return Ok(());
        };
        let (cs, ce) = range;
        if cs > ce || ce > end - start {
            return Ok(());
        }
        self.expand(start + cs, start + ce, offset)
    }

    /// Inflates the bundle at `buf[from..to]` (its record at file
    /// `offset`) into the bundle buffer its packets are read from next.
    fn expand(&mut self, from: usize, to: usize, offset: u64) -> Result<(), ReadError> {
        let max = self.max_packet_size;
        let expanded = inflate_bundle(&self.buf[from..to], max, &mut self.bundle)
            .and_then(|()| validate_bundle(&self.bundle, max));
        if let Err(e) = expanded {
            self.bundle.clear();
            self.bundle_pos = 0;
            return Err(self.fail(offset, ReadErrorKind::BadBundle(e)));
        }
        self.bundle_pos = 0;
        self.bundle_offset = offset;
        Ok(())
    }

    #[inline]
    pub(super) fn packet_at(&self, loc: Loc) -> Packet<'_> {
        match loc {
            Loc::Buf { start, end, offset } => Packet {
                bytes: &self.buf[start..end],
                offset,
                in_bundle: false,
            },
            Loc::Bundle { start, end } => Packet {
                bytes: &self.bundle[start..end],
                offset: self.bundle_offset,
                in_bundle: true,
            },
        }
    }

    pub(super) fn fail(&mut self, offset: u64, kind: ReadErrorKind) -> ReadError {
        let e = ReadError { offset, kind };
        self.failed = Some(e.clone());
        e
    }

    /// The next packet if it is the common case, else None (then
    /// [`Self::advance`] decides): a whole record in the buffer behind a
    /// one-byte length, nothing failed, no bundle being yielded or to be
    /// expanded. Small enough to inline where packets are read one by one
    /// (a trace of small packets spent more on the call than on the record).
    #[inline(always)]
    pub(super) fn advance_plain(&mut self) -> Option<Loc> {
        if self.expand_bundles || self.failed.is_some() || self.bundle_pos < self.bundle.len() {
            return None;
        }
        let avail = self.buf.get(self.start..self.end)?;
        let [0x0a, len, ..] = *avail else {
            return None;
        };
        let len = usize::from(len);
        if len >= 0x80 || len > self.max_packet_size || avail.len() - 2 < len {
            return None;
        }
        let offset = self.offset;
        let start = self.start + 2;
        let end = start + len;
        self.start = end;
        self.offset += 2 + len as u64;
        let loc = Loc::Buf { start, end, offset };
        self.last = Some(loc);
        Some(loc)
    }

    /// Finds the next packet, consuming its record.
    #[inline]
    pub(super) fn advance(&mut self) -> Result<Option<Loc>, ReadError> {
        self.last = None;
        let loc = self.advance_inner()?;
        self.last = loc;
        Ok(loc)
    }

    #[inline]
    fn advance_inner(&mut self) -> Result<Option<Loc>, ReadError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        loop {
            if self.bundle_pos < self.bundle.len() {
                // Validated when expanded, so headers are complete here.
                let rest = &self.bundle[self.bundle_pos..];
                if let Ok(Header::Complete(h, len)) = record_header(rest, self.max_packet_size) {
                    let start = self.bundle_pos + h;
                    let end = start + len as usize;
                    self.bundle_pos = end;
                    return Ok(Some(Loc::Bundle { start, end }));
                }
                self.bundle_pos = self.bundle.len();
            }
            let avail = &self.buf[self.start..self.end];
            if avail.is_empty() {
                return Ok(None);
            }
            let (h, len) = match record_header(avail, self.max_packet_size) {
                Ok(Header::Complete(h, len)) => (h, len),
                Ok(Header::Incomplete) => return Ok(None),
                Err(kind) => return Err(self.fail(self.offset, kind)),
            };
            if ((avail.len() - h) as u64) < len {
                return Ok(None);
            }
            let record_len = h + len as usize;
            let offset = self.offset;
            let start = self.start + h;
            let end = self.start + record_len;
            self.start = end;
            self.offset += record_len as u64;
            if self.expand_bundles
                && let Some((cs, ce)) = find_compressed(&self.buf[start..end])
            {
                self.expand(start + cs, start + ce, offset)?;
                continue; // an empty bundle yields nothing
            }
            return Ok(Some(Loc::Buf { start, end, offset }));
        }
    }

    /// Declares the end of input: an error if a partial record remains.
    /// Complete records not yet read can still be read afterwards.
    pub fn finish(&mut self) -> Result<(), ReadError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut pos = self.start;
        let mut offset = self.offset;
        while pos < self.end {
            let avail = &self.buf[pos..self.end];
            match record_header(avail, self.max_packet_size) {
                Err(kind) => return Err(self.fail(offset, kind)),
                Ok(Header::Incomplete) => {
                    let available = avail.len() as u64;
                    return Err(self.fail(offset, ReadErrorKind::TruncatedHeader { available }));
                }
                Ok(Header::Complete(h, len)) => {
                    let available = (avail.len() - h) as u64;
                    if len > available {
                        return Err(
                            self.fail(offset, ReadErrorKind::LengthPastEnd { len, available })
                        );
                    }
                    pos += h + len as usize;
                    offset += (h as u64) + len;
                }
            }
        }
        Ok(())
    }
}
