//! The on-disk format of spool segments (little-endian throughout).
//!
//! A segment file is `SEGMENT_MAGIC` followed by records. A record is a
//! 12-byte header — record magic, body length, crc32 of the body — and the
//! body: kind (u8), batch seq (u64), first packet index (u64), packet count
//! (u32), cursor count (u16), cursors (source u16, length u32, bytes), then
//! the packets.
//!
//! Packets of a batch record (kind 3) are written exactly as they go on the
//! wire inside the `Batch` message: one `packets` field (3) per packet, tag,
//! varint length, bytes. The uplink sends that part of the record as it is
//! (no re-encoding, no copy), and reading a batch back is one read and a
//! crc check. Kind 1, written by earlier relays (each packet as length u32
//! and bytes), is still read.
//!
//! A checkpoint record (count 0) opens each segment and carries the next
//! batch seq, the next packet index and every source's latest cursor, so
//! the newest segment alone is enough to resume even after all older
//! segments were acknowledged and deleted.

use bytes::{BufMut, Bytes, BytesMut};
use tracesync_protocol::scan::{FieldValue, Fields};
use tracesync_protocol::wire;

pub const SEGMENT_MAGIC: &[u8; 8] = b"TSSPOOL1";
const RECORD_MAGIC: u32 = 0x5453_5242;
pub const RECORD_HEADER_BYTES: usize = 12;
/// A record body larger than this is garbage, not data (a frame is 4 MiB).
const MAX_BODY_BYTES: u32 = 64 << 20;
/// `Batch.packets` in the relay protocol.
pub const BATCH_PACKETS_FIELD: u32 = 3;
/// Its tag (field 3, length-delimited).
const BATCH_PACKETS_TAG: u8 = (BATCH_PACKETS_FIELD << 3) as u8 | 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Packets as length u32 + bytes (earlier relays; read only).
    LegacyBatch = 1,
    Checkpoint = 2,
    /// Packets as `Batch.packets` fields.
    Batch = 3,
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: RecordKind,
    /// Batch: its seq. Checkpoint: the next seq to assign.
    pub seq: u64,
    /// Batch: index of its first packet. Checkpoint: the next index.
    pub first_packet_index: u64,
    pub packet_count: u32,
    pub cursors: Vec<(u16, Bytes)>,
    /// The packets as `Batch.packets` fields (empty for a checkpoint).
    pub wire: Bytes,
    /// Bytes of the packets themselves.
    pub payload_bytes: usize,
}

/// Bytes the packets take as `Batch.packets` fields.
#[inline]
pub fn wire_len(packet_len: usize) -> usize {
    1 + wire::varint_len(packet_len as u64) + packet_len
}

/// Bytes `encode` will produce for these cursors and packets.
pub fn encoded_len<'a>(
    cursor_lens: impl Iterator<Item = usize>,
    packets: impl Iterator<Item = &'a Bytes>,
) -> usize {
    RECORD_HEADER_BYTES
        + BODY_FIXED_BYTES
        + cursor_lens.map(|len| 6 + len).sum::<usize>()
        + packets.map(|p| wire_len(p.len())).sum::<usize>()
}

/// kind, seq, first index, packet count, cursor count.
const BODY_FIXED_BYTES: usize = 1 + 8 + 8 + 4 + 2;

/// An encoded record: all its bytes (to write) and, for a batch, where its
/// packets' wire form starts in them.
#[derive(Clone, Debug)]
pub struct Encoded {
    pub bytes: Bytes,
    pub wire_start: usize,
}

impl Encoded {
    /// The packets as `Batch.packets` fields (shares the record's buffer).
    pub fn wire(&self) -> Bytes {
        self.bytes.slice(self.wire_start..)
    }
}

/// Encodes a whole record (header and body) in one buffer: one copy of
/// each packet, which the disk write and the uplink then share.
#[cfg(test)]
pub fn encode(
    kind: RecordKind,
    seq: u64,
    first_packet_index: u64,
    cursors: &[(u16, &[u8])],
    packets: &[Bytes],
) -> Encoded {
    encode_into(
        kind,
        seq,
        first_packet_index,
        cursors,
        packets,
        BytesMut::new(),
    )
}

