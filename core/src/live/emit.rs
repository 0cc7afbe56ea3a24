//! Packets out: the watermark, draining in time order, sync points, and the
//! host's own packets.

use std::sync::Arc;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::scan::field;

use super::core::{LiveCore, reason};
use super::epochs::check_mapping;
use super::order::{Queued, StreamId};
use super::packet::{OutPacket, Role};
use super::stamp::{OWN_SEQUENCE_ID, host_clock_snapshot, host_system_info};
use super::types::RelaySlot;
use crate::sync::covering::{Mapping, Refinement};
use crate::sync_point::offset_pair;
use crate::sync_point::sync_point_packet;

/// About how many packet bytes one [`LiveCore::drain`] call appends.
pub const DRAIN_MAX_BYTES: u64 = 4 << 20;

/// The host's own packets form one stream.
const HOST_STREAM: StreamId = StreamId::MAX;

impl LiveCore {
    /// Packets with a time <= this may be written: the slowest connected,
    /// synced relay's latest clock on the host timeline, and host now,
    /// minus the merge window. A relay connected less than
    /// `connect_grace_ns` ago without an estimate yet holds it at its
    /// connect time (its first packets wait for that estimate). Other
    /// unsynced relays and disconnected ones hold nothing: their packets
    /// are written late if they turn out older.
    pub fn watermark(&self, now: u64) -> i64 {
        let host_now = i64::try_from(now).unwrap_or(i64::MAX);
        let grace = self.config.connect_grace_ns;
        let slowest = self
            .relays
            .values()
            .filter(|r| r.slot.is_some())
            .filter_map(|r| match (r.estimate, r.latest_boottime) {
                (Some(e), Some(b)) => Some(e.to_host(b)),
                (None, _) if now < r.connected_at.saturating_add(grace) => {
                    Some(i64::try_from(r.connected_at).unwrap_or(i64::MAX))
                }
                _ => None,
            })
            .fold(host_now, i64::min);
        let window = i64::try_from(self.config.merge_window_ns).unwrap_or(i64::MAX);
        slowest.saturating_sub(window)
    }

    /// Relay connections that should stop reading for now, so the relay's
    /// spool holds the data instead of the daemon's memory:
    /// - a relay with no sync estimate yet whose pending queue is full (its
    ///   estimate comes from the prober, not from the stream);
    /// - while the ordering queue holds more than half its bound, a relay
    ///   whose latest clock is more than a merge window ahead of the
    ///   watermark: reading the relays that hold the watermark back first
    ///   keeps the queue short and the output in order instead of forcing
    ///   packets out early (`forced_by_queue_limit`, written late).
    ///
    /// The relays holding the watermark are never held back, so it always
    /// advances.
    pub fn held_back(&self, now: u64) -> Vec<RelaySlot> {
        let crowded = self.order.bytes() > self.config.queue_max_bytes / 2;
        let watermark = self.watermark(now);
        let window = i64::try_from(self.config.merge_window_ns).unwrap_or(i64::MAX);
        let ahead_from = watermark.saturating_add(window.saturating_mul(2));
        self.relays
            .values()
            .filter_map(|r| {
                let slot = r.slot?;
                let hold = match (r.estimate, r.latest_boottime) {
                    (None, _) => self.pending_full(r),
                    (Some(e), Some(b)) => crowded && e.to_host(b) > ahead_from,
                    (Some(_), None) => false,
                };
                hold.then_some(slot)
            })
            .collect()
    }

    /// Appends to `out`, in time order, every packet the watermark has
    /// passed, with the sync points they need. `now` is host BOOTTIME.
    ///
    /// One call appends about [`DRAIN_MAX_BYTES`] at most (the rest stays
    /// queued): call again until it appends nothing, writing in between,
    /// so the drained-but-unwritten packets stay bounded too.
    pub fn drain(&mut self, now: u64, out: &mut Vec<OutPacket>) {
        self.latest_now = self.latest_now.max(now);
        let watermark = self.watermark(now);
        let stop_at = self.stats.bytes_out.saturating_add(DRAIN_MAX_BYTES);
        while self.stats.bytes_out < stop_at
            && let Some(q) = self.order.pop_through(watermark)
        {
            self.emit(q, out);
        }
        while self.order.bytes() > self.config.queue_max_bytes {
            let Some(q) = self.order.pop() else { break };
            self.stats.forced_by_queue_limit += 1;
            self.emit(q, out);
        }
    }

    /// Appends everything queued, in time order (shutdown). Packets still
    /// pending stay unacknowledged: their relays resend them next time.
    pub fn flush_all(&mut self, out: &mut Vec<OutPacket>) {
        while let Some(q) = self.order.pop() {
            self.emit(q, out);
        }
    }

