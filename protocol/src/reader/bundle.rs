//! `compressed_packets` bundles (field 50): finding one in a packet,
//! inflating it within the size limit, and checking that what it expands to
//! is a sequence of complete records.
//!
//! Perfetto's service writes bundles with zlib's `deflateInit` (RFC 1950
//! header) and its trace processor auto-detects zlib or gzip headers, so
//! bundles are accepted with a zlib header, a gzip header, or as raw deflate.

use std::io::Read;

use flate2::{Decompress, FlushDecompress, Status};

use super::framing::{Header, record_header};
use super::{BundleError, ReadErrorKind};
use crate::scan::field;
use crate::wire;

/// Byte range of the last `compressed_packets` field of a packet, if the
/// packet is well formed and has one. Malformed packets are not bundles:
/// they pass through for the consumer's scanner to report.
pub(super) fn find_compressed(p: &[u8]) -> Option<(usize, usize)> {
    bundle_range(p)
}

/// The byte range of the `compressed_packets` field an expanding reader
/// would expand in packet `p` (see [`TraceReader::expand_last`]): for a
/// caller whose scan of the packet failed, the reader's own walk.
///
/// [`TraceReader::expand_last`]: super::TraceReader::expand_last
pub fn bundle_range(p: &[u8]) -> Option<(usize, usize)> {
    // Every encoding of field 50's tag (402, length-delimited) starts with
    // the byte 0x92, minimal or not: without it there is no bundle, and the
    // field walk below (a second one per packet) is skipped.
    if !has_byte_0x92(p) {
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

/// Whether `p` holds the byte 0x92, eight bytes per step (the classic
/// "has a zero byte" test on `word ^ 0x92..92`). `<[u8]>::contains` calls
/// the generic memchr, whose alignment prologue and epilogue cost more than
/// the search for the ~50-byte packets that dominate small-packet traces
/// (10% of a merge's instructions, checked in both passes).
#[inline]
pub(super) fn has_byte_0x92(p: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const PATTERN: u64 = u64::from_ne_bytes([0x92; 8]);
    let mut words = p.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_ne_bytes(w.try_into().expect("8 bytes")) ^ PATTERN;
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            return true;
        }
    }
    words.remainder().contains(&0x92)
}

/// Inflates a bundle into `out` (cleared first), at most `max` bytes.
pub(super) fn inflate_bundle(
    data: &[u8],
    max: usize,
    out: &mut Vec<u8>,
) -> Result<(), BundleError> {
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
pub(super) fn validate_bundle(bundle: &[u8], max: usize) -> Result<(), BundleError> {
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
