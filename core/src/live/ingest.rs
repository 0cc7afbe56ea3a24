//! Batches in: de-duplication, scan, clock resolution, the pending queue.
//!
//! A resolved data packet is stamped without a copy where it can be: a
//! slice of its relay's frame up to the sequence id the daemon replaces,
//! with the few bytes after that and the stamped fields inline after it
//! ([`Stamped`]); the writer's framing is its only copy. The other packets
//! (fields to cut inside the packet, SystemInfo, the roles kept for file
//! preambles) are stamped into one buffer per batch (one allocation for the
//! whole batch instead of one per packet). All are queued for the
//! watermark when the batch is done (`staging.rs`).
//!
//! Memory: a queued slice keeps its whole frame alive, while the ordering
//! queue counts only the packet's stamped length. So a frame's packets are
//! queued as slices only if they use nearly all of it (`SLACK_DIVISOR` in
//! `staging.rs`); otherwise they are copied into the staging buffer after
//! all, and the frame is freed with the batch.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::relay::v1::RelayClocks as WireClocks;
use tracesync_protocol::scan::{PacketFields, defaults_timestamp_clock_id, scan_packet};
use tracesync_protocol::wire;

use super::acks::BatchSeq;
use super::clocks::RelayClocks;
use super::core::{LiveCore, Relay, StreamKey, reason};
use super::epochs::EarlierEstimates;
use super::estimate::SyncEstimate;
use super::order::Queued;
use super::packet::{Origin, OutPacket, Role, Stamped};
use super::staging::{STAGED_KEEP, Staged};
use super::stamp::{split_relayed, stamp_relayed};
use super::types::{RelaySlot, SessionError};
use crate::clock::ConvertError;

/// Most bytes stamping adds to a packet (the fields it appends).
const STAMP_GROWTH: usize = 20;

/// What ingest learned about a packet in stream order.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub key: StreamKey,
    pub index: u64,
    pub batch: u64,
    /// Clock of the timestamp, and whether to stamp it (the packet names none).
    pub clock: u32,
    pub stamp_clock: bool,
    /// Relay BOOTTIME of the batch: time of a packet with no timestamp on a
    /// stream with no earlier time.
    pub fallback_boottime: Option<u64>,
    /// Host BOOTTIME of arrival: the last resort for such a packet.
    pub arrival: u64,
}

/// A packet waiting for its clock to become resolvable.
#[derive(Debug)]
pub(super) struct PendingPacket {
    pub meta: Meta,
    pub bytes: Bytes,
}

impl PendingPacket {
    /// Memory it holds, as counted against `pending_max_bytes`: its bytes
    /// (a copy of its own, an allocation of its own) plus the queue entry.
    pub(super) fn held(&self) -> usize {
        allocated(self.bytes.len()) + std::mem::size_of::<PendingPacket>()
    }
}

/// Heap memory of an allocation of `len` bytes: the allocator's header and
/// rounding (16-byte chunks, 32 at least, as glibc's malloc), none for 0.
pub(super) fn allocated(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + 8).next_multiple_of(16).max(32)
    }
}

/// Size of a pending queue entry (the packet's bytes are apart).
#[cfg(test)]
pub(super) fn pending_entry_size() -> usize {
    std::mem::size_of::<PendingPacket>()
}

/// What resolution decided for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolution {
    /// Host time and relay BOOTTIME (None if placed by arrival time).
    Ready {
        ts: i64,
        boottime: Option<i64>,
    },
    /// The clock has no path to the relay's BOOTTIME yet.
    NoPath,
    /// The relay has no sync estimate yet.
    NoSync,
    Drop(&'static str),
}

/// Host time of relay BOOTTIME `boottime`, with the estimate of the
/// packet's own clock epoch.
fn to_host(
    clocks: &RelayClocks,
    estimates: (Option<&SyncEstimate>, &EarlierEstimates),
    boottime: i64,
) -> Resolution {
    let (latest, earlier) = estimates;
    let Some(e) = earlier.pick(latest, clocks.epoch_at(boottime)) else {
        return Resolution::NoSync;
    };
    // Negative relay BOOTTIME cannot be a time on it: dropped as Perfetto would.
    let ts = u64::try_from(boottime).map_or(-1, |b| e.to_host(b));
    if ts < 0 {
        return Resolution::Drop(reason::NEGATIVE);
    }
    Resolution::Ready {
        ts,
        boottime: Some(boottime),
    }
}