/// [`encode`] into `out` (cleared first): a spare buffer of an acked
/// batch, so the record is written to memory that is already mapped.
pub fn encode_into(
    kind: RecordKind,
    seq: u64,
    first_packet_index: u64,
    cursors: &[(u16, &[u8])],
    packets: &[Bytes],
    mut out: BytesMut,
) -> Encoded {
    let mut body_len =
        encoded_len(cursors.iter().map(|(_, c)| c.len()), packets.iter()) - RECORD_HEADER_BYTES;
    if kind == RecordKind::LegacyBatch {
        body_len -= packets.iter().map(|p| wire_len(p.len())).sum::<usize>();
        body_len += packets.iter().map(|p| 4 + p.len()).sum::<usize>();
    }
    out.clear();
    out.reserve(RECORD_HEADER_BYTES + body_len);
    out.put_u32_le(RECORD_MAGIC);
    out.put_u32_le(body_len as u32);
    out.put_u32_le(0); // crc, filled below
    out.put_u8(kind as u8);
    out.put_u64_le(seq);
    out.put_u64_le(first_packet_index);
    out.put_u32_le(packets.len() as u32);
    out.put_u16_le(cursors.len() as u16);
    for (source, cursor) in cursors {
        out.put_u16_le(*source);
        out.put_u32_le(cursor.len() as u32);
        out.put_slice(cursor);
    }
    let wire_start = out.len();
    for packet in packets {
        if kind == RecordKind::LegacyBatch {
            out.put_u32_le(packet.len() as u32);
        } else {
            out.put_u8(BATCH_PACKETS_TAG);
            let mut len = packet.len() as u64;
            while len >= 0x80 {
                out.put_u8((len as u8) | 0x80);
                len >>= 7;
            }
            out.put_u8(len as u8);
        }
        out.put_slice(packet);
    }
    debug_assert_eq!(out.len(), RECORD_HEADER_BYTES + body_len);
    let crc = crc32fast::hash(&out[RECORD_HEADER_BYTES..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    Encoded {
        bytes: out.freeze(),
        wire_start,
    }
}

/// Packets in their wire form (`Batch.packets` fields), as one buffer.
pub fn encode_wire(packets: &[Bytes]) -> Bytes {
    let mut out = Vec::with_capacity(packets.iter().map(|p| wire_len(p.len())).sum());
    for packet in packets {
        wire::put_len_field(&mut out, BATCH_PACKETS_FIELD, packet);
    }
    Bytes::from(out)
}

/// The packets of a wire form (slices of it, no copy); Err if it is not a
/// run of `Batch.packets` fields.
pub fn wire_packets(wire: &Bytes) -> Result<Vec<Bytes>, &'static str> {
    let mut packets = Vec::new();
    for field in Fields::new(wire) {
        match field {
            Ok(f) if f.number == BATCH_PACKETS_FIELD => match f.value {
                FieldValue::Len(packet) => packets.push(wire.slice_ref(packet)),
                _ => return Err("packet field of the wrong wire type"),
            },
            Ok(_) => return Err("not a packet field"),
            Err(_) => return Err("packets do not parse"),
        }
    }
    Ok(packets)
}

/// Counts the packets of a wire form and their bytes; Err if it is not a
/// run of `Batch.packets` fields.
fn check_wire(wire: &[u8]) -> Result<(u32, usize), &'static str> {
    let (mut count, mut bytes) = (0u32, 0usize);
    for field in Fields::new(wire) {
        match field {
            Ok(f) if f.number == BATCH_PACKETS_FIELD => match f.value {
                FieldValue::Len(packet) => {
                    count += 1;
                    bytes += packet.len();
                }
                _ => return Err("packet field of the wrong wire type"),
            },
            Ok(_) => return Err("not a packet field"),
            Err(_) => return Err("packets do not parse"),
        }
    }
    Ok((count, bytes))
}

/// What the header of the record at some offset says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderCheck {
    /// A whole record of this many bytes (header included) is there.
    Complete { record_len: usize, crc: u32 },
    /// The file ends inside the record: a torn write.
    Torn,
    /// Not a record header at all.
    Garbage(&'static str),
}

pub fn check_header(rest: &[u8]) -> HeaderCheck {
    let Some(header) = rest.first_chunk::<RECORD_HEADER_BYTES>() else {
        return HeaderCheck::Torn;
    };
    let word =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    if word(0) != RECORD_MAGIC {
        return HeaderCheck::Garbage("bad record magic");
    }
    let body_len = word(4);
    if body_len > MAX_BODY_BYTES {
        return HeaderCheck::Garbage("record length out of range");
    }
    let record_len = RECORD_HEADER_BYTES + body_len as usize;
    if rest.len() < record_len {
        return HeaderCheck::Torn;
    }
    HeaderCheck::Complete {
        record_len,
        crc: word(8),
    }
}

