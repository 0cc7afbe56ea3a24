//! What each rolled file starts with so it opens alone (DESIGN.md §4): the
//! latest SystemInfo per machine, ClockSnapshot per (machine, sequence),
//! sync point per machine, and each sequence's incremental state.

use std::collections::HashMap;

use bytes::Bytes;
use tracesync_protocol::incremental::{IncrementalClocks, reanchor};
use tracesync_protocol::scan::{self, Fields, PacketFields, field};

use super::RecoveredSequence;
use crate::live::{Role, Stamped};

/// TrackDescriptor (TracePacket field 60): producers re-emit descriptors
/// after each incremental-state clear, so they belong to the replayed state.
const TRACK_DESCRIPTOR: u32 = 60;

/// The preamble role of a packet, decided from its top-level fields. The
/// live core classifies its packets with the same rule.
pub fn role_of(fields: &PacketFields<'_>) -> Role {
    Role::of(fields)
}

/// Top-level fields kept when an incremental-state packet is replayed: the
/// state itself and what scopes it, never the packet's event payload (a
/// replayed event would appear twice across files) nor its timestamp (on
/// an incremental clock it is a delta: replayed, it would move every later
/// packet of the sequence; without one the packet takes the latest time).
fn kept_in_replay(number: u32) -> bool {
    matches!(
        number,
        field::TRUSTED_PACKET_SEQUENCE_ID
            | field::INTERNED_DATA
            | field::SEQUENCE_FLAGS
            | field::INCREMENTAL_STATE_CLEARED
            | field::TRACE_PACKET_DEFAULTS
            | field::MACHINE_ID
            | TRACK_DESCRIPTOR
    )
}

/// The replayable part of an incremental-state packet. Fields are copied
/// byte for byte; a packet that does not scan is kept whole.
pub fn strip_for_replay(packet: &Bytes) -> Bytes {
    let mut ranges = Vec::new();
    for f in Fields::new(packet) {
        match f {
            Ok(f) if kept_in_replay(f.number) => ranges.push(f.start..f.end),
            Ok(_) => {}
            Err(_) => return packet.clone(),
        }
    }
    if ranges.iter().map(|r| r.len()).sum::<usize>() == packet.len() {
        return packet.clone();
    }
    let mut out = Vec::with_capacity(ranges.iter().map(|r| r.len()).sum());
    for r in ranges {
        out.extend_from_slice(&packet[r]);
    }
    Bytes::from(out)
}

/// Bounds of the preamble state (memory and size of every file's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreambleLimits {
    /// Incremental state kept per sequence; packets past it are not kept
    /// (counted as `incremental_state_overflow`); the clear is always kept.
    pub per_sequence_bytes: usize,
    /// Incremental state kept over all sequences; the least recently
    /// written sequences are forgotten past it.
    pub total_bytes: usize,
    /// Machines, (machine, sequence) snapshots and sequences kept each; the
    /// least recently written are forgotten past it.
    pub max_keys: usize,
}

impl Default for PreambleLimits {
    fn default() -> Self {
        Self {
            per_sequence_bytes: 4 << 20,
            total_bytes: 64 << 20,
            max_keys: 4096,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    /// Write order, so the preamble keeps the original order.
    order: u64,
    bytes: Bytes,
}

#[derive(Debug, Default)]
struct SequenceState {
    packets: Vec<Entry>,
    bytes: usize,
    last_used: u64,
}

/// Counters of state that did not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreambleCounters {
    pub incremental_state_overflow: u64,
    pub forgotten: u64,
}

/// The latest packets of each preamble role, bounded by [`PreambleLimits`].
#[derive(Debug, Default)]
pub struct PreambleState {
    limits: PreambleLimits,
    order: u64,
    system_info: HashMap<u32, Entry>,
    snapshots: HashMap<(u32, u32), Entry>,
    sync_points: HashMap<u32, Entry>,
    sequences: HashMap<u32, SequenceState>,
    incremental_bytes: usize,
    counters: PreambleCounters,
    /// Incremental clocks by sequence (sequences whose latest snapshot
    /// defines one).
    incremental_clocks: HashMap<u32, IncrementalClocks>,
}

/// Removes the entry written least recently if `map` is over `max` keys.
fn forget_oldest<K: Copy + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    max: usize,
    order: impl Fn(&V) -> u64,
) -> Option<V> {
    if map.len() <= max {
        return None;
    }
    let oldest = map.iter().min_by_key(|(_, v)| order(v)).map(|(k, _)| *k)?;
    map.remove(&oldest)
}