fn resolve(
    clocks: &mut RelayClocks,
    estimates: (Option<&SyncEstimate>, &EarlierEstimates),
    last: Option<(i64, Option<i64>)>,
    timestamp: Option<u64>,
    m: &Meta,
) -> Resolution {
    match timestamp {
        Some(raw) => match clocks.boottime_of(m.key.1, m.clock, raw) {
            Ok(boottime) => to_host(clocks, estimates, boottime),
            Err(ConvertError::Overflow) => Resolution::Drop(reason::CONVERSION),
            Err(_) => Resolution::NoPath,
        },
        None => match (last, m.fallback_boottime) {
            (Some((ts, boottime)), _) => Resolution::Ready { ts, boottime },
            (None, Some(b)) => to_host(clocks, estimates, i64::try_from(b).unwrap_or(i64::MAX)),
            (None, None) => Resolution::Ready {
                ts: i64::try_from(m.arrival).unwrap_or(i64::MAX),
                boottime: None,
            },
        },
    }
}

impl LiveCore {
    /// A relay's Batch: packets `first_index..` in relay order. `now` is
    /// host BOOTTIME. Never fails on packet contents (bad packets are
    /// counted and dropped); fails only for a session the core does not
    /// know or one past its unacknowledged-batch limit.
    pub fn batch(
        &mut self,
        slot: RelaySlot,
        seq: u64,
        first_index: u64,
        packets: Vec<Bytes>,
        clocks: Option<WireClocks>,
        now: u64,
    ) -> Result<(), SessionError> {
        let instance = self.relay_of(slot)?;
        self.latest_now = self.latest_now.max(now);
        let limit = self.config.max_unacked_batches;
        let Some(relay) = self.relays.get_mut(&instance) else {
            return Err(SessionError::UnknownSlot(slot));
        };
        if relay.batches.unacked() >= limit {
            return Err(SessionError::TooManyUnackedBatches {
                slot,
                unacked: relay.batches.unacked(),
                limit,
            });
        }
        if let Some(c) = clocks {
            relay.latest_boottime = Some(c.boottime_ns);
        }
        let fallback_boottime = relay.latest_boottime;
        let raw_id = relay.raw_id;
        if let BatchSeq::New { lost } = relay.batches.accept(seq)
            && lost > 0
        {
            self.machine(raw_id).count(reason::BATCHES_LOST, lost);
        }
        self.machine(raw_id).last_seen = Some(now);
        let mut staged = std::mem::take(&mut self.staged);
        // The frame's length, but for the batch's few other fields.
        let frame_len: usize = packets
            .iter()
            .map(|p| 1 + wire::varint_len(p.len() as u64) + p.len())
            .sum();
        let mut clocks_changed = false;
        staged.left = packets.iter().map(|p| p.len() + STAMP_GROWTH).sum();
        for (k, bytes) in (0u64..).zip(packets) {
            // Indices past u64::MAX come only from a broken relay: wrap, no panic.
            let index = first_index.wrapping_add(k);
            self.stats.packets_in += 1;
            let meta = Meta {
                key: (instance, 0),
                index,
                batch: seq,
                clock: BOOTTIME,
                stamp_clock: false,
                fallback_boottime,
                arrival: now,
            };
            let len = bytes.len();
            clocks_changed |= self.ingest(meta, bytes, raw_id, &mut staged);
            staged.left = staged.left.saturating_sub(len + STAMP_GROWTH);
        }
        staged.left = 0;
        self.queue_staged(&mut staged, Some(frame_len));
        self.staged = staged;
        if clocks_changed {
            self.retry_pending(instance);
        }
        if std::mem::take(&mut self.sequence_limit_hit) {
            return Err(SessionError::TooManySequences {
                slot,
                limit: self.config.max_sequences_per_relay,
            });
        }
        Ok(())
    }

