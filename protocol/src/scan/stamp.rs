//! Stamping: a copy of a packet with `machine_id`,
//! `trusted_packet_sequence_id` or `timestamp_clock_id` set, removed or
//! replaced, every other byte in order; from a fresh walk ([`stamp_into`]),
//! from the positions the scan found ([`stamp_scanned`], [`StampLayout`]),
//! or as a prefix of the packet plus a short inline tail ([`stamp_split`]).

use super::field;
use super::layout::StampLayout;
use super::{Fields, PacketFields, ScanError};

/// Top-level edits applied by [`stamp_into`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    /// Replace (or add) `machine_id`; `Some(0)` removes it (0 means the host).
    pub machine_id: Option<u32>,
    /// Replace (or add) `trusted_packet_sequence_id`.
    pub trusted_packet_sequence_id: Option<u32>,
    /// Set `timestamp_clock_id` if the packet has none.
    pub default_timestamp_clock_id: Option<u32>,
    /// Remove fields only the tracing service may write (trusted_uid,
    /// trusted_pid, machine_id, trusted_packet_sequence_id), as Perfetto's
    /// service does to producer packets.
    pub strip_trusted: bool,
}

/// Appends `packet` with the edits of `stamp` to `out` (the body only, no
/// Trace framing). Fields not edited keep their bytes and order.
pub fn stamp_into(packet: &[u8], stamp: &Stamp, out: &mut Vec<u8>) -> Result<(), ScanError> {
    let mut has_clock_id = false;
    let mut copied_from = 0;
    // Copy runs of kept fields, skipping removed ones.
    for f in Fields::new(packet) {
        let f = f?;
        let remove = match f.number {
            field::MACHINE_ID => stamp.machine_id.is_some() || stamp.strip_trusted,
            field::TRUSTED_PACKET_SEQUENCE_ID => {
                stamp.trusted_packet_sequence_id.is_some() || stamp.strip_trusted
            }
            field::TRUSTED_UID | field::TRUSTED_PID => stamp.strip_trusted,
            field::TIMESTAMP_CLOCK_ID => {
                has_clock_id = true;
                false
            }
            _ => false,
        };
        if remove {
            out.extend_from_slice(&packet[copied_from..f.start]);
            copied_from = f.end;
        }
    }
    out.extend_from_slice(&packet[copied_from..]);
    append_stamped_fields(stamp, has_clock_id, out);
    Ok(())
}

/// The fields a stamp adds after the packet's kept bytes.
fn append_stamped_fields(stamp: &Stamp, has_clock_id: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(StampSuffix::new(stamp, has_clock_id).as_slice());
}

/// [`stamp_into`] for a packet already scanned: uses the field positions the
/// scan found instead of walking the packet again. Same output.
pub fn stamp_scanned(
    packet: &[u8],
    fields: &PacketFields<'_>,
    stamp: &Stamp,
    out: &mut Vec<u8>,
) -> Result<(), ScanError> {
    stamp_by_layout(packet, &fields.stamp_layout, stamp, out)
}

/// [`stamp_scanned`] with only the scan's [`StampLayout`] kept (a caller
/// that moved the scan's results away from the packet's bytes).
pub fn stamp_by_layout(
    packet: &[u8],
    layout: &StampLayout,
    stamp: &Stamp,
    out: &mut Vec<u8>,
) -> Result<(), ScanError> {
    if stamp.strip_trusted || layout.repeated {
        return stamp_into(packet, stamp, out);
    }
    let cuts = replaced_fields(layout, stamp);
    let mut copied_from = 0;
    for (start, end) in cuts.into_iter().flatten() {
        out.extend_from_slice(&packet[copied_from..start as usize]);
        copied_from = end as usize;
    }
    out.extend_from_slice(&packet[copied_from..]);
    append_stamped_fields(stamp, layout.has_clock_id, out);
    Ok(())
}

/// Longest run of fields a [`Stamp`] appends: trusted_packet_sequence_id
/// (1-byte tag), machine_id and timestamp_clock_id (2-byte tags), each
/// with a varint of at most 5 bytes.
pub const STAMP_SUFFIX_MAX: usize = 20;

/// Most bytes of a packet [`stamp_split`] moves from after a replaced
/// field into the tail (a producer's sequence_flags after its sequence id).
pub const STAMP_MOVED_MAX: usize = 12;

/// Room a tail keeps after the stamp's fields for one more varint field
/// with a 1-byte tag (a converted packet's timestamp).
pub const STAMP_EXTRA_MAX: usize = 11;

