//! [`LiveCore`]: sessions, machines and streams; acknowledgements and status.
//!
//! Ingest (batches, resolution, pending) is in `ingest.rs`, output
//! (watermark, drain, sync points, host packets) in `emit.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use tracesync_protocol::relay::v1::RelayClocks as WireClocks;

use super::acks::BatchTracker;
use super::clocks::RelayClocks;
use super::epochs::EarlierEstimates;
use super::estimate::SyncEstimate;
use super::hash::IdMap;
use super::ingest::PendingPacket;
use super::order::{Order, StreamId};
use super::recovered::{Recovered, RecoveredSequence};
use super::staging::Staged;
use super::stamp::OWN_SEQUENCE_ID;
use super::types::{
    CommitPoint, Connected, HelloInfo, LiveConfig, LiveStats, Refusal, RelaySlot, SessionError,
};
use crate::status::MachineStatus;
use crate::sync::covering::CoveringEstimates;

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
    /// Counters of written packets, reported apart from the drops.
    pub const NOT_DROPS: [&str; 3] = [LATE, UNPROBED, REMAPPED];
    pub const SEQUENCES_OVER_LIMIT: &str = "sequences_over_limit";
}

/// One machine row of the output (raw id 0 is the host).
#[derive(Debug, Default)]
pub(super) struct Machine {
    pub name: Option<Arc<str>>,
    /// The relay instance connected for it now.
    pub connected: Option<u64>,
    pub packets: u64,
    pub bytes: u64,
    /// Largest error bound of any packet written for it.
    pub max_err_ns: u64,
    pub counters: BTreeMap<&'static str, u64>,
    /// Host BOOTTIME of the last frame.
    pub last_seen: Option<u64>,
    /// The last sync point written: (client BOOTTIME, offset).
    pub sync_point: Option<(u64, i64)>,
    /// Sync points never go below this client BOOTTIME: the one the
    /// current file's preamble replays after a restart.
    pub sync_floor: u64,
    pub estimate: Option<SyncEstimate>,
}

impl Machine {
    pub fn count(&mut self, reason: &'static str, n: u64) {
        // Saturating: a hostile batch seq can claim u64::MAX lost batches.
        let count = self.counters.entry(reason).or_default();
        *count = count.saturating_add(n);
    }
}

/// One relay instance, connected or not.
#[derive(Debug)]
pub(super) struct Relay {
    pub raw_id: u32,
    pub boot_id: String,
    pub slot: Option<RelaySlot>,
    pub clocks: RelayClocks,
    /// The latest sync estimate (of the relay's current epoch).
    pub estimate: Option<SyncEstimate>,
    /// The last estimate of each earlier epoch: packets map in their own.
    pub earlier: EarlierEstimates,
    /// Recent estimates by the newest sample they checked: a packet's
    /// mapping is checked against a sample taken after it when written.
    pub covering: CoveringEstimates,
    /// Relay BOOTTIME of its latest Hello/Batch/Heartbeat clocks.
    pub latest_boottime: Option<u64>,
    /// Host BOOTTIME of the current connection's Hello (the watermark
    /// grace, see [`LiveConfig::connect_grace_ns`]).
    pub connected_at: u64,
    pub batches: BatchTracker,
    pub pending: VecDeque<PendingPacket>,
    pub pending_bytes: usize,
    /// Order of disconnection, for forgetting the longest-gone first.
    pub disconnected_order: u64,
    /// Streams of this instance (bounded by `max_sequences_per_relay`).
    pub sequences: usize,
}

/// Covering estimates kept per relay: enough for packets up to a merge
/// window plus a few seconds of transport delay old, at the fastest probe
/// rates (a packet older than the oldest kept is checked against a later
/// estimate than the first after it; see `CoveringEstimates::new`).
fn covering_estimates(config: &LiveConfig) -> CoveringEstimates {
    const MAX_ENTRIES: usize = 1024;
    const TRANSPORT_SLACK_NS: u64 = 10_000_000_000;
    CoveringEstimates::new(
        config.merge_window_ns.saturating_add(TRANSPORT_SLACK_NS),
        MAX_ENTRIES,
    )
}

