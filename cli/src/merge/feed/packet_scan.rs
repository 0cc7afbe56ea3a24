//! What the second pass uses of a packet's scan ([`PacketScan`]), owned,
//! and the walk that writes it where the batch keeps it
//! ([`PacketScan::scan_into`]).
//!
//! Invariants: [`PacketScan::scan_into`] gives what a full
//! [`scan_packet`](tracesync_protocol::scan::scan_packet) reads of the
//! same fields (the same walk, so the same packets are malformed), and
//! the same `compressed_packets`. [`SequenceIndex`] numbers an input's
//! (machine id, sequence id) pairs 0, 1, 2... in order of first
//! appearance, the same way whichever thread scans the input.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

use tracesync_protocol::scan::{
    FieldSink, Kind, SEQ_INCREMENTAL_STATE_CLEARED, StampLayout, defaults_timestamp_clock_id,
    field, note_payload, walk_fields_into,
};

/// What the second pass uses of a packet's scan, owned: byte ranges are
/// relative to the packet's first byte.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PacketScan {
    pub timestamp: Option<u64>,
    pub timestamp_clock_id: Option<u32>,
    pub trusted_packet_sequence_id: Option<u32>,
    pub machine_id: Option<u32>,
    pub data_field: Option<u32>,
    pub clears_incremental_state: bool,
    pub has_system_info: bool,
    /// None without `trace_packet_defaults`; else its nonzero
    /// `timestamp_clock_id` if it has one and decodes (read here, off the
    /// merging thread).
    pub defaults_clock: Option<Option<u32>>,
    pub clock_snapshot: Option<Range<u32>>,
    pub remote_clock_sync: Option<Range<u32>>,
    pub stamp_layout: StampLayout,
    /// The packet's (machine id, sequence id) in its input's
    /// `SequenceIndex`: the merging thread finds its sequence's state by
    /// it, not by a hash lookup per packet.
    pub sequence: u32,
}

/// Numbers an input's (embedded machine id, sequence id) pairs densely,
/// in order of first appearance.
#[derive(Debug, Default)]
pub struct SequenceIndex {
    numbers: HashMap<(u32, u32), u32, BuildHasherDefault<SequenceKeyHasher>>,
    /// The last pair looked up and its number: runs of one sequence skip
    /// the hash.
    last: Option<((u32, u32), u32)>,
}

impl SequenceIndex {
    /// The number of the pair `scan` belongs to (ids absent count as 0).
    #[inline]
    pub fn number(&mut self, scan: &PacketScan) -> u32 {
        let key = (
            scan.machine_id.unwrap_or(0),
            scan.trusted_packet_sequence_id.unwrap_or(0),
        );
        if let Some((last, n)) = self.last
            && last == key
        {
            return n;
        }
        let next = self.numbers.len() as u32;
        let n = *self.numbers.entry(key).or_insert(next);
        self.last = Some((key, n));
        n
    }
}

/// Hasher of the sequence lookup, keyed by (embedded machine id, sequence
/// id): packs the two u32s and mixes them with MurmurHash3's finalizer, a
/// bijection, instead of SipHash (a measurable share of the per-packet
/// cost with small packets).
#[derive(Default)]
struct SequenceKeyHasher(u64);

impl Hasher for SequenceKeyHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        z ^ (z >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 << 32) | u64::from(n);
    }
}

/// Byte range of `b`, a slice of `packet`, relative to its first byte.
fn range_in(packet: &[u8], b: &[u8]) -> Range<u32> {
    let start = (b.as_ptr() as usize - packet.as_ptr() as usize) as u32;
    start..start + b.len() as u32
}

/// The nonzero `timestamp_clock_id` of `trace_packet_defaults` bytes, if
/// they decode and have one.
fn defaults_clock(defaults: &[u8]) -> Option<u32> {
    defaults_timestamp_clock_id(defaults)
        .ok()
        .flatten()
        .filter(|&c| c != 0)
}

impl PacketScan {
    /// Scans `packet` into `self`, which must hold the defaults (its
    /// `sequence` is left to the caller's `SequenceIndex`), written
    /// where the batch keeps it (a scan built elsewhere and copied in was
    /// read back before its stores could be forwarded, a stall on most
    /// packets). Returns the packet's `compressed_packets` bytes, or None
    /// if the packet is malformed (then `self` holds the fields before the
    /// malformed one).
    #[inline]
    pub fn scan_into<'a>(&mut self, packet: &'a [u8]) -> Option<Option<&'a [u8]>> {
        let mut sink = Sink {
            scan: self,
            packet,
            sequence_flags: 0,
            state_cleared: false,
            defaults: None,
            compressed: None,
        };
        let walked = walk_fields_into(packet, &mut sink);
        let Sink {
            sequence_flags,
            state_cleared,
            defaults,
            compressed,
            ..
        } = sink;
        walked.ok()?;
        self.clears_incremental_state =
            state_cleared || sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED != 0;
        self.defaults_clock = defaults.map(defaults_clock);
        Some(compressed)
    }

    pub fn kind(&self) -> Kind {
        Kind(self.data_field)
    }
}

