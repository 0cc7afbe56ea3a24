//! A resolved packet while it waits for the watermark: what its
//! [`OutPacket`] will be made of, packed.
//!
//! Each packet moves several times between taking its batch and writing it
//! (staging, the stream queue, the heap's pop, emit). A move of more than
//! 128 bytes is a `memcpy` call on the baseline x86-64 target, of at most
//! 128 an inline copy: so a [`Queued`] holds no more than that. What every
//! packet of a stream shares (the relay instance and sequence, the `src`
//! label) stays with the stream and the machine name with the machine; the
//! optional fields are packed behind flags. [`Queued::unpack`] makes the
//! [`OutPacket`] when the packet is written.

use std::sync::Arc;

use super::packet::{Origin, OutPacket, Role, Stamped};
use super::types::StreamId;

/// A relayed packet's place in its relay's stream and batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relayed {
    /// Relay-wide packet index ([`Origin::index`]).
    pub index: u64,
    /// The relay batch it came in: writing it counts towards that batch's
    /// acknowledgement.
    pub batch: u64,
}

/// What a queued packet is made of (packed by [`Queued::pack`]).
#[derive(Debug)]
pub struct Parts {
    pub stream: StreamId,
    pub ts: i64,
    pub err_ns: u64,
    pub clock: u32,
    pub clock_ts: u64,
    pub machine_raw_id: u32,
    pub seq: u32,
    pub data_field: Option<u32>,
    pub role: Role,
    pub bytes: Stamped,
    /// None for the daemon's own packets.
    pub relayed: Option<Relayed>,
    /// The packet's time on its relay's BOOTTIME (for sync points).
    pub relay_boottime: Option<i64>,
}

const RELAYED: u8 = 1;
const BOOTTIME: u8 = 2;
const DATA_FIELD: u8 = 4;
/// Dated beyond the horizon (see [`Queued::set_ahead`]).
const AHEAD: u8 = 8;

/// [`Parts`], packed: the optional fields are valid only with their flag.
#[derive(Debug)]
pub struct Queued {
    pub ts: i64,
    pub err_ns: u64,
    clock_ts: u64,
    index: u64,
    batch: u64,
    relay_boottime: i64,
    pub bytes: Stamped,
    pub stream: StreamId,
    pub machine_raw_id: u32,
    seq: u32,
    clock: u32,
    data_field: u32,
    pub role: Role,
    flags: u8,
}

impl Queued {
    /// Asks the CPU to load the cache lines of the fields a pop reads
    /// first (time, stream, flags: with the field order the compiler
    /// chose, they lie in the entry's two or three lines). A hint: no
    /// effect on what the program does.
    #[inline(always)]
    pub fn warm(&self) {
        mem_prefetch::prefetch_read_data::<_, 3>(&self.ts);
        mem_prefetch::prefetch_read_data::<_, 3>(&self.flags);
        mem_prefetch::prefetch_read_data::<_, 3>(&self.stream);
    }

    /// The same for the first bytes of the packet.
    #[inline(always)]
    pub fn warm_bytes(&self) {
        if let Some(first) = self.bytes.head().first() {
            mem_prefetch::prefetch_read_data::<_, 3>(first);
        }
    }

    pub fn pack(p: Parts) -> Self {
        let flag = |on: bool, f: u8| if on { f } else { 0 };
        let relayed = p.relayed.unwrap_or(Relayed { index: 0, batch: 0 });
        Self {
            ts: p.ts,
            err_ns: p.err_ns,
            clock_ts: p.clock_ts,
            index: relayed.index,
            batch: relayed.batch,
            relay_boottime: p.relay_boottime.unwrap_or(0),
            bytes: p.bytes,
            stream: p.stream,
            machine_raw_id: p.machine_raw_id,
            seq: p.seq,
            clock: p.clock,
            data_field: p.data_field.unwrap_or(0),
            role: p.role,
            flags: flag(p.relayed.is_some(), RELAYED)
                | flag(p.relay_boottime.is_some(), BOOTTIME)
                | flag(p.data_field.is_some(), DATA_FIELD),
        }
    }

