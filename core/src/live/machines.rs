//! The machine table: one row per machine raw id (0 is the host) with its
//! name, traffic and drop counters, last frame, sync points and clock
//! mapping; and the status rows made of it.

use std::collections::BTreeMap;
use std::collections::hash_map::{Entry, VacantEntry};
use std::sync::Arc;

use super::estimate::SyncEstimate;
use super::quality::MachineTracks;
use super::types::Refusal;
use tracesync_protocol::relay::v1;
use tracesync_protocol::relay::{MAX_SOURCE_TEXT_BYTES, MAX_SOURCES};

use crate::hash::IdMap;
use crate::status::{MachineStatus, SourceStatus};
use crate::sync::covering::Refinement;
use crate::sync_point::offset_pair;

/// Counter names (Perfetto's stat names where one exists).
pub mod reason {
    pub const DUPLICATE: &str = "duplicates_dropped";
    pub const NO_PATH: &str = "clock_sync_failure_no_path";
    pub const CONVERSION: &str = "clock_sync_failure";
    pub const NEGATIVE: &str = "trace_sorter_negative_timestamp_dropped";
    pub const MALFORMED: &str = "packets_malformed";
    pub const BATCHES_LOST: &str = "relay_batches_lost";
    pub const REMOTE_SYNC_REPLACED: &str = "remote_clock_sync_replaced";
    pub const INVALID_SNAPSHOT: &str = "invalid_clock_snapshots";
    pub const LATE: &str = "late_packets";
    /// Written with no probe sample taken after them yet (not dropped).
    pub const UNPROBED: &str = "unprobed_packets";
    /// Written with a mapping a later probe sample corrected (not dropped).
    pub const REMAPPED: &str = "remapped_packets";
    /// A connected, synced relay stopped holding the merge watermark: its
    /// clock had not advanced for the stall grace (`LiveConfig::stall_after_ns`).
    /// Counted once per stall; it holds again once its clock catches up.
    pub const CLOCK_STALLS: &str = "clock_stalls";
    /// Relay clocks (of a Hello, Batch or Heartbeat) refused for the
    /// watermark: earlier than the relay's last accepted clock, mapping
    /// past host time beyond the sync estimate's bound, or a session's
    /// first clock mapping far before host time.
    pub const CLOCKS_REFUSED: &str = "clocks_refused";
    /// Packets dated past host now by more than their bound plus 1 s (the
    /// slack of a relay clock): written at once, apart from the merge, so
    /// they stall nobody (not dropped).
    pub const FUTURE: &str = "future_packets";
    /// Counters reported apart from the drops: of written packets, and of
    /// the relays' clocks (no packet is dropped for them).
    pub const NOT_DROPS: [&str; 6] = [
        LATE,
        UNPROBED,
        REMAPPED,
        CLOCK_STALLS,
        CLOCKS_REFUSED,
        FUTURE,
    ];
    pub const SEQUENCES_OVER_LIMIT: &str = "sequences_over_limit";
}

/// One machine row of the output.
#[derive(Debug, Default)]
pub(super) struct Machine {
    name: Option<Arc<str>>,
    /// The relay instance connected for it now.
    connected: Option<u64>,
    packets: u64,
    bytes: u64,
    /// Largest error bound of any packet written for it.
    max_err_ns: u64,
    counters: BTreeMap<&'static str, u64>,
    /// Host BOOTTIME of the last frame.
    last_seen: Option<u64>,
    /// The last sync point written: (client BOOTTIME, offset).
    sync_point: Option<(u64, i64)>,
    /// Sync points never go below this client BOOTTIME: the one the
    /// current file's preamble replays after a restart.
    sync_floor: u64,
    estimate: Option<SyncEstimate>,
    /// Its relay's sources, as last reported.
    sources: Vec<SourceStatus>,
    /// Its relay's mode as its last Hello said (None: the host, or never
    /// connected in this run).
    ring: Option<bool>,
    /// Its ring relay's fill, as its last Heartbeat said.
    ring_fill: Option<v1::RingFill>,
    /// Its sync-quality tracks.
    pub quality: MachineTracks,
}

