//! One relay instance, connected or not: its clock graph and sync
//! estimates (how its packets resolve), its batches (what may be
//! acknowledged), its pending queue (packets waiting for a clock) and its
//! hold on the watermark (`hold.rs`).

use std::collections::VecDeque;

use tracesync_protocol::relay::v1::RelayClocks as WireClocks;

use super::acks::{BatchSeq, BatchTracker};
use super::clocks::RelayClocks;
use super::epochs::{EarlierEstimates, check_mapping};
use super::estimate::SyncEstimate;
use super::hold::{Hold, Verdict};
use super::machines::reason;
use super::pending::{Meta, PendingPacket};
use super::types::{HelloInfo, LiveConfig, RelaySlot};
use crate::clock::ConvertError;
use crate::sync::covering::{CoveringEstimates, Mapping, Refinement};

/// What resolution decided for one packet: the caller stages it, queues it
/// as pending or drops it.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resolution {
    Ready(Resolved),
    /// The clock has no path to the relay's BOOTTIME yet.
    NoPath,
    /// The relay has no sync estimate yet.
    NoSync,
    Drop(&'static str),
}

/// Where a packet goes on the host timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Resolved {
    /// Host time.
    pub ts: i64,
    /// Relay BOOTTIME (None if placed by arrival time).
    pub boottime: Option<i64>,
    /// The hard bound of the estimate it was mapped with, carried to that
    /// BOOTTIME ([`SyncEstimate::bound_at`]: the estimator's frequency
    /// bound and wander allowance; 0 without a BOOTTIME or an estimate).
    pub bound_ns: u64,
}

/// A connection of a relay instance accepted: its slot, and what it
/// changed (the caller moves a renamed relay's streams, counts the lost
/// batches).
#[must_use]
#[derive(Clone, Copy, Debug)]
pub(super) struct Session {
    pub slot: RelaySlot,
    /// The slot of the connection it had still (a stale one), now forgotten.
    pub replaced: Option<RelaySlot>,
    /// The raw id it had before (its machine, if it was renamed).
    pub old_raw_id: u32,
    /// Batches it lost between what was accepted and its spool's start.
    pub lost: u64,
    /// Welcome.acked_through_batch.
    pub acked_through_batch: u64,
}

#[derive(Debug)]
pub(super) struct Relay {
    raw_id: u32,
    boot_id: String,
    slot: Option<RelaySlot>,
    clocks: RelayClocks,
    /// The latest sync estimate (of the relay's current epoch).
    estimate: Option<SyncEstimate>,
    /// The last estimate of each earlier epoch: packets map in their own.
    earlier: EarlierEstimates,
    /// Recent estimates by the newest sample they checked: a packet's
    /// mapping is checked against a sample taken after it when written.
    covering: CoveringEstimates,
    /// Relay BOOTTIME of its latest Hello/Batch/Heartbeat clocks, refused
    /// or not (the time of a packet with none on a stream with none yet).
    latest_boottime: Option<u64>,
    /// The clocks that hold the watermark, and whether they stalled.
    hold: Hold,
    /// Host BOOTTIME of the current connection's Hello (the watermark
    /// grace, see [`LiveConfig::connect_grace_ns`]).
    connected_at: u64,
    batches: BatchTracker,
    pending: VecDeque<PendingPacket>,
    pending_bytes: usize,
    /// Order of disconnection, for forgetting the longest-gone first.
    disconnected_order: u64,
    /// Its latest session was in ring mode: its spool's start moved as
    /// its ring let batches go, none of them owed to the output.
    ring: bool,
    /// Streams of this instance (bounded by `max_sequences_per_relay`).
    sequences: usize,
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

impl Relay {
    /// A relay instance first seen in `hello` at host BOOTTIME `now`, with
    /// `sequences` streams recovered from the output before it connected.
    pub fn new(hello: &HelloInfo, now: u64, sequences: usize, config: &LiveConfig) -> Self {
        Self {
            sequences,
            raw_id: hello.machine_raw_id,
            boot_id: hello.boot_id.clone(),
            slot: None,
            clocks: RelayClocks::default(),
            estimate: None,
            earlier: EarlierEstimates::default(),
            covering: covering_estimates(config),
            latest_boottime: None,
            hold: Hold::default(),
            connected_at: now,
            // Nothing known of this instance: what precedes its spool
            // was acknowledged before (by this daemon, before a restart).
            batches: BatchTracker::starting_at(hello.oldest_unacked_batch.saturating_sub(1)),
            pending: VecDeque::new(),
            pending_bytes: 0,
            disconnected_order: 0,
            ring: hello.ring,
        }
    }

