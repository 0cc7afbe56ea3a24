//! What a refined capture (`tracesync refine`) writes before a remote
//! machine's packet: the sync point (RemoteClockSync) and sync-quality
//! samples that make Perfetto, and every reader of the rolled files, place
//! the packet by the two-sided mapping (`crate::sync::smoother`) instead
//! of the live one.
//!
//! Invariants, per machine and output file:
//! - **Placed as mapped, within a threshold.** A sync point is written
//!   before a timed packet whenever none was written in this file yet, or
//!   the packet's mapped offset moved from the one in force by more than
//!   [`sync_threshold_ns`] of its bound. Perfetto then places the packet at
//!   most that far from the mapping.
//! - **Covered.** The packet's bound is the mapping's bound plus that
//!   distance; the error-bound value in force (the machine's last sample
//!   in stream order) is at least it, as the live daemon's rule says
//!   (docs/format.md, "Sync-quality tracks").
//! - **Opens alone.** [`RefinedTracks::new_file`] forgets what is in force,
//!   so each file states its own sync point and bound before the
//!   machine's first timed packet in it.
//! - **`c` never goes backwards** for a machine, across files too.

use crate::live::OWN_SEQUENCE_ID;
use crate::sync_point::{offset_pair, sync_point_packet};
use crate::sync_quality::{QualityTrack, counter_packet, ns_to_us};

/// Where a relay timestamp lands on the host timeline, and how surely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub host_ns: i64,
    pub bound_ns: u64,
}

/// Largest move of the mapped offset a sync point in force may lag by:
/// an eighth of the packet's bound, between 50 and 250 ns (a quarter of
/// the live daemon's default threshold: a refined capture is written
/// once, and its placement should not lose to the live one's by the
/// lag), so a 50 ppm relay costs a sync point every 5 ms at most.
pub fn sync_threshold_ns(bound_ns: u64) -> u64 {
    (bound_ns / 8).clamp(50, 250)
}

/// A new bound sample gets 1/16 headroom (at least 500 ns), as the live
/// daemon's: a bound that grows slowly needs a sample only now and then.
fn with_headroom(bound_ns: u64) -> u64 {
    bound_ns.saturating_add((bound_ns / 16).max(500))
}

/// What was written for one remote machine.
#[derive(Debug, Default)]
pub struct RefinedTracks {
    /// The machine's sync-quality sequence, once its descriptors were seen.
    pub quality_seq: Option<u32>,
    /// Client-minus-host offset of the sync point in force in this file.
    offset_in_force: Option<i64>,
    /// Error bound in force in this file (ns); 0 before the first sample.
    bound_in_force: u64,
    /// Largest client value of a sync point written (all files).
    last_client: u64,
}

/// What [`RefinedTracks::before`] decided for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// The packet's bound: the mapping's plus the sync point's lag.
    pub bound_ns: u64,
    /// The bound readers give it: the value in force on its track.
    pub in_force_ns: u64,
    /// Where Perfetto places it (the sync point in force applied).
    pub placed_ns: i64,
    pub sync_point: bool,
}

impl RefinedTracks {
    /// A new output file starts: it must state everything again.
    pub fn new_file(&mut self) {
        self.offset_in_force = None;
        self.bound_in_force = 0;
    }