impl PreambleState {
    pub fn new(limits: PreambleLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn counters(&self) -> PreambleCounters {
        self.counters
    }

    /// Per machine, the highest client BOOTTIME of its replayed sync point.
    pub fn sync_floors(&self) -> Vec<(u32, u64)> {
        use prost::Message;
        use tracesync_protocol::perfetto::trace_packet::Data;
        use tracesync_protocol::perfetto::{TracePacket, clock_snapshot::Clock};
        const BOOTTIME: u32 = 6;
        let mut floors: Vec<(u32, u64)> = self
            .sync_points
            .iter()
            .filter_map(|(&machine, entry)| {
                let Ok(TracePacket {
                    data: Some(Data::RemoteClockSync(sync)),
                    ..
                }) = TracePacket::decode(&entry.bytes[..])
                else {
                    return None;
                };
                let client = sync
                    .synced_clocks
                    .iter()
                    .filter_map(|s| s.client_clocks.as_ref())
                    .flat_map(|c| c.clocks.iter())
                    .filter(|c: &&Clock| c.clock_id == Some(BOOTTIME))
                    .filter_map(|c| c.timestamp)
                    .max()?;
                Some((machine, client))
            })
            .collect();
        floors.sort_unstable();
        floors
    }

    /// The default timestamp_clock_id the replayed state of `seq` sets.
    fn default_clock_of(&self, seq: u32) -> Option<u32> {
        let mut default_clock = None;
        for e in self.sequences.get(&seq).map_or(&[][..], |s| &s.packets) {
            let Ok(fields) = scan::scan_packet(&e.bytes) else {
                continue;
            };
            // As the live core does in stream order.
            if fields.clears_incremental_state() {
                default_clock = None;
            }
            if let Some(d) = fields.trace_packet_defaults {
                default_clock = scan::defaults_timestamp_clock_id(d)
                    .ok()
                    .flatten()
                    .filter(|&c| c != 0);
            }
        }
        default_clock
    }

    /// The snapshot entry as the preamble replays it (re-anchored if it
    /// defines incremental clocks).
    fn replayed_snapshot(&self, seq: u32, e: &Entry) -> Bytes {
        self.incremental_clocks
            .get(&seq)
            .and_then(|inc| reanchor(&e.bytes, inc))
            .map_or_else(|| e.bytes.clone(), Bytes::from)
    }

    /// Per output sequence with replayed state or a snapshot: the state
    /// the live core keeps for it (its default clock, its ClockSnapshots
    /// that define sequence-scoped clocks),
    /// as the packets the next file's preamble replays define it. Sorted by
    /// sequence.
    pub fn recovered_sequences(&self) -> Vec<RecoveredSequence> {
        let mut out: std::collections::BTreeMap<u32, RecoveredSequence> =
            std::collections::BTreeMap::new();
        for &seq in self.sequences.keys() {
            out.entry(seq)
                .or_insert_with(|| RecoveredSequence::new(seq))
                .default_clock = self.default_clock_of(seq);
        }
        let mut snapshots: Vec<(&(u32, u32), &Entry)> = self.snapshots.iter().collect();
        snapshots.sort_by_key(|(_, e)| e.order);
        for (&(_, seq), e) in snapshots {
            // Only snapshots defining a sequence-scoped clock: a relay sends
            // its builtin clocks again every second, a producer its sequence
            // clocks only when its sequence starts.
            let defines_sequence_clock = |payload: &[u8]| {
                use prost::Message;
                tracesync_protocol::perfetto::ClockSnapshot::decode(payload).is_ok_and(|c| {
                    c.clocks.iter().any(|c| {
                        tracesync_protocol::clock_ids::is_sequence_clock(c.clock_id.unwrap_or(0))
                    })
                })
            };
            let replayed = self.replayed_snapshot(seq, e);
            if let Some(payload) = scan::scan_packet(&replayed)
                .ok()
                .and_then(|f| f.clock_snapshot)
                .filter(|p| defines_sequence_clock(p))
            {
                out.entry(seq)
                    .or_insert_with(|| RecoveredSequence::new(seq))
                    .clock_snapshots
                    .push(payload.to_vec());
            }
        }
        out.into_values()
            .filter(|s| s.default_clock.is_some() || !s.clock_snapshots.is_empty())
            .collect()
    }

    /// Notes a packet written to the output.
    pub fn observe(&mut self, role: Role, machine: u32, seq: u32, bytes: &Bytes) {
        self.order += 1;
        let entry = Entry {
            order: self.order,
            bytes: bytes.clone(),
        };
        let max = self.limits.max_keys;
        if role != Role::ClockSnapshot
            && !self.incremental_clocks.is_empty()
            && let Some(inc) = self.incremental_clocks.get_mut(&seq)
            && let Ok(fields) = scan::scan_packet(bytes)
        {
            inc.advance(&fields);
        }
        let forgotten = match role {
            Role::Data => {
                if let Some(s) = self.sequences.get_mut(&seq) {
                    s.last_used = self.order;
                }
                false
            }
            Role::SystemInfo => {
                self.system_info.insert(machine, entry);
                forget_oldest(&mut self.system_info, max, |e| e.order).is_some()
            }
            Role::ClockSnapshot => {
                match scan::scan_packet(bytes)
                    .ok()
                    .and_then(|f| f.clock_snapshot)
                    .and_then(|p| IncrementalClocks::from_snapshot(p, self.default_clock_of(seq)))
                {
                    Some(inc) => self.incremental_clocks.insert(seq, inc),
                    None => self.incremental_clocks.remove(&seq),
                };
                self.snapshots.insert((machine, seq), entry);
                let forgot = forget_oldest(&mut self.snapshots, max, |e| e.order).is_some();
                if forgot {
                    let snapshots = &self.snapshots;
                    self.incremental_clocks
                        .retain(|s, _| snapshots.keys().any(|k| k.1 == *s));
                }
                forgot
            }
            Role::SyncPoint => {
                self.sync_points.insert(machine, entry);
                forget_oldest(&mut self.sync_points, max, |e| e.order).is_some()
            }
            Role::IncrementalStateCleared | Role::IncrementalState => {
                self.observe_incremental(role, seq, entry);
                self.forget_sequences()
            }
        };
        if forgotten {
            self.counters.forgotten += 1;
        }
    }

    fn observe_incremental(&mut self, role: Role, seq: u32, mut entry: Entry) {
        entry.bytes = strip_for_replay(&entry.bytes);
        let len = entry.bytes.len();
        let state = self.sequences.entry(seq).or_default();
        state.last_used = entry.order;
        if role == Role::IncrementalStateCleared {
            self.incremental_bytes -= state.bytes;
            state.packets.clear();
            state.bytes = 0;
        } else if state.bytes + len > self.limits.per_sequence_bytes {
            self.counters.incremental_state_overflow += 1;
            return;
        }
        state.packets.push(entry);
        state.bytes += len;
        self.incremental_bytes += len;
    }

    /// Forgets least recently written sequences past the limits; never the
    /// one written last.
    fn forget_sequences(&mut self) -> bool {
        let mut forgotten = false;
        while self.sequences.len() > 1
            && (self.sequences.len() > self.limits.max_keys
                || self.incremental_bytes > self.limits.total_bytes)
        {
            let Some(s) = forget_oldest(&mut self.sequences, 0, |s| s.last_used) else {
                break;
            };
            self.incremental_bytes -= s.bytes;
            forgotten = true;
        }
        forgotten
    }

    /// The preamble, in the order Perfetto needs it: SystemInfo, then clock
    /// snapshots, then sync points, then incremental state; within each
    /// group, in the order the packets were written.
    pub fn packets(&self) -> Vec<Bytes> {
        let ordered = |mut v: Vec<&Entry>| {
            v.sort_by_key(|e| e.order);
            v.into_iter().map(|e| e.bytes.clone()).collect::<Vec<_>>()
        };
        let mut out = ordered(self.system_info.values().collect());
        let mut snapshots: Vec<(&(u32, u32), &Entry)> = self.snapshots.iter().collect();
        snapshots.sort_by_key(|(_, e)| e.order);
        out.extend(
            snapshots
                .into_iter()
                .map(|(&(_, seq), e)| self.replayed_snapshot(seq, e)),
        );
        out.extend(ordered(self.sync_points.values().collect()));
        out.extend(ordered(
            self.sequences.values().flat_map(|s| &s.packets).collect(),
        ));
        out
    }

    /// Notes a packet written to the output; a data packet is not copied
    /// (only its fields are read, if its sequence has incremental clocks).
    pub fn observe_packet(&mut self, role: Role, machine: u32, seq: u32, bytes: &Stamped) {
        if role != Role::Data {
            self.observe(role, machine, seq, &bytes.to_bytes());
            return;
        }
        // As observe_raw does for data.
        self.observe(role, machine, seq, &Bytes::new());
        if let Some(inc) = self.incremental_clocks.get_mut(&seq)
            && let Ok(fields) = bytes.scan()
        {
            inc.advance(&fields);
        }
    }

    /// Notes a packet read back from a file on recovery.
    pub fn observe_raw(&mut self, bytes: &[u8]) -> Option<u32> {
        let fields = scan::scan_packet(bytes).ok()?;
        let role = role_of(&fields);
        let machine = fields.machine_id.unwrap_or(0);
        let seq = fields.trusted_packet_sequence_id.unwrap_or(0);
        if role != Role::Data {
            self.observe(role, machine, seq, &Bytes::copy_from_slice(bytes));
        } else {
            self.observe(role, machine, seq, &Bytes::new());
            if let Some(inc) = self.incremental_clocks.get_mut(&seq) {
                inc.advance(&fields);
            }
        }
        fields.trusted_packet_sequence_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tracesync_protocol::perfetto::{InternedData, TracePacket, TracePacketDefaults};

    fn encode(p: TracePacket) -> Bytes {
        Bytes::from(p.encode_to_vec())
    }

    fn fields_role(p: TracePacket) -> Role {
        let b = p.encode_to_vec();
        role_of(&scan::scan_packet(&b).expect("valid packet"))
    }

    #[test]
    fn roles_from_fields() {
        use tracesync_protocol::perfetto::trace_packet::Data;
        use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync, SystemInfo};
        let data = |d| TracePacket {
            data: Some(d),
            ..Default::default()
        };
        assert_eq!(
            fields_role(data(Data::SystemInfo(SystemInfo::default()))),
            Role::SystemInfo
        );
        assert_eq!(
            fields_role(data(Data::ClockSnapshot(ClockSnapshot::default()))),
            Role::ClockSnapshot
        );
        assert_eq!(
            fields_role(data(Data::RemoteClockSync(RemoteClockSync::default()))),
            Role::SyncPoint
        );
        let cleared = TracePacket {
            sequence_flags: Some(1),
            interned_data: Some(InternedData::default()),
            ..Default::default()
        };
        assert_eq!(fields_role(cleared), Role::IncrementalStateCleared);
        let legacy_clear = TracePacket {
            incremental_state_cleared: Some(true),
            ..Default::default()
        };
        assert_eq!(fields_role(legacy_clear), Role::IncrementalStateCleared);
        let interned = TracePacket {
            sequence_flags: Some(2),
            interned_data: Some(InternedData::default()),
            ..Default::default()
        };
        assert_eq!(fields_role(interned), Role::IncrementalState);
        let defaults = TracePacket {
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(6),
            }),
            ..Default::default()
        };
        assert_eq!(fields_role(defaults), Role::IncrementalState);
        let plain = TracePacket {
            timestamp: Some(5),
            sequence_flags: Some(2),
            ..Default::default()
        };
        assert_eq!(fields_role(plain), Role::Data);
    }

    #[test]
    fn strip_keeps_state_fields_byte_for_byte() {
        use tracesync_protocol::perfetto::TrackEvent;
        use tracesync_protocol::perfetto::trace_packet::Data;
        let state = TracePacket {
            sequence_flags: Some(1),
            interned_data: Some(InternedData::default()),
            machine_id: Some(9),
            ..Default::default()
        };
        let mut with_event = state.clone();
        with_event.timestamp = Some(77); // a delta on an incremental clock
        with_event.data = Some(Data::TrackEvent(TrackEvent {
            track_uuid: Some(3),
            ..Default::default()
        }));
        let stripped = strip_for_replay(&encode(with_event));
        assert_eq!(TracePacket::decode(stripped).expect("decodes"), state);
        // Nothing to strip: the same bytes, not a copy.
        let b = encode(state);
        assert_eq!(strip_for_replay(&b).as_ptr(), b.as_ptr());
    }

    #[test]
    fn sync_floors_are_the_replayed_sync_points_client_boottime() {
        use crate::merge::output::sync_point_packet;
        let mut s = PreambleState::new(PreambleLimits::default());
        s.observe(
            Role::SyncPoint,
            3,
            1,
            &Bytes::from(sync_point_packet(3, 1, 700, 650)),
        );
        s.observe(
            Role::SyncPoint,
            3,
            1,
            &Bytes::from(sync_point_packet(3, 1, 900, 850)),
        );
        s.observe(
            Role::SyncPoint,
            5,
            1,
            &Bytes::from(sync_point_packet(5, 1, 40, 10)),
        );
        // Undecodable bytes give no floor rather than a wrong one.
        s.observe(Role::SyncPoint, 7, 1, &Bytes::from_static(&[0xff, 0xff]));
        assert_eq!(s.sync_floors(), [(3, 900), (5, 40)]);
    }

    fn state_packet(seq: u32, flags: u32, size: usize) -> Bytes {
        use tracesync_protocol::perfetto::EventName;
        encode(TracePacket {
            sequence_flags: Some(flags),
            interned_data: Some(InternedData {
                event_names: vec![EventName {
                    iid: Some(1),
                    name: Some("x".repeat(size)),
                }],
            }),
            optional_trusted_packet_sequence_id: Some(
                tracesync_protocol::perfetto::trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
            ),
            ..Default::default()
        })
    }

    #[test]
    fn order_groups_and_clears() {
        let mut s = PreambleState::new(PreambleLimits::default());
        let b = |n: u8| Bytes::from(vec![0x68, n]); // field 13 = n (kept in replay)
        s.observe(Role::IncrementalState, 0, 5, &b(1)); // before any clear: kept
        s.observe(Role::SyncPoint, 3, 1, &b(2));
        s.observe(Role::ClockSnapshot, 3, 1, &b(3));
        s.observe(Role::SystemInfo, 3, 1, &b(4));
        s.observe(Role::IncrementalStateCleared, 0, 5, &b(5));
        s.observe(Role::IncrementalState, 0, 6, &b(6));
        s.observe(Role::IncrementalState, 0, 5, &b(7));
        s.observe(Role::Data, 0, 5, &b(8));
        s.observe(Role::ClockSnapshot, 3, 1, &b(9)); // replaces b(3)
        s.observe(Role::ClockSnapshot, 3, 2, &b(10));
        s.observe(Role::ClockSnapshot, 4, 1, &b(11));
        assert_eq!(
            s.packets(),
            [b(4), b(9), b(10), b(11), b(2), b(5), b(6), b(7)]
        );
    }

    #[test]
    fn per_sequence_bound_keeps_the_clear() {
        let limits = PreambleLimits {
            per_sequence_bytes: 300,
            ..PreambleLimits::default()
        };
        let mut s = PreambleState::new(limits);
        let clear = state_packet(5, 1, 400);
        s.observe(Role::IncrementalStateCleared, 0, 5, &clear);
        let small = state_packet(5, 2, 10);
        s.observe(Role::IncrementalState, 0, 5, &small);
        assert_eq!(s.packets(), std::slice::from_ref(&clear));
        assert_eq!(s.counters().incremental_state_overflow, 1);
        // A new clear starts afresh.
        let clear2 = state_packet(5, 1, 10);
        s.observe(Role::IncrementalStateCleared, 0, 5, &clear2);
        s.observe(Role::IncrementalState, 0, 5, &small);
        assert_eq!(s.packets(), [clear2, small]);
        assert_eq!(s.incremental_bytes, s.sequences[&5].bytes);
    }

    #[test]
    fn total_bound_forgets_least_recently_written_sequences() {
        let limits = PreambleLimits {
            per_sequence_bytes: 1000,
            total_bytes: 250,
            max_keys: 3,
        };
        let mut s = PreambleState::new(limits);
        let p = |seq| state_packet(seq, 1, 100);
        s.observe(Role::IncrementalStateCleared, 0, 1, &p(1));
        s.observe(Role::IncrementalStateCleared, 0, 2, &p(2));
        s.observe(Role::Data, 0, 1, &Bytes::new()); // sequence 1 is used again
        s.observe(Role::IncrementalStateCleared, 0, 3, &p(3));
        assert_eq!(s.packets(), [p(1), p(3)]);
        assert_eq!(s.counters().forgotten, 1);
        for m in 0..5 {
            s.observe(Role::SystemInfo, m, 0, &Bytes::from(vec![0x40, m as u8]));
        }
        assert_eq!(s.system_info.len(), 3);
        assert!(!s.system_info.contains_key(&0));
    }

    #[test]
    fn recovered_sequences_carry_the_default_clock_and_snapshots() {
        use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
        use tracesync_protocol::perfetto::{ClockSnapshot, clock_snapshot::Clock};
        let on = |seq: u32, mut p: TracePacket| {
            p.optional_trusted_packet_sequence_id = Some(
                OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
            );
            encode(p)
        };
        let defaults = |clock| {
            Some(TracePacketDefaults {
                timestamp_clock_id: Some(clock),
            })
        };
        let snap = ClockSnapshot {
            clocks: vec![Clock {
                clock_id: Some(64),
                timestamp: Some(5),
                ..Default::default()
            }],
            primary_trace_clock: None,
        };
        let mut s = PreambleState::new(PreambleLimits::default());
        let snapshot = on(
            5,
            TracePacket {
                data: Some(Data::ClockSnapshot(snap.clone())),
                ..Default::default()
            },
        );
        s.observe(Role::ClockSnapshot, 2, 5, &snapshot);
        let clear = |clock| {
            on(
                5,
                TracePacket {
                    sequence_flags: Some(1),
                    trace_packet_defaults: defaults(clock),
                    ..Default::default()
                },
            )
        };
        s.observe(Role::IncrementalStateCleared, 2, 5, &clear(3));
        let later = on(
            5,
            TracePacket {
                sequence_flags: Some(2),
                trace_packet_defaults: defaults(64),
                ..Default::default()
            },
        );
        s.observe(Role::IncrementalState, 2, 5, &later);
        // A sequence whose last clear names no default has none.
        s.observe(
            Role::IncrementalState,
            2,
            6,
            &on(
                6,
                TracePacket {
                    trace_packet_defaults: defaults(3),
                    ..Default::default()
                },
            ),
        );
        s.observe(
            Role::IncrementalStateCleared,
            2,
            6,
            &on(
                6,
                TracePacket {
                    sequence_flags: Some(1),
                    ..Default::default()
                },
            ),
        );
        let got = s.recovered_sequences();
        assert_eq!(
            got,
            [RecoveredSequence {
                out_seq: 5,
                default_clock: Some(64),
                clock_snapshots: vec![snap.encode_to_vec()],
            }]
        );
    }

    #[test]
    fn incremental_clock_snapshots_are_replayed_at_the_last_absolute_value() {
        use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
        use tracesync_protocol::perfetto::{ClockSnapshot, clock_snapshot::Clock};
        let on = |mut p: TracePacket| {
            p.optional_trusted_packet_sequence_id =
                Some(OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(5));
            p.machine_id = Some(2);
            encode(p)
        };
        let clock = |id, ts, incremental| Clock {
            clock_id: Some(id),
            timestamp: Some(ts),
            is_incremental: incremental,
            ..Default::default()
        };
        let snapshot = |clocks| ClockSnapshot {
            clocks,
            primary_trace_clock: None,
        };
        let mut s = PreambleState::new(PreambleLimits::default());
        // As the SDK writes it: defaults first, then the clock, then deltas.
        let clear = on(TracePacket {
            timestamp: Some(7), // a delta from the snapshot: replayed without it
            sequence_flags: Some(1),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(64),
            }),
            ..Default::default()
        });
        s.observe(Role::IncrementalStateCleared, 2, 5, &clear);
        let original = snapshot(vec![clock(6, 1_000, None), clock(64, 500, Some(true))]);
        let snap = on(TracePacket {
            timestamp: Some(1_000),
            timestamp_clock_id: Some(6),
            data: Some(Data::ClockSnapshot(original)),
            ..Default::default()
        });
        s.observe(Role::ClockSnapshot, 2, 5, &snap);
        for delta in [10, 20] {
            let data = on(TracePacket {
                timestamp: Some(delta),
                ..Default::default()
            });
            s.observe(Role::Data, 2, 5, &data);
        }
        // An explicit other clock does not move it.
        let other = on(TracePacket {
            timestamp: Some(99_999),
            timestamp_clock_id: Some(6),
            ..Default::default()
        });
        s.observe(Role::Data, 2, 5, &other);
        let packets: Vec<TracePacket> = s
            .packets()
            .iter()
            .map(|b| TracePacket::decode(&b[..]).expect("decodes"))
            .collect();
        let Some(Data::ClockSnapshot(replayed)) = &packets[0].data else {
            panic!("snapshot first: {packets:?}");
        };
        assert_eq!(
            replayed,
            &snapshot(vec![clock(6, 1_030, None), clock(64, 530, Some(true))])
        );
        assert_eq!(
            (packets[0].timestamp, packets[0].timestamp_clock_id),
            (None, None)
        );
        assert_eq!(packets[0].machine_id, Some(2));
        assert_eq!(packets[1].timestamp, None, "replayed state has no delta");
        assert_eq!(packets[1].sequence_flags, Some(1));
        // Recovery reads the same from the file's bytes.
        let mut r = PreambleState::new(PreambleLimits::default());
        for p in [&clear, &snap] {
            r.observe_raw(p);
        }
        for delta in [10u64, 20] {
            r.observe_raw(&on(TracePacket {
                timestamp: Some(delta),
                ..Default::default()
            }));
        }
        assert_eq!(r.packets()[0], s.packets()[0]);
        assert_eq!(
            r.recovered_sequences()[0].clock_snapshots,
            [snapshot(vec![clock(6, 1_030, None), clock(64, 530, Some(true))]).encode_to_vec()]
        );
    }
}
