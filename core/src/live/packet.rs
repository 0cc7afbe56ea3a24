//! One packet of the merged output, as handed to the rolling writer and to
//! tail subscribers.

use bytes::Bytes;
use tracesync_protocol::scan::{self, PacketFields, ScanError, StampSuffix};
use tracesync_protocol::wire;

/// TracePacket.track_descriptor.
const TRACK_DESCRIPTOR: u32 = 60;

/// What a packet is for the rolling writer's preamble (docs/format.md): the
/// writer replays the latest packets of these roles at the start of every
/// file so each file opens alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// An ordinary packet: written once, never replayed.
    Data,
    /// SystemInfo of a machine: the latest per machine is replayed.
    SystemInfo,
    /// A ClockSnapshot: the latest per (machine, output sequence) is replayed.
    ClockSnapshot,
    /// A RemoteClockSync sync point: the latest per machine is replayed.
    SyncPoint,
    /// Clears its sequence's incremental state (SEQ_INCREMENTAL_STATE_CLEARED
    /// or incremental_state_cleared): starts the replayed state of the
    /// sequence afresh. Also a data packet.
    IncrementalStateCleared,
    /// Carries interned_data or trace_packet_defaults after the last clear:
    /// replayed with it. Also a data packet.
    IncrementalState,
    /// A sync-quality counter value or epoch instant the daemon wrote
    /// (`crate::sync_quality`): the latest per track is replayed, so every
    /// file starts with the values in force.
    SyncQuality,
}

impl Role {
    /// The role of a scanned packet: snapshots and SystemInfo first, then
    /// incremental state, else data.
    pub fn of(fields: &tracesync_protocol::scan::PacketFields<'_>) -> Self {
        if fields.clock_snapshot.is_some() {
            Role::ClockSnapshot
        } else if fields.system_info.is_some() {
            Role::SystemInfo
        } else if fields.remote_clock_sync.is_some() {
            Role::SyncPoint
        } else if fields.clears_incremental_state() {
            Role::IncrementalStateCleared
        } else if fields.has_interned_data
            || fields.trace_packet_defaults.is_some()
            // Producers re-emit track descriptors after each clear: a file
            // without them loses its tracks.
            || fields.data_field == Some(TRACK_DESCRIPTOR)
        {
            Role::IncrementalState
        } else {
            Role::Data
        }
    }
}

/// Where a relayed packet came from, for de-duplication of resent batches:
/// within one relay sequence packets are never reordered, so "written up to
/// index i" per (relay instance, relay sequence) says exactly what is in the
/// output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The relay's persistent instance id (Hello.relay_instance_id).
    pub relay_instance: u64,
    /// The relay's sequence id (trusted_packet_sequence_id as the relay sent it).
    pub relay_sequence: u32,
    /// Relay-wide packet index (Batch.first_packet_index + position).
    pub index: u64,
}

/// A resolved packet ready for output.
#[derive(Clone, Debug)]
pub struct OutPacket {
    /// Resolved trace time (host BOOTTIME, ns).
    pub ts: i64,
    /// Perfetto machine id stamped on the packet (0 = the host).
    pub machine_raw_id: u32,
    /// Machine name for tail/jsonl (None for an unnamed host).
    pub machine_name: Option<std::sync::Arc<str>>,
    /// Output trusted_packet_sequence_id stamped on the packet.
    pub seq: u32,
    /// Clock the packet's timestamp was read in, and its raw value; both 0
    /// for a packet without timestamp (it takes its stream's last time).
    pub clock: u32,
    pub clock_ts: u64,
    /// Error bound of `ts` (0 within the host machine).
    pub err_ns: u64,
    /// Payload field number (`kind` in jsonl), None if the packet has none.
    pub data_field: Option<u32>,
    /// Relay source label (`src` in jsonl), e.g. "phone/file:/data/trace".
    pub src: std::sync::Arc<str>,
    pub role: Role,
    /// None for packets the daemon made itself (its own snapshots,
    /// SystemInfo, sync points).
    pub origin: Option<Origin>,
    /// The stamped TracePacket bytes, without Trace framing.
    pub bytes: Stamped,
}