    /// A connection of the instance on `slot`: its Hello `hello` at host
    /// BOOTTIME `now`, and the ClockSnapshot payloads recovered for it (by
    /// relay sequence), if any.
    pub fn open_session(
        &mut self,
        hello: &HelloInfo,
        slot: RelaySlot,
        now: u64,
        recovered_clocks: Option<Vec<(u32, Vec<u8>)>>,
    ) -> Session {
        if self.boot_id != hello.boot_id {
            // The relay's machine rebooted: its clocks restarted.
            self.boot_id = hello.boot_id.clone();
            self.clocks = RelayClocks::default();
            self.estimate = None;
            self.covering.clear();
        }
        let lost = self.batches.resume(hello.oldest_unacked_batch);
        // Since a session in ring mode (or in this one) the spool's start
        // moved by what the ring let go: a relay restarted in stream mode
        // lost none of it.
        let lost = if self.ring || hello.ring { 0 } else { lost };
        self.ring = hello.ring;
        for (relay_sequence, payload) in recovered_clocks.into_iter().flatten() {
            self.clocks.add_snapshot(&payload, relay_sequence);
        }
        let replaced = self.slot.replace(slot);
        let old_raw_id = std::mem::replace(&mut self.raw_id, hello.machine_raw_id);
        // The Hello's clocks are the session's first (`saw_clocks`).
        self.latest_boottime = None;
        self.hold.reset();
        self.connected_at = now;
        self.batches.reported_now();
        Session {
            slot,
            replaced,
            old_raw_id,
            lost,
            acked_through_batch: self.batches.acked(),
        }
    }

    /// The connection ended; `order` ranks it among disconnections.
    pub fn close_session(&mut self, order: u64) {
        self.slot = None;
        self.disconnected_order = order;
    }

    pub fn raw_id(&self) -> u32 {
        self.raw_id
    }

    pub fn slot(&self) -> Option<RelaySlot> {
        self.slot
    }

    pub fn has_estimate(&self) -> bool {
        self.estimate.is_some()
    }

    /// Disconnected, with nothing pending nor unacknowledged: it may be
    /// forgotten.
    pub fn is_idle(&self) -> bool {
        self.slot.is_none() && self.pending.is_empty() && self.batches.unacked() == 0
    }

    pub fn disconnected_order(&self) -> u64 {
        self.disconnected_order
    }

    /// Notes the relay clocks a frame carried, arrived at host BOOTTIME
    /// `now` and reading time `reading` (see `hold.rs`): whether they were
    /// refused for the watermark (to be counted). `grace_ns` is
    /// [`LiveConfig::stall_after_ns`].
    pub fn saw_clocks(
        &mut self,
        clocks: Option<WireClocks>,
        now: u64,
        reading: u64,
        grace_ns: u64,
    ) -> Verdict {
        let Some(c) = clocks else {
            return Verdict::Accepted;
        };
        self.latest_boottime = Some(c.boottime_ns);
        let estimate = self.estimate;
        self.hold
            .saw(c.boottime_ns, now, reading, estimate.as_ref(), grace_ns)
    }

    /// Relay BOOTTIME of its latest Hello/Batch/Heartbeat clocks.
    pub fn latest_boottime(&self) -> Option<u64> {
        self.latest_boottime
    }

    /// A new sync estimate (earlier epochs' last ones are kept). A clock
    /// accepted before the first estimate is checked against it: Refused
    /// if it does not fit (to be counted).
    pub fn set_estimate(&mut self, estimate: SyncEstimate, grace_ns: u64) -> Verdict {
        self.earlier.replaced(self.estimate, &estimate);
        self.covering.push(&estimate);
        self.estimate = Some(estimate);
        self.hold.estimated(&estimate, grace_ns)
    }

    /// Opens one more stream unless it has `limit` already.
    pub fn open_sequence(&mut self, limit: usize) -> bool {
        if self.sequences >= limit {
            return false;
        }
        self.sequences += 1;
        true
    }

    // Batches.

    /// Batches accepted but not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.batches.unacked()
    }

    /// Classifies a batch by its seq and records it as accepted.
    pub fn accept_batch(&mut self, seq: u64) -> BatchSeq {
        self.batches.accept(seq)
    }

