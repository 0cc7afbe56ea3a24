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
#[inline]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    // Fast path: one-byte varints (most tags, flags and short lengths).
    if let Some(&byte) = buf.get(*pos)
        && byte < 0x80
    {
        *pos += 1;
        return Ok(u64::from(byte));
    }
    let Some(rest) = buf.get(*pos..) else {
        return Err(WireError::Truncated);
    };
    let mut value: u64 = 0;
    // Iterating the slice needs no bounds check per byte.
    for (i, &byte) in rest.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            *pos += i + 1;
            return Ok(value);
        }
    }
    if rest.len() >= 10 {
        Err(WireError::VarintTooLong)
    } else {
        Err(WireError::Truncated)
    }
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
