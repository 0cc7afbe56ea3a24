//! Record headers of Trace framing: the tag of a `Trace.packet` record and
//! its length, read strictly (a record header is never resynchronised).

use super::ReadErrorKind;
use crate::wire::{self, WireError};

/// The tag of a `Trace.packet` record: field 1, wire type 2.
pub(super) const PACKET_TAG: u64 = (1 << 3) | 2;

/// Why a header could not be read yet.
pub(super) enum Header {
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
pub(super) fn record_header(buf: &[u8], max: usize) -> Result<Header, ReadErrorKind> {
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