/// One stream: a relay sequence of one relay instance.
#[derive(Debug)]
pub(super) struct Stream {
    pub id: StreamId,
    pub out_seq: u32,
    pub raw_id: u32,
    /// Highest packet index accepted or recovered as written.
    pub written: Option<u64>,
    /// trace_packet_defaults.timestamp_clock_id of the sequence.
    pub default_clock: Option<u32>,
    /// Last resolved (host ts, relay BOOTTIME): for packets with no timestamp.
    pub last: Option<(i64, Option<i64>)>,
    /// Packets of this stream in its relay's pending queue.
    pub pending: u32,
    pub src: Arc<str>,
}

pub(super) type StreamKey = (u64, u32);

/// The live capture core (sans-IO). See the module docs of [`crate::live`].
#[derive(Debug)]
pub struct LiveCore {
    pub(super) config: LiveConfig,
    pub(super) relays: IdMap<u64, Relay>,
    pub(super) slots: IdMap<RelaySlot, u64>,
    next_slot: RelaySlot,
    pub(super) machines: BTreeMap<u32, Machine>,
    pub(super) streams: IdMap<StreamKey, Stream>,
    next_stream_id: StreamId,
    next_out_seq: u32,
    pub(super) order: Order,
    pub(super) last_emitted: Option<i64>,
    pub(super) host_info_sent: bool,
    pub(super) host_last_snapshot: Option<u64>,
    commit_point: u64,
    disconnects: u64,
    /// Latest host BOOTTIME passed in by any call.
    pub(super) latest_now: u64,
    pub(super) stats: LiveStats,
    /// Reused staging buffer of the batch being ingested.
    pub(super) staged: Staged,
    /// The batch being ingested hit `max_sequences_per_relay`.
    pub(super) sequence_limit_hit: bool,
    /// Recovered ClockSnapshot payloads per relay instance, (relay
    /// sequence, payload): fed to its clock graph when it connects.
    recovered_clocks: IdMap<u64, Vec<(u32, Vec<u8>)>>,
}

impl LiveCore {
    /// A core resuming from the rolling writer's recovered state.
    pub fn new(config: LiveConfig, recovered: Recovered) -> Self {
        let mut core = Self {
            config,
            relays: IdMap::default(),
            slots: IdMap::default(),
            next_slot: 1,
            machines: BTreeMap::new(),
            streams: IdMap::default(),
            next_stream_id: 0,
            next_out_seq: recovered.next_out_seq.max(OWN_SEQUENCE_ID + 1),
            order: Order::default(),
            last_emitted: None,
            host_info_sent: false,
            host_last_snapshot: None,
            commit_point: 0,
            disconnects: 0,
            latest_now: 0,
            stats: LiveStats::default(),
            staged: Staged::default(),
            sequence_limit_hit: false,
            recovered_clocks: IdMap::default(),
        };
        let host_name = core.config.host_name.as_deref().map(Arc::from);
        core.machines.entry(0).or_default().name = host_name;
        for (raw_id, client) in recovered.sync_floors {
            core.machines.entry(raw_id).or_default().sync_floor = client;
        }
        let mut sequences: BTreeMap<u32, RecoveredSequence> = recovered
            .sequences
            .into_iter()
            .map(|q| (q.out_seq, q))
            .collect();
        for s in recovered.streams {
            core.machines.entry(s.machine_raw_id).or_default();
            // The stream resolves and stamps as before the restart: its
            // sequence's default clock, its sequence-scoped clocks.
            let state = sequences.remove(&s.out_seq).unwrap_or_default();
            if !state.clock_snapshots.is_empty() {
                core.recovered_clocks
                    .entry(s.relay_instance)
                    .or_default()
                    .extend(
                        state
                            .clock_snapshots
                            .into_iter()
                            .map(|p| (s.relay_sequence, p)),
                    );
            }
            let id = core.allocate_stream_id();
            core.streams.insert(
                (s.relay_instance, s.relay_sequence),
                Stream {
                    id,
                    out_seq: s.out_seq,
                    raw_id: s.machine_raw_id,
                    written: Some(s.written_through),
                    default_clock: state.default_clock,
                    last: None,
                    pending: 0,
                    src: Arc::from(format!("{}/{}", s.machine_raw_id, s.relay_sequence)),
                },
            );
        }
        core
    }

