//! [`LiveCore`]: the composition of the sub-states (see the module docs of
//! [`crate::live`]); sessions, acknowledgements and status.
//!
//! Ingest (batches, resolution, pending) is in `ingest.rs`, output
//! (watermark, drain, sync points, host packets) in `emit.rs`.

use tracesync_protocol::relay::v1::RelayClocks as WireClocks;

use super::estimate::SyncEstimate;
use super::hold::{ReadingClock, Verdict};
use super::machines::{Machines, reason};
use super::output::Output;
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
        );
        for (instance, raw_id) in instances {
            if let Some(name) = machines.name(raw_id) {
                streams.name_machine(instance, &name);
            }
        }
        Self {
            config,
            latest_now: 0,
            reading: ReadingClock::default(),
            machines,
            relays: Relays::new(recovered_clocks),
            streams,
            output: Output::default(),
            quality_seqs: Default::default(),
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
            .connect(raw_id, instance, &hello.machine_name, now)?;
        let streams = &self.streams;
        let session = self
            .relays
            .connect(&hello, now, &self.config, || streams.count_of(instance));
        if session.old_raw_id != raw_id {
            // The relay was renamed: its streams move to the new machine.
            self.machines.release(session.old_raw_id, instance);
            self.streams.move_to_machine(instance, raw_id);
        }
        if session.lost > 0 {
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
            self.retry_pending(instance);
        }
        Ok(())
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
