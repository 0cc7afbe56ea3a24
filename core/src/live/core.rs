//! [`LiveCore`]: the composition of the sub-states (see the module docs of
//! [`crate::live`]); sessions, acknowledgements and status.
//!
//! Every method of [`LiveCore`] is here; each lends the sub-states a step
//! works on to its file: a batch's packets to `ingest.rs` ([`Ingest`]:
//! de-duplication, resolution, pending), drained packets to `emit.rs`
//! ([`Emit`]: sync points, sync-quality tracks, host packets).

use bytes::Bytes;
use tracesync_protocol::relay::v1::RelayClocks as WireClocks;

use super::emit::{DRAIN_MAX_BYTES, Emit, OUT_ENTRY};
use super::estimate::SyncEstimate;
use super::hold::{ReadingClock, Verdict};
use super::ingest::{BatchIn, Ingest};
use super::machines::{Machines, reason};
use super::output::Output;
use super::packet::OutPacket;
use super::recovered::Recovered;
use super::relays::Relays;
use super::staging::IngestScratch;
use super::streams::Streams;
use super::types::{
    CommitPoint, Connected, HelloInfo, LiveConfig, LiveStats, Refusal, RelaySlot, SessionError,
};
use crate::status::MachineStatus;

/// The live capture core (sans-IO). See the module docs of [`crate::live`].
#[derive(Debug)]
pub struct LiveCore {
    pub(super) config: LiveConfig,
    /// Latest host BOOTTIME passed in by any call.
    pub(super) latest_now: u64,
    /// How long the ingest loop has been reading (the stall grace's clock).
    pub(super) reading: ReadingClock,
    pub(super) machines: Machines,
    pub(super) relays: Relays,
    pub(super) streams: Streams,
    pub(super) output: Output,
    /// Allocates the sync-quality sequences of the machines.
    pub(super) quality_seqs: super::quality::QualitySequences,
    pub(super) scratch: IngestScratch,
}

impl LiveCore {
    /// A core resuming from the rolling writer's recovered state.
    pub fn new(config: LiveConfig, recovered: Recovered) -> Self {
        let mut machines = Machines::with_host(config.host_name.as_deref());
        for (raw_id, client) in recovered.sync_floors {
            machines.set_sync_floor(raw_id, client);
        }
        for s in &recovered.streams {
            machines.add(s.machine_raw_id);
        }
        for (raw_id, name) in &recovered.names {
            // The host's name is the configured one.
            if *raw_id != 0 {
                machines.name_recovered(*raw_id, name);
            }
        }
        let instances: Vec<(u64, u32)> = recovered
            .streams
            .iter()
            .map(|s| (s.relay_instance, s.machine_raw_id))
            .collect();
        let (mut streams, recovered_clocks) = Streams::recover(
            recovered.streams,
            recovered.sequences,
            recovered.next_out_seq,
            config.ids,
        );
        for (instance, raw_id) in instances {
            if let Some(name) = machines.name(raw_id) {
                streams.name_machine(instance, &name);
            }
        }
        let quality_seqs = super::quality::QualitySequences::new(config.ids);
        Self {
            config,
            latest_now: 0,
            reading: ReadingClock::default(),
            machines,
            relays: Relays::new(recovered_clocks),
            streams,
            output: Output::default(),
            quality_seqs,
            scratch: IngestScratch::default(),
        }
    }

