//! What Perfetto's proto reader does per machine of a relay-recorded input,
//! in stream order: the cross-machine edges of RemoteClockSync packets, and
//! each machine's default clock.
//!
//! - A RemoteClockSync relates **every clock present on both sides** (not
//!   only BOOTTIME): per clock, the offset of Perfetto's
//!   `CalculateClockOffsets` becomes one edge between the host's and the
//!   client's clock, anchored at the last host reading of that clock
//!   (`{host: h, client: h + offset}`).
//! - Each machine of a file has a default clock (a packet with no clock id
//!   and no sequence default is read on it): set by a snapshot's
//!   `primary_trace_clock`, else BOOTTIME when a snapshot has it. A machine
//!   first seen in the file starts with the file's host default *at that
//!   point of the stream*; with none, its packets are taken as already in
//!   trace time and not converted at all.
//! - Service events (`TracingServiceEvent`, field 69) without a clock id are
//!   BOOTTIME, whatever the primary trace clock.

use std::collections::HashMap;

use tracesync_protocol::clock_ids::{BOOTTIME, TRACE_FILE};
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync};

/// TracePacket field number of `service_event`.
pub const SERVICE_EVENT_FIELD: u32 = 69;

/// One client/host exchange of a RemoteClockSync packet: (clock, value) lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncRound {
    pub client: Vec<(u32, u64)>,
    pub host: Vec<(u32, u64)>,
}

/// Perfetto's offset estimate from one RemoteClockSync packet, for `clock`:
/// client-minus-host, the integer mean over adjacent entry pairs less than
/// 30 s apart on the client's BOOTTIME of two three-timestamp round trips,
/// `(t1c + t2c)/2 - t1h` and `t2c - (t1h + t2h)/2`.
pub fn remote_sync_offset(rounds: &[SyncRound], clock: u32) -> Option<i64> {
    const ROUND_GAP_NS: i128 = 30_000_000_000;
    let value = |list: &[(u32, u64)], c: u32| {
        list.iter()
            .find(|(id, v)| *id == c && *v != 0)
            .map(|(_, v)| i128::from(*v))
    };
    let mut offsets = Vec::new();
    for pair in rounds.windows(2) {
        let boot = tracesync_protocol::clock_ids::BOOTTIME;
        if let (Some(b1), Some(b2)) = (value(&pair[0].client, boot), value(&pair[1].client, boot))
            && b2 - b1 >= ROUND_GAP_NS
        {
            continue;
        }
        let (Some(t1c), Some(t1h), Some(t2c), Some(t2h)) = (
            value(&pair[0].client, clock),
            value(&pair[0].host, clock),
            value(&pair[1].client, clock),
            value(&pair[1].host, clock),
        ) else {
            continue;
        };
        // Integer division truncating toward zero, as in C++.
        offsets.push((t1c + t2c) / 2 - t1h);
        offsets.push(t2c - (t1h + t2h) / 2);
    }
    if offsets.is_empty() {
        return None;
    }
    let mean = offsets.iter().sum::<i128>() / offsets.len() as i128;
    i64::try_from(mean).ok()
}

/// The rounds of a RemoteClockSync as (clock, value) lists.
pub fn rounds_of(sync: &RemoteClockSync) -> Vec<SyncRound> {
    let list = |s: &Option<ClockSnapshot>| {
        s.iter()
            .flat_map(|s| &s.clocks)
            .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
            .collect::<Vec<_>>()
    };
    sync.synced_clocks
        .iter()
        .map(|r| SyncRound {
            client: list(&r.client_clocks),
            host: list(&r.host_clocks),
        })
        .collect()
}

/// One cross-machine edge of a RemoteClockSync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncEdge {
    pub clock: u32,
    pub host: u64,
    pub client: u64,
}

/// Every clock of the packet that has an offset, as an edge anchored at the
/// last non-zero host reading of that clock; in clock id order. An edge
/// whose client value would fall outside 0..2^64 is left out.
pub fn sync_edges(rounds: &[SyncRound]) -> Vec<SyncEdge> {
    let mut clocks: Vec<u32> = rounds
        .iter()
        .flat_map(|r| r.host.iter().map(|(c, _)| *c))
        .filter(|c| rounds.iter().any(|r| r.client.iter().any(|(k, _)| k == c)))
        .collect();
    clocks.sort_unstable();
    clocks.dedup();
    clocks
        .into_iter()
        .filter_map(|clock| {
            let offset = remote_sync_offset(rounds, clock)?;
            let host = rounds.iter().rev().find_map(|r| {
                r.host
                    .iter()
                    .find(|(c, v)| *c == clock && *v != 0)
                    .map(|(_, v)| *v)
            })?;
            let client = u64::try_from(i128::from(host) + i128::from(offset)).ok()?;
            Some(SyncEdge {
                clock,
                host,
                client,
            })
        })
        .collect()
}

/// The clock a snapshot makes its machine's default, if any.
pub fn default_from_snapshot(
    primary: Option<u32>,
    clocks: impl Iterator<Item = u32>,
) -> Option<u32> {
    if primary.is_some() {
        return primary;
    }
    let mut has_boottime = false;
    for c in clocks {
        if c == TRACE_FILE {
            return None;
        }
        has_boottime |= c == BOOTTIME;
    }
    has_boottime.then_some(BOOTTIME)
}

