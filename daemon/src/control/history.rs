//! The recent packets a new text or jsonl tail may start with (`tail -n N`,
//! `tail --since TIME` against the daemon).
//!
//! The ingest loop hands every drain's packets to [`ControlHub`]'s fanout,
//! which keeps the last of them here: at most [`HISTORY_PACKETS`] packets
//! and [`HISTORY_BYTES`] of packet bytes (the oldest go first). Their bytes
//! are copied out of the relays' frames, so a held packet pins no frame:
//! per drain, the packets that can stay (the last ones, within both
//! bounds) are copied into one buffer, which lives while one of them is
//! held. Memory: at most 4 MiB of held packets, one older buffer of at most
//! 4 MiB that its last packets still pin, and 4096 records of 160
//! bytes: under 9 MiB, also while a drain's buffer is filled (the
//! packets it pushes out go before it is allocated). The lock is taken once per drain by the ingest thread
//! and once per new tail by the control socket; the tail subscribes to the
//! live stream under it, so every packet reaches the tail once: in its
//! history or in its stream.
//!
//! [`ControlHub`]: super::ControlHub

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use tracesync_core::live::{OutPacket, Stamped};

pub use tracesync_core::control::HISTORY_PACKETS;
/// Packet bytes held at most.
pub const HISTORY_BYTES: usize = 4 << 20;

/// The last packets written, oldest first.
#[derive(Debug, Default)]
pub struct History {
    /// Owned, not shared: most are pushed out by a later drain before any
    /// tail asks (an allocation per held packet was ~1.5% of the ingest
    /// thread with small packets); a new tail gets shared copies.
    packets: VecDeque<OutPacket>,
    bytes: usize,
}

impl History {
    /// Keeps the packets of one drain (only the last ones can stay),
    /// copied into one buffer.
    pub fn extend(&mut self, drained: &[OutPacket]) {
        let mut from = drained.len();
        let mut bytes = 0;
        while from > 0 && drained.len() - from < HISTORY_PACKETS && bytes < HISTORY_BYTES {
            from -= 1;
            bytes += drained[from].bytes.len();
        }
        let kept = &drained[from..];
        // The packets these push out go first: else an older round's
        // buffer, pinned by them, lived on beside the new one while it
        // was filled (three buffers at once: 11.6 MiB in a heap profile).
        while self.packets.len() + kept.len() > HISTORY_PACKETS
            || self.bytes + bytes > HISTORY_BYTES
        {
            let Some(old) = self.packets.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
        }
        let mut buffer = Vec::with_capacity(bytes);
        for packet in kept {
            packet.bytes.extend_into(&mut buffer);
        }
        let buffer = Bytes::from(buffer);
        let mut at = 0;
        for packet in kept {
            let len = packet.bytes.len();
            let own = Stamped::from(buffer.slice(at..at + len));
            at += len;
            // Field by field: a clone would take and drop a reference to
            // the frame the packet's bytes are in.
            self.push(OutPacket {
                ts: packet.ts,
                machine_raw_id: packet.machine_raw_id,
                machine_name: packet.machine_name.clone(),
                seq: packet.seq,
                clock: packet.clock,
                clock_ts: packet.clock_ts,
                err_ns: packet.err_ns,
                data_field: packet.data_field,
                src: Arc::clone(&packet.src),
                role: packet.role,
                origin: packet.origin,
                bytes: own,
            });
        }
    }

    /// Keeps one packet.
    fn push(&mut self, packet: OutPacket) {
        self.bytes += packet.bytes.len();
        self.packets.push_back(packet);
        while self.packets.len() > HISTORY_PACKETS
            || (self.bytes > HISTORY_BYTES && self.packets.len() > 1)
        {
            if let Some(old) = self.packets.pop_front() {
                self.bytes -= old.bytes.len();
            }
        }
    }

    /// The held packets, oldest first, shared as the tails' stream is.
    pub fn snapshot(&self) -> Vec<Arc<OutPacket>> {
        self.packets.iter().map(|p| Arc::new(p.clone())).collect()
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::scan::{Stamp, StampSuffix};

    fn packet(ts: i64, size: usize) -> OutPacket {
        with_bytes(ts, Stamped::from(Bytes::from(vec![0u8; size])))
    }

    fn with_bytes(ts: i64, bytes: Stamped) -> OutPacket {
        OutPacket {
            ts,
            machine_raw_id: 0,
            machine_name: None,
            seq: 1,
            clock: 0,
            clock_ts: 0,
            err_ns: 0,
            data_field: None,
            src: Arc::from("test"),
            role: tracesync_core::live::Role::Data,
            origin: None,
            bytes,
        }
    }

    #[test]
    fn keeps_the_last_packets_within_both_bounds() {
        let mut h = History::default();
        let drained: Vec<OutPacket> = (0..HISTORY_PACKETS as i64 + 10)
            .map(|ts| packet(ts, 10))
            .collect();
        h.extend(&drained);
        assert_eq!(h.len(), HISTORY_PACKETS);
        assert_eq!(h.snapshot()[0].ts, 10);
        // Big packets: the byte bound wins, the newest stays.
        h.extend(&[
            packet(-1, HISTORY_BYTES / 2),
            packet(-2, HISTORY_BYTES / 2 + 1),
        ]);
        let held = h.snapshot();
        assert_eq!(held.last().map(|p| p.ts), Some(-2));
        assert!(
            held.iter().map(|p| p.bytes.len()).sum::<usize>()
                <= HISTORY_BYTES + HISTORY_BYTES / 2 + 1
        );
        assert!(!held.iter().any(|p| p.ts == -1));
    }

    #[test]
    fn a_held_packet_owns_its_bytes() {
        let frame = Bytes::from(vec![7u8; 1000]);
        let mut split = Stamped::default();
        let no_suffix = StampSuffix::new(&Stamp::default(), false);
        assert!(split.set_split(frame.slice(10..20), [&[1, 2], &[]], &no_suffix));
        let p = with_bytes(0, split);
        let mut h = History::default();
        h.extend(&[p.clone(), p.clone()]);
        let held = h.snapshot();
        assert_eq!(held.len(), 2);
        assert_eq!(held[1].bytes.to_vec(), p.bytes.to_vec());
        // One buffer of the two copies, not the 1000-byte frame.
        assert_eq!(held[1].bytes.head().len(), 12);
        assert!(held[1].bytes.tail().is_empty());
        assert!(
            !held[1]
                .bytes
                .head()
                .as_ptr_range()
                .contains(&frame.as_ptr())
        );
    }
}