/// Bytes that follow a packet's kept prefix once stamped, held inline (no
/// allocation): kept bytes from after a replaced field, then the fields
/// the stamp appends, then at most one field pushed by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampTail {
    buf: [u8; STAMP_MOVED_MAX + STAMP_SUFFIX_MAX + STAMP_EXTRA_MAX],
    len: u8,
}

impl Default for StampTail {
    fn default() -> Self {
        Self {
            buf: [0; STAMP_MOVED_MAX + STAMP_SUFFIX_MAX + STAMP_EXTRA_MAX],
            len: 0,
        }
    }
}

impl StampTail {
    /// The fields `stamp` appends to a packet that has (or has not) a
    /// `timestamp_clock_id` of its own, after `moved` (at most
    /// [`STAMP_MOVED_MAX`] bytes).
    fn new(moved: [&[u8]; 2], stamp: &Stamp, has_clock_id: bool) -> Self {
        Self::join(moved, &StampSuffix::new(stamp, has_clock_id))
    }

    /// `moved` (at most [`STAMP_MOVED_MAX`] bytes, most often none), then
    /// `suffix`, copied whole (a fixed size: no call to memcpy).
    #[inline]
    fn join(moved: [&[u8]; 2], suffix: &StampSuffix) -> Self {
        let mut s = Self::default();
        s.fill(moved, suffix);
        s
    }

    /// [`Self::join`] in place (`moved` and a suffix always fit).
    #[inline]
    fn fill(&mut self, moved: [&[u8]; 2], suffix: &StampSuffix) {
        if let Some(len) = write_tail(&mut self.buf, moved, suffix) {
            self.len = len as u8;
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// Appends a varint field with a 1-byte tag (field numbers 1 to 15);
    /// false, the tail unchanged, for another field number or where it
    /// does not fit.
    pub fn push_varint_field(&mut self, field: u32, mut v: u64) -> bool {
        let at = usize::from(self.len);
        let Some(room) = self.buf.get_mut(at..at + STAMP_EXTRA_MAX) else {
            return false;
        };
        if !(1..16).contains(&field) {
            return false;
        }
        room[0] = (field << 3) as u8;
        let mut n = 1;
        while v >= 0x80 {
            room[n] = (v as u8) | 0x80;
            n += 1;
            v >>= 7;
        }
        room[n] = v as u8;
        self.len += n as u8 + 1;
        true
    }
}

/// The fields a [`Stamp`] appends to a packet, built once for the packets
/// that take the same stamp (a sequence of one merge input) instead of
/// encoded for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampSuffix {
    buf: [u8; STAMP_SUFFIX_MAX],
    len: u8,
}

impl StampSuffix {
    /// The fields `stamp` appends to a packet that has (or has not) a
    /// `timestamp_clock_id` of its own.
    pub fn new(stamp: &Stamp, has_clock_id: bool) -> Self {
        let mut s = Self {
            buf: [0; STAMP_SUFFIX_MAX],
            len: 0,
        };
        if let Some(seq) = stamp.trusted_packet_sequence_id {
            s.put_varint(u64::from(field::TRUSTED_PACKET_SEQUENCE_ID) << 3);
            s.put_varint(u64::from(seq));
        }
        if let Some(machine) = stamp.machine_id.filter(|&m| m != 0) {
            s.put_varint(u64::from(field::MACHINE_ID) << 3);
            s.put_varint(u64::from(machine));
        }
        if let (false, Some(clock)) = (has_clock_id, stamp.default_timestamp_clock_id) {
            s.put_varint(u64::from(field::TIMESTAMP_CLOCK_ID) << 3);
            s.put_varint(u64::from(clock));
        }
        s
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// Varints of at most 32 bits after a tag: within `buf` by construction.
    fn put_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf[usize::from(self.len)] = (v as u8) | 0x80;
            self.len += 1;
            v >>= 7;
        }
        self.buf[usize::from(self.len)] = v as u8;
        self.len += 1;
    }
}