/// Default clocks of one input's machines, in stream order.
#[derive(Debug, Default)]
pub struct MachineDefaults {
    /// The file's host (base) machine.
    base: Option<u32>,
    /// Other machines, by embedded id: fixed when first seen, then moved by
    /// their own snapshots.
    others: HashMap<u32, Option<u32>>,
}

impl MachineDefaults {
    /// The default of embedded id `id` (`is_base`: it is the file's base
    /// machine), registering the machine at its first packet.
    pub fn get(&mut self, id: u32, is_base: bool) -> Option<u32> {
        if is_base {
            return self.base;
        }
        let base = self.base;
        *self.others.entry(id).or_insert(base)
    }

    /// A snapshot of machine `id` set `clock` as its default.
    pub fn set(&mut self, id: u32, is_base: bool, clock: u32) {
        if is_base {
            self.base = Some(clock);
        } else {
            self.others.insert(id, Some(clock));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(client: &[(u32, u64)], host: &[(u32, u64)]) -> SyncRound {
        SyncRound {
            client: client.to_vec(),
            host: host.to_vec(),
        }
    }

    #[test]
    fn every_clock_on_both_sides_gets_an_edge() {
        // Perfetto's CalculateClockOffset vector: BOOTTIME -107500, REALTIME -106250.
        let e0 = round(&[(6, 10000), (1, 25000)], &[(6, 120000), (1, 135000)]);
        let e1 = round(&[(6, 20000), (1, 35000)], &[(6, 140000), (1, 150000)]);
        assert_eq!(
            sync_edges(&[e0, e1]),
            vec![
                SyncEdge {
                    clock: 1,
                    host: 150000,
                    client: 150000 - 106250
                },
                SyncEdge {
                    clock: 6,
                    host: 140000,
                    client: 140000 - 107500
                },
            ]
        );
        // REALTIME alone is related too.
        let r0 = round(&[(1, 25000)], &[(1, 135000)]);
        let r1 = round(&[(1, 35000)], &[(1, 150000)]);
        assert_eq!(sync_edges(&[r0, r1]).len(), 1);
    }

    #[test]
    fn defaults_follow_the_stream() {
        let mut d = MachineDefaults::default();
        // Machine 7 first seen before the host has a default: none, for good.
        assert_eq!(d.get(7, false), None);
        d.set(0, true, BOOTTIME);
        assert_eq!(d.get(7, false), None);
        assert_eq!(d.get(9, false), Some(BOOTTIME), "inherits at first sight");
        d.set(7, false, 3);
        assert_eq!(d.get(7, false), Some(3));
        assert_eq!(default_from_snapshot(None, [1, 6].into_iter()), Some(6));
        assert_eq!(default_from_snapshot(None, [6, 11].into_iter()), None);
        assert_eq!(default_from_snapshot(Some(3), [6].into_iter()), Some(3));
    }

    #[test]
    fn tv13_offsets() {
        let e0 = round(&[(6, 10000), (1, 25000)], &[(6, 120000), (1, 135000)]);
        let e1 = round(&[(6, 20000), (1, 35000)], &[(6, 140000), (1, 150000)]);
        assert_eq!(
            remote_sync_offset(&[e0.clone(), e1.clone()], 6),
            Some(-107500)
        );
        assert_eq!(remote_sync_offset(&[e0, e1], 1), Some(-106250));
    }

    #[test]
    fn tv13_above_threshold_and_multi_rounds() {
        let e = 30_000_000_000;
        let e0 = round(&[(6, 10000)], &[(6, 120000)]);
        let far = round(&[(6, 20000 + e)], &[(6, 140000 + e)]);
        assert_eq!(remote_sync_offset(&[e0.clone(), far], 6), None);
        let rounds = [
            e0,
            round(&[(6, 20000)], &[(6, 140000)]),
            round(&[(6, 30000 + e)], &[(6, 160000 + e)]),
            round(&[(6, 45000 + e)], &[(6, 170000 + e)]),
        ];
        assert_eq!(remote_sync_offset(&rounds, 6), Some(-114375));
    }

    #[test]
    fn tv13_incomplete_and_tv14_tv23() {
        let incomplete = [
            round(&[(6, 10000)], &[(6, 120000)]),
            round(&[(6, 25000)], &[]),
        ];
        assert_eq!(remote_sync_offset(&incomplete, 6), None);
        let tv14 = [
            round(&[(6, 100)], &[(6, 1000)]),
            round(&[(6, 300)], &[(6, 1200)]),
        ];
        assert_eq!(remote_sync_offset(&tv14, 6), Some(-800));
        let tv23 = [
            round(&[(6, 50e9 as u64)], &[(6, 2e9 as u64)]),
            round(&[(6, 50e9 as u64)], &[(6, 2e9 as u64)]),
        ];
        assert_eq!(remote_sync_offset(&tv23, 6), Some(48_000_000_000));
    }
}
