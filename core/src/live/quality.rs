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
    QUALITY_SEQ_BASE, QUALITY_SEQ_COUNT, QualityTrack, counter_packet, descriptor_packets,
    epoch_packet, ns_to_us,
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

/// Allocates the machines' sequences.
#[derive(Debug, Default)]
pub(super) struct QualitySequences {
    next: u32,
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
        let p = b.packet;
        let raw_id = p.machine_raw_id;
        let m = self;
        if m.seq == 0 {
            m.seq = QUALITY_SEQ_BASE + seqs.next % QUALITY_SEQ_COUNT;
            seqs.next = seqs.next.wrapping_add(1);
        }
        let client = b
            .client
            .or_else(|| {
                let c = i128::from(p.ts) + i128::from(b.last_offset?);
                u64::try_from(c).ok()
            })
            .map(|c| c.max(m.last_client));
        let Some(client) = client.filter(|&c| c > 0) else {
            return;
        };
        m.last_client = client;
        let mut pushed = Vec::new();
        let mut push = |bytes: Vec<u8>, data_field: u32, role: Role| {
            pushed.push((bytes, data_field, role));
        };
        if !m.described {
            m.described = true;
            for (i, d) in descriptor_packets(raw_id, m.seq).into_iter().enumerate() {
                let role = if i == 0 {
                    Role::IncrementalStateCleared
                } else {
                    Role::IncrementalState
                };
                push(d, TRACK_DESCRIPTOR, role);
            }
        }
        let counter = |track, value| counter_packet(raw_id, m.seq, client, track, value);
        // Epoch changes first: the values after them are the new epoch's.
        let instance = p.origin.map(|o| o.relay_instance);
        let mut epoch = None;
        if let (Some(old), Some(new)) = (m.instance, instance)
            && old != new
        {
            epoch = Some("reconnect");
        }
        if instance.is_some() {
            m.instance = instance;
        }
        if let Some(e) = b.estimate {
            if m.bmm.is_some_and(|old| {
                old.abs_diff(e.boottime_minus_monotonic_ns) > EPOCH_JUMP_NS.unsigned_abs()
            }) {
                epoch = Some("suspend");
            }
            m.bmm = Some(e.boottime_minus_monotonic_ns);
        }
        if let Some((_, offset)) = b.sync_point {
            let bound = p.err_ns;
            if epoch.is_none()
                && let Some((old, old_bound)) = m.offset
                && old.abs_diff(offset) > old_bound.saturating_add(bound)
            {
                epoch = Some("step");
            }
            m.offset = Some((offset, bound));
        }
        if let Some(what) = epoch {
            push(
                epoch_packet(raw_id, m.seq, client, what),
                TRACK_EVENT,
                Role::SyncQuality,
            );
        }
        if let Some((_, offset)) = b.sync_point {
            let v = ns_to_us(offset as f64);
            push(
                counter(QualityTrack::Offset, v),
                TRACK_EVENT,
                Role::SyncQuality,
            );
        }
        if let Some(e) = b.estimate {
            if m.freq_bits != Some(e.freq_ppm.to_bits()) {
                m.freq_bits = Some(e.freq_ppm.to_bits());
                let v = e.freq_ppm;
                push(
                    counter(QualityTrack::FreqError, v),
                    TRACK_EVENT,
                    Role::SyncQuality,
                );
            }
            if m.rtt_ns != Some(e.rtt_ns) {
                m.rtt_ns = Some(e.rtt_ns);
                let v = ns_to_us(e.rtt_ns as f64);
                push(
                    counter(QualityTrack::RoundTrip, v),
                    TRACK_EVENT,
                    Role::SyncQuality,
                );
            }
        }
        // The bound in force must cover this packet; lowered (at a sync
        // point, when the estimate moved) once it is well above need.
        let need = p.err_ns;
        let lower = b.sync_point.is_some() && with_headroom(need) < m.bound_ns / 8 * 7;
        if need > m.bound_ns || m.bound_ns == 0 || lower {
            m.bound_ns = with_headroom(need);
            let v = ns_to_us(m.bound_ns as f64);
            push(
                counter(QualityTrack::ErrorBound, v),
                TRACK_EVENT,
                Role::SyncQuality,
            );
        }
        for (bytes, data_field, role) in pushed {
            out.push(track_packet(p, m.seq, client, bytes, data_field, role));
        }
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