/// Writes a stamped packet's tail, `moved` then `suffix`, at the start of
/// `dest`: its length, or None, `dest` unchanged, if it does not fit. The
/// suffix is copied at a fixed size (no call to memcpy) where `dest` has
/// room for its whole buffer after `moved`, or where nothing is moved (as
/// for most packets) by `dest`'s own length; else at its length.
#[inline]
pub fn write_tail(dest: &mut [u8], moved: [&[u8]; 2], suffix: &StampSuffix) -> Option<usize> {
    let appended = suffix.as_slice();
    let len = moved[0].len() + moved[1].len() + appended.len();
    if len > dest.len() {
        return None;
    }
    let mut at = 0;
    for m in moved.into_iter().filter(|m| !m.is_empty()) {
        dest[at..at + m.len()].copy_from_slice(m);
        at += m.len();
    }
    if let Some(room) = dest.get_mut(at..at + STAMP_SUFFIX_MAX) {
        room.copy_from_slice(&suffix.buf);
    } else if at == 0 {
        // Shorter than the suffix's buffer: `len <= dest.len()` fitted.
        let whole = dest.len();
        dest.copy_from_slice(&suffix.buf[..whole]);
    } else {
        dest[at..len].copy_from_slice(appended);
    }
    Some(len)
}

/// The byte ranges of the fields `stamp` replaces (sequence id, machine
/// id), in packet order.
fn replaced_fields(layout: &StampLayout, stamp: &Stamp) -> [Option<(u32, u32)>; 2] {
    let sequence = layout
        .sequence_id
        .filter(|_| stamp.trusted_packet_sequence_id.is_some());
    let machine = layout.machine_id.filter(|_| stamp.machine_id.is_some());
    let mut cuts = [sequence, machine];
    if let [Some(a), Some(b)] = cuts
        && b.0 < a.0
    {
        cuts.swap(0, 1);
    }
    cuts
}

/// [`stamp_scanned`] without copying the packet where it allows: if the
/// stamped packet is `packet[..n]` followed by a short tail (the replaced
/// fields, if any, lie within the packet's last [`STAMP_MOVED_MAX`] kept
/// bytes, as a relay's appended sequence id or a producer's sequence id
/// and flags do), returns `n` and that tail. None where a replaced field
/// lies further inside the packet or stamping walks it.
pub fn stamp_split(
    packet: &[u8],
    fields: &PacketFields<'_>,
    stamp: &Stamp,
) -> Option<(usize, StampTail)> {
    stamp_split_by_layout(packet, &fields.stamp_layout, stamp)
}

/// [`stamp_split`] with only the scan's [`StampLayout`] kept.
pub fn stamp_split_by_layout(
    packet: &[u8],
    layout: &StampLayout,
    stamp: &Stamp,
) -> Option<(usize, StampTail)> {
    let (head, moved) = stamp_split_moved(packet, layout, stamp)?;
    Some((head, StampTail::new(moved, stamp, layout.has_clock_id)))
}

/// [`stamp_split_by_layout`] with the fields the stamp appends built
/// beforehand (`suffix` must be `StampSuffix::new(stamp,
/// layout.has_clock_id)`) and the tail written into `tail`, where the
/// caller keeps it; returns the kept prefix's length. A tail returned was
/// built on the stack and copied: its bytes, stored at a variable offset,
/// were read back whole before the stores could be forwarded (a stall on
/// most packets of a merge).
#[inline]
pub fn stamp_split_with_suffix_into(
    packet: &[u8],
    layout: &StampLayout,
    stamp: &Stamp,
    suffix: &StampSuffix,
    tail: &mut StampTail,
) -> Option<usize> {
    debug_assert_eq!(*suffix, StampSuffix::new(stamp, layout.has_clock_id));
    let (head, moved) = stamp_split_moved(packet, layout, stamp)?;
    tail.fill(moved, suffix);
    Some(head)
}

/// The kept prefix's length and the kept bytes moved after it (at most
/// [`STAMP_MOVED_MAX`] of them, in two pieces), for [`stamp_split`]: the
/// stamped packet is the prefix, the moved bytes, then the fields the
/// stamp appends. None where it does not split. For a caller that builds
/// the tail where it keeps it.
#[inline]
pub fn stamp_split_moved<'p>(
    packet: &'p [u8],
    layout: &StampLayout,
    stamp: &Stamp,
) -> Option<(usize, [&'p [u8]; 2])> {
    if stamp.strip_trusted || layout.repeated {
        return None;
    }
    let cuts = replaced_fields(layout, stamp);
    let [first, second] = cuts.map(|c| c.map(|(s, e)| (s as usize, e as usize)));
    let (head, moved): (usize, [&[u8]; 2]) = match (first, second) {
        (None, None) => (packet.len(), [&[], &[]]),
        (Some((s, e)), None) | (None, Some((s, e))) => (s, [&packet[e..], &[]]),
        (Some((s1, e1)), Some((s2, e2))) => (s1, [&packet[e1..s2], &packet[e2..]]),
    };
    if moved[0].len() + moved[1].len() > STAMP_MOVED_MAX {
        return None;
    }
    Some((head, moved))
}
