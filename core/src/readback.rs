//! Trace time of packets read back from the rolling files (`tail DIR`,
//! `merge DIR`, the daemon's snapshots of stream relays), and
//! recognition of a new file's replayed preamble.
//!
//! The daemon writes a remote machine's packets with their relay clock
//! values and tells Perfetto the mapping with RemoteClockSync sync points
//! (docs/format.md). Reading a file in order, the latest sync point of a
//! machine gives its offset `c - h` (client BOOTTIME c, host BOOTTIME h),
//! and a packet's trace time is its BOOTTIME value minus that offset: what
//! Perfetto shows, and the daemon's own `ts` to within the sync-point
//! threshold (1 µs by default). Clocks other than BOOTTIME go through the
//! machine's latest ClockSnapshot first. A packet with no timestamp, or one
//! in a clock with no path, takes the previous packet's time. A remote
//! packet's error bound is the value in force on its machine's error-bound
//! track (docs/format.md, "Sync-quality tracks"): at least the bound the
//! daemon gave it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, BUILTIN_MAX};
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync, SystemInfo};
use tracesync_protocol::scan::{PacketFields, defaults_timestamp_clock_id, scan_packet};

use crate::live::OutPacket;
use crate::preamble::role_of;
use crate::sync_quality::{QualityTrack, bound_us_to_ns, read_sample};

/// Machines and sequences remembered; beyond it the maps start afresh
/// (only a corrupt or hostile directory gets there).
const MAX_KEYS: usize = 1 << 16;

/// Per-machine clock state learned from the stream.
#[derive(Debug, Default)]
pub struct FileResolver {
    names: HashMap<u32, Arc<str>>,
    /// Latest ClockSnapshot per machine: (clock id, value), builtin clocks.
    snapshots: HashMap<u32, Vec<(u32, u64)>>,
    /// Client-minus-host BOOTTIME offset per remote machine.
    offsets: HashMap<u32, i64>,
    /// Sequence default clock per (machine, sequence).
    defaults: HashMap<(u32, u32), u32>,
    /// Error bound in force per remote machine (ns): its last sample on the
    /// sync-quality error-bound track (`tracesync_core::sync_quality`).
    bounds: HashMap<u32, u64>,
    last_ts: i64,
    /// Packets that did not scan (shown nowhere, counted).
    pub undecodable: u64,
}

impl FileResolver {
    /// The error bound in force for remote machine `raw_id`, if a bound
    /// sample was read.
    pub fn bound(&self, raw_id: u32) -> Option<u64> {
        self.bounds.get(&raw_id).copied()
    }

    /// Names machine `raw_id` until a SystemInfo names it (index.jsonl's
    /// names, for the packets before a machine's first SystemInfo).
    pub fn name_machine(&mut self, raw_id: u32, name: &str) {
        self.names.entry(raw_id).or_insert_with(|| Arc::from(name));
    }

    /// Learns from `bytes` and returns it as an output packet; None if the
    /// packet does not scan.
    pub fn resolve(&mut self, bytes: &[u8], src: &Arc<str>) -> Option<OutPacket> {
        let Ok(fields) = scan_packet(bytes) else {
            self.undecodable += 1;
            return None;
        };
        let mut out = self.resolve_scanned(&fields, bytes, src);
        out.bytes = Bytes::copy_from_slice(bytes).into();
        Some(out)
    }

    /// As [`Self::resolve`] for a packet already scanned, without a copy
    /// of its bytes (the result's `bytes` are empty).
    pub fn resolve_scanned(
        &mut self,
        fields: &PacketFields<'_>,
        bytes: &[u8],
        src: &Arc<str>,
    ) -> OutPacket {
        let machine = fields.machine_id.unwrap_or(0);
        let seq = fields.trusted_packet_sequence_id.unwrap_or(0);
        self.learn(fields, bytes, machine, seq);
        let explicit = fields
            .timestamp_clock_id
            .or_else(|| self.defaults.get(&(machine, seq)).copied());
        let (clock, clock_ts) = match fields.timestamp {
            Some(value) => {
                let clock = explicit.unwrap_or(BOOTTIME);
                if let Some(ts) = self.trace_time(machine, clock, value, explicit.is_some()) {
                    self.last_ts = ts;
                }
                (clock, value)
            }
            None => (0, 0),
        };
        // Within the host machine times are exact; a remote packet's bound
        // is the one in force on its error-bound track.
        let err_ns = if machine == 0 {
            0
        } else {
            self.bounds.get(&machine).copied().unwrap_or(0)
        };
        OutPacket {
            ts: self.last_ts,
            machine_raw_id: machine,
            machine_name: self.names.get(&machine).cloned(),
            seq,
            clock,
            clock_ts,
            err_ns,
            data_field: fields.data_field,
            src: Arc::clone(src),
            role: role_of(fields),
            origin: None,
            bytes: Bytes::new().into(),
        }
    }

