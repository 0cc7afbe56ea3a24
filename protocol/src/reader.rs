//! Streaming reader of Trace framing: a trace file is a concatenation of
//! `Trace.packet` (field 1, length-delimited) records.
//!
//! Input may arrive in chunks of any size; gzip'd files are detected by
//! magic; `compressed_packets` bundles (field 50, zlib deflate) are expanded
//! into their inner packets. Every error names the byte offset of the record
//! it concerns, counted in the (decompressed) Trace stream.
//!
//! Perfetto's service writes bundles with zlib's `deflateInit` (RFC 1950
//! header) and its trace processor auto-detects zlib or gzip headers, so
//! bundles are accepted with a zlib header, a gzip header, or as raw deflate.

use std::io::{self, Read};

use flate2::{Decompress, FlushDecompress, Status};

use crate::scan::field;
use crate::wire::{self, WireError};

/// Default limit of one packet, and of one expanded bundle.
pub const DEFAULT_MAX_PACKET_SIZE: usize = 128 << 20;

/// Bytes read per call by [`TraceFile`].
pub const FILE_CHUNK_SIZE: usize = 256 << 10;

/// The tag of a `Trace.packet` record: field 1, wire type 2.
const PACKET_TAG: u64 = (1 << 3) | 2;

/// One TracePacket's bytes (no framing), borrowed from the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub bytes: &'a [u8],
    /// Byte offset of the field-1 record in the (decompressed) Trace stream;
    /// for packets expanded from a compressed bundle, the offset of the
    /// bundle's outer record.
    pub offset: u64,
    pub in_bundle: bool,
}

/// A malformed trace stream, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {kind}")]
pub struct ReadError {
    pub offset: u64,
    pub kind: ReadErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadErrorKind {
    #[error("malformed varint in a record header (over 10 bytes or over 64 bits)")]
    BadVarint,
    #[error(
        "not a packet record: field {field}, wire type {wire_type} \
         (a trace holds only field 1, length-delimited)"
    )]
    NotPacketRecord { field: u64, wire_type: u8 },
    #[error("input ends inside a record header ({available} bytes left)")]
    TruncatedHeader { available: u64 },
    #[error("record of {len} bytes runs past the end of input ({available} bytes left)")]
    LengthPastEnd { len: u64, available: u64 },
    #[error("packet of {len} bytes exceeds the limit of {max} bytes")]
    PacketTooLarge { len: u64, max: u64 },
    #[error("bad compressed bundle: {0}")]
    BadBundle(BundleError),
    #[error("bad gzip stream (after {compressed_read} compressed bytes read): {message}")]
    BadGzip {
        compressed_read: u64,
        message: String,
    },
}

/// What is wrong with a `compressed_packets` bundle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("inflate failed: {0}")]
    Inflate(String),
    #[error("compressed stream is truncated")]
    Truncated,
    #[error("expands past the limit of {max} bytes")]
    TooLarge { max: u64 },
    #[error("inner record at byte {offset} of the expanded bundle: {kind}")]
    Inner {
        offset: u64,
        kind: Box<ReadErrorKind>,
    },
}

/// Why a header could not be read yet.
enum Header {
    /// Tag and length are valid: (header length, body length).
    Complete(usize, u64),
    /// Need more input.
    Incomplete,
}

enum Varint {
    Value(u64, usize),
    Incomplete,
    Bad,
}

/// Reads a varint at `buf[pos..]`; `Incomplete` if the input ends inside it.
#[inline(always)]
fn varint_at(buf: &[u8], pos: usize) -> Varint {
    let rest = buf.get(pos..).unwrap_or_default();
    match wire::decode_varint(rest) {
        // Framing is strict: a 10th byte may only carry the top bit of a u64.
        Ok((_, 10)) if rest[9] > 1 => Varint::Bad,
        Ok((v, n)) => Varint::Value(v, n),
        Err(WireError::Truncated) => Varint::Incomplete,
        Err(_) => Varint::Bad,
    }
}