    /// Marks a packet dated past host now by more than its bound and the
    /// slack (`ingest.rs`): it is written as soon as it is its stream's
    /// head instead of waiting, perhaps for an hour, for the watermark to
    /// reach its time (holding the queue's memory, and its stream behind
    /// it, meanwhile).
    pub fn set_ahead(&mut self) {
        self.flags |= AHEAD;
    }

    pub fn is_ahead(&self) -> bool {
        self.flags & AHEAD != 0
    }

    /// Its key in the merge of stream heads: its time, or the earliest key
    /// there is when it is ahead (taken at the next drain).
    #[inline(always)]
    pub fn order_ts(&self) -> i64 {
        if self.is_ahead() { i64::MIN } else { self.ts }
    }

    pub fn relayed(&self) -> Option<Relayed> {
        (self.flags & RELAYED != 0).then_some(Relayed {
            index: self.index,
            batch: self.batch,
        })
    }

    /// The output sequence id stamped on it.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    pub fn relay_boottime(&self) -> Option<i64> {
        (self.flags & BOOTTIME != 0).then_some(self.relay_boottime)
    }

    /// The packet to write, with what its stream and machine say of it:
    /// `relay` is its stream's (relay instance, relay sequence), None for
    /// the daemon's own packets.
    #[inline]
    pub fn unpack(
        self,
        relay: Option<(u64, u32)>,
        src: Arc<str>,
        machine_name: Option<Arc<str>>,
    ) -> OutPacket {
        let origin = self
            .relayed()
            .zip(relay)
            .map(|(r, (relay_instance, relay_sequence))| Origin {
                relay_instance,
                relay_sequence,
                index: r.index,
            });
        OutPacket {
            ts: self.ts,
            machine_raw_id: self.machine_raw_id,
            machine_name,
            seq: self.seq,
            clock: self.clock,
            clock_ts: self.clock_ts,
            err_ns: self.err_ns,
            data_field: (self.flags & DATA_FIELD != 0).then_some(self.data_field),
            src,
            role: self.role,
            origin,
            bytes: self.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(
        relayed: Option<Relayed>,
        relay_boottime: Option<i64>,
        data_field: Option<u32>,
    ) -> Parts {
        Parts {
            stream: 7,
            ts: -5,
            err_ns: 11,
            clock: 6,
            clock_ts: 13,
            machine_raw_id: 3,
            seq: 9,
            data_field,
            role: Role::IncrementalState,
            bytes: vec![1u8, 2, 3].into(),
            relayed,
            relay_boottime,
        }
    }

    #[test]
    fn moves_inline_and_unpacks_what_was_packed() {
        // An inline copy on the baseline target: see the module docs.
        assert!(std::mem::size_of::<Queued>() <= 128);
        let relayed = Relayed {
            index: u64::MAX,
            batch: 0,
        };
        for (r, b, d) in [
            (Some(relayed), Some(i64::MIN), Some(0)),
            (Some(relayed), Some(0), None),
            (None, None, Some(60)),
            (None, Some(-1), None),
        ] {
            let q = Queued::pack(parts(r, b, d));
            assert_eq!((q.relayed(), q.relay_boottime()), (r, b));
            let p = q.unpack(Some((4, 5)), Arc::from("m/5"), Some(Arc::from("m")));
            assert_eq!(
                (p.ts, p.err_ns, p.clock, p.clock_ts, p.machine_raw_id, p.seq),
                (-5, 11, 6, 13, 3, 9)
            );
            assert_eq!((p.data_field, p.role), (d, Role::IncrementalState));
            assert_eq!(p.bytes.to_vec(), [1, 2, 3]);
            assert_eq!((&*p.src, p.machine_name.as_deref()), ("m/5", Some("m")));
            assert_eq!(
                p.origin,
                r.map(|r| Origin {
                    relay_instance: 4,
                    relay_sequence: 5,
                    index: r.index
                })
            );
        }
    }
}