    /// `n` packets of batch `seq` are taken: the batch waits for them
    /// (a packet not taken after all is [`Self::packet_done`]).
    pub fn packets_taken(&mut self, seq: u64, n: usize) {
        // A frame's packets are far fewer than 2^32 (its size is bounded):
        // the loop only keeps the count exact on any input.
        let mut left = n;
        while left > 0 {
            let k = u32::try_from(left).unwrap_or(u32::MAX);
            self.batches.add_outstanding(seq, k);
            left -= k as usize;
        }
    }

    /// A packet of batch `seq` was dropped.
    pub fn packet_done(&mut self, seq: u64) {
        self.batches.packet_done(seq);
    }

    /// A packet of batch `seq` is written now, mapped as `provisional`
    /// from relay BOOTTIME `relay_boottime`: its mapping checked against
    /// the probe samples taken after it (None if it has no relay time).
    #[must_use]
    #[inline]
    pub fn packet_written(
        &mut self,
        seq: u64,
        relay_boottime: Option<i64>,
        provisional: Mapping,
    ) -> Option<(Mapping, Refinement)> {
        self.batches.packet_done(seq);
        let c = relay_boottime.and_then(|c| u64::try_from(c).ok())?;
        let bmm = self.clocks.epoch_at(c as i64);
        Some(check_mapping(&mut self.covering, bmm, c, provisional))
    }

    /// Remembers what is done at commit point `point`.
    pub fn mark(&mut self, point: u64) {
        self.batches.mark(point);
    }

    /// Everything drained up to commit point `point` is durable.
    pub fn committed_through(&mut self, point: u64) {
        self.batches.committed_through(point);
    }

    /// Everything drained so far is durable.
    pub fn committed_now(&mut self) {
        self.batches.committed_now();
    }

    /// The ack to send on its connection, if it is connected and the ack
    /// moved since the last one handed out.
    pub fn take_ack(&mut self) -> Option<(RelaySlot, u64)> {
        Some((self.slot?, self.batches.take_ack()?))
    }

    // Clocks and resolution.

    /// Adds a ClockSnapshot payload seen on `relay_sequence`: whether the
    /// clock graph changed, and how many invalid snapshots it counted.
    #[must_use]
    pub fn add_snapshot(&mut self, payload: &[u8], relay_sequence: u32) -> (bool, u64) {
        let before = self.clocks.invalid_clock_snapshots;
        let changed = self.clocks.add_snapshot(payload, relay_sequence);
        (changed, self.clocks.invalid_clock_snapshots - before)
    }

    /// Resolves a packet of `m` with raw `timestamp` (None: it has none;
    /// `last` is its stream's last resolved time).
    pub fn resolve(
        &mut self,
        last: Option<(i64, Option<i64>)>,
        timestamp: Option<u64>,
        m: &Meta,
    ) -> Resolution {
        match timestamp {
            Some(raw) => match self.clocks.boottime_of(m.key.1, m.clock, raw) {
                Ok(boottime) => self.to_host(boottime),
                Err(ConvertError::Overflow) => Resolution::Drop(reason::CONVERSION),
                Err(_) => Resolution::NoPath,
            },
            None => match (last, m.fallback_boottime) {
                (Some((ts, boottime)), _) => Resolution::Ready(Resolved {
                    ts,
                    boottime,
                    bound_ns: boottime
                        .and_then(|c| {
                            let e = self.estimate_at(Some(c))?;
                            Some(e.bound_at(c.max(0) as u64))
                        })
                        .unwrap_or(0),
                }),
                (None, Some(b)) => self.to_host(i64::try_from(b).unwrap_or(i64::MAX)),
                (None, None) => Resolution::Ready(Resolved {
                    ts: i64::try_from(m.arrival).unwrap_or(i64::MAX),
                    boottime: None,
                    bound_ns: 0,
                }),
            },
        }
    }

    /// Host time of relay BOOTTIME `boottime`, with the estimate of the
    /// packet's own clock epoch.
    fn to_host(&self, boottime: i64) -> Resolution {
        let Some(e) = self.estimate_at(Some(boottime)) else {
            return Resolution::NoSync;
        };
        // Negative relay BOOTTIME cannot be a time on it: dropped as Perfetto would.
        let Ok(b) = u64::try_from(boottime) else {
            return Resolution::Drop(reason::NEGATIVE);
        };
        let ts = e.to_host(b);
        if ts < 0 {
            return Resolution::Drop(reason::NEGATIVE);
        }
        // Read here, where the estimate is at hand: staging the packet
        // would look it up again.
        Resolution::Ready(Resolved {
            ts,
            boottime: Some(boottime),
            bound_ns: e.bound_at(b),
        })
    }