/// Parses one record header at the start of `buf`.
#[inline(always)]
fn record_header(buf: &[u8], max: usize) -> Result<Header, ReadErrorKind> {
    // Fast path: tag 0x0a and a one-byte length.
    if let [0x0a, len, ..] = buf
        && *len < 0x80
        && usize::from(*len) <= max
    {
        return Ok(Header::Complete(2, u64::from(*len)));
    }
    let (tag, tag_len) = match varint_at(buf, 0) {
        Varint::Value(v, n) => (v, n),
        Varint::Incomplete => return Ok(Header::Incomplete),
        Varint::Bad => return Err(ReadErrorKind::BadVarint),
    };
    if tag != PACKET_TAG {
        return Err(ReadErrorKind::NotPacketRecord {
            field: tag >> 3,
            wire_type: (tag & 7) as u8,
        });
    }
    let (len, len_len) = match varint_at(buf, tag_len) {
        Varint::Value(v, n) => (v, n),
        Varint::Incomplete => return Ok(Header::Incomplete),
        Varint::Bad => return Err(ReadErrorKind::BadVarint),
    };
    if len > max as u64 {
        return Err(ReadErrorKind::PacketTooLarge {
            len,
            max: max as u64,
        });
    }
    Ok(Header::Complete(tag_len + len_len, len))
}

/// Byte range of the last `compressed_packets` field of a packet, if the
/// packet is well formed and has one. Malformed packets are not bundles:
/// they pass through for the consumer's scanner to report.
fn find_compressed(p: &[u8]) -> Option<(usize, usize)> {
    // Every encoding of field 50's tag (402, length-delimited) starts with
    // the byte 0x92, minimal or not: without it there is no bundle, and the
    // field walk below (a second one per packet) is skipped.
    if !p.contains(&0x92) {
        return None;
    }
    let mut pos = 0;
    let mut found = None;
    while let Some(rest) = p.get(pos..).filter(|r| !r.is_empty()) {
        let (tag, n) = wire::decode_varint(rest).ok()?;
        pos += n;
        // Branches, not a jump table: they predict better on this hot path.
        let wire_type = tag & 7;
        if wire_type == 0 {
            pos += wire::decode_varint(&rest[n..]).ok()?.1;
        } else if wire_type == 2 {
            let (len, m) = wire::decode_varint(&rest[n..]).ok()?;
            pos += m;
            let end = pos.checked_add(usize::try_from(len).ok()?)?;
            if tag >> 3 == u64::from(field::COMPRESSED_PACKETS) && end <= p.len() {
                found = Some((pos, end));
            }
            pos = end;
        } else if wire_type == 1 {
            pos += 8;
        } else if wire_type == 5 {
            pos += 4;
        } else {
            return None;
        }
    }
    // A field running past the end makes the packet malformed.
    (pos == p.len()).then_some(found).flatten()
}

/// Inflates a bundle into `out` (cleared first), at most `max` bytes.
fn inflate_bundle(data: &[u8], max: usize, out: &mut Vec<u8>) -> Result<(), BundleError> {
    out.clear();
    if data.starts_with(&[0x1f, 0x8b]) {
        // Perfetto's own writer never makes these, but its reader accepts them.
        let mut dec = flate2::read::GzDecoder::new(data).take(max as u64 + 1);
        dec.read_to_end(out)
            .map_err(|e| BundleError::Inflate(e.to_string()))?;
        if out.len() > max {
            return Err(BundleError::TooLarge { max: max as u64 });
        }
        return Ok(());
    }
    // A zlib header: CM = 8 (deflate), and the header checksums to 0 mod 31.
    let zlib = data.len() >= 2
        && data[0] & 0x0f == 8
        && (u16::from(data[0]) << 8 | u16::from(data[1])) % 31 == 0;
    match inflate_into(data, zlib, max, out) {
        // Raw deflate can look like a zlib header by chance.
        Err(BundleError::Inflate(_)) if zlib => inflate_into(data, false, max, out),
        other => other,
    }
}

