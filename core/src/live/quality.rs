//! The sync-quality tracks of the remote machines (`crate::sync_quality`):
//! what to write before a remote machine's packet so the tracks show the
//! estimates the core used and the error-bound track covers the packet.

use std::sync::Arc;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;

use super::epochs::EPOCH_JUMP_NS;
use super::estimate::SyncEstimate;
use super::packet::{OutPacket, Role};
use crate::sync_quality::{
    QualityTrack, counter_packet, descriptor_packets, epoch_packet, ns_to_us,
};

/// TracePacket fields of what is written here.
const TRACK_DESCRIPTOR: u32 = 60;
const TRACK_EVENT: u32 = 11;

/// A new bound sample is written with this headroom (1/16 of it, at least
/// 500 ns), so a bound that grows with the distance from the estimate's
/// reference needs a new sample only now and then.
fn with_headroom(err_ns: u64) -> u64 {
    err_ns.saturating_add((err_ns / 16).max(500))
}

/// What was last written for one machine (kept in its machine row, so
/// forgotten with it and described again when it comes back).
#[derive(Debug, Default)]
pub(super) struct MachineTracks {
    /// Its sequence; 0 until the first packet.
    seq: u32,
    described: bool,
    /// The error bound in force (ns): every packet written since the last
    /// bound sample had a bound at most this.
    bound_ns: u64,
    freq_bits: Option<u64>,
    rtt_ns: Option<u64>,
    /// BOOTTIME-MONOTONIC of the last estimate seen.
    bmm: Option<i64>,
    instance: Option<u64>,
    /// Last offset sample and the bound at it, for steps.
    offset: Option<(i64, u64)>,
    /// The machine's last BOOTTIME a sample was written at.
    last_client: u64,
}

/// Allocates the machines' sequences (in this core's class of the range).
#[derive(Debug, Default)]
pub(super) struct QualitySequences {
    next: u32,
    ids: super::ShardIds,
}

impl QualitySequences {
    pub fn new(ids: super::ShardIds) -> Self {
        Self { next: 0, ids }
    }
}

/// What the core knows before writing a remote machine's packet.
pub(super) struct Before<'a> {
    pub packet: &'a OutPacket,
    /// The packet's BOOTTIME on its machine, if it has a time.
    pub client: Option<u64>,
    /// The sync point written right before the packet: (client, offset).
    pub sync_point: Option<(u64, i64)>,
    /// The machine's last sync point: offset, for packets with no time.
    pub last_offset: Option<i64>,
    pub estimate: Option<&'a SyncEstimate>,
}

impl MachineTracks {
    /// Appends to `out` the track packets due before `b.packet`.
    pub fn before(
        &mut self,
        seqs: &mut QualitySequences,
        b: &Before<'_>,
        out: &mut Vec<OutPacket>,
    ) {
        self.allocate_seq(seqs);
        let Some(client) = self.client_time(b) else {
            return;
        };
        self.last_client = client;
        let mut w = TrackWriter {
            packet: b.packet,
            seq: self.seq,
            client,
            out,
        };
        self.describe(&mut w);
        // Epoch changes first: the values after them are the new epoch's.
        if let Some(what) = self.epoch_change(b) {
            let bytes = epoch_packet(b.packet.machine_raw_id, self.seq, client, what);
            w.push(bytes, TRACK_EVENT, Role::SyncQuality);
        }
        if let Some((_, offset)) = b.sync_point {
            w.counter(QualityTrack::Offset, ns_to_us(offset as f64));
        }
        if let Some(e) = b.estimate {
            self.estimate_counters(e, &mut w);
        }
        self.error_bound(b, &mut w);
    }

    /// Gives the machine its sequence on its first packet.
    #[inline]
    fn allocate_seq(&mut self, seqs: &mut QualitySequences) {
        if self.seq == 0 {
            self.seq = seqs.ids.quality_seq(seqs.next);
            seqs.next = seqs.next.wrapping_add(1);
        }
    }

    /// The machine's BOOTTIME to write the samples at: the packet's own, or
    /// its trace time carried back by the last offset; never earlier than
    /// the last sample's, and None without one (or at 0).
    #[inline]
    fn client_time(&self, b: &Before<'_>) -> Option<u64> {
        let client = b
            .client
            .or_else(|| {
                let c = i128::from(b.packet.ts) + i128::from(b.last_offset?);
                u64::try_from(c).ok()
            })
            .map(|c| c.max(self.last_client));
        client.filter(|&c| c > 0)
    }

