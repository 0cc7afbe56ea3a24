//! What a trace needs before a packet in the middle of the merged stream
//! so it opens alone (docs/format.md): the latest SystemInfo per machine,
//! ClockSnapshot per (machine, sequence), sync point per machine, and each
//! sequence's incremental state. One tracker serves every place such a
//! start is written: each rolled file's preamble (the rolling writer) and
//! a perfetto tail's first packets (the control socket). Sans-IO and
//! bounded by [`PreambleLimits`].

use bytes::Bytes;
use tracesync_protocol::incremental::{IncrementalClocks, reanchor};
use tracesync_protocol::scan::{self, Fields, PacketFields, field};

use crate::hash::IdMap;
use crate::live::{RecoveredSequence, Role, Stamped};

/// TrackDescriptor (TracePacket field 60): producers re-emit descriptors
/// after each incremental-state clear, so they belong to the replayed state.
const TRACK_DESCRIPTOR: u32 = 60;

/// The preamble role of a packet, decided from its top-level fields. The
/// live core classifies its packets with the same rule.
/// In a rolled file (sequence ids are output ids) the daemon's
/// sync-quality samples are recognised too.
pub fn role_of(fields: &PacketFields<'_>) -> Role {
    if crate::sync_quality::is_quality_sample(fields) {
        return Role::SyncQuality;
    }
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

/// The track uuid of a TrackEvent packet (0 if none): the key of the
/// latest sync-quality sample per track.
fn quality_track_uuid(packet: &[u8]) -> u64 {
    use prost::Message;
    use tracesync_protocol::perfetto::TracePacket;
    use tracesync_protocol::perfetto::trace_packet::Data;
    match TracePacket::decode(packet) {
        Ok(TracePacket {
            data: Some(Data::TrackEvent(e)),
            ..
        }) => e.track_uuid.unwrap_or(0),
        _ => 0,
    }
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
    /// The machine whose packets the sequence carries.
    machine: u32,
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
    system_info: IdMap<u32, Entry>,
    snapshots: IdMap<(u32, u32), Entry>,
    sync_points: IdMap<u32, Entry>,
    /// Latest sync-quality sample per (sequence, track uuid).
    quality: IdMap<(u32, u64), (u32, Entry)>,
    sequences: IdMap<u32, SequenceState>,
    incremental_bytes: usize,
    counters: PreambleCounters,
    /// Incremental clocks by sequence (sequences whose latest snapshot
    /// defines one).
    incremental_clocks: IdMap<u32, IncrementalClocks>,
}

/// Removes the entry written least recently if `map` is over `max` keys.
fn forget_oldest<K: Copy + Eq + std::hash::Hash, V>(
    map: &mut IdMap<K, V>,
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
            Role::SyncQuality => {
                let uuid = quality_track_uuid(bytes);
                self.quality.insert((seq, uuid), (machine, entry));
                forget_oldest(&mut self.quality, max, |(_, e)| e.order).is_some()
            }
            Role::IncrementalStateCleared | Role::IncrementalState => {
                self.observe_incremental(role, machine, seq, entry);
                self.forget_sequences()
            }
        };
        if forgotten {
            self.counters.forgotten += 1;
        }
    }

    fn observe_incremental(&mut self, role: Role, machine: u32, seq: u32, mut entry: Entry) {
        entry.bytes = strip_for_replay(&entry.bytes);
        let len = entry.bytes.len();
        let state = self.sequences.entry(seq).or_default();
        state.machine = machine;
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
        self.packets_by_machine()
            .into_iter()
            .map(|(_, bytes)| bytes)
            .collect()
    }

    /// [`Self::packets`], each with the machine it belongs to (a tail
    /// filtered by machine sends only those).
    pub fn packets_by_machine(&self) -> Vec<(u32, Bytes)> {
        fn ordered(mut v: Vec<(u32, &Entry)>) -> Vec<(u32, Bytes)> {
            v.sort_by_key(|(_, e)| e.order);
            v.into_iter().map(|(m, e)| (m, e.bytes.clone())).collect()
        }
        let mut out = ordered(self.system_info.iter().map(|(&m, e)| (m, e)).collect());
        let mut snapshots: Vec<(&(u32, u32), &Entry)> = self.snapshots.iter().collect();
        snapshots.sort_by_key(|(_, e)| e.order);
        out.extend(
            snapshots
                .into_iter()
                .map(|(&(machine, seq), e)| (machine, self.replayed_snapshot(seq, e))),
        );
        out.extend(ordered(
            self.sync_points.iter().map(|(&m, e)| (m, e)).collect(),
        ));
        out.extend(ordered(
            self.sequences
                .values()
                .flat_map(|s| s.packets.iter().map(|e| (s.machine, e)))
                .collect(),
        ));
        // After the descriptors of their tracks (group 4).
        out.extend(ordered(
            self.quality.values().map(|(m, e)| (*m, e)).collect(),
        ));
        out
    }

    /// Some sequence has incremental clocks: its data packets must be
    /// observed too (they advance the clocks its snapshot is replayed at).
    pub fn tracks_incremental_clocks(&self) -> bool {
        !self.incremental_clocks.is_empty()
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
mod tests;