fn inflate_into(data: &[u8], zlib: bool, max: usize, out: &mut Vec<u8>) -> Result<(), BundleError> {
    out.clear();
    let mut dec = Decompress::new(zlib);
    // Room for one byte past the limit, so overflow is detected.
    let cap_limit = max.saturating_add(1);
    out.reserve(data.len().saturating_mul(4).max(4096).min(cap_limit));
    loop {
        if out.len() == out.capacity() {
            if out.len() > max {
                return Err(BundleError::TooLarge { max: max as u64 });
            }
            let room = (cap_limit - out.len()).min(out.len().max(4096));
            out.reserve_exact(room);
        }
        let consumed = dec.total_in() as usize;
        let before_out = out.len();
        let input = data.get(consumed..).unwrap_or_default();
        let status = dec
            .decompress_vec(input, out, FlushDecompress::None)
            .map_err(|e| BundleError::Inflate(e.to_string()))?;
        if out.len() > max {
            return Err(BundleError::TooLarge { max: max as u64 });
        }
        match status {
            Status::StreamEnd => return Ok(()),
            Status::Ok | Status::BufError => {
                let progressed = dec.total_in() as usize != consumed || out.len() != before_out;
                // No progress with output room left means the input ran out.
                if !progressed && out.len() < out.capacity() {
                    return Err(BundleError::Truncated);
                }
            }
        }
    }
}

/// Checks that `bundle` is a sequence of complete field-1 records.
fn validate_bundle(bundle: &[u8], max: usize) -> Result<(), BundleError> {
    let mut pos = 0;
    while pos < bundle.len() {
        let rest = &bundle[pos..];
        let inner = |kind| BundleError::Inner {
            offset: pos as u64,
            kind: Box::new(kind),
        };
        match record_header(rest, max).map_err(inner)? {
            Header::Incomplete => {
                return Err(inner(ReadErrorKind::TruncatedHeader {
                    available: rest.len() as u64,
                }));
            }
            Header::Complete(h, len) => {
                let available = (rest.len() - h) as u64;
                if len > available {
                    return Err(inner(ReadErrorKind::LengthPastEnd { len, available }));
                }
                pos += h + len as usize;
            }
        }
    }
    Ok(())
}

/// Where the next packet lies, without borrowing the reader.
#[derive(Clone, Copy)]
enum Loc {
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
    buf: Vec<u8>,
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
            failed: None,
        }
    }

    /// Whether `compressed_packets` bundles are replaced by their inner
    /// packets (the default); if off, bundles are yielded as they are.
    pub fn set_expand_bundles(&mut self, on: bool) {
        self.expand_bundles = on;
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
        let room = self.make_room(chunk.len());
        room[..chunk.len()].copy_from_slice(chunk);
        self.end += chunk.len();
    }

    /// Reads at most `max` bytes from `r` straight into the buffer (no
    /// intermediate copy). Returns how many were read; 0 means EOF.
    pub fn fill_from<R: Read + ?Sized>(&mut self, r: &mut R, max: usize) -> io::Result<usize> {
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

    fn packet_at(&self, loc: Loc) -> Packet<'_> {
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

    fn fail(&mut self, offset: u64, kind: ReadErrorKind) -> ReadError {
        let e = ReadError { offset, kind };
        self.failed = Some(e.clone());
        e
    }

    /// Finds the next packet, consuming its record.
    fn advance(&mut self) -> Result<Option<Loc>, ReadError> {
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
                let data = &self.buf[start + cs..start + ce];
                let max = self.max_packet_size;
                let expanded = inflate_bundle(data, max, &mut self.bundle)
                    .and_then(|()| validate_bundle(&self.bundle, max));
                if let Err(e) = expanded {
                    self.bundle.clear();
                    self.bundle_pos = 0;
                    return Err(self.fail(offset, ReadErrorKind::BadBundle(e)));
                }
                self.bundle_pos = 0;
                self.bundle_offset = offset;
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

/// Counts bytes from the underlying reader and remembers whether it failed,
/// so gzip errors can be told apart from I/O errors.
#[derive(Debug)]
struct Counting<R> {
    inner: R,
    read: u64,
    io_failed: bool,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.read += n as u64;
                Ok(n)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.io_failed = true;
                }
                Err(e)
            }
        }
    }
}