    /// Appends to `out` the packets due before machine `raw_id`'s packet
    /// at its BOOTTIME `relay_ns`, mapped to `placement`.
    pub fn before(
        &mut self,
        raw_id: u32,
        relay_ns: u64,
        placement: Placement,
        out: &mut Vec<Vec<u8>>,
    ) -> Written {
        let offset = (i128::from(relay_ns) - i128::from(placement.host_ns))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        let threshold = sync_threshold_ns(placement.bound_ns);
        let sync_point = self
            .offset_in_force
            .is_none_or(|o| o.abs_diff(offset) > threshold);
        if sync_point {
            let (client, host) = offset_pair(relay_ns.max(self.last_client), offset);
            self.last_client = client;
            out.push(sync_point_packet(raw_id, OWN_SEQUENCE_ID, client, host));
            self.offset_in_force = Some(offset);
            if let Some(seq) = self.quality_seq {
                let v = ns_to_us(offset as f64);
                out.push(counter_packet(raw_id, seq, client, QualityTrack::Offset, v));
            }
        }
        let in_force = self.offset_in_force.unwrap_or(offset);
        let lag = in_force.abs_diff(offset);
        let need = placement.bound_ns.saturating_add(lag);
        let lower = sync_point && with_headroom(need) < self.bound_in_force / 8 * 7;
        if let Some(seq) = self.quality_seq
            && (need > self.bound_in_force || self.bound_in_force == 0 || lower)
        {
            self.bound_in_force = with_headroom(need);
            let v = ns_to_us(self.bound_in_force as f64);
            let client = relay_ns.max(1);
            out.push(counter_packet(
                raw_id,
                seq,
                client,
                QualityTrack::ErrorBound,
                v,
            ));
        }
        let placed = (i128::from(relay_ns) - i128::from(in_force))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        Written {
            bound_ns: need,
            in_force_ns: self.bound_in_force,
            placed_ns: placed,
            sync_point,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync_quality::{QUALITY_SEQ_BASE, read_sample};
    use tracesync_protocol::scan::scan_packet;

    fn tracks() -> RefinedTracks {
        RefinedTracks {
            quality_seq: Some(QUALITY_SEQ_BASE),
            ..RefinedTracks::default()
        }
    }

    #[test]
    fn sync_point_when_the_offset_moves_past_the_threshold() {
        let mut t = tracks();
        let mut out = Vec::new();
        let p = |host_ns| Placement {
            host_ns,
            bound_ns: 2_000,
        };
        // First packet: a sync point, its offset sample and a bound sample.
        let w = t.before(7, 1_000_000, p(400_000), &mut out);
        assert!(w.sync_point);
        assert_eq!(out.len(), 3);
        assert_eq!(w.placed_ns, 400_000);
        // 200 ns of drift is within an eighth of 2 µs: no sync point, the
        // lag is in the packet's bound and placement.
        out.clear();
        let w = t.before(7, 2_000_000, p(1_400_200), &mut out);
        assert!(!w.sync_point);
        assert_eq!((w.bound_ns, w.placed_ns), (2_200, 1_400_000));
        assert!(w.in_force_ns >= w.bound_ns);
        // 300 ns is past it: a new sync point, placed exactly.
        out.clear();
        let w = t.before(7, 3_000_000, p(2_400_300), &mut out);
        assert!(w.sync_point);
        assert_eq!((w.bound_ns, w.placed_ns), (2_000, 2_400_300));
    }

    #[test]
    fn every_file_states_its_own_and_client_never_goes_back() {
        let mut t = tracks();
        let mut out = Vec::new();
        let p = Placement {
            host_ns: 5_000,
            bound_ns: 10_000,
        };
        t.before(3, 9_000_000, p, &mut out);
        t.new_file();
        out.clear();
        // An earlier relay time in the next file (another sequence): the
        // sync point keeps the client value, and restates the bound.
        let w = t.before(
            3,
            8_000_000,
            Placement {
                host_ns: 4_000,
                ..p
            },
            &mut out,
        );
        assert!(w.sync_point);
        let kinds: Vec<_> = out
            .iter()
            .map(|b| {
                let f = scan_packet(b).unwrap();
                read_sample(&f, b).map(|s| (s.track, s.client_boottime))
            })
            .collect();
        assert_eq!(kinds[0], None, "the sync point comes first");
        assert_eq!(kinds[1], Some((QualityTrack::Offset, 9_000_000)));
        assert_eq!(kinds[2].map(|k| k.0), Some(QualityTrack::ErrorBound));
        assert!(w.in_force_ns >= 10_000);
    }

    #[test]
    fn the_bound_in_force_covers_every_packet_and_comes_down() {
        let mut t = tracks();
        let mut out = Vec::new();
        let mut host = 0i64;
        for (i, bound_ns) in [50_000u64, 60_000, 1_000, 1_000, 1_000]
            .into_iter()
            .enumerate()
        {
            host += 1_000_000 + i as i64 * 2_000;
            let w = t.before(
                1,
                1_000_000 * (i as u64 + 1),
                Placement {
                    host_ns: host,
                    bound_ns,
                },
                &mut out,
            );
            assert!(w.in_force_ns >= w.bound_ns, "packet {i}: {w:?}");
        }
        assert!(
            t.bound_in_force < 10_000,
            "lowered at a sync point: {}",
            t.bound_in_force
        );
    }
}
