//! Protobuf wire primitives: varints, tags, and the errors of malformed bytes.
//!
//! Hand-written on purpose: the scanner must read and skip fields without
//! decoding messages (prost's encoding module is not public API).

/// Protobuf wire types (groups are not used by Perfetto and are rejected).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireType {
    Varint = 0,
    Fixed64 = 1,
    Len = 2,
    Fixed32 = 5,
}

/// What is wrong with a run of bytes; offsets are added by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("input ends inside a field")]
    Truncated,
    #[error("varint longer than 10 bytes")]
    VarintTooLong,
    #[error("length {len} runs past the end of the enclosing message ({available} bytes left)")]
    LengthPastEnd { len: u64, available: u64 },
    #[error("unsupported wire type {0}")]
    BadWireType(u8),
    #[error("field number 0 is invalid")]
    FieldZero,
}

/// Reads a varint at `*pos`, advancing it.
#[inline(always)]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    let (value, len) = decode_varint(buf.get(*pos..).unwrap_or_default())?;
    *pos += len;
    Ok(value)
}

/// Decodes the varint at the start of `buf`: its value and length in bytes.
/// Bits past 64 in a 10th byte are dropped, as protobuf parsers do.
#[inline(always)]
pub fn decode_varint(buf: &[u8]) -> Result<(u64, usize), WireError> {
    // One-byte varints (tags, small lengths) dominate: keep them branch-light.
    if let Some(&b) = buf.first()
        && b < 0x80
    {
        return Ok((u64::from(b), 1));
    }
    decode_varint_multi(buf)
}

#[inline]
fn decode_varint_multi(buf: &[u8]) -> Result<(u64, usize), WireError> {
    if let Some(bytes) = buf.first_chunk::<10>() {
        // Branch-free for up to 8 bytes: locate the first byte without the
        // continuation bit, then pack the 7-bit groups together.
        let (word, stops) = word_and_stops(bytes);
        let low = |w: u64| {
            let x = w & 0x7f7f_7f7f_7f7f_7f7f;
            let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
            let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
            (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
        };
        if stops != 0 {
            let bits = stops.trailing_zeros() + 1; // 8, 16, ... 64
            let keep = u64::MAX >> (64 - bits);
            return Ok((low(word & keep), bits as usize / 8));
        }
        // 9 or 10 bytes (large timestamps); bits past 64 are dropped.
        let value = low(word) | u64::from(bytes[8] & 0x7f) << 56;
        if bytes[8] < 0x80 {
            return Ok((value, 9));
        }
        if bytes[9] < 0x80 {
            return Ok((value | u64::from(bytes[9]) << 63, 10));
        }
        return Err(WireError::VarintTooLong);
    }
    let mut value = 0u64;
    for (i, &byte) in buf.iter().enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Ok((value, i + 1));
        }
    }
    Err(WireError::Truncated)
}

/// The first 8 bytes of a varint's 10 as a little-endian word, and the
/// high bit of each byte that ends a varint (no continuation bit) set.
#[inline(always)]
fn word_and_stops(bytes: &[u8; 10]) -> (u64, u64) {
    let word = u64::from_le_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ]);
    (word, !word & 0x8080_8080_8080_8080)
}

/// The length of the varint at the start of `buf`, with
/// [`decode_varint`]'s errors, without assembling its value: for a field
/// whose value the reader does not keep (a timestamp's 6-8 bytes).
#[inline(always)]
pub fn skip_varint(buf: &[u8]) -> Result<usize, WireError> {
    if let Some(&b) = buf.first()
        && b < 0x80
    {
        return Ok(1);
    }
    if let Some(bytes) = buf.first_chunk::<10>() {
        let (_, stops) = word_and_stops(bytes);
        if stops != 0 {
            return Ok(stops.trailing_zeros() as usize / 8 + 1);
        }
        if bytes[8] < 0x80 {
            return Ok(9);
        }
        if bytes[9] < 0x80 {
            return Ok(10);
        }
        return Err(WireError::VarintTooLong);
    }
    decode_varint_multi(buf).map(|(_, len)| len)
}

/// Number of bytes `v` takes as a varint.
#[inline]
pub const fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 bits, at least one.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends `v` as a varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a field tag.
#[inline]
pub fn put_tag(out: &mut Vec<u8>, field: u32, wire_type: WireType) {
    put_varint(out, (u64::from(field) << 3) | wire_type as u64);
}

/// Appends a varint field.
#[inline]
pub fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, WireType::Varint);
    put_varint(out, v);
}

/// Appends a length-delimited field.
#[inline]
pub fn put_len_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_tag(out, field, WireType::Len);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends `body` as one `Trace.packet` record (field 1), the unit of a trace file.
#[inline]
pub fn put_trace_packet(out: &mut Vec<u8>, body: &[u8]) {
    put_len_field(out, 1, body);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain byte-at-a-time definition.
    fn reference(buf: &[u8]) -> Result<(u64, usize), WireError> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = buf.get(i) else {
                return Err(WireError::Truncated);
            };
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok((value, i + 1));
            }
        }
        Err(WireError::VarintTooLong)
    }

    #[test]
    fn decode_matches_reference_and_round_trips() {
        let mut values = vec![0, 1, 127, 128, 300, u64::MAX, u64::MAX - 1, 1 << 63];
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend((0..64).map(|s| (1u64 << s) - 1));
        for v in values {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            for pad in [0usize, 1, 12] {
                let mut padded = b.clone();
                padded.extend(std::iter::repeat_n(0xffu8, pad));
                assert_eq!(decode_varint(&padded), Ok((v, b.len())), "{v}");
                let mut pos = 0;
                assert_eq!(read_varint(&padded, &mut pos), Ok(v));
                assert_eq!(pos, b.len());
            }
            // Every truncation is reported as such.
            for cut in 0..b.len() {
                assert_eq!(decode_varint(&b[..cut]), Err(WireError::Truncated));
            }
        }
        // Overlong and over-64-bit forms, with and without trailing bytes.
        let cases: [&[u8]; 5] = [
            &[0xff; 11],
            &[0xff; 10],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[
                0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0x00,
            ],
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
        ];
        for c in cases {
            assert_eq!(decode_varint(c), reference(c), "{c:?}");
        }
        let mut pos = 3;
        assert_eq!(read_varint(&[1, 2], &mut pos), Err(WireError::Truncated));
    }

    proptest::proptest! {
        /// Skipping a varint reads as many bytes, and fails alike, as
        /// decoding it: at every length, with or without bytes after it.
        #[test]
        fn skip_varint_is_decode_varint_without_the_value(
            bytes in proptest::collection::vec(
                proptest::sample::select(vec![0x00u8, 0x01, 0x7f, 0x80, 0x81, 0xff]),
                0..14,
            ),
        ) {
            proptest::prop_assert_eq!(
                skip_varint(&bytes),
                decode_varint(&bytes).map(|(_, len)| len)
            );
        }
    }
}