    /// The track descriptors, once per machine row.
    #[inline]
    fn describe(&mut self, w: &mut TrackWriter<'_>) {
        if self.described {
            return;
        }
        self.described = true;
        let descriptors = descriptor_packets(w.packet.machine_raw_id, self.seq);
        for (i, d) in descriptors.into_iter().enumerate() {
            let role = if i == 0 {
                Role::IncrementalStateCleared
            } else {
                Role::IncrementalState
            };
            w.push(d, TRACK_DESCRIPTOR, role);
        }
    }

    /// Notes the relay instance, the suspend offset and the sync offset of
    /// `b`, and names the epoch change they show, if any (a suspend over a
    /// reconnect; a step only when neither).
    #[inline]
    fn epoch_change(&mut self, b: &Before<'_>) -> Option<&'static str> {
        let p = b.packet;
        let instance = p.origin.map(|o| o.relay_instance);
        let mut epoch = None;
        if let (Some(old), Some(new)) = (self.instance, instance)
            && old != new
        {
            epoch = Some("reconnect");
        }
        if instance.is_some() {
            self.instance = instance;
        }
        if let Some(e) = b.estimate {
            if self.bmm.is_some_and(|old| {
                old.abs_diff(e.boottime_minus_monotonic_ns) > EPOCH_JUMP_NS.unsigned_abs()
            }) {
                epoch = Some("suspend");
            }
            self.bmm = Some(e.boottime_minus_monotonic_ns);
        }
        if let Some((_, offset)) = b.sync_point {
            let bound = p.err_ns;
            if epoch.is_none()
                && let Some((old, old_bound)) = self.offset
                && old.abs_diff(offset) > old_bound.saturating_add(bound)
            {
                epoch = Some("step");
            }
            self.offset = Some((offset, bound));
        }
        epoch
    }

    /// The frequency and round-trip samples, when they changed.
    #[inline]
    fn estimate_counters(&mut self, e: &SyncEstimate, w: &mut TrackWriter<'_>) {
        if self.freq_bits != Some(e.freq_ppm.to_bits()) {
            self.freq_bits = Some(e.freq_ppm.to_bits());
            w.counter(QualityTrack::FreqError, e.freq_ppm);
        }
        if self.rtt_ns != Some(e.rtt_ns) {
            self.rtt_ns = Some(e.rtt_ns);
            w.counter(QualityTrack::RoundTrip, ns_to_us(e.rtt_ns as f64));
        }
    }

    /// The bound in force must cover this packet; lowered (at a sync
    /// point, when the estimate moved) once it is well above need.
    #[inline]
    fn error_bound(&mut self, b: &Before<'_>, w: &mut TrackWriter<'_>) {
        let need = b.packet.err_ns;
        let lower = b.sync_point.is_some() && with_headroom(need) < self.bound_ns / 8 * 7;
        if need > self.bound_ns || self.bound_ns == 0 || lower {
            self.bound_ns = with_headroom(need);
            w.counter(QualityTrack::ErrorBound, ns_to_us(self.bound_ns as f64));
        }
    }
}

/// Appends one machine's track packets, written before `packet` on the
/// machine's sequence `seq` at its BOOTTIME `client`.
struct TrackWriter<'a> {
    packet: &'a OutPacket,
    seq: u32,
    client: u64,
    out: &'a mut Vec<OutPacket>,
}

impl TrackWriter<'_> {
    #[inline]
    fn push(&mut self, bytes: Vec<u8>, data_field: u32, role: Role) {
        let packet = track_packet(self.packet, self.seq, self.client, bytes, data_field, role);
        self.out.push(packet);
    }

    /// A sample of `track`.
    #[inline]
    fn counter(&mut self, track: QualityTrack, value: f64) {
        let raw_id = self.packet.machine_raw_id;
        let bytes = counter_packet(raw_id, self.seq, self.client, track, value);
        self.push(bytes, TRACK_EVENT, Role::SyncQuality);
    }
}

fn track_packet(
    p: &OutPacket,
    seq: u32,
    client: u64,
    bytes: Vec<u8>,
    data_field: u32,
    role: Role,
) -> OutPacket {
    let timed = role == Role::SyncQuality;
    OutPacket {
        ts: p.ts,
        machine_raw_id: p.machine_raw_id,
        machine_name: p.machine_name.clone(),
        seq,
        clock: if timed { BOOTTIME } else { 0 },
        clock_ts: if timed { client } else { 0 },
        err_ns: p.err_ns,
        data_field: Some(data_field),
        src: Arc::from(p.machine_name.as_deref().unwrap_or("sync")),
        role,
        origin: None,
        bytes: Bytes::from(bytes).into(),
    }
}