/// The walk's view of a [`PacketScan`] being written, with what it needs
/// only until the walk ends.
struct Sink<'s, 'a> {
    scan: &'s mut PacketScan,
    packet: &'a [u8],
    sequence_flags: u32,
    state_cleared: bool,
    defaults: Option<&'a [u8]>,
    compressed: Option<&'a [u8]>,
}

impl<'a> FieldSink<'a> for Sink<'_, 'a> {
    #[inline(always)]
    fn varint(&mut self, number: u32, value: u64) {
        match number {
            field::TIMESTAMP => self.scan.timestamp = Some(value),
            field::TRUSTED_PACKET_SEQUENCE_ID => {
                self.scan.trusted_packet_sequence_id = Some(value as u32);
            }
            field::SEQUENCE_FLAGS => self.sequence_flags = value as u32,
            field::TIMESTAMP_CLOCK_ID => self.scan.timestamp_clock_id = Some(value as u32),
            field::INCREMENTAL_STATE_CLEARED => self.state_cleared = value != 0,
            field::MACHINE_ID => self.scan.machine_id = Some(value as u32),
            _ => note_payload(&mut self.scan.data_field, number),
        }
    }

    #[inline(always)]
    fn len(&mut self, number: u32, bytes: &'a [u8]) {
        match number {
            field::TRACE_PACKET_DEFAULTS => self.defaults = Some(bytes),
            field::CLOCK_SNAPSHOT => self.scan.clock_snapshot = Some(range_in(self.packet, bytes)),
            field::SYSTEM_INFO => self.scan.has_system_info = true,
            field::REMOTE_CLOCK_SYNC => {
                self.scan.remote_clock_sync = Some(range_in(self.packet, bytes));
            }
            field::COMPRESSED_PACKETS => self.compressed = Some(bytes),
            _ => {}
        }
        note_payload(&mut self.scan.data_field, number);
    }

    #[inline(always)]
    fn fixed(&mut self, number: u32) {
        note_payload(&mut self.scan.data_field, number);
    }

    #[inline(always)]
    fn span(&mut self, number: u32, start: usize, end: usize) {
        self.scan.stamp_layout.note(number, start, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::test_traces::arbitrary_packet;
    use proptest::prelude::*;
    use tracesync_protocol::scan::{PacketFields, scan_packet};

    /// What a full scan's fields make (what `scan_into` writes in place).
    fn from_full_scan(packet: &[u8], fields: &PacketFields<'_>) -> PacketScan {
        PacketScan {
            timestamp: fields.timestamp,
            timestamp_clock_id: fields.timestamp_clock_id,
            trusted_packet_sequence_id: fields.trusted_packet_sequence_id,
            machine_id: fields.machine_id,
            data_field: fields.data_field,
            clears_incremental_state: fields.clears_incremental_state(),
            has_system_info: fields.system_info.is_some(),
            defaults_clock: fields.trace_packet_defaults.map(defaults_clock),
            clock_snapshot: fields.clock_snapshot.map(|b| range_in(packet, b)),
            remote_clock_sync: fields.remote_clock_sync.map(|b| range_in(packet, b)),
            stamp_layout: fields.stamp_layout,
            sequence: 0,
        }
    }

    #[test]
    fn sequences_are_numbered_in_order_of_first_appearance() {
        let scan = |machine, seq| PacketScan {
            machine_id: machine,
            trusted_packet_sequence_id: seq,
            ..PacketScan::default()
        };
        let mut index = SequenceIndex::default();
        let order = [
            (None, Some(3)),
            (None, Some(3)),
            (Some(7), Some(3)),
            (None, Some(4)),
            (None, Some(3)),
            (Some(0), Some(4)), // machine 0 is no machine id
            (Some(7), None),
            (Some(7), Some(0)),
        ];
        let got: Vec<u32> = order
            .iter()
            .map(|&(m, s)| index.number(&scan(m, s)))
            .collect();
        assert_eq!(got, [0, 0, 1, 2, 0, 2, 3, 3]);
    }

    proptest! {
        /// Written in place, the scan is what the full scan makes.
        #[test]
        fn a_scan_in_place_is_the_full_scans(p in arbitrary_packet()) {
            let mut got = PacketScan::default();
            let compressed = got.scan_into(&p);
            match scan_packet(&p) {
                Ok(fields) => {
                    prop_assert_eq!(compressed, Some(fields.compressed_packets));
                    prop_assert_eq!(got, from_full_scan(&p, &fields));
                }
                Err(_) => prop_assert_eq!(compressed, None),
            }
        }
    }
}
