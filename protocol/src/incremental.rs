//! Incremental clocks of a sequence, for replaying its state elsewhere
//! (the daemon's file preambles, the relay's resume of a file source):
//! tracking each incremental clock's absolute value, and rewriting a
//! ClockSnapshot to read those values.

use crate::scan::{self, Fields, PacketFields, field};

/// A sequence's incremental clocks (ClockSnapshot `is_incremental`, as
/// the Perfetto SDK's track-event clock 64): a timestamp on one is a delta
/// from the sequence's previous timestamp on it, the first after a snapshot
/// from the snapshot's value. Replaying the latest snapshot as written
/// would restart the sum there; a replay (the daemon's file preamble, the relay's
/// resume) re-anchors it at the last absolute value instead ([`reanchor`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IncrementalClocks {
    /// (clock id, absolute raw value of its last timestamp).
    clocks: Vec<(u32, u64)>,
    /// The sequence's default timestamp_clock_id.
    default_clock: Option<u32>,
}

impl IncrementalClocks {
    /// The incremental clocks a ClockSnapshot payload defines (None: none).
    pub fn from_snapshot(payload: &[u8], default_clock: Option<u32>) -> Option<Self> {
        use prost::Message;
        let snapshot = crate::perfetto::ClockSnapshot::decode(payload).ok()?;
        let clocks: Vec<(u32, u64)> = snapshot
            .clocks
            .iter()
            .filter(|c| c.is_incremental.unwrap_or(false))
            .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
            .collect();
        (!clocks.is_empty()).then_some(Self {
            clocks,
            default_clock,
        })
    }

    /// A packet of the sequence after the snapshot, in stream order.
    pub fn advance(&mut self, fields: &PacketFields<'_>) {
        if fields.clears_incremental_state() {
            self.default_clock = None;
        }
        if let Some(d) = fields.trace_packet_defaults {
            self.default_clock = scan::defaults_timestamp_clock_id(d)
                .ok()
                .flatten()
                .filter(|&c| c != 0);
        }
        let Some(ts) = fields.timestamp else { return };
        let clock = fields
            .timestamp_clock_id
            .filter(|&c| c != 0)
            .or(self.default_clock);
        if let Some(acc) = self
            .clocks
            .iter_mut()
            .find(|(id, _)| Some(*id) == clock)
            .map(|(_, acc)| acc)
        {
            *acc = acc.wrapping_add(ts);
        }
    }
}

/// A ClockSnapshot packet re-anchored at `inc`'s last values: each tracked
/// incremental clock reads its last absolute value, every other clock is
/// moved by the same time (so the snapshot still relates the clocks as the
/// original did); the packet's own timestamp is dropped. None if it cannot
/// be rewritten (then the original is replayed).
pub fn reanchor(packet: &[u8], inc: &IncrementalClocks) -> Option<Vec<u8>> {
    use prost::Message;
    let fields = scan::scan_packet(packet).ok()?;
    let mut snapshot = crate::perfetto::ClockSnapshot::decode(fields.clock_snapshot?).ok()?;
    let unit = |c: &crate::perfetto::clock_snapshot::Clock| {
        i128::from(c.unit_multiplier_ns.filter(|&u| u != 0).unwrap_or(1))
    };
    let tracked = |id: Option<u32>| {
        inc.clocks
            .iter()
            .find(|(c, _)| Some(*c) == id)
            .map(|(_, acc)| *acc)
    };
    // The time the first tracked clock moved since the snapshot.
    let shift_ns = snapshot.clocks.iter().find_map(|c| {
        let acc = tracked(c.clock_id).filter(|_| c.is_incremental.unwrap_or(false))?;
        Some((i128::from(acc) - i128::from(c.timestamp.unwrap_or(0))) * unit(c))
    })?;
    for c in &mut snapshot.clocks {
        let incremental = c.is_incremental.unwrap_or(false);
        let value = match (incremental, tracked(c.clock_id)) {
            (true, Some(acc)) => i128::from(acc),
            (true, None) => continue,
            (false, _) => i128::from(c.timestamp.unwrap_or(0)) + shift_ns / unit(c),
        };
        c.timestamp = Some(u64::try_from(value.max(0)).unwrap_or(u64::MAX));
    }
    let mut out = Vec::with_capacity(packet.len() + 16);
    for f in Fields::new(packet) {
        let f = f.ok()?;
        if !matches!(
            f.number,
            field::CLOCK_SNAPSHOT | field::TIMESTAMP | field::TIMESTAMP_CLOCK_ID
        ) {
            out.extend_from_slice(&packet[f.start..f.end]);
        }
    }
    crate::wire::put_len_field(&mut out, field::CLOCK_SNAPSHOT, &snapshot.encode_to_vec());
    Some(out)
}