type Peeked<R> = io::Chain<io::Cursor<Vec<u8>>, Counting<R>>;

#[derive(Debug)]
enum Source<R> {
    Plain(Peeked<R>),
    Gzip(flate2::read::MultiGzDecoder<Peeked<R>>),
}

/// Reads a whole trace from any reader, gzip'd or not.
#[derive(Debug)]
pub struct TraceFile<R> {
    source: Source<R>,
    reader: TraceReader,
    eof: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Format(#[from] ReadError),
}

impl<R: Read> TraceFile<R> {
    pub fn new(reader: R) -> io::Result<Self> {
        Self::with_reader(reader, TraceReader::new())
    }

    /// Uses a configured [`TraceReader`] (limits, bundle expansion).
    pub fn with_reader(mut reader: R, trace_reader: TraceReader) -> io::Result<Self> {
        // Peek at the magic without losing it: the bytes are chained back.
        let mut magic = [0u8; 2];
        let mut got = 0;
        while got < magic.len() {
            match reader.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let gzip = magic[..got] == [0x1f, 0x8b];
        let counting = Counting {
            inner: reader,
            read: got as u64,
            io_failed: false,
        };
        let peeked = io::Cursor::new(magic[..got].to_vec()).chain(counting);
        let source = if gzip {
            Source::Gzip(flate2::read::MultiGzDecoder::new(peeked))
        } else {
            Source::Plain(peeked)
        };
        Ok(Self {
            source,
            reader: trace_reader,
            eof: false,
        })
    }

    /// Whether the input was gzip'd.
    pub fn is_gzip(&self) -> bool {
        matches!(self.source, Source::Gzip(_))
    }

    /// The next packet; `Ok(None)` at a clean end of input.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, FileReadError> {
        loop {
            if let Some(loc) = self.reader.advance().map_err(FileReadError::Format)? {
                return Ok(Some(self.reader.packet_at(loc)));
            }
            if self.eof {
                self.reader.finish().map_err(FileReadError::Format)?;
                return Ok(None);
            }
            let read = match &mut self.source {
                Source::Plain(r) => self.reader.fill_from(r, FILE_CHUNK_SIZE),
                Source::Gzip(r) => self.reader.fill_from(r, FILE_CHUNK_SIZE),
            };
            match read {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => return Err(self.classify(e)),
            }
        }
    }