/// A stamped TracePacket (without Trace framing): `head`, then a short
/// `tail` held inline. A relayed data packet is a slice of the frame it
/// came in, up to the sequence id the daemon replaces, with the few bytes
/// after that and the stamped fields as its tail, so stamping it copies
/// nothing; any other packet is all head. Read it only through these methods: [`Stamped::write_framed`]
/// (the file, the perfetto tail stream), [`Stamped::to_bytes`] (kept
/// copies), [`Stamped::len`].
#[derive(Clone, Default)]
pub struct Stamped {
    head: Bytes,
    tail_len: u8,
    tail: [u8; TAIL_MAX],
}

/// Longest inline tail: sequence id, machine id and clock id fields with
/// the ids the daemon uses (a longer stamp takes the copying path); 15
/// keeps [`Stamped`] at 48 bytes.
pub const TAIL_MAX: usize = 15;

impl Stamped {
    /// Whether a tail of `moved` then `suffix` fits inline.
    pub fn tail_fits(moved: [&[u8]; 2], suffix: &StampSuffix) -> bool {
        moved[0].len() + moved[1].len() + suffix.as_slice().len() <= TAIL_MAX
    }

    /// Makes this `head` followed by `moved` and `suffix`, the tail written
    /// where this is ([`scan::write_tail`]): built elsewhere and copied in,
    /// its bytes were read back before their stores could be forwarded (a
    /// stall on most packets of the live core). False, unchanged, if it
    /// does not fit ([`Self::tail_fits`]).
    #[inline]
    #[must_use]
    pub fn set_split(&mut self, head: Bytes, moved: [&[u8]; 2], suffix: &StampSuffix) -> bool {
        let Some(len) = scan::write_tail(&mut self.tail, moved, suffix) else {
            return false;
        };
        self.tail_len = len as u8;
        self.head = head;
        true
    }

    /// The same tail after a new head (the same bytes elsewhere).
    pub fn with_head(&self, head: Bytes) -> Self {
        Self {
            head,
            ..self.clone()
        }
    }

    /// Length of the stamped packet.
    pub fn len(&self) -> usize {
        self.head.len() + usize::from(self.tail_len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn head(&self) -> &Bytes {
        &self.head
    }

    pub fn tail(&self) -> &[u8] {
        &self.tail[..usize::from(self.tail_len)]
    }

    /// Appends the packet as one `Trace.packet` record (field 1): one copy.
    pub fn write_framed(&self, out: &mut Vec<u8>) {
        out.reserve(self.len() + 6);
        wire::put_tag(out, 1, wire::WireType::Len);
        wire::put_varint(out, self.len() as u64);
        self.extend_into(out);
    }

    /// Appends the packet's bytes (no framing).
    pub fn extend_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(self.tail());
    }

    /// The packet's bytes in one buffer: the head itself if there is no
    /// tail, else a copy (an allocation of its own).
    pub fn to_bytes(&self) -> Bytes {
        if self.tail_len == 0 {
            return self.head.clone();
        }
        Bytes::from(self.to_vec())
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.extend_into(&mut v);
        v
    }

    /// The packet's top-level fields as [`scan::scan_packet`] reads the
    /// stamped bytes, without joining them: the tail holds only varint
    /// fields that replace the head's. Its `stamp_layout` is the head's.
    pub fn scan(&self) -> Result<PacketFields<'_>, ScanError> {
        let mut fields = scan::scan_packet(&self.head)?;
        if self.tail_len > 0 {
            let tail = scan::scan_packet(self.tail())?;
            if tail.trusted_packet_sequence_id.is_some() {
                fields.trusted_packet_sequence_id = tail.trusted_packet_sequence_id;
            }
            if tail.machine_id.is_some() {
                fields.machine_id = tail.machine_id;
            }
            if tail.timestamp_clock_id.is_some() {
                fields.timestamp_clock_id = tail.timestamp_clock_id;
            }
        }
        Ok(fields)
    }
}

impl From<Bytes> for Stamped {
    fn from(head: Bytes) -> Self {
        Self {
            head,
            ..Self::default()
        }
    }
}

