//! Packets out: each drained packet with the sync point and sync-quality
//! packets it needs, and the host's own packets. The watermark and the
//! drain loop are [`LiveCore`](super::LiveCore)'s (`core.rs`).

use std::sync::Arc;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::scan::field;

use super::machines::{Machines, reason};
use super::output::Output;
use super::packet::{OutPacket, Role};
use super::quality::{Before, QualitySequences};
use super::queued::{Parts, Queued};
use super::relays::Relays;
use super::stamp::{OWN_SEQUENCE_ID, host_clock_snapshot, host_system_info};
use super::streams::Streams;
use super::types::LiveConfig;
use super::types::StreamId;
use crate::sync::covering::Mapping;
use crate::sync_point::sync_point_packet;

/// About how many bytes one [`LiveCore::drain`](super::LiveCore::drain) call appends: the packets'
/// bytes plus their entries in the list ([`OutPacket`]). With small packets
/// the entries are most of it: counting the packets' bytes alone, a round
/// of ~64 B packets listed 64 Ki entries, ~10 MiB of list.
pub const DRAIN_MAX_BYTES: u64 = 4 << 20;

/// One packet's entry in the drained list.
pub(super) const OUT_ENTRY: u64 = std::mem::size_of::<OutPacket>() as u64;

/// The host's own packets form one stream.
const HOST_STREAM: StreamId = StreamId::MAX;

/// What the output works on: the core's sub-states, borrowed for one
/// drain or host tick.
pub(super) struct Emit<'c> {
    pub config: &'c LiveConfig,
    pub machines: &'c mut Machines,
    pub relays: &'c mut Relays,
    pub streams: &'c Streams,
    pub output: &'c mut Output,
    pub quality_seqs: &'c mut QualitySequences,
}

impl Emit<'_> {
    /// Appends `q` to `out` as the packet it is, with the sync point and
    /// the sync-quality packets it needs before it.
    pub(super) fn packet(&mut self, mut q: Queued, out: &mut Vec<OutPacket>) {
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
        let ahead = q.is_ahead();
        if ahead {
            self.machines.count(raw_id, reason::FUTURE, 1);
        }
        let machine = self.machines.row(raw_id);
        let packet = q.unpack(relay, src, machine.name().cloned());
        let late = self.output.written(packet.ts, packet.bytes.len(), ahead);
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
            quality.before(self.quality_seqs, &before, out);
        }
        out.push(packet);
    }

    /// The host's own packets due at `now` (see
    /// [`LiveCore::host_tick`](super::LiveCore::host_tick)).
    pub(super) fn host_tick(&mut self, now: u64, clocks: &[(u32, u64)]) {
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

    /// Queues one of the host's own packets for the watermark.
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