impl Machine {
    pub fn name(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }

    /// Its sync-quality tracks, and beside them the estimate shown for it
    /// (the latest), which they read: a borrow, not a copy per packet.
    pub fn tracks_and_estimate(&mut self) -> (&mut MachineTracks, Option<&SyncEstimate>) {
        (&mut self.quality, self.estimate.as_ref())
    }

    /// The offset (relay BOOTTIME minus host time) of its last sync point.
    pub fn last_offset(&self) -> Option<i64> {
        self.sync_point.map(|(_, o)| o)
    }

    /// Adds `n` to the counter of `reason`.
    pub fn count(&mut self, reason: &'static str, n: u64) {
        // Saturating: a hostile batch seq can claim u64::MAX lost batches.
        let count = self.counters.entry(reason).or_default();
        *count = count.saturating_add(n);
    }

    /// A packet of `len` bytes with error bound `err_ns` was written;
    /// `late`: older than one written before; `refinement`: what the
    /// write-time check did to its mapping.
    #[inline]
    pub fn wrote(&mut self, len: usize, err_ns: u64, late: bool, refinement: Option<Refinement>) {
        if late {
            self.count(reason::LATE, 1);
        }
        match refinement {
            Some(Refinement::Unprobed) => self.count(reason::UNPROBED, 1),
            Some(Refinement::Remapped) => self.count(reason::REMAPPED, 1),
            Some(Refinement::Confirmed) | None => {}
        }
        self.packets += 1;
        self.bytes += len as u64;
        self.max_err_ns = self.max_err_ns.max(err_ns);
    }

    /// The sync point to write before a packet at host time `ts` and relay
    /// BOOTTIME `c`, as (client, host): one if the machine has none yet or
    /// its offset (relay BOOTTIME minus host time) moved by more than
    /// `threshold_ns` since the last one, which it becomes.
    pub fn next_sync_point(&mut self, c: i64, ts: i64, threshold_ns: u64) -> Option<(u64, u64)> {
        let offset = c.saturating_sub(ts);
        let last = self.sync_point;
        if last.is_some_and(|(_, o)| o.abs_diff(offset) <= threshold_ns) {
            return None;
        }
        // Client values never go backwards within a machine, nor below the
        // sync point a restarted daemon's preamble replays.
        let floor = last.map_or(0, |(client, _)| client).max(self.sync_floor);
        let (client, host) = offset_pair(u64::try_from(c).unwrap_or(0).max(floor), offset);
        self.sync_point = Some((client, offset));
        Some((client, host))
    }
}

/// Every machine of the output by raw id. Hashed, not ordered: a
/// packet's row is looked up once per written packet (a `BTreeMap` entry
/// cost ~59 instructions there); the status sorts its rows by raw id.
#[derive(Debug, Default)]
pub(super) struct Machines {
    rows: IdMap<u32, Machine>,
}

/// A machine's first row (out of line: see [`Machines::row`]).
#[cold]
#[inline(never)]
fn new_row(vacant: VacantEntry<'_, u32, Machine>) -> &mut Machine {
    vacant.insert(Machine::default())
}

impl Machines {
    /// The table with the host's row (raw id 0), named `host_name`.
    pub fn with_host(host_name: Option<&str>) -> Self {
        let mut machines = Self::default();
        machines.row(0).name = host_name.map(Arc::from);
        machines
    }

    /// The row of `raw_id`, added if missing. Looked up once per written
    /// packet: inlined, the rare insertion (a whole default row) kept out
    /// of line.
    #[inline]
    pub fn row(&mut self, raw_id: u32) -> &mut Machine {
        match self.rows.entry(raw_id) {
            Entry::Occupied(row) => row.into_mut(),
            Entry::Vacant(vacant) => new_row(vacant),
        }
    }

