//! Packets out: the watermark, draining in time order, sync points, and the
//! host's own packets.

use std::sync::Arc;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::scan::field;

use super::core::LiveCore;
use super::machines::reason;
use super::packet::{OutPacket, Role};
use super::quality::Before;
use super::queued::{Parts, Queued};
use super::stamp::{OWN_SEQUENCE_ID, host_clock_snapshot, host_system_info};
use super::types::RelaySlot;
use super::types::StreamId;
use crate::sync::covering::Mapping;
use crate::sync_point::sync_point_packet;

/// About how many bytes one [`LiveCore::drain`] call appends: the packets'
/// bytes plus their entries in the list ([`OutPacket`]). With small packets
/// the entries are most of it: counting the packets' bytes alone, a round
/// of ~64 B packets listed 64 Ki entries, ~10 MiB of list.
pub const DRAIN_MAX_BYTES: u64 = 4 << 20;

/// One packet's entry in the drained list.
const OUT_ENTRY: u64 = std::mem::size_of::<OutPacket>() as u64;

/// The host's own packets form one stream.
const HOST_STREAM: StreamId = StreamId::MAX;

impl LiveCore {
    /// Packets with a time <= this may be written: the slowest connected,
    /// synced relay's latest accepted clock on the host timeline, and host
    /// now, minus the merge window. A relay whose accepted clock has not
    /// kept up with the reading clock for [`LiveConfig::stall_after_ns`]
    /// holds nothing until it does again, and refused clocks never count
    /// (see the module docs, "Watermark"). A relay connected less than
    /// `connect_grace_ns` ago without an estimate yet holds it at its
    /// connect time (its first packets wait for that estimate). Other
    /// unsynced relays and disconnected ones hold nothing: their packets
    /// are written late if they turn out older.
    ///
    /// [`LiveConfig::stall_after_ns`]: super::LiveConfig::stall_after_ns
    pub fn watermark(&self, now: u64) -> i64 {
        let host_now = i64::try_from(now).unwrap_or(i64::MAX);
        let reading = self.reading.at(now);
        let slowest = self
            .relays
            .slowest(now, reading, &self.config)
            .map_or(host_now, |s| s.min(host_now));
        let window = i64::try_from(self.config.merge_window_ns).unwrap_or(i64::MAX);
        slowest.saturating_sub(window)
    }

    /// Relay connections that should stop reading for now, so the relay's
    /// spool holds the data instead of the daemon's memory:
    /// - a relay with no sync estimate yet whose pending queue is full (its
    ///   estimate comes from the prober, not from the stream);
    /// - while the ordering queue holds more than half its bound, a relay
    ///   whose latest accepted clock is more than a merge window ahead of
    ///   the watermark: reading the relays that hold the watermark back
    ///   first keeps the queue short and the output in order instead of
    ///   forcing packets out early (`forced_by_queue_limit`, written late).
    ///
    /// The relays holding the watermark are never held back, so it always
    /// advances; a relay that stalled holds no more, so it holds nobody
    /// back. A relay's stall grace does not run while it is held back, and
    /// starts again when it is read again (call this before each
    /// [`drain`](Self::drain), as the ingest loop does).
    #[must_use = "the connections to stop reading"]
    pub fn held_back(&mut self, now: u64) -> Vec<RelaySlot> {
        let crowded = self.output.queued_bytes() > self.config.queue_max_bytes / 2;
        let watermark = self.watermark(now);
        let window = i64::try_from(self.config.merge_window_ns).unwrap_or(i64::MAX);
        let ahead_from = watermark.saturating_add(window.saturating_mul(2));
        let reading = self.reading.at(now);
        self.relays
            .held_back(crowded, ahead_from, &self.config, reading)
    }

    /// Appends to `out`, in time order, every packet the watermark has
    /// passed, with the sync points they need. `now` is host BOOTTIME.
    ///
    /// One call appends about [`DRAIN_MAX_BYTES`] at most (the rest stays
    /// queued): call again until it appends nothing, writing in between,
    /// so the drained-but-unwritten packets stay bounded too.
    pub fn drain(&mut self, now: u64, out: &mut Vec<OutPacket>) {
        self.latest_now = self.latest_now.max(now);
        let reading = self.reading.drained(now);
        let machines = &mut self.machines;
        self.relays
            .check_stalls(reading, self.config.stall_after_ns(), |raw_id| {
                machines.count(raw_id, reason::CLOCK_STALLS, 1);
            });
        let watermark = self.watermark(now);
        let stop_at = self.output.bytes_out().saturating_add(DRAIN_MAX_BYTES);
        let first = out.len();
        while self.output.bytes_out() + (out.len() - first) as u64 * OUT_ENTRY < stop_at
            && let Some(q) = self.output.pop_through(watermark)
        {
            self.emit(q, out);
        }
        while let Some(q) = self.output.pop_over(self.config.queue_max_bytes) {
            self.emit(q, out);
        }
    }

