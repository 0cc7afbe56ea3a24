//! What a window needs before its first packet to decode alone: the
//! latest SystemInfo, each sequence's latest ClockSnapshot, and each
//! sequence's incremental state (the packet that last cleared it, and
//! every later packet carrying interned data, packet defaults or a track
//! descriptor). Perfetto's own ring loses these when it wraps; here they
//! outlive the batches they came in.
//!
//! Fed with every packet as its batch is cut ([`Preamble::observe`]),
//! asked for the state in force before a batch ([`Preamble::before`]).
//! Packets are copied (a slice would pin its whole batch in memory) and
//! kept whole: the daemon strips them for replay with the rule its own
//! preambles use.
//!
//! Invariants: each list is in batch order; [`Preamble::forget_before`]
//! keeps exactly what is in force at its batch and everything after it;
//! the bytes held never exceed the limit: past it the oldest entries go
//! first, counted in [`Preamble::dropped`] (a window whose state was cut
//! so may not decode alone; the driver logs it).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tracesync_protocol::scan;

/// TrackDescriptor (TracePacket field 60): re-emitted after each clear,
/// part of a sequence's state.
const TRACK_DESCRIPTOR: u32 = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    SystemInfo,
    Clock,
    Clear,
    State,
}

#[derive(Clone, Debug)]
struct Entry {
    seq: u64,
    kind: Kind,
    packet: Bytes,
}

#[derive(Debug)]
pub struct Preamble {
    system_info: VecDeque<Entry>,
    sequences: BTreeMap<u32, VecDeque<Entry>>,
    bytes: usize,
    limit: usize,
    dropped: u64,
}

impl Preamble {
    pub fn new(limit: usize) -> Self {
        Self {
            system_info: VecDeque::new(),
            sequences: BTreeMap::new(),
            bytes: 0,
            limit,
            dropped: 0,
        }
    }

    /// A packet of batch `seq` (batches in order).
    pub fn observe(&mut self, seq: u64, packet: &[u8]) {
        let Ok(fields) = scan::scan_packet(packet) else {
            return;
        };
        let kind = if fields.system_info.is_some() {
            Kind::SystemInfo
        } else if fields.clock_snapshot.is_some() {
            Kind::Clock
        } else if fields.clears_incremental_state() {
            Kind::Clear
        } else if fields.has_interned_data
            || fields.trace_packet_defaults.is_some()
            || fields.data_field == Some(TRACK_DESCRIPTOR)
        {
            Kind::State
        } else {
            return;
        };
        let entry = Entry {
            seq,
            kind,
            packet: Bytes::copy_from_slice(packet),
        };
        self.bytes += entry.packet.len();
        match kind {
            Kind::SystemInfo => self.system_info.push_back(entry),
            _ => {
                let sequence = fields.trusted_packet_sequence_id.unwrap_or(0);
                self.sequences.entry(sequence).or_default().push_back(entry);
            }
        }
        self.enforce_limit();
    }

    /// The packets in force before batch `seq`, in the order a trace needs
    /// them: SystemInfo, then per sequence its ClockSnapshot, the packet
    /// that last cleared its state and the state after it.
    pub fn before(&self, seq: u64) -> Vec<Bytes> {
        let mut out = Vec::new();
        if let Some(info) = self.system_info.iter().rev().find(|e| e.seq < seq) {
            out.push(info.packet.clone());
        }
        for entries in self.sequences.values() {
            let earlier: Vec<&Entry> = entries.iter().filter(|e| e.seq < seq).collect();
            if let Some(clock) = earlier.iter().rev().find(|e| e.kind == Kind::Clock) {
                out.push(clock.packet.clone());
            }
            let from = earlier
                .iter()
                .rposition(|e| e.kind == Kind::Clear)
                .unwrap_or(0);
            out.extend(
                earlier
                    .iter()
                    .skip(from)
                    .filter(|e| matches!(e.kind, Kind::Clear | Kind::State))
                    .map(|e| e.packet.clone()),
            );
        }
        out
    }

    /// Batches before `seq` are gone from the ring: keep only what is in
    /// force at `seq` of them.
    pub fn forget_before(&mut self, seq: u64) {
        let mut freed = 0;
        let latest_info = self.system_info.iter().rposition(|e| e.seq < seq);
        if let Some(keep) = latest_info {
            for entry in self.system_info.drain(..keep) {
                freed += entry.packet.len();
            }
        }
        for entries in self.sequences.values_mut() {
            let earlier = entries.iter().take_while(|e| e.seq < seq).count();
            let last_clock = entries
                .iter()
                .take(earlier)
                .rposition(|e| e.kind == Kind::Clock);
            let last_clear = entries
                .iter()
                .take(earlier)
                .rposition(|e| e.kind == Kind::Clear);
            let mut index = 0;
            entries.retain(|e| {
                let position = index;
                index += 1;
                let keep = position >= earlier
                    || Some(position) == last_clock
                    || (e.kind != Kind::Clock && last_clear.is_none_or(|c| position >= c));
                if !keep {
                    freed += e.packet.len();
                }
                keep
            });
        }
        self.sequences.retain(|_, entries| !entries.is_empty());
        self.bytes -= freed;
    }