    fn emit(&mut self, q: Queued, out: &mut Vec<OutPacket>) {
        let Queued {
            mut packet,
            relay_boottime,
            batch,
        } = q;
        let raw_id = packet.machine_raw_id;
        let mut refinement = None;
        if let (Some(b), Some(o)) = (batch, packet.origin)
            && let Some(relay) = self.relays.get_mut(&o.relay_instance)
        {
            relay.batches.packet_done(b);
            if let Some(c) = relay_boottime.and_then(|c| u64::try_from(c).ok()) {
                let provisional = Mapping {
                    host_ns: packet.ts,
                    bound_ns: packet.err_ns,
                };
                let bmm = relay.clocks.epoch_at(c as i64);
                let (checked, how) = check_mapping(&relay.covering, bmm, c, provisional);
                packet.ts = checked.host_ns;
                packet.err_ns = checked.bound_ns;
                refinement = Some(how);
            }
        }
        let late = self.last_emitted.is_some_and(|last| packet.ts < last);
        self.last_emitted = Some(self.last_emitted.map_or(packet.ts, |l| l.max(packet.ts)));
        // One machine lookup per packet (the sync point check included).
        let threshold = self.config.sync_threshold_ns;
        let machine = self.machines.entry(raw_id).or_default();
        if late {
            self.stats.late_packets += 1;
            machine.count(reason::LATE, 1);
        }
        match refinement {
            Some(Refinement::Unprobed) => machine.count(reason::UNPROBED, 1),
            Some(Refinement::Remapped) => machine.count(reason::REMAPPED, 1),
            Some(Refinement::Confirmed) | None => {}
        }
        machine.packets += 1;
        machine.bytes += packet.bytes.len() as u64;
        machine.max_err_ns = machine.max_err_ns.max(packet.err_ns);
        let sync_at = relay_boottime.filter(|&c| {
            raw_id != 0
                && machine
                    .sync_point
                    .is_none_or(|(_, o)| o.abs_diff(c.saturating_sub(packet.ts)) > threshold)
        });
        self.stats.packets_out += 1;
        self.stats.bytes_out += packet.bytes.len() as u64;
        if let Some(c) = sync_at {
            self.sync_point(&packet, c, out);
        }
        out.push(packet);
    }

    /// Writes a RemoteClockSync for the packet's machine before it, if the
    /// machine has none yet or its offset at the packet's relay time moved
    /// by more than the threshold since the last one. The offset is taken
    /// from the packet's own mapping (relay BOOTTIME minus host time), so
    /// Perfetto places this packet exactly where the core did.
    fn sync_point(&mut self, packet: &OutPacket, c: i64, out: &mut Vec<OutPacket>) {
        let offset = c.saturating_sub(packet.ts);
        let threshold = self.config.sync_threshold_ns;
        let machine = self.machine(packet.machine_raw_id);
        let last = machine.sync_point;
        if last.is_some_and(|(_, o)| o.abs_diff(offset) <= threshold) {
            return;
        }
        // Client values never go backwards within a machine, nor below the
        // sync point a restarted daemon's preamble replays.
        let floor = last.map_or(0, |(client, _)| client).max(machine.sync_floor);
        let (client, host) = offset_pair(u64::try_from(c).unwrap_or(0).max(floor), offset);
        machine.sync_point = Some((client, offset));
        let bytes = Bytes::from(sync_point_packet(
            packet.machine_raw_id,
            OWN_SEQUENCE_ID,
            client,
            host,
        ));
        self.stats.sync_points_written += 1;
        out.push(OutPacket {
            ts: packet.ts,
            machine_raw_id: packet.machine_raw_id,
            machine_name: packet.machine_name.clone(),
            seq: OWN_SEQUENCE_ID,
            clock: BOOTTIME,
            clock_ts: client,
            err_ns: packet.err_ns,
            data_field: Some(field::REMOTE_CLOCK_SYNC),
            src: Arc::from(packet.machine_name.as_deref().unwrap_or("sync")),
            role: Role::SyncPoint,
            origin: None,
            bytes: bytes.into(),
        });
    }

    /// The host's own packets: its SystemInfo once, and a ClockSnapshot
    /// every `host_snapshot_interval_ns`. `clocks` are the host's clocks
    /// read together ((clock id, ns), BOOTTIME among them); `now` is host
    /// BOOTTIME. Call it often (every tick of the ingest loop).
    pub fn host_tick(&mut self, now: u64, clocks: &[(u32, u64)]) {
        self.latest_now = self.latest_now.max(now);
        let ts = i64::try_from(now).unwrap_or(i64::MAX);
        if !self.host_info_sent {
            self.host_info_sent = true;
            let name = self.config.host_name.clone();
            let bytes = host_system_info(name.as_deref(), now);
            self.push_host(ts, now, bytes, Role::SystemInfo, field::SYSTEM_INFO);
        }
        let interval = self.config.host_snapshot_interval_ns;
        if self
            .host_last_snapshot
            .is_none_or(|last| now >= last.saturating_add(interval))
        {
            self.host_last_snapshot = Some(now);
            let bytes = host_clock_snapshot(clocks);
            self.push_host(ts, now, bytes, Role::ClockSnapshot, field::CLOCK_SNAPSHOT);
        }
    }

    fn push_host(&mut self, ts: i64, now: u64, bytes: Bytes, role: Role, data_field: u32) {
        let name = self.machines.get(&0).and_then(|m| m.name.clone());
        let src: Arc<str> = Arc::from(name.as_deref().unwrap_or("host"));
        self.order.push(
            HOST_STREAM,
            Queued {
                packet: OutPacket {
                    ts,
                    machine_raw_id: 0,
                    machine_name: name,
                    seq: OWN_SEQUENCE_ID,
                    clock: BOOTTIME,
                    clock_ts: now,
                    err_ns: 0,
                    data_field: Some(data_field),
                    src,
                    role,
                    origin: None,
                    bytes: bytes.into(),
                },
                relay_boottime: None,
                batch: None,
            },
        );
    }
}