    /// Appends everything queued, in time order (shutdown). Packets still
    /// pending stay unacknowledged: their relays resend them next time.
    pub fn flush_all(&mut self, out: &mut Vec<OutPacket>) {
        while let Some(q) = self.output.pop() {
            self.emit(q, out);
        }
    }

    fn emit(&mut self, mut q: Queued, out: &mut Vec<OutPacket>) {
        let raw_id = q.machine_raw_id;
        let relay_boottime = q.relay_boottime();
        // What its stream says of every packet. The daemon's own packets
        // have none; a relayed packet always has (a stream with packets
        // queued is never forgotten), else it is labelled by machine and
        // output sequence.
        let (relay, src) = match self.streams.labels(q.stream) {
            Some(labels) => (Some(labels.key), Arc::clone(&labels.src)),
            None if q.relayed().is_none() => (
                None,
                self.machines
                    .name(raw_id)
                    .unwrap_or_else(|| Arc::from("host")),
            ),
            None => (None, self.machines.src_label(raw_id, q.seq())),
        };
        let mut refinement = None;
        if let (Some(r), Some((instance, _))) = (q.relayed(), relay)
            && let Some(relay) = self.relays.get_mut(instance)
        {
            let provisional = Mapping {
                host_ns: q.ts,
                bound_ns: q.err_ns,
            };
            if let Some((checked, how)) = relay.packet_written(r.batch, relay_boottime, provisional)
            {
                q.ts = checked.host_ns;
                q.err_ns = checked.bound_ns;
                refinement = Some(how);
            }
        }
        // One machine lookup per packet (its name and the sync point
        // included).
        let machine = self.machines.row(raw_id);
        let packet = q.unpack(relay, src, machine.name().cloned());
        let late = self.output.written(packet.ts, packet.bytes.len());
        machine.wrote(packet.bytes.len(), packet.err_ns, late, refinement);
        // A RemoteClockSync for the packet's machine before it, if the
        // machine has none yet or its offset at the packet's relay time
        // moved by more than the threshold since the last one. The offset
        // is taken from the packet's own mapping (relay BOOTTIME minus host
        // time), so Perfetto places this packet exactly where the core did.
        let threshold = self.config.sync_threshold_ns;
        let sync_point = relay_boottime
            .filter(|_| raw_id != 0)
            .and_then(|c| machine.next_sync_point(c, packet.ts, threshold));
        if let Some((client, host)) = sync_point {
            self.output.sync_point_written();
            out.push(sync_point_for(&packet, client, host));
        }
        if raw_id != 0 {
            // The sync-quality tracks (`quality.rs`): the values the core
            // used, and a bound in force that covers this packet.
            let last_offset = machine.last_offset();
            let (quality, estimate) = machine.tracks_and_estimate();
            let before = Before {
                packet: &packet,
                client: relay_boottime.and_then(|c| u64::try_from(c).ok()),
                sync_point: sync_point.map(|(c, h)| (c, (i128::from(c) - i128::from(h)) as i64)),
                last_offset,
                estimate,
            };
            quality.before(&mut self.quality_seqs, &before, out);
        }
        out.push(packet);
    }

    /// The host's own packets: its SystemInfo once, and a ClockSnapshot
    /// every `host_snapshot_interval_ns`. `clocks` are the host's clocks
    /// read together ((clock id, ns), BOOTTIME among them); `now` is host
    /// BOOTTIME. Call it often (every tick of the ingest loop).
    pub fn host_tick(&mut self, now: u64, clocks: &[(u32, u64)]) {
        self.latest_now = self.latest_now.max(now);
        let ts = i64::try_from(now).unwrap_or(i64::MAX);
        if self.output.take_host_info() {
            let name = self.config.host_name.clone();
            let bytes = host_system_info(name.as_deref(), now);
            self.push_host(ts, now, bytes, Role::SystemInfo, field::SYSTEM_INFO);
        }
        let interval = self.config.host_snapshot_interval_ns;
        if self.output.take_host_snapshot(now, interval) {
            let bytes = host_clock_snapshot(clocks);
            self.push_host(ts, now, bytes, Role::ClockSnapshot, field::CLOCK_SNAPSHOT);
        }
    }

    fn push_host(&mut self, ts: i64, now: u64, bytes: Bytes, role: Role, data_field: u32) {
        self.output.push(Queued::pack(Parts {
            stream: HOST_STREAM,
            ts,
            err_ns: 0,
            clock: BOOTTIME,
            clock_ts: now,
            machine_raw_id: 0,
            seq: OWN_SEQUENCE_ID,
            data_field: Some(data_field),
            role,
            bytes: bytes.into(),
            relayed: None,
            relay_boottime: None,
        }));
    }
}

/// The sync point (client, host) written before `packet`.
fn sync_point_for(packet: &OutPacket, client: u64, host: u64) -> OutPacket {
    let bytes = Bytes::from(sync_point_packet(
        packet.machine_raw_id,
        OWN_SEQUENCE_ID,
        client,
        host,
    ));
    OutPacket {
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
    }
}