    /// Takes one packet of a batch; returns whether the relay's clock graph
    /// changed.
    fn ingest(&mut self, mut m: Meta, bytes: Bytes, raw_id: u32, staged: &mut Staged) -> bool {
        let instance = m.key.0;
        let Ok(fields) = scan_packet(&bytes) else {
            self.machine(raw_id).count(reason::MALFORMED, 1);
            return false;
        };
        m.key.1 = fields.trusted_packet_sequence_id.unwrap_or(0);
        if !self.streams.contains_key(&m.key)
            && self
                .relays
                .get(&instance)
                .is_some_and(|r| r.sequences >= self.config.max_sequences_per_relay)
        {
            // A sequence flood must not grow the stream table: drop, and
            // the batch's caller closes the connection.
            self.machine(raw_id).count(reason::SEQUENCES_OVER_LIMIT, 1);
            self.sequence_limit_hit = true;
            return false;
        }
        let stream = self.stream_entry(m.key, raw_id);
        if stream.written.is_some_and(|w| m.index <= w) {
            self.machine(raw_id).count(reason::DUPLICATE, 1);
            return false;
        }
        stream.written = Some(m.index);
        // Sequence state changes in stream order, before the packet's own
        // clock is chosen (a defaults packet applies to itself too).
        if fields.clears_incremental_state() {
            stream.default_clock = None;
        }
        if let Some(defaults) = fields.trace_packet_defaults {
            stream.default_clock = defaults_timestamp_clock_id(defaults)
                .ok()
                .flatten()
                .filter(|&c| c != 0);
        }
        let explicit = fields.timestamp_clock_id.filter(|&c| c != 0);
        m.clock = explicit.or(stream.default_clock).unwrap_or(BOOTTIME);
        m.stamp_clock = explicit.is_none() && stream.default_clock.is_none();
        let blocked = stream.pending > 0;
        let last = stream.last;
        if fields.remote_clock_sync.is_some() {
            // Replaced by the core's own sync points, which carry the
            // estimator's mapping; the producer's would override it.
            self.machine(raw_id).count(reason::REMOTE_SYNC_REPLACED, 1);
            return false;
        }
        let Some(relay) = self.relays.get_mut(&instance) else {
            return false;
        };
        let mut changed = false;
        if let Some(snapshot) = fields.clock_snapshot {
            let before = relay.clocks.invalid_clock_snapshots;
            changed = relay.clocks.add_snapshot(snapshot, m.key.1);
            let invalid = relay.clocks.invalid_clock_snapshots - before;
            if invalid > 0 {
                self.machine(raw_id)
                    .count(reason::INVALID_SNAPSHOT, invalid);
            }
        }
        let Some(relay) = self.relays.get_mut(&instance) else {
            return changed;
        };
        relay.batches.add_outstanding(m.batch);
        let resolution = if blocked {
            Resolution::NoPath
        } else {
            resolve(
                &mut relay.clocks,
                (relay.estimate.as_ref(), &relay.earlier),
                last,
                fields.timestamp,
                &m,
            )
        };
        match resolution {
            Resolution::Ready { ts, boottime } => {
                self.stage(&m, &bytes, &fields, ts, boottime, staged);
            }
            Resolution::NoPath | Resolution::NoSync => {
                // A copy: the packet is a slice of its relay's whole frame,
                // which must not stay pinned by one pending packet.
                let bytes = Bytes::copy_from_slice(&bytes);
                self.push_pending(PendingPacket { meta: m, bytes });
            }
            Resolution::Drop(why) => self.dropped(&m, why),
        }
        changed
    }

    /// Counts a dropped packet and lets its batch be acknowledged.
    fn dropped(&mut self, m: &Meta, why: &'static str) {
        if let Some(relay) = self.relays.get_mut(&m.key.0) {
            relay.batches.packet_done(m.batch);
            let raw_id = relay.raw_id;
            self.machine(raw_id).count(why, 1);
        }
    }