    fn classify(&mut self, e: io::Error) -> FileReadError {
        let Source::Gzip(dec) = &self.source else {
            return FileReadError::Io(e);
        };
        let counting = dec.get_ref().get_ref().1;
        if counting.io_failed {
            return FileReadError::Io(e);
        }
        // Offset: decompressed bytes delivered so far, the stream's own coordinate.
        let offset = self.reader.position() + self.reader.buffered() as u64;
        let kind = ReadErrorKind::BadGzip {
            compressed_read: counting.read,
            message: e.to_string(),
        };
        FileReadError::Format(self.reader.fail(offset, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perfetto::{TracePacket, TrackDescriptor, trace_packet};
    use crate::wire;
    use flate2::Compression;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use prost::Message;
    use std::io::Write;

    /// Packet bodies of assorted sizes: empty, 1-byte and 2-byte lengths.
    fn bodies() -> Vec<Vec<u8>> {
        (0..6u64)
            .map(|i| {
                TracePacket {
                    timestamp: (i > 0).then_some(1000 * i),
                    data: (i % 2 == 1).then(|| {
                        trace_packet::Data::TrackDescriptor(TrackDescriptor {
                            name: Some("n".repeat(60 * i as usize)),
                            ..Default::default()
                        })
                    }),
                    ..Default::default()
                }
                .encode_to_vec()
            })
            .collect()
    }

    fn frame(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in bodies {
            wire::put_trace_packet(&mut out, b);
        }
        out
    }

    /// Offsets of each record in a framed stream.
    fn offsets(bodies: &[Vec<u8>]) -> Vec<u64> {
        let mut off = 0;
        bodies
            .iter()
            .map(|b| {
                let o = off;
                off += (1 + wire::varint_len(b.len() as u64) + b.len()) as u64;
                o
            })
            .collect()
    }

    type Got = Vec<(Vec<u8>, u64, bool)>;

    fn drain(r: &mut TraceReader, got: &mut Got) -> Result<(), ReadError> {
        while let Some(p) = r.next_packet()? {
            got.push((p.bytes.to_vec(), p.offset, p.in_bundle));
        }
        Ok(())
    }

    fn read_chunked(stream: &[u8], cuts: &[usize]) -> Result<Got, ReadError> {
        let mut r = TraceReader::new();
        let mut got = Vec::new();
        let mut prev = 0;
        for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
            r.push(&stream[prev..c]);
            prev = c;
            drain(&mut r, &mut got)?;
        }
        r.finish()?;
        Ok(got)
    }

    fn expected(bodies: &[Vec<u8>]) -> Got {
        bodies
            .iter()
            .zip(offsets(bodies))
            .map(|(b, o)| (b.clone(), o, false))
            .collect()
    }

    #[test]
    fn split_at_every_boundary() {
        let bodies = bodies();
        assert!(bodies.iter().any(Vec::is_empty));
        assert!(bodies.iter().any(|b| b.len() >= 128));
        let stream = frame(&bodies);
        let want = expected(&bodies);
        for i in 0..=stream.len() {
            assert_eq!(read_chunked(&stream, &[i]).unwrap(), want, "cut at {i}");
        }
        // Every pair of cuts over the first records.
        for i in 0..40 {
            for j in i..40 {
                assert_eq!(read_chunked(&stream, &[i, j]).unwrap(), want);
            }
        }
        let every: Vec<usize> = (1..stream.len()).collect();
        assert_eq!(read_chunked(&stream, &every).unwrap(), want);
    }

    #[test]
    fn zero_length_packets_and_empty_input() {
        let stream = [0x0a, 0x00, 0x0a, 0x00];
        let got = read_chunked(&stream, &[]).unwrap();
        assert_eq!(got, [(vec![], 0, false), (vec![], 2, false)]);
        assert_eq!(read_chunked(&[], &[]).unwrap(), []);
    }

    #[test]
    fn non_minimal_tag_is_accepted() {
        // Tag 10 as a two-byte varint is still field 1, wire type 2.
        let got = read_chunked(&[0x8a, 0x00, 0x01, 0x42], &[]).unwrap();
        assert_eq!(got, [(vec![0x42], 0, false)]);
    }

    fn err_of(stream: &[u8]) -> ReadError {
        read_chunked(stream, &[]).unwrap_err()
    }

    #[test]
    fn truncated_record_at_eof() {
        let bodies = bodies();
        let stream = frame(&bodies);
        let last = *offsets(&bodies).last().unwrap();
        let cut = &stream[..stream.len() - 3];
        let len = bodies.last().unwrap().len() as u64;
        let e = err_of(cut);
        assert_eq!(e.offset, last);
        assert_eq!(
            e.kind,
            ReadErrorKind::LengthPastEnd {
                len,
                available: len - 3
            }
        );
        assert!(e.to_string().starts_with(&format!("byte offset {last}: ")));
        // A header cut after the tag.
        let e = err_of(&stream[..last as usize + 1]);
        assert_eq!(
            (e.offset, e.kind),
            (last, ReadErrorKind::TruncatedHeader { available: 1 })
        );
    }

    #[test]
    fn length_beyond_eof() {
        let mut stream = frame(&bodies()[..2]);
        let at = stream.len() as u64;
        stream.extend_from_slice(&[0x0a, 0xe8, 0x07, 1, 2, 3]); // len 1000
        let e = err_of(&stream);
        assert_eq!(e.offset, at);
        assert_eq!(
            e.kind,
            ReadErrorKind::LengthPastEnd {
                len: 1000,
                available: 3
            }
        );
    }

    #[test]
    fn garbage_is_not_a_packet_record() {
        let mut stream = frame(&bodies()[..3]);
        let at = stream.len() as u64;
        stream.extend_from_slice(b"hello, world");
        let e = err_of(&stream);
        // 'h' = 0x68: field 13, wire type 0.
        assert_eq!(e.offset, at);
        assert_eq!(
            e.kind,
            ReadErrorKind::NotPacketRecord {
                field: 13,
                wire_type: 0
            }
        );
        assert!(e.to_string().contains("field 13, wire type 0"));
        // Another field with the right wire type is rejected too.
        let e = err_of(&[0x12, 0x00]);
        assert_eq!(
            e.kind,
            ReadErrorKind::NotPacketRecord {
                field: 2,
                wire_type: 2
            }
        );
    }

    #[test]
    fn bad_varints() {
        let mut stream = frame(&bodies()[..1]);
        let at = stream.len() as u64;
        stream.extend_from_slice(&[0xff; 11]);
        let e = err_of(&stream);
        assert_eq!((e.offset, e.kind), (at, ReadErrorKind::BadVarint));
        // The length varint, and a 10-byte varint overflowing 64 bits.
        let mut len = vec![0x0a];
        len.extend_from_slice(&[0xff; 11]);
        assert_eq!(err_of(&len).kind, ReadErrorKind::BadVarint);
        let mut over = vec![0x0a];
        over.extend_from_slice(&[0x80; 9]);
        over.push(0x02);
        assert_eq!(err_of(&over).kind, ReadErrorKind::BadVarint);
    }

    #[test]
    fn errors_are_sticky() {
        let mut r = TraceReader::new();
        r.push(&[0x0a, 0x01, 0x05, 0x12]);
        assert!(r.next_packet().unwrap().is_some());
        let e = r.next_packet().unwrap_err();
        r.push(&[0x0a, 0x00]);
        assert_eq!(r.next_packet().unwrap_err(), e);
        assert_eq!(r.finish().unwrap_err(), e);
    }

    #[test]
    fn packet_size_limit() {
        let mut r = TraceReader::with_max_packet_size(4);
        r.push(&[0x0a, 0x04, 1, 2, 3, 4, 0x0a, 0x05]);
        assert_eq!(r.next_packet().unwrap().unwrap().bytes, [1, 2, 3, 4]);
        // Rejected from the header alone, before the body arrives.
        let e = r.next_packet().unwrap_err();
        assert_eq!(
            (e.offset, e.kind),
            (6, ReadErrorKind::PacketTooLarge { len: 5, max: 4 })
        );
    }

    #[test]
    fn memory_stays_bounded() {
        let body = vec![7u8; 1000];
        let stream = frame(&vec![body; 2000]);
        let mut r = TraceReader::new();
        let mut n = 0;
        for chunk in stream.chunks(4096) {
            r.push(chunk);
            while r.next_packet().unwrap().is_some() {
                n += 1;
            }
            assert!(
                r.buf.len() <= 2 * (4096 + 1003),
                "buffer grew to {}",
                r.buf.len()
            );
        }
        r.finish().unwrap();
        assert_eq!(n, 2000);
    }

    fn bundle_packet(inner: &[Vec<u8>], encode: fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
        TracePacket {
            data: Some(trace_packet::Data::CompressedPackets(
                encode(&frame(inner)).into(),
            )),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn zlib(b: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn raw_deflate(b: &[u8]) -> Vec<u8> {
        let mut e = DeflateEncoder::new(Vec::new(), Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn bundles_expand_with_the_bundle_offset() {
        let b = bodies();
        for encode in [zlib as fn(&[u8]) -> Vec<u8>, raw_deflate, gzip] {
            let outer = vec![
                b[1].clone(),
                bundle_packet(&b[2..5], encode),
                b[5].clone(),
                bundle_packet(&[], encode),
                b[0].clone(),
            ];
            let stream = frame(&outer);
            let offs = offsets(&outer);
            let mut want = vec![(b[1].clone(), offs[0], false)];
            want.extend(b[2..5].iter().map(|p| (p.clone(), offs[1], true)));
            want.push((b[5].clone(), offs[2], false));
            want.push((b[0].clone(), offs[4], false)); // empty bundle yields nothing
            for cut in 0..=stream.len() {
                assert_eq!(read_chunked(&stream, &[cut]).unwrap(), want);
            }

            // With expansion off, bundles pass through.
            let mut r = TraceReader::new();
            r.set_expand_bundles(false);
            r.push(&stream);
            let mut got = Vec::new();
            drain(&mut r, &mut got).unwrap();
            assert_eq!(got, expected(&outer));
        }
    }

    fn bundle_err(data: Vec<u8>, max: usize) -> ReadError {
        let p = TracePacket {
            data: Some(trace_packet::Data::CompressedPackets(data.into())),
            ..Default::default()
        };
        let mut stream = frame(&bodies()[..1]);
        wire::put_trace_packet(&mut stream, &p.encode_to_vec());
        let mut r = TraceReader::with_max_packet_size(max);
        r.push(&stream);
        assert!(r.next_packet().unwrap().is_some());
        let e = r.next_packet().unwrap_err();
        assert_eq!(e.offset, offsets(&bodies()[..2])[1]);
        e
    }

    #[test]
    fn bad_bundles() {
        let e = bundle_err(b"\x78\x9cnot deflate at all".to_vec(), 1 << 20);
        assert!(
            matches!(e.kind, ReadErrorKind::BadBundle(BundleError::Inflate(_))),
            "{e}"
        );

        let full = zlib(&frame(&bodies()));
        let e = bundle_err(full[..full.len() / 2].to_vec(), 1 << 20);
        assert_eq!(e.kind, ReadErrorKind::BadBundle(BundleError::Truncated));

        let e = bundle_err(zlib(&[0u8; 10_000]), 4096);
        assert_eq!(
            e.kind,
            ReadErrorKind::BadBundle(BundleError::TooLarge { max: 4096 })
        );
        // A limit below the initial reservation (found by the property tests).
        let e = bundle_err(zlib(&[0u8; 1000]), 30);
        assert_eq!(
            e.kind,
            ReadErrorKind::BadBundle(BundleError::TooLarge { max: 30 })
        );

        // Inner stream with a partial record after a good one.
        let mut inner = frame(&bodies()[..2]);
        let at = inner.len() as u64;
        inner.extend_from_slice(&[0x0a, 0x09, 1]);
        let e = bundle_err(zlib(&inner), 1 << 20);
        let want = BundleError::Inner {
            offset: at,
            kind: Box::new(ReadErrorKind::LengthPastEnd {
                len: 9,
                available: 1,
            }),
        };
        assert_eq!(e.kind, ReadErrorKind::BadBundle(want));
        assert!(e.to_string().contains("bad compressed bundle"));

        let e = bundle_err(zlib(b"\x10\x01"), 1 << 20);
        let want = BundleError::Inner {
            offset: 0,
            kind: Box::new(ReadErrorKind::NotPacketRecord {
                field: 2,
                wire_type: 0,
            }),
        };
        assert_eq!(e.kind, ReadErrorKind::BadBundle(want));
    }

    #[test]
    fn malformed_packet_with_field_50_is_not_a_bundle() {
        // Field 50 then a truncated field: passed through for the scanner.
        let mut body = Vec::new();
        wire::put_len_field(&mut body, 50, b"junk");
        body.push(0x08);
        let got = read_chunked(&frame(std::slice::from_ref(&body)), &[]).unwrap();
        assert_eq!(got, [(body, 0, false)]);
    }

    /// A reader that yields one byte per call, then optionally fails.
    struct Trickle<'a>(&'a [u8], bool);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.split_first() {
                Some((&b, rest)) if !buf.is_empty() => {
                    buf[0] = b;
                    self.0 = rest;
                    Ok(1)
                }
                None if self.1 => Err(io::Error::other("disk on fire")),
                _ => Ok(0),
            }
        }
    }

    fn read_file<R: Read>(r: R) -> Result<Got, FileReadError> {
        let mut f = TraceFile::new(r)?;
        let mut got = Vec::new();
        while let Some(p) = f.next_packet()? {
            got.push((p.bytes.to_vec(), p.offset, p.in_bundle));
        }
        // Stays at EOF.
        assert!(f.next_packet()?.is_none());
        Ok(got)
    }

    #[test]
    fn file_plain_and_gzip() {
        let b = bodies();
        let stream = frame(&b);
        let want = expected(&b);
        assert_eq!(read_file(&stream[..]).unwrap(), want);
        assert_eq!(read_file(Trickle(&stream, false)).unwrap(), want);
        let gz = gzip(&stream);
        assert!(TraceFile::new(&gz[..]).unwrap().is_gzip());
        assert_eq!(read_file(&gz[..]).unwrap(), want);
        assert_eq!(read_file(Trickle(&gz, false)).unwrap(), want);
        // Multi-member gzip: concatenated files.
        let (first, second) = stream.split_at(offsets(&b)[3] as usize);
        let two = [gzip(first), gzip(second)].concat();
        assert_eq!(read_file(&two[..]).unwrap(), want);
        assert_eq!(read_file(&[][..]).unwrap(), []);
    }

    #[test]
    fn file_errors() {
        let b = bodies();
        let stream = frame(&b);

        // Bad gzip: magic then junk.
        let bad = [&[0x1f, 0x8b][..], &[0x55; 64]].concat();
        let Err(FileReadError::Format(e)) = read_file(&bad[..]) else {
            panic!("bad gzip must be a format error");
        };
        assert!(matches!(e.kind, ReadErrorKind::BadGzip { .. }), "{e}");
        assert_eq!(e.offset, 0);

        // Truncated gzip: the packets before the cut are read, then an error.
        let gz = gzip(&frame(&vec![vec![1u8; 200]; 2000]));
        let mut f = TraceFile::new(&gz[..gz.len() - 20]).unwrap();
        let err = loop {
            match f.next_packet() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("truncated gzip read as complete"),
                Err(e) => break e,
            }
        };
        let FileReadError::Format(e) = err else {
            panic!("{err}")
        };
        assert!(matches!(e.kind, ReadErrorKind::BadGzip { .. }), "{e}");
        assert!(e.offset > 0);

        // Truncated plain file.
        let Err(FileReadError::Format(e)) = read_file(&stream[..stream.len() - 1]) else {
            panic!("truncated file must be a format error");
        };
        assert!(matches!(e.kind, ReadErrorKind::LengthPastEnd { .. }));

        // I/O errors stay I/O errors, gzip'd or not.
        let gz = gzip(&stream);
        for input in [&stream, &gz] {
            let Err(FileReadError::Io(e)) = read_file(Trickle(input, true)) else {
                panic!("I/O error lost");
            };
            assert_eq!(e.to_string(), "disk on fire");
        }
    }
}