    /// A relay's Hello. `now` is host BOOTTIME.
    pub fn connect(&mut self, hello: HelloInfo, now: u64) -> Result<Connected, Refusal> {
        self.latest_now = self.latest_now.max(now);
        let raw_id = hello.machine_raw_id;
        let instance = hello.relay_instance;
        if raw_id == 0 {
            return Err(Refusal::ReservedRawId);
        }
        self.machines
            .connect(raw_id, instance, &hello.machine_name, hello.ring, now)?;
        let streams = &self.streams;
        let session = self
            .relays
            .connect(&hello, now, &self.config, || streams.count_of(instance));
        if session.old_raw_id != raw_id {
            // The relay was renamed: its streams move to the new machine.
            self.machines.release(session.old_raw_id, instance);
            self.streams.move_to_machine(instance, raw_id);
        }
        // A ring relay's spool start moves as its ring lets batches go:
        // nothing of it was owed to the output.
        if session.lost > 0 && !hello.ring {
            self.machines
                .count(raw_id, reason::BATCHES_LOST, session.lost);
        }
        // The Hello's clocks are the session's first.
        let reading = self.reading.at(now);
        let grace = self.config.stall_after_ns();
        if let Some(relay) = self.relays.get_mut(instance)
            && relay.saw_clocks(hello.clocks, now, reading, grace) == Verdict::Refused
        {
            self.machines.count(raw_id, reason::CLOCKS_REFUSED, 1);
        }
        // Streams recovered before the name was known get it now.
        if let Some(name) = self.machines.name(raw_id) {
            self.streams.name_machine(instance, &name);
        }
        self.forget_idle_relays();
        Ok(Connected {
            slot: session.slot,
            acked_through_batch: session.acked_through_batch,
            replaced: session.replaced,
        })
    }

    /// The connection of `slot` ended. Its queued and pending packets stay
    /// (they are written when their time comes); it no longer holds the
    /// watermark.
    pub fn disconnect(&mut self, slot: RelaySlot) {
        if let Some((instance, raw_id)) = self.relays.disconnect(slot) {
            self.machines.release(raw_id, instance);
        }
    }

    /// Forgets the longest-disconnected relay instances with nothing in
    /// flight while more than `max_relay_records` are remembered.
    fn forget_idle_relays(&mut self) {
        while let Some((instance, raw_id)) = self.relays.forget_idle(self.config.max_relay_records)
        {
            let output = &mut self.output;
            self.streams
                .forget(instance, |id| output.forget_stream_if_empty(id));
            // Its machine row goes too once nothing refers to it, so relays
            // that keep coming with new raw ids cannot grow the table.
            let (relays, streams) = (&self.relays, &self.streams);
            self.machines.forget_unused(raw_id, || {
                relays.refer_to_machine(raw_id) || streams.refer_to_machine(raw_id)
            });
        }
    }

    /// A Heartbeat: the relay's clocks advance the watermark (unless
    /// refused, see the module docs, "Watermark").
    pub fn heartbeat(
        &mut self,
        slot: RelaySlot,
        clocks: Option<WireClocks>,
        now: u64,
    ) -> Result<(), SessionError> {
        let instance = self.relays.instance_of(slot)?;
        self.latest_now = self.latest_now.max(now);
        let reading = self.reading.at(now);
        let grace = self.config.stall_after_ns();
        if let Some(relay) = self.relays.get_mut(instance) {
            let raw_id = relay.raw_id();
            if relay.saw_clocks(clocks, now, reading, grace) == Verdict::Refused {
                self.machines.count(raw_id, reason::CLOCKS_REFUSED, 1);
            }
            self.machines.seen(raw_id, now);
        }
        Ok(())
    }

    /// The relay's sources as its Heartbeat reports them (shown in the
    /// status of its machine).
    pub fn sources(
        &mut self,
        slot: RelaySlot,
        sources: &[tracesync_protocol::relay::v1::SourceState],
    ) -> Result<(), SessionError> {
        let instance = self.relays.instance_of(slot)?;
        if let Some(relay) = self.relays.get_mut(instance) {
            self.machines.set_sources(relay.raw_id(), sources);
        }
        Ok(())
    }

    /// A ring relay's fill as its Heartbeat reports it (None: it reports
    /// none); its oldest time is mapped to host time in the status.
    pub fn ring_fill(
        &mut self,
        slot: RelaySlot,
        fill: Option<tracesync_protocol::relay::v1::RingFill>,
    ) -> Result<(), SessionError> {
        let instance = self.relays.instance_of(slot)?;
        if let Some(relay) = self.relays.get_mut(instance) {
            self.machines.set_ring_fill(relay.raw_id(), fill);
        }
        Ok(())
    }