    /// Stamps a resolved packet: a data packet as a slice of `bytes` where
    /// it can be, any other into the staging buffer.
    fn stage(
        &mut self,
        m: &Meta,
        bytes: &Bytes,
        fields: &PacketFields<'_>,
        ts: i64,
        boottime: Option<i64>,
        staged: &mut Staged,
    ) {
        let Some(stream) = self.streams.get_mut(&m.key) else {
            return;
        };
        let raw_id = stream.raw_id;
        let name = self
            .machines
            .get(&raw_id)
            .and_then(|machine| machine.name.clone());
        let has_ts = fields.timestamp.is_some();
        let stamp_clock = (has_ts && m.stamp_clock).then_some(m.clock);
        let role = Role::of(fields);
        // Only data packets: the others are kept for preambles long after
        // their frame is written and must not pin it.
        let sliced = (role == Role::Data)
            .then(|| split_relayed(bytes, fields, raw_id, stream.out_seq, stamp_clock))
            .flatten();
        let (stamped, range) = match sliced {
            Some(stamped) => {
                staged.sliced += stamped.len();
                (stamped, None)
            }
            None => {
                if role == Role::Data
                    && staged.buf.capacity() - staged.buf.len() < bytes.len() + STAMP_GROWTH
                {
                    // A data packet that is no slice: the rest of its batch,
                    // written alike, likely is none either. Room for all of
                    // it at once, not a growing buffer copied as it grows.
                    staged
                        .buf
                        .reserve(staged.left.max(bytes.len() + STAMP_GROWTH));
                }
                let start = staged.buf.len();
                let stamped = stamp_relayed(
                    bytes,
                    fields,
                    raw_id,
                    stream.out_seq,
                    stamp_clock,
                    name.as_deref(),
                    &mut staged.buf,
                );
                if stamped.is_err() {
                    staged.buf.truncate(start);
                    self.dropped(m, reason::MALFORMED);
                    return;
                }
                (Stamped::default(), Some(start..staged.buf.len()))
            }
        };
        stream.last = Some((ts, boottime));
        // The bound of the estimate the packet was mapped with (its epoch's).
        let estimate = self.relays.get(&m.key.0).and_then(|r| {
            let epoch = boottime.and_then(|c| r.clocks.epoch_at(c));
            r.earlier.pick(r.estimate.as_ref(), epoch).copied()
        });
        let packet = OutPacket {
            ts,
            machine_raw_id: raw_id,
            machine_name: name,
            seq: stream.out_seq,
            clock: if has_ts { m.clock } else { 0 },
            clock_ts: fields.timestamp.unwrap_or(0),
            err_ns: match (estimate, boottime) {
                (Some(e), Some(c)) => extrapolated_bound(&e, c.max(0) as u64),
                _ => 0,
            },
            data_field: fields.data_field,
            src: Arc::clone(&stream.src),
            role,
            origin: Some(Origin {
                relay_instance: m.key.0,
                relay_sequence: m.key.1,
                index: m.index,
            }),
            bytes: stamped,
        };
        let queued = Queued {
            packet,
            relay_boottime: boottime,
            batch: Some(m.batch),
        };
        staged.packets.push((stream.id, queued, range));
    }

    /// Queues a packet behind its relay's unresolvable ones. When the queue
    /// is full the oldest is dropped (see the module docs), except for a
    /// relay still waiting for its first sync estimate: its connection is
    /// held back instead ([`LiveCore::held_back`]), and only frames already
    /// on their way can overfill it, up to twice the bound.
    fn push_pending(&mut self, p: PendingPacket) {
        let instance = p.meta.key.0;
        if let Some(stream) = self.streams.get_mut(&p.meta.key) {
            stream.pending += 1;
        }
        let Some(relay) = self.relays.get_mut(&instance) else {
            return;
        };
        let slack = if relay.estimate.is_none() { 2 } else { 1 };
        let (max_packets, max_bytes) = (
            self.config.pending_max_packets.saturating_mul(slack),
            self.config.pending_max_bytes.saturating_mul(slack),
        );
        relay.pending_bytes += p.held();
        relay.pending.push_back(p);
        let mut evicted = Vec::new();
        while relay.pending.len() > max_packets || relay.pending_bytes > max_bytes {
            let Some(old) = relay.pending.pop_front() else {
                break;
            };
            relay.pending_bytes -= old.held();
            evicted.push(old);
        }
        for old in evicted {
            if let Some(stream) = self.streams.get_mut(&old.meta.key) {
                stream.pending = stream.pending.saturating_sub(1);
            }
            self.dropped(&old.meta, reason::NO_PATH);
        }
    }