    /// Names `raw_id` as the output already did (a restart): a machine
    /// keeps its first name.
    pub fn name_recovered(&mut self, raw_id: u32, name: &str) {
        let machine = self.row(raw_id);
        if machine.name.is_none() && !name.is_empty() {
            machine.name = Some(Arc::from(name));
        }
    }

    /// Adds the row of `raw_id` if missing.
    pub fn add(&mut self, raw_id: u32) {
        self.row(raw_id);
    }

    /// Sync points of `raw_id` never go below client BOOTTIME `client`.
    pub fn set_sync_floor(&mut self, raw_id: u32, client: u64) {
        self.row(raw_id).sync_floor = client;
    }

    /// Relay instance `instance` connects for `raw_id` (named `name`,
    /// empty if it has none) at host BOOTTIME `now`; refused while another
    /// instance holds the raw id.
    pub fn connect(
        &mut self,
        raw_id: u32,
        instance: u64,
        name: &str,
        ring: bool,
        now: u64,
    ) -> Result<(), Refusal> {
        let machine = self.row(raw_id);
        if let Some(holder) = machine.connected.filter(|&i| i != instance) {
            let holder_name = machine.name.as_deref().unwrap_or("unnamed").to_owned();
            return Err(Refusal::RawIdInUse {
                raw_id,
                holder_instance: holder,
                holder_name,
            });
        }
        if machine.name.is_none() && !name.is_empty() {
            // A machine keeps its first name: names in the output stay stable.
            machine.name = Some(Arc::from(name));
        }
        machine.connected = Some(instance);
        machine.last_seen = Some(now);
        machine.ring = Some(ring);
        Ok(())
    }

    /// `instance` no longer connects for `raw_id` (if it did).
    pub fn release(&mut self, raw_id: u32, instance: u64) {
        if let Some(m) = self.rows.get_mut(&raw_id)
            && m.connected == Some(instance)
        {
            m.connected = None;
        }
    }

    /// Forgets the row of `raw_id` (never the host's) if no relay
    /// connects for it and `in_use` says nothing else refers to it.
    pub fn forget_unused(&mut self, raw_id: u32, in_use: impl FnOnce() -> bool) {
        if raw_id != 0
            && self
                .rows
                .get(&raw_id)
                .is_some_and(|m| m.connected.is_none())
            && !in_use()
        {
            self.rows.remove(&raw_id);
        }
    }

    /// Adds `n` to `raw_id`'s counter of `reason`.
    pub fn count(&mut self, raw_id: u32, reason: &'static str, n: u64) {
        self.row(raw_id).count(reason, n);
    }

    /// A frame for `raw_id` arrived at host BOOTTIME `now`.
    pub fn seen(&mut self, raw_id: u32, now: u64) {
        self.row(raw_id).last_seen = Some(now);
    }