    /// A relay's Batch: packets `first_index..` in relay order. `now` is
    /// host BOOTTIME. Never fails on packet contents (bad packets are
    /// counted and dropped); fails only for a session the core does not
    /// know or one past its unacknowledged-batch limit.
    pub fn batch(
        &mut self,
        slot: RelaySlot,
        seq: u64,
        first_index: u64,
        packets: Vec<Bytes>,
        clocks: Option<WireClocks>,
        now: u64,
    ) -> Result<(), SessionError> {
        let instance = self.relays.instance_of(slot)?;
        self.latest_now = self.latest_now.max(now);
        let reading = self.reading.at(now);
        let batch = BatchIn {
            seq,
            first_index,
            packets,
            clocks,
        };
        self.ingest().batch((slot, instance), batch, now, reading)
    }

    /// The sub-states ingest works on.
    fn ingest(&mut self) -> Ingest<'_> {
        Ingest {
            config: &self.config,
            machines: &mut self.machines,
            relays: &mut self.relays,
            streams: &mut self.streams,
            output: &mut self.output,
            scratch: &mut self.scratch,
            latest_now: self.latest_now,
        }
    }

    /// A new clock-sync estimate for the relay on `slot`: packets waiting
    /// for it are resolved.
    pub fn sync(&mut self, slot: RelaySlot, estimate: SyncEstimate) -> Result<(), SessionError> {
        let instance = self.relays.instance_of(slot)?;
        let grace = self.config.stall_after_ns();
        if let Some(relay) = self.relays.get_mut(instance) {
            if relay.set_estimate(estimate, grace) == Verdict::Refused {
                self.machines
                    .count(relay.raw_id(), reason::CLOCKS_REFUSED, 1);
            }
            self.machines.set_estimate(relay.raw_id(), estimate);
            self.ingest().retry_pending(instance);
        }
        Ok(())
    }

    /// Packets with a time <= this may be written: the slowest connected,
    /// synced relay's latest accepted clock on the host timeline, and host
    /// now, minus the merge window. A relay whose accepted clock has not
    /// kept up with the reading clock for [`LiveConfig::stall_after_ns`]
    /// holds nothing until it does again, and refused clocks never count
    /// (see the module docs, "Watermark"). A relay connected less than
    /// `connect_grace_ns` ago without an estimate yet holds it at its
    /// connect time (its first packets wait for that estimate). Other
    /// unsynced relays and disconnected ones hold nothing: their packets
    /// are written late if they turn out older.
    ///
    /// [`LiveConfig::stall_after_ns`]: super::LiveConfig::stall_after_ns
    pub fn watermark(&self, now: u64) -> i64 {
        let host_now = i64::try_from(now).unwrap_or(i64::MAX);
        let reading = self.reading.at(now);
        let slowest = self
            .relays
            .slowest(now, reading, &self.config)
            .map_or(host_now, |s| s.min(host_now));
        let window = i64::try_from(self.config.merge_window_ns).unwrap_or(i64::MAX);
        slowest.saturating_sub(window)
    }

    /// Relay connections that should stop reading for now, so the relay's
    /// spool holds the data instead of the daemon's memory:
    /// - a relay with no sync estimate yet whose pending queue is full (its
    ///   estimate comes from the prober, not from the stream);
    /// - while the ordering queue holds more than half its bound, a relay
    ///   whose latest accepted clock is more than a merge window ahead of
    ///   the watermark: reading the relays that hold the watermark back
    ///   first keeps the queue short and the output in order instead of
    ///   forcing packets out early (`forced_by_queue_limit`, written late).
    ///
    /// The relays holding the watermark are never held back, so it always
    /// advances; a relay that stalled holds no more, so it holds nobody
    /// back. A relay's stall grace does not run while it is held back, and
    /// starts again when it is read again (call this before each
    /// [`drain`](Self::drain), as the ingest loop does).
    #[must_use = "the connections to stop reading"]
    pub fn held_back(&mut self, now: u64) -> Vec<RelaySlot> {
        let crowded = self.output.queued_bytes() > self.config.queue_max_bytes / 2;
        let watermark = self.watermark(now);
        let window = i64::try_from(self.config.merge_window_ns).unwrap_or(i64::MAX);
        let ahead_from = watermark.saturating_add(window.saturating_mul(2));
        let reading = self.reading.at(now);
        self.relays
            .held_back(crowded, ahead_from, &self.config, reading)
    }

    /// Appends to `out`, in time order, every packet the watermark has
    /// passed, with the sync points they need. `now` is host BOOTTIME.
    ///
    /// One call appends about [`DRAIN_MAX_BYTES`] at most (the rest stays
    /// queued): call again until it appends nothing, writing in between,
    /// so the drained-but-unwritten packets stay bounded too.
    pub fn drain(&mut self, now: u64, out: &mut Vec<OutPacket>) {
        self.latest_now = self.latest_now.max(now);
        let reading = self.reading.drained(now);
        let machines = &mut self.machines;
        self.relays
            .check_stalls(reading, self.config.stall_after_ns(), |raw_id| {
                machines.count(raw_id, reason::CLOCK_STALLS, 1);
            });
        let watermark = self.watermark(now);
        let queue_max_bytes = self.config.queue_max_bytes;
        let mut emit = self.emit();
        let stop_at = emit.output.bytes_out().saturating_add(DRAIN_MAX_BYTES);
        let first = out.len();
        while emit.output.bytes_out() + (out.len() - first) as u64 * OUT_ENTRY < stop_at
            && let Some(q) = emit.output.pop_through(watermark)
        {
            emit.packet(q, out);
        }
        while let Some(q) = emit.output.pop_over(queue_max_bytes) {
            emit.packet(q, out);
        }
    }

    /// Appends everything queued, in time order (shutdown). Packets still
    /// pending stay unacknowledged: their relays resend them next time.
    pub fn flush_all(&mut self, out: &mut Vec<OutPacket>) {
        let mut emit = self.emit();
        while let Some(q) = emit.output.pop() {
            emit.packet(q, out);
        }
    }

    /// The host's own packets: its SystemInfo once, and a ClockSnapshot
    /// every `host_snapshot_interval_ns`. `clocks` are the host's clocks
    /// read together ((clock id, ns), BOOTTIME among them); `now` is host
    /// BOOTTIME. Call it often (every tick of the ingest loop).
    pub fn host_tick(&mut self, now: u64, clocks: &[(u32, u64)]) {
        self.latest_now = self.latest_now.max(now);
        self.emit().host_tick(now, clocks);
    }

    /// The sub-states the output works on.
    fn emit(&mut self) -> Emit<'_> {
        Emit {
            config: &self.config,
            machines: &mut self.machines,
            relays: &mut self.relays,
            streams: &self.streams,
            output: &mut self.output,
            quality_seqs: &mut self.quality_seqs,
        }
    }

    /// Marks everything drained so far; pass it to [`Self::committed_through`]
    /// once the writer has committed what was drained before this call.
    pub fn commit_point(&mut self) -> CommitPoint {
        self.relays.commit_point()
    }

    /// Everything drained before `point` is durable: the acks that moved,
    /// for connected relays.
    #[must_use = "the acks to send"]
    pub fn committed_through(&mut self, point: CommitPoint) -> Vec<(RelaySlot, u64)> {
        self.relays.committed_through(point)
    }

    /// Everything drained so far is durable (the writer committed after the
    /// last drain): the acks that moved, for connected relays.
    #[must_use = "the acks to send"]
    pub fn committed(&mut self) -> Vec<(RelaySlot, u64)> {
        self.relays.committed()
    }

    /// The latest clock estimate of the relay connected on `slot` (a
    /// trigger's window is mapped onto its clock with it).
    pub fn estimate_of(&self, slot: RelaySlot) -> Option<SyncEstimate> {
        let instance = self.relays.instance_of(slot).ok()?;
        self.relays.get(instance)?.estimate()
    }

    /// Per machine (host first): traffic, counters by reason, pending,
    /// clock mapping. `now` is host BOOTTIME, `now_unix_ms` the wall clock
    /// at the same moment (for last seen).
    pub fn status(&self, now: u64, now_unix_ms: u64) -> Vec<MachineStatus> {
        self.machines.status(now, now_unix_ms, |raw_id| {
            self.relays.pending_of_machine(raw_id)
        })
    }

    pub fn stats(&self) -> LiveStats {
        self.output.stats()
    }

    /// Packets waiting for the watermark (all relays and the host).
    pub fn queued(&self) -> usize {
        self.output.queued()
    }
}