/// Verifies the crc of a whole record and decodes it.
pub fn decode(record: &Bytes) -> Result<Record, &'static str> {
    let HeaderCheck::Complete { record_len, crc } = check_header(record) else {
        return Err("incomplete record");
    };
    let body = record.slice(RECORD_HEADER_BYTES..record_len);
    if crc32fast::hash(&body) != crc {
        return Err("checksum mismatch");
    }
    let mut reader = Reader { buf: &body, pos: 0 };
    let kind = match reader.u8()? {
        1 => RecordKind::LegacyBatch,
        2 => RecordKind::Checkpoint,
        3 => RecordKind::Batch,
        _ => return Err("unknown record kind"),
    };
    let seq = reader.u64()?;
    let first_packet_index = reader.u64()?;
    let packet_count = reader.u32()?;
    let cursor_count = reader.u16()?;
    let mut cursors = Vec::with_capacity(usize::from(cursor_count).min(1024));
    for _ in 0..cursor_count {
        let source = reader.u16()?;
        let len = reader.u32()? as usize;
        let start = reader.take(len)?;
        cursors.push((source, body.slice(start..start + len)));
    }
    let (wire, payload_bytes) = if kind == RecordKind::LegacyBatch {
        // Bounded by the body length: every packet takes at least 4 bytes.
        if packet_count as usize > body.len() / 4 {
            return Err("packet count exceeds the record");
        }
        let mut packets = Vec::with_capacity(packet_count as usize);
        for _ in 0..packet_count {
            let len = reader.u32()? as usize;
            let start = reader.take(len)?;
            packets.push(body.slice(start..start + len));
        }
        if reader.pos != body.len() {
            return Err("trailing bytes after the last packet");
        }
        let bytes = packets.iter().map(Bytes::len).sum();
        (encode_wire(&packets), bytes)
    } else {
        let wire = body.slice(reader.pos..);
        let (count, bytes) = check_wire(&wire)?;
        if count != packet_count {
            return Err("packet count does not match the packets");
        }
        (wire, bytes)
    };
    Ok(Record {
        kind,
        seq,
        first_packet_index,
        packet_count,
        cursors,
        wire,
        payload_bytes,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// Skips `len` bytes, returning where they start.
    fn take(&mut self, len: usize) -> Result<usize, &'static str> {
        let start = self.pos;
        let end = start.checked_add(len).ok_or("length overflow")?;
        if end > self.buf.len() {
            return Err("field runs past the record");
        }
        self.pos = end;
        Ok(start)
    }
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        let start = self.take(N)?;
        let mut out = [0; N];
        out.copy_from_slice(&self.buf[start..start + N]);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.bytes::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        self.bytes().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        self.bytes().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        self.bytes().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_batch_layouts() {
        let packets = [
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from(vec![7u8; 300]),
        ];
        for kind in [RecordKind::Batch, RecordKind::LegacyBatch] {
            let encoded = encode(kind, 9, 1000, &[(0, b"{}"), (3, b"cursor")], &packets);
            let record = decode(&encoded.bytes).unwrap();
            assert_eq!(record.kind, kind);
            assert_eq!(
                (record.seq, record.first_packet_index, record.packet_count),
                (9, 1000, 3)
            );
            assert_eq!(wire_packets(&record.wire).unwrap(), packets);
            assert_eq!(record.payload_bytes, 303);
            assert_eq!(record.cursors[1], (3, Bytes::from_static(b"cursor")));
            // Both read back as the same wire form.
            assert_eq!(record.wire, encode_wire(&packets));
        }
        let encoded = encode(RecordKind::Batch, 9, 1000, &[], &packets);
        assert_eq!(encoded.wire(), encode_wire(&packets));
        assert_eq!(
            encoded.bytes.len(),
            encoded_len(std::iter::empty(), packets.iter())
        );
    }

    #[test]
    fn wire_form_is_the_batch_message_field() {
        use prost::Message;
        use tracesync_protocol::relay::v1;
        let packets = vec![Bytes::from_static(b"xy"), Bytes::from(vec![1u8; 200])];
        let batch = v1::Batch {
            packets: packets.clone(),
            ..Default::default()
        };
        assert_eq!(encode_wire(&packets), batch.encode_to_vec());
        assert!(wire_packets(&Bytes::from_static(&[0x08, 0x01])).is_err());
    }

    #[test]
    fn any_flipped_byte_or_cut_is_rejected() {
        let bytes = encode(
            RecordKind::Checkpoint,
            1,
            0,
            &[(1, b"x")],
            &[Bytes::from_static(b"p")],
        )
        .bytes
        .to_vec();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&Bytes::from(bad)).is_err(), "byte {i}");
        }
        for cut in 0..bytes.len() {
            assert_eq!(check_header(&bytes[..cut]), HeaderCheck::Torn, "cut {cut}");
            assert!(decode(&Bytes::copy_from_slice(&bytes[..cut])).is_err());
        }
    }
}