    fn learn(&mut self, fields: &PacketFields<'_>, bytes: &[u8], machine: u32, seq: u32) {
        if self.names.len() > MAX_KEYS || self.defaults.len() > MAX_KEYS {
            self.names.clear();
            self.snapshots.clear();
            self.offsets.clear();
            self.defaults.clear();
            self.bounds.clear();
        }
        if let Some(sample) = read_sample(fields, bytes)
            && sample.track == QualityTrack::ErrorBound
            && let Some(value) = sample.value
        {
            self.bounds.insert(sample.raw_id, bound_us_to_ns(value));
        }
        if let Some(info) = fields.system_info
            && let Ok(info) = SystemInfo::decode(info)
            && let Some(name) = info.machine_name
        {
            self.names.insert(machine, Arc::from(name));
        }
        if let Some(defaults) = fields.trace_packet_defaults
            && let Ok(Some(clock)) = defaults_timestamp_clock_id(defaults)
        {
            self.defaults.insert((machine, seq), clock);
        }
        if let Some(snapshot) = fields.clock_snapshot
            && let Ok(snapshot) = ClockSnapshot::decode(snapshot)
        {
            let clocks = snapshot
                .clocks
                .iter()
                .filter_map(|c| Some((c.clock_id?, c.timestamp?)))
                .filter(|(id, _)| *id <= BUILTIN_MAX)
                .collect();
            self.snapshots.insert(machine, clocks);
        }
        if let Some(sync) = fields.remote_clock_sync
            && let Ok(sync) = RemoteClockSync::decode(sync)
            && let Some(offset) = sync.synced_clocks.iter().rev().find_map(|s| {
                let c = boottime_of(s.client_clocks.as_ref()?)?;
                let h = boottime_of(s.host_clocks.as_ref()?)?;
                Some(c as i64 - h as i64)
            })
        {
            self.offsets.insert(machine, offset);
        }
    }

    /// BOOTTIME on `machine` of `value` in `clock`, if there is a path
    /// (clocks other than BOOTTIME through the machine's latest
    /// ClockSnapshot).
    pub fn machine_boottime(&self, machine: u32, clock: u32, value: u64) -> Option<u64> {
        let boottime = if clock == BOOTTIME {
            i128::from(value)
        } else {
            let snap = self.snapshots.get(&machine)?;
            let at = |id: u32| {
                snap.iter()
                    .find(|(c, _)| *c == id)
                    .map(|(_, v)| i128::from(*v))
            };
            i128::from(value) - at(clock)? + at(BOOTTIME)?
        };
        u64::try_from(boottime).ok()
    }

    /// Host trace time of `value` in `clock` on `machine`, if there is a path.
    fn trace_time(&self, machine: u32, clock: u32, value: u64, explicit: bool) -> Option<i64> {
        let boottime = i128::from(self.machine_boottime(machine, clock, value)?);
        // Perfetto shifts only packets with a clock id (explicit or by
        // default) on remote machines; the daemon stamps one on them all.
        let offset = if machine != 0 && explicit {
            i128::from(self.offsets.get(&machine).copied().unwrap_or(0))
        } else {
            0
        };
        i64::try_from(boottime - offset).ok()
    }
}

fn boottime_of(snapshot: &ClockSnapshot) -> Option<u64> {
    snapshot
        .clocks
        .iter()
        .find(|c| c.clock_id == Some(BOOTTIME))
        .and_then(|c| c.timestamp)
}

/// The preamble-role packets already shown, by content: a new file's
/// preamble replays them, and a replayed packet is byte-identical to the
/// one shown from the previous file. Bounded, oldest forgotten first; the
/// replay is of the latest ones, so they are the ones kept.
#[derive(Debug, Default)]
pub struct SeenPackets {
    set: HashSet<(u64, usize)>,
    order: VecDeque<(u64, usize)>,
}

/// Preamble packets remembered for replay detection.
pub const MAX_SEEN: usize = 1 << 16;

impl SeenPackets {
    fn key(bytes: &[u8]) -> (u64, usize) {
        // SipHash with fixed keys: stable within the process, and a
        // collision needs equal lengths too.
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        (h.finish(), bytes.len())
    }

    pub fn insert(&mut self, bytes: &[u8]) {
        let key = Self::key(bytes);
        if self.set.insert(key) {
            self.order.push_back(key);
            if self.order.len() > MAX_SEEN
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }

    pub fn contains(&self, bytes: &[u8]) -> bool {
        self.set.contains(&Self::key(bytes))
    }
}