    /// The latest estimate (of the relay's current epoch).
    pub fn estimate(&self) -> Option<SyncEstimate> {
        self.estimate
    }

    /// The estimate a packet at relay BOOTTIME `boottime` maps with: its
    /// clock epoch's (the latest when the epoch is unknown).
    pub fn estimate_at(&self, boottime: Option<i64>) -> Option<&SyncEstimate> {
        let epoch = boottime.and_then(|c| self.clocks.epoch_at(c));
        self.earlier.pick(self.estimate.as_ref(), epoch)
    }

    /// The host time the relay holds the watermark at, if it is connected:
    /// its latest accepted clock on the host timeline, unless that clock
    /// lagged the reading clock (`reading`) by more than
    /// [`LiveConfig::stall_after_ns`]; for `connect_grace_ns` after it
    /// connected without an estimate, its connect time.
    pub fn watermark_hold(&self, now: u64, reading: u64, config: &LiveConfig) -> Option<i64> {
        self.slot?;
        match (self.estimate, self.hold.clock()) {
            (Some(e), Some(b)) if !self.hold.lags(reading, config.stall_after_ns()) => {
                Some(e.to_host(b))
            }
            (None, _) if now < self.connected_at.saturating_add(config.connect_grace_ns) => {
                Some(i64::try_from(self.connected_at).unwrap_or(i64::MAX))
            }
            _ => None,
        }
    }

    /// Its latest accepted clock on the host timeline, once it has an
    /// estimate.
    pub fn latest_host_time(&self) -> Option<i64> {
        match (self.estimate, self.hold.clock()) {
            (Some(e), Some(b)) => Some(e.to_host(b)),
            _ => None,
        }
    }

    /// Whether it just stopped holding the watermark because its clock
    /// stalled (connected and synced, its accepted clock lagging the
    /// reading clock by more than `grace_ns`): counted once per stall.
    pub fn check_stall(&mut self, reading: u64, grace_ns: u64) -> bool {
        let holds = self.slot.is_some() && self.estimate.is_some();
        holds && self.hold.check_stall(reading, grace_ns)
    }

    /// The core holds its connection back (or no longer) at reading time
    /// `reading`.
    pub fn set_paused(&mut self, paused: bool, reading: u64) {
        self.hold.set_paused(paused, reading);
    }

    // The pending queue.

    /// Packets waiting for a resolvable clock.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Memory of the pending packets (see [`PendingPacket::held`]).
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Queues a packet behind the unresolvable ones; returns the oldest
    /// ones evicted to keep the queue within its bound (doubled while the
    /// relay waits for its first estimate, see `LiveCore::push_pending`).
    #[must_use = "evicted packets are dropped: count them"]
    pub fn push_pending(&mut self, p: PendingPacket, config: &LiveConfig) -> Vec<PendingPacket> {
        let slack = if self.estimate.is_none() { 2 } else { 1 };
        let (max_packets, max_bytes) = (
            config.pending_max_packets.saturating_mul(slack),
            config.pending_max_bytes.saturating_mul(slack),
        );
        self.pending_bytes += p.held();
        self.pending.push_back(p);
        let mut evicted = Vec::new();
        while self.pending.len() > max_packets || self.pending_bytes > max_bytes {
            let Some(old) = self.pending.pop_front() else {
                break;
            };
            self.pending_bytes -= old.held();
            evicted.push(old);
        }
        evicted
    }

    /// The pending packets to retry, taken out of the queue: none while it
    /// is empty or the relay has no estimate (nothing with a time resolves
    /// without one, and a packet without one waits only behind such a
    /// packet).
    #[must_use = "give back what stays pending with restore_pending"]
    pub fn take_pending_to_retry(&mut self) -> Option<VecDeque<PendingPacket>> {
        if self.pending.is_empty() || self.estimate.is_none() {
            return None;
        }
        self.pending_bytes = 0;
        Some(std::mem::take(&mut self.pending))
    }

    /// The packets a retry kept pending, holding `bytes`.
    pub fn restore_pending(&mut self, kept: VecDeque<PendingPacket>, bytes: usize) {
        self.pending = kept;
        self.pending_bytes = bytes;
    }
}