    fn allocate_stream_id(&mut self) -> StreamId {
        let id = self.next_stream_id;
        // The host's stream is StreamId::MAX.
        self.next_stream_id = self.next_stream_id.wrapping_add(1) % StreamId::MAX;
        id
    }

    /// The stream of (relay instance, relay sequence), created on first use.
    pub(super) fn stream_entry(&mut self, key: StreamKey, raw_id: u32) -> &mut Stream {
        if !self.streams.contains_key(&key) {
            let id = self.allocate_stream_id();
            let out_seq = self.next_out_seq;
            self.next_out_seq = self.next_out_seq.wrapping_add(1).max(OWN_SEQUENCE_ID + 1);
            let src = self.src_label(raw_id, key.1);
            if let Some(relay) = self.relays.get_mut(&key.0) {
                relay.sequences += 1;
            }
            self.streams.insert(
                key,
                Stream {
                    id,
                    out_seq,
                    raw_id,
                    written: None,
                    default_clock: None,
                    last: None,
                    pending: 0,
                    src,
                },
            );
        }
        // Inserted just above if it was missing.
        self.streams.get_mut(&key).expect("stream exists")
    }

    /// `src` of jsonl: "<machine name or raw id>/<relay sequence>".
    fn src_label(&self, raw_id: u32, relay_sequence: u32) -> Arc<str> {
        match self.machines.get(&raw_id).and_then(|m| m.name.as_deref()) {
            Some(name) => Arc::from(format!("{name}/{relay_sequence}")),
            None => Arc::from(format!("{raw_id}/{relay_sequence}")),
        }
    }

    /// A relay's Hello. `now` is host BOOTTIME.
    pub fn connect(&mut self, hello: HelloInfo, now: u64) -> Result<Connected, Refusal> {
        self.latest_now = self.latest_now.max(now);
        let raw_id = hello.machine_raw_id;
        if raw_id == 0 {
            return Err(Refusal::ReservedRawId);
        }
        let machine = self.machines.entry(raw_id).or_default();
        if let Some(holder) = machine.connected.filter(|&i| i != hello.relay_instance) {
            let holder_name = machine.name.as_deref().unwrap_or("unnamed").to_owned();
            return Err(Refusal::RawIdInUse {
                raw_id,
                holder_instance: holder,
                holder_name,
            });
        }
        if machine.name.is_none() && !hello.machine_name.is_empty() {
            // A machine keeps its first name: names in the output stay stable.
            machine.name = Some(Arc::from(hello.machine_name.as_str()));
        }
        machine.connected = Some(hello.relay_instance);
        machine.last_seen = Some(now);

        let slot = self.next_slot;
        self.next_slot = self.next_slot.wrapping_add(1).max(1);
        let oldest = hello.oldest_unacked_batch;
        let mut lost = 0;
        let streams = &self.streams;
        let relay = self
            .relays
            .entry(hello.relay_instance)
            .or_insert_with(|| Relay {
                // Streams recovered from the output before it connected.
                sequences: streams
                    .keys()
                    .filter(|k| k.0 == hello.relay_instance)
                    .count(),
                raw_id,
                boot_id: hello.boot_id.clone(),
                slot: None,
                clocks: RelayClocks::default(),
                estimate: None,
                earlier: EarlierEstimates::default(),
                covering: covering_estimates(&self.config),
                latest_boottime: None,
                connected_at: now,
                // Nothing known of this instance: what precedes its spool
                // was acknowledged before (by this daemon, before a restart).
                batches: BatchTracker::starting_at(oldest.saturating_sub(1)),
                pending: VecDeque::new(),
                pending_bytes: 0,
                disconnected_order: 0,
            });
        if relay.boot_id != hello.boot_id {
            // The relay's machine rebooted: its clocks restarted.
            relay.boot_id = hello.boot_id.clone();
            relay.clocks = RelayClocks::default();
            relay.estimate = None;
            relay.covering.clear();
        }
        lost += relay.batches.resume(oldest);
        if let Some(snapshots) = self.recovered_clocks.remove(&hello.relay_instance) {
            for (relay_sequence, payload) in snapshots {
                relay.clocks.add_snapshot(&payload, relay_sequence);
            }
        }
        let replaced = relay.slot.replace(slot);
        let old_raw_id = std::mem::replace(&mut relay.raw_id, raw_id);
        relay.latest_boottime = hello.clocks.map(|c| c.boottime_ns);
        relay.connected_at = now;
        relay.batches.reported_now();
        let acked_through_batch = relay.batches.acked();
        if let Some(old) = replaced {
            self.slots.remove(&old);
        }
        if old_raw_id != raw_id {
            // The relay was renamed: its streams move to the new machine.
            if let Some(m) = self.machines.get_mut(&old_raw_id)
                && m.connected == Some(hello.relay_instance)
            {
                m.connected = None;
            }
            for (_, stream) in self
                .streams
                .iter_mut()
                .filter(|(k, _)| k.0 == hello.relay_instance)
            {
                stream.raw_id = raw_id;
            }
        }
        self.slots.insert(slot, hello.relay_instance);
        if lost > 0 {
            self.machine(raw_id).count(reason::BATCHES_LOST, lost);
        }
        // Streams recovered before the name was known get it now.
        if let Some(name) = self.machines.get(&raw_id).and_then(|m| m.name.clone()) {
            for ((instance, seq), stream) in self.streams.iter_mut() {
                if *instance == hello.relay_instance {
                    stream.src = Arc::from(format!("{name}/{seq}"));
                }
            }
        }
        self.forget_idle_relays();
        Ok(Connected {
            slot,
            acked_through_batch,
            replaced,
        })
    }