impl From<Vec<u8>> for Stamped {
    fn from(v: Vec<u8>) -> Self {
        Bytes::from(v).into()
    }
}

impl std::fmt::Debug for Stamped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stamped")
            .field("head", &self.head.len())
            .field("tail", &self.tail())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tracesync_protocol::scan::{Stamp, scan_packet, stamp_scanned, stamp_split_moved};

    fn no_suffix() -> StampSuffix {
        StampSuffix::new(&Stamp::default(), false)
    }

    #[test]
    fn stamped_reads_as_its_joined_bytes() {
        let mut head = Vec::new();
        wire::put_varint_field(&mut head, 8, 1_000); // timestamp
        wire::put_len_field(&mut head, 11, &[0x10, 1]); // track_event
        let mut tail = Vec::new();
        wire::put_varint_field(&mut tail, 10, 300);
        wire::put_varint_field(&mut tail, 98, 7);
        wire::put_varint_field(&mut tail, 58, 6);
        let joined = [&head[..], &tail[..]].concat();
        let mut split = Stamped::default();
        assert!(split.set_split(Bytes::from(head.clone()), [&tail, &[]], &no_suffix()));
        for s in [split, Stamped::from(joined.clone())] {
            assert_eq!(s.len(), joined.len());
            assert_eq!(s.to_vec(), joined);
            assert_eq!(s.to_bytes(), joined);
            let mut framed = vec![0xAA];
            s.write_framed(&mut framed);
            let mut want = vec![0xAA];
            wire::put_trace_packet(&mut want, &joined);
            assert_eq!(framed, want);
            let got = s.scan().expect("scans");
            let want = scan_packet(&joined).expect("scans");
            assert_eq!(
                PacketFields {
                    stamp_layout: want.stamp_layout,
                    ..got
                },
                want
            );
        }
        let long = [0; TAIL_MAX + 1];
        assert!(!Stamped::default().set_split(Bytes::new(), [&long, &[]], &no_suffix()));
        // Kept small: one per queued packet.
        assert_eq!(std::mem::size_of::<Stamped>(), 48);
    }

    proptest! {
        /// Set in place over whatever a reused entry held, a split packet
        /// is the packet stamped by copying.
        #[test]
        fn a_split_set_in_place_is_the_stamped_packet(
            fields in proptest::collection::vec((0usize..6, 0u64..100_000), 0..8),
            seq in 1u32..70_000,
            machine in 0u32..300,
            clock in proptest::option::of(1u32..200),
            before in proptest::collection::vec(any::<u8>(), 0..TAIL_MAX),
        ) {
            let mut packet = Vec::new();
            for (kind, v) in fields {
                match kind {
                    0 => wire::put_varint_field(&mut packet, 8, v),
                    1 => wire::put_varint_field(&mut packet, 10, v),
                    2 => wire::put_varint_field(&mut packet, 98, v),
                    3 => wire::put_varint_field(&mut packet, 58, v),
                    4 => wire::put_varint_field(&mut packet, 13, v),
                    _ => wire::put_len_field(&mut packet, 11, &v.to_le_bytes()[..(v % 9) as usize]),
                }
            }
            let scanned = scan_packet(&packet).expect("well formed");
            let stamp = Stamp {
                machine_id: Some(machine),
                trusted_packet_sequence_id: Some(seq),
                default_timestamp_clock_id: clock,
                strip_trusted: false,
            };
            let mut want = Vec::new();
            stamp_scanned(&packet, &scanned, &stamp, &mut want).expect("stamps");
            let suffix = StampSuffix::new(&stamp, scanned.stamp_layout.has_clock_id);
            let mut reused = Stamped::default();
            prop_assert!(reused.set_split(Bytes::new(), [&before, &[]], &no_suffix()));
            let bytes = Bytes::from(packet.clone());
            if let Some((kept, moved)) = stamp_split_moved(&packet, &scanned.stamp_layout, &stamp) {
                let fits = Stamped::tail_fits(moved, &suffix);
                prop_assert_eq!(reused.set_split(bytes.slice(..kept), moved, &suffix), fits);
                if fits {
                    prop_assert_eq!(reused.to_vec(), want);
                }
            }
        }
    }
}