    /// Entries dropped to stay within the limit.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops the oldest entries (by batch) while over the limit.
    fn enforce_limit(&mut self) {
        while self.bytes > self.limit {
            let oldest_sequence = self
                .sequences
                .iter()
                .filter_map(|(id, entries)| entries.front().map(|e| (e.seq, *id)))
                .min();
            let oldest_info = self.system_info.front().map(|e| e.seq);
            let entry = match (oldest_sequence, oldest_info) {
                (Some((seq, _)), Some(info)) if info <= seq => self.system_info.pop_front(),
                (Some((_, id)), _) => self.sequences.get_mut(&id).and_then(VecDeque::pop_front),
                (None, Some(_)) => self.system_info.pop_front(),
                (None, None) => None,
            };
            let Some(entry) = entry else {
                break;
            };
            self.bytes -= entry.packet.len();
            self.dropped += 1;
        }
        self.sequences.retain(|_, entries| !entries.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::scan::field;
    use tracesync_protocol::wire;

    /// A packet on `sequence` with one payload field (a marker byte).
    fn packet(sequence: u32, payload_field: u32, marker: u8) -> Vec<u8> {
        let mut out = Vec::new();
        wire::put_varint_field(
            &mut out,
            field::TRUSTED_PACKET_SEQUENCE_ID,
            u64::from(sequence),
        );
        wire::put_len_field(&mut out, payload_field, &[marker]);
        out
    }

    fn cleared(sequence: u32, marker: u8) -> Vec<u8> {
        let mut out = packet(sequence, field::INTERNED_DATA, marker);
        wire::put_varint_field(&mut out, field::SEQUENCE_FLAGS, 1);
        out
    }

    #[test]
    fn state_in_force_before_a_batch_survives_forgetting_older_batches() {
        let mut preamble = Preamble::new(1 << 20);
        let info = packet(1, field::SYSTEM_INFO, 1);
        let clock_old = packet(1, field::CLOCK_SNAPSHOT, 2);
        let clear_old = cleared(5, 3);
        let event = packet(5, 11, 4);
        let clock_new = packet(1, field::CLOCK_SNAPSHOT, 5);
        let clear_new = cleared(5, 6);
        let interned = packet(5, field::INTERNED_DATA, 7);
        let descriptor = packet(6, TRACK_DESCRIPTOR, 8);
        preamble.observe(1, &info);
        preamble.observe(1, &clock_old);
        preamble.observe(1, &clear_old);
        preamble.observe(2, &event);
        preamble.observe(3, &clock_new);
        preamble.observe(3, &clear_new);
        preamble.observe(4, &interned);
        preamble.observe(4, &descriptor);
        let as_bytes = |packets: &[&Vec<u8>]| -> Vec<Bytes> {
            packets.iter().map(|p| Bytes::from((*p).clone())).collect()
        };
        let before_five = as_bytes(&[&info, &clock_new, &clear_new, &interned, &descriptor]);
        assert_eq!(preamble.before(5), before_five);
        assert_eq!(
            preamble.before(2),
            as_bytes(&[&info, &clock_old, &clear_old])
        );
        preamble.forget_before(5);
        assert_eq!(preamble.before(5), before_five, "what is in force stays");
        preamble.forget_before(6);
        assert_eq!(preamble.before(6), before_five);
        assert_eq!(preamble.dropped(), 0);
    }

    #[test]
    fn the_limit_drops_the_oldest_and_counts() {
        let mut preamble = Preamble::new(40);
        for seq in 1..=20 {
            preamble.observe(seq, &packet(3, field::INTERNED_DATA, seq as u8));
        }
        assert!(preamble.bytes() <= 40);
        assert!(preamble.dropped() > 0);
        let kept = preamble.before(100);
        assert_eq!(
            kept.last(),
            Some(&Bytes::from(packet(3, field::INTERNED_DATA, 20)))
        );
    }

    #[test]
    fn event_packets_and_garbage_are_not_state() {
        let mut preamble = Preamble::new(1 << 20);
        preamble.observe(1, &packet(2, 11, 0));
        preamble.observe(1, &[0xff, 0xff, 0xff]);
        assert_eq!(preamble.bytes(), 0);
        assert!(preamble.before(2).is_empty());
    }
}