    pub(super) fn machine(&mut self, raw_id: u32) -> &mut Machine {
        self.machines.entry(raw_id).or_default()
    }

    /// The connection of `slot` ended. Its queued and pending packets stay
    /// (they are written when their time comes); it no longer holds the
    /// watermark.
    pub fn disconnect(&mut self, slot: RelaySlot) {
        let Some(instance) = self.slots.remove(&slot) else {
            return;
        };
        self.disconnects += 1;
        if let Some(relay) = self.relays.get_mut(&instance) {
            relay.slot = None;
            relay.disconnected_order = self.disconnects;
            if let Some(m) = self.machines.get_mut(&relay.raw_id)
                && m.connected == Some(instance)
            {
                m.connected = None;
            }
        }
    }

    /// Forgets the longest-disconnected relay instances with nothing in
    /// flight while more than `max_relay_records` are remembered.
    fn forget_idle_relays(&mut self) {
        while self.relays.len() > self.config.max_relay_records {
            let idle = self
                .relays
                .iter()
                .filter(|(_, r)| {
                    r.slot.is_none() && r.pending.is_empty() && r.batches.unacked() == 0
                })
                .min_by_key(|(_, r)| r.disconnected_order)
                .map(|(&i, _)| i);
            let Some(instance) = idle else { return };
            let raw_id = self.relays.remove(&instance).map(|r| r.raw_id);
            let order = &mut self.order;
            self.streams.retain(|k, s| {
                let forget = k.0 == instance && order.stream_len(s.id) == 0;
                if forget {
                    order.remove_stream(s.id);
                }
                !forget
            });
            // Its machine row goes too once nothing refers to it, so relays
            // that keep coming with new raw ids cannot grow the table.
            if let Some(raw_id) = raw_id.filter(|&id| id != 0)
                && self
                    .machines
                    .get(&raw_id)
                    .is_some_and(|m| m.connected.is_none())
                && !self.relays.values().any(|r| r.raw_id == raw_id)
                && !self.streams.values().any(|s| s.raw_id == raw_id)
            {
                self.machines.remove(&raw_id);
            }
        }
    }

