//! Batches in: de-duplication, scan, clock resolution, the pending queue.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::relay::v1::RelayClocks as WireClocks;
use tracesync_protocol::scan::{PacketFields, defaults_timestamp_clock_id, scan_packet};

use super::acks::BatchSeq;
use super::clocks::RelayClocks;
use super::core::{LiveCore, StreamKey, reason};
use super::estimate::SyncEstimate;
use super::order::{BatchRef, Queued};
use super::packet::{Origin, OutPacket, Role};
use super::stamp::stamp_relayed;
use super::types::{RelaySlot, SessionError};
use crate::clock::ConvertError;

/// A packet waiting for its clock to become resolvable.
#[derive(Debug)]
pub(super) struct PendingPacket {
    pub key: StreamKey,
    pub index: u64,
    pub batch: u64,
    pub bytes: Bytes,
    /// Clock of the timestamp, and whether to stamp it (the packet names none).
    pub clock: u32,
    pub stamp_clock: bool,
    /// Relay BOOTTIME of the batch: time of a packet with no timestamp on a
    /// stream with no earlier time.
    pub fallback_boottime: Option<u64>,
    /// Host BOOTTIME of arrival: the last resort for such a packet.
    pub arrival: u64,
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

fn resolve(
    clocks: &mut RelayClocks,
    estimate: Option<&SyncEstimate>,
    last: Option<(i64, Option<i64>)>,
    fields: &PacketFields<'_>,
    p: &PendingPacket,
) -> Resolution {
    let to_host = |boottime: i64| -> Resolution {
        let Some(e) = estimate else {
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
    };
    match fields.timestamp {
        Some(raw) => match clocks.boottime_of(p.key.1, p.clock, raw) {
            Ok(boottime) => to_host(boottime),
            Err(ConvertError::Overflow) => Resolution::Drop(reason::CONVERSION),
            Err(_) => Resolution::NoPath,
        },
        None => match (last, p.fallback_boottime) {
            (Some((ts, boottime)), _) => Resolution::Ready { ts, boottime },
            (None, Some(b)) => to_host(i64::try_from(b).unwrap_or(i64::MAX)),
            (None, None) => Resolution::Ready {
                ts: i64::try_from(p.arrival).unwrap_or(i64::MAX),
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
        let mut clocks_changed = false;
        for (index, bytes) in (first_index..).zip(packets) {
            self.stats.packets_in += 1;
            let p = PendingPacket {
                key: (instance, 0),
                index,
                batch: seq,
                bytes,
                clock: BOOTTIME,
                stamp_clock: false,
                fallback_boottime,
                arrival: now,
            };
            clocks_changed |= self.ingest(p, raw_id);
        }
        if clocks_changed {
            self.retry_pending(instance);
        }
        Ok(())
    }

    /// Takes one packet of a batch; returns whether the relay's clock graph
    /// changed.
    fn ingest(&mut self, mut p: PendingPacket, raw_id: u32) -> bool {
        let instance = p.key.0;
        let bytes = p.bytes.clone();
        let Ok(fields) = scan_packet(&bytes) else {
            self.machine(raw_id).count(reason::MALFORMED, 1);
            return false;
        };
        p.key.1 = fields.trusted_packet_sequence_id.unwrap_or(0);
        let stream = self.stream_entry(p.key, raw_id);
        if stream.written.is_some_and(|w| p.index <= w) {
            self.machine(raw_id).count(reason::DUPLICATE, 1);
            return false;
        }
        stream.written = Some(p.index);
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
        p.clock = explicit.or(stream.default_clock).unwrap_or(BOOTTIME);
        p.stamp_clock = explicit.is_none() && stream.default_clock.is_none();
        let blocked = stream.pending > 0;
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
            changed = relay.clocks.add_snapshot(snapshot, p.key.1);
            let invalid = relay.clocks.invalid_clock_snapshots - before;
            if invalid > 0 {
                self.machine(raw_id)
                    .count(reason::INVALID_SNAPSHOT, invalid);
            }
        }
        let Some(relay) = self.relays.get_mut(&instance) else {
            return changed;
        };
        relay.batches.add_outstanding(p.batch);
        if blocked {
            self.push_pending(p);
            return changed;
        }
        let last = self.streams.get(&p.key).and_then(|s| s.last);
        let estimate = relay.estimate;
        match resolve(&mut relay.clocks, estimate.as_ref(), last, &fields, &p) {
            Resolution::Ready { ts, boottime } => {
                self.enqueue(&p, &fields, ts, boottime, estimate.as_ref());
            }
            Resolution::NoPath | Resolution::NoSync => self.push_pending(p),
            Resolution::Drop(why) => self.dropped(&p, why),
        }
        changed
    }

    /// Counts a dropped packet and lets its batch be acknowledged.
    fn dropped(&mut self, p: &PendingPacket, why: &'static str) {
        if let Some(relay) = self.relays.get_mut(&p.key.0) {
            relay.batches.packet_done(p.batch);
            let raw_id = relay.raw_id;
            self.machine(raw_id).count(why, 1);
        }
    }

    /// Stamps a resolved packet and queues it for the watermark.
    fn enqueue(
        &mut self,
        p: &PendingPacket,
        fields: &PacketFields<'_>,
        ts: i64,
        boottime: Option<i64>,
        estimate: Option<&SyncEstimate>,
    ) {
        let Some(stream) = self.streams.get_mut(&p.key) else {
            return;
        };
        let raw_id = stream.raw_id;
        let name = self.machines.get(&raw_id).and_then(|m| m.name.clone());
        let has_ts = fields.timestamp.is_some();
        let stamp_clock = (has_ts && p.stamp_clock).then_some(p.clock);
        let bytes = match stamp_relayed(
            &p.bytes,
            fields,
            raw_id,
            stream.out_seq,
            stamp_clock,
            name.as_deref(),
        ) {
            Ok(b) => b,
            Err(_) => {
                self.dropped(p, reason::MALFORMED);
                return;
            }
        };
        stream.last = Some((ts, boottime));
        let packet = OutPacket {
            ts,
            machine_raw_id: raw_id,
            machine_name: name,
            seq: stream.out_seq,
            clock: if has_ts { p.clock } else { 0 },
            clock_ts: fields.timestamp.unwrap_or(0),
            err_ns: estimate
                .filter(|_| boottime.is_some())
                .map_or(0, |e| e.error_bound_ns),
            data_field: fields.data_field,
            src: Arc::clone(&stream.src),
            role: Role::of(fields),
            origin: Some(Origin {
                relay_instance: p.key.0,
                relay_sequence: p.key.1,
                index: p.index,
            }),
            bytes,
        };
        let id = stream.id;
        self.order.push(
            id,
            Queued {
                packet,
                relay_boottime: boottime,
                batch: Some(BatchRef {
                    relay_instance: p.key.0,
                    batch: p.batch,
                }),
            },
        );
    }

    /// Queues a packet behind its relay's unresolvable ones; when the queue
    /// is full the oldest is dropped (see the module docs).
    fn push_pending(&mut self, p: PendingPacket) {
        let instance = p.key.0;
        if let Some(stream) = self.streams.get_mut(&p.key) {
            stream.pending += 1;
        }
        let (max_packets, max_bytes) = (
            self.config.pending_max_packets,
            self.config.pending_max_bytes,
        );
        let Some(relay) = self.relays.get_mut(&instance) else {
            return;
        };
        relay.pending_bytes += p.bytes.len();
        relay.pending.push_back(p);
        let mut evicted = Vec::new();
        while relay.pending.len() > max_packets || relay.pending_bytes > max_bytes {
            let Some(old) = relay.pending.pop_front() else {
                break;
            };
            relay.pending_bytes -= old.bytes.len();
            evicted.push(old);
        }
        for old in evicted {
            if let Some(stream) = self.streams.get_mut(&old.key) {
                stream.pending -= 1;
            }
            self.dropped(&old, reason::NO_PATH);
        }
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
        for p in waiting {
            if blocked.contains(&p.key.1) {
                kept_bytes += p.bytes.len();
                kept.push_back(p);
                continue;
            }
            let bytes = p.bytes.clone();
            let Ok(fields) = scan_packet(&bytes) else {
                // Scanned once already; cannot fail again.
                continue;
            };
            let last = self.streams.get(&p.key).and_then(|s| s.last);
            let Some(relay) = self.relays.get_mut(&instance) else {
                return;
            };
            let estimate = relay.estimate;
            let mut resolution = resolve(&mut relay.clocks, estimate.as_ref(), last, &fields, &p);
            if resolution == Resolution::NoPath && now.saturating_sub(p.arrival) > max_age {
                // Synced, and still no snapshot relates its clock: give up.
                resolution = Resolution::Drop(reason::NO_PATH);
            }
            match resolution {
                Resolution::NoPath | Resolution::NoSync => {
                    blocked.insert(p.key.1);
                    kept_bytes += p.bytes.len();
                    kept.push_back(p);
                }
                resolved => {
                    if let Some(stream) = self.streams.get_mut(&p.key) {
                        stream.pending -= 1;
                    }
                    match resolved {
                        Resolution::Ready { ts, boottime } => {
                            self.enqueue(&p, &fields, ts, boottime, estimate.as_ref());
                        }
                        Resolution::Drop(why) => self.dropped(&p, why),
                        Resolution::NoPath | Resolution::NoSync => {}
                    }
                }
            }
        }
        if let Some(relay) = self.relays.get_mut(&instance) {
            relay.pending = kept;
            relay.pending_bytes = kept_bytes;
        }
    }
}