    /// The sources `raw_id`'s relay reported, kept within
    /// [`MAX_SOURCES`] and [`MAX_SOURCE_TEXT_BYTES`] (a relay chooses the
    /// text: it costs the daemon a bounded amount).
    pub fn set_sources(&mut self, raw_id: u32, sources: &[v1::SourceState]) {
        let cut = |text: &str| {
            let mut end = text.len().min(MAX_SOURCE_TEXT_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text[..end].to_owned()
        };
        self.row(raw_id).sources = sources
            .iter()
            .take(MAX_SOURCES)
            .map(|s| SourceStatus {
                spec: cut(&s.spec),
                state: cut(&s.state),
                detail: cut(&s.detail),
            })
            .collect();
    }

    /// The ring fill `raw_id`'s relay reported (None: it reports none).
    pub fn set_ring_fill(&mut self, raw_id: u32, fill: Option<v1::RingFill>) {
        self.row(raw_id).ring_fill = fill;
    }

    /// The clock mapping shown for `raw_id`.
    pub fn set_estimate(&mut self, raw_id: u32, estimate: SyncEstimate) {
        self.row(raw_id).estimate = Some(estimate);
    }

    pub fn name(&self, raw_id: u32) -> Option<Arc<str>> {
        self.rows.get(&raw_id).and_then(|m| m.name.clone())
    }

    /// `src` of jsonl: "<machine name or raw id>/<relay sequence>".
    pub fn src_label(&self, raw_id: u32, relay_sequence: u32) -> Arc<str> {
        match self.rows.get(&raw_id).and_then(|m| m.name.as_deref()) {
            Some(name) => Arc::from(format!("{name}/{relay_sequence}")),
            None => Arc::from(format!("{raw_id}/{relay_sequence}")),
        }
    }

    /// One row per machine (host first). `pending` counts the packets
    /// waiting for a clock of a raw id; `now` is host BOOTTIME,
    /// `now_unix_ms` the wall clock at the same moment (for last seen).
    pub fn status(
        &self,
        now: u64,
        now_unix_ms: u64,
        pending: impl Fn(u32) -> u64,
    ) -> Vec<MachineStatus> {
        let mut rows: Vec<(&u32, &Machine)> = self.rows.iter().collect();
        rows.sort_unstable_by_key(|(raw_id, _)| **raw_id);
        rows.into_iter()
            .map(|(&raw_id, m)| {
                let estimate = m.estimate;
                MachineStatus {
                    name: m.name.as_deref().map(str::to_owned),
                    raw_id,
                    connected: raw_id == 0 || m.connected.is_some(),
                    packets: m.packets,
                    bytes: m.bytes,
                    // Late packets are written, not dropped: reported apart.
                    drops: m
                        .counters
                        .iter()
                        .filter(|(k, _)| !reason::NOT_DROPS.contains(k))
                        .map(|(k, v)| ((*k).to_owned(), *v))
                        .collect(),
                    late_packets: m.counters.get(reason::LATE).copied().unwrap_or(0),
                    unprobed_packets: m.counters.get(reason::UNPROBED).copied().unwrap_or(0),
                    remapped_packets: m.counters.get(reason::REMAPPED).copied().unwrap_or(0),
                    clock_stalls: m.counters.get(reason::CLOCK_STALLS).copied().unwrap_or(0),
                    clocks_refused: m.counters.get(reason::CLOCKS_REFUSED).copied().unwrap_or(0),
                    future_packets: m.counters.get(reason::FUTURE).copied().unwrap_or(0),
                    max_err_ns: m.max_err_ns,
                    pending: pending(raw_id),
                    offset_ns: estimate.map(|e| e.offset_at(e.ref_relay_ns)),
                    drift_ppm: estimate.map(|e| e.freq_ppm),
                    error_bound_ns: estimate.map(|e| e.error_bound_ns),
                    rtt_ns: estimate.map(|e| e.rtt_ns),
                    last_seen_unix_ms: m.last_seen.map(|seen| {
                        now_unix_ms.saturating_sub(now.saturating_sub(seen) / 1_000_000)
                    }),
                    sync: None,
                    sources: m.sources.clone(),
                    mode: m
                        .ring
                        .map(|ring| if ring { "ring" } else { "stream" }.to_owned()),
                    ring: m.ring_fill.map(|f| ring_status(&f, estimate.as_ref(), now)),
                }
            })
            .collect()
    }
}

/// A ring relay's fill for the status, its oldest time mapped to the
/// host's clock with the relay's `estimate` (host BOOTTIME `now`).
fn ring_status(
    fill: &v1::RingFill,
    estimate: Option<&SyncEstimate>,
    now: u64,
) -> crate::status::RingStatus {
    let oldest_host_ns = estimate
        .filter(|_| fill.oldest_relay_ns > 0)
        .and_then(|e| e.checked_to_host(fill.oldest_relay_ns))
        .and_then(|t| u64::try_from(t).ok());
    crate::status::RingStatus {
        bytes_held: fill.bytes_held,
        packets_held: fill.packets_held,
        bytes_limit: fill.bytes_limit,
        seconds_limit: fill.seconds_limit,
        oldest_host_ns,
        oldest_age_ns: oldest_host_ns.map(|t| now.saturating_sub(t)),
        windows_owed: fill.windows_owed,
    }
}