    pub(super) fn relay_of(&self, slot: RelaySlot) -> Result<u64, SessionError> {
        self.slots
            .get(&slot)
            .copied()
            .ok_or(SessionError::UnknownSlot(slot))
    }

    /// A Heartbeat: the relay's clocks advance the watermark.
    pub fn heartbeat(
        &mut self,
        slot: RelaySlot,
        clocks: Option<WireClocks>,
        now: u64,
    ) -> Result<(), SessionError> {
        let instance = self.relay_of(slot)?;
        self.latest_now = self.latest_now.max(now);
        if let Some(relay) = self.relays.get_mut(&instance) {
            if let Some(c) = clocks {
                relay.latest_boottime = Some(c.boottime_ns);
            }
            let raw_id = relay.raw_id;
            self.machine(raw_id).last_seen = Some(now);
        }
        Ok(())
    }

    /// A new clock-sync estimate for the relay on `slot`: packets waiting
    /// for it are resolved.
    pub fn sync(&mut self, slot: RelaySlot, estimate: SyncEstimate) -> Result<(), SessionError> {
        let instance = self.relay_of(slot)?;
        if let Some(relay) = self.relays.get_mut(&instance) {
            relay.earlier.replaced(relay.estimate, &estimate);
            relay.covering.push(&estimate);
            relay.estimate = Some(estimate);
            let raw_id = relay.raw_id;
            self.machine(raw_id).estimate = Some(estimate);
            self.retry_pending(instance);
        }
        Ok(())
    }

    /// Marks everything drained so far; pass it to [`Self::committed_through`]
    /// once the writer has committed what was drained before this call.
    pub fn commit_point(&mut self) -> CommitPoint {
        self.commit_point += 1;
        for relay in self.relays.values_mut() {
            relay.batches.mark(self.commit_point);
        }
        CommitPoint(self.commit_point)
    }

    /// Everything drained before `point` is durable: the acks that moved,
    /// for connected relays.
    pub fn committed_through(&mut self, point: CommitPoint) -> Vec<(RelaySlot, u64)> {
        for relay in self.relays.values_mut() {
            relay.batches.committed_through(point.0);
        }
        self.take_acks()
    }

    /// Everything drained so far is durable (the writer committed after the
    /// last drain): the acks that moved, for connected relays.
    pub fn committed(&mut self) -> Vec<(RelaySlot, u64)> {
        for relay in self.relays.values_mut() {
            relay.batches.committed_now();
        }
        self.take_acks()
    }

    fn take_acks(&mut self) -> Vec<(RelaySlot, u64)> {
        let mut acks: Vec<_> = self
            .relays
            .values_mut()
            .filter_map(|r| Some((r.slot?, r.batches.take_ack()?)))
            .collect();
        acks.sort_unstable();
        acks
    }

    /// Per machine (host first): traffic, counters by reason, pending,
    /// clock mapping. `now` is host BOOTTIME, `now_unix_ms` the wall clock
    /// at the same moment (for last seen).
    pub fn status(&self, now: u64, now_unix_ms: u64) -> Vec<MachineStatus> {
        self.machines
            .iter()
            .map(|(&raw_id, m)| {
                let pending = self
                    .relays
                    .values()
                    .filter(|r| r.raw_id == raw_id)
                    .map(|r| r.pending.len() as u64)
                    .sum();
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
                    max_err_ns: m.max_err_ns,
                    pending,
                    offset_ns: estimate.map(|e| e.offset_at(e.ref_relay_ns)),
                    drift_ppm: estimate.map(|e| e.freq_ppm),
                    error_bound_ns: estimate.map(|e| e.error_bound_ns),
                    rtt_ns: estimate.map(|e| e.rtt_ns),
                    last_seen_unix_ms: m.last_seen.map(|seen| {
                        now_unix_ms.saturating_sub(now.saturating_sub(seen) / 1_000_000)
                    }),
                    sync: None,
                }
            })
            .collect()
    }

    pub fn stats(&self) -> LiveStats {
        self.stats
    }

    /// Packets waiting for the watermark (all relays and the host).
    pub fn queued(&self) -> usize {
        self.order.len()
    }
}