    /// The relay's pending queue is at its bound, or the relays still
    /// waiting for their first estimate hold `pending_max_bytes` together
    /// (so their startup does not cost memory per relay: they are held
    /// back, their spools keep the data).
    pub(super) fn pending_full(&self, relay: &Relay) -> bool {
        let max_bytes = self.config.pending_max_bytes;
        relay.pending.len() >= self.config.pending_max_packets
            || relay.pending_bytes >= max_bytes
            || (relay.estimate.is_none() && self.unsynced_pending_bytes() >= max_bytes)
    }

    /// Pending bytes of all relays without a sync estimate.
    fn unsynced_pending_bytes(&self) -> usize {
        self.relays
            .values()
            .filter(|r| r.estimate.is_none())
            .map(|r| r.pending_bytes)
            .sum()
    }

    /// Resolves what can be resolved of a relay's pending packets, in
    /// order; a stream whose packet still waits keeps its later ones too.
    pub(super) fn retry_pending(&mut self, instance: u64) {
        let Some(relay) = self.relays.get_mut(&instance) else {
            return;
        };
        // Without an estimate nothing with a time resolves, and a packet
        // without one waits only behind such a packet.
        if relay.pending.is_empty() || relay.estimate.is_none() {
            return;
        }
        let max_age = self.config.pending_max_age_ns;
        let now = self.latest_now;
        let waiting = std::mem::take(&mut relay.pending);
        relay.pending_bytes = 0;
        let mut kept = VecDeque::new();
        let mut kept_bytes = 0;
        let mut blocked: HashSet<u32> = HashSet::new();
        let mut staged = std::mem::take(&mut self.staged);
        for p in waiting {
            let m = p.meta;
            if blocked.contains(&m.key.1) {
                kept_bytes += p.held();
                kept.push_back(p);
                continue;
            }
            // Scanned once already: cannot fail again.
            let Ok(fields) = scan_packet(&p.bytes) else {
                continue;
            };
            let last = self.streams.get(&m.key).and_then(|s| s.last);
            let Some(relay) = self.relays.get_mut(&instance) else {
                break;
            };
            let mut resolution = resolve(
                &mut relay.clocks,
                (relay.estimate.as_ref(), &relay.earlier),
                last,
                fields.timestamp,
                &m,
            );
            if resolution == Resolution::NoPath && now.saturating_sub(m.arrival) > max_age {
                // Synced, and still no snapshot relates its clock: give up.
                resolution = Resolution::Drop(reason::NO_PATH);
            }
            if let Resolution::NoPath | Resolution::NoSync = resolution {
                blocked.insert(m.key.1);
                kept_bytes += p.held();
                kept.push_back(p);
                continue;
            }
            if let Some(stream) = self.streams.get_mut(&m.key) {
                stream.pending = stream.pending.saturating_sub(1);
            }
            match resolution {
                Resolution::Ready { ts, boottime } => {
                    self.stage(&m, &p.bytes, &fields, ts, boottime, &mut staged);
                    // Queued in slices: a long pending queue is not staged
                    // (and its staging room kept) all at once.
                    if staged.packets.len() >= STAGED_KEEP {
                        self.queue_staged(&mut staged, None);
                    }
                }
                Resolution::Drop(why) => self.dropped(&m, why),
                Resolution::NoPath | Resolution::NoSync => {}
            }
        }
        self.queue_staged(&mut staged, None);
        self.staged = staged;
        if let Some(relay) = self.relays.get_mut(&instance) {
            relay.pending = kept;
            relay.pending_bytes = kept_bytes;
        }
    }
}

/// The estimate's hard bound carried from its reference to relay BOOTTIME
/// `c`: the estimator's own frequency bound and wander allowance
/// ([`SyncEstimate::bound_at`]), not a flat drift assumption.
fn extrapolated_bound(e: &SyncEstimate, c: u64) -> u64 {
    e.bound_at(c)
}
