//! The real live core, rolling writer, prober registry and control hub
//! behind the server's traits ([`super::engine`]): the only file that knows
//! both sides.

use std::io;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use tracesync_common::clock::{Clock, SystemClock};
use tracesync_protocol::relay::v1;
use tracesync_protocol::trigger::RelayMode;

use super::engine::{Admitted, Core, Fanout, ProbeRegistry, Slot, Writer};
use crate::control::ControlHub;
use crate::rolling::RollingWriter;
use crate::sync::ProbeSessions;
use tracesync_core::live::{self, LiveCore, OutPacket};
use tracesync_core::status::{MachineStatus, OutputStatus};
use tracesync_core::sync::{Registration, SyncUpdate};

impl Core for LiveCore {
    type SyncUpdate = SyncUpdate;
    type CommitPoint = live::CommitPoint;
    type Refusal = live::Refusal;
    type SessionError = live::SessionError;

    fn connect(&mut self, hello: &v1::Hello, now_ns: u64) -> Result<Admitted, live::Refusal> {
        let info = live::HelloInfo {
            relay_instance: hello.relay_instance_id,
            boot_id: hello.boot_id.clone(),
            machine_name: hello.machine_name.clone(),
            machine_raw_id: hello.machine_raw_id,
            oldest_unacked_batch: hello.oldest_unacked_batch,
            clocks: hello.clocks,
            ring: RelayMode::from_hello(&hello.mode) == Some(RelayMode::Ring),
        };
        let connected = LiveCore::connect(self, info, now_ns)?;
        Ok(Admitted {
            slot: connected.slot,
            acked_through_batch: connected.acked_through_batch,
            replaced: connected.replaced,
        })
    }

    fn batch(
        &mut self,
        slot: Slot,
        batch: v1::Batch,
        now_ns: u64,
    ) -> Result<(), live::SessionError> {
        LiveCore::batch(
            self,
            slot,
            batch.seq,
            batch.first_packet_index,
            batch.packets,
            batch.clocks,
            now_ns,
        )
    }

    fn heartbeat(
        &mut self,
        slot: Slot,
        heartbeat: &v1::Heartbeat,
        now_ns: u64,
    ) -> Result<(), live::SessionError> {
        LiveCore::heartbeat(self, slot, heartbeat.clocks, now_ns)?;
        LiveCore::ring_fill(self, slot, heartbeat.ring)?;
        LiveCore::sources(self, slot, &heartbeat.sources)
    }

    fn sync(&mut self, update: &SyncUpdate) {
        // An update for a slot that has gone since is stale: nothing to do.
        let _ = LiveCore::sync(self, update.slot, update.estimate);
        for s in &update.samples {
            let rtt =
                s.t4.saturating_sub(s.t1)
                    .saturating_sub(s.t3.saturating_sub(s.t2));
            crate::metrics::record_probe_rtt(rtt);
        }
    }

    fn disconnect(&mut self, slot: Slot) {
        LiveCore::disconnect(self, slot);
    }

    fn host_tick(&mut self, now_ns: u64) {
        let clocks = SystemClock::default().now().snapshot();
        LiveCore::host_tick(self, now_ns, &clocks);
    }

    fn drain(&mut self, now_ns: u64, out: &mut Vec<OutPacket>) {
        LiveCore::drain(self, now_ns, out);
    }

    fn flush_all(&mut self, out: &mut Vec<OutPacket>) {
        LiveCore::flush_all(self, out);
    }

    fn held_back(&mut self, now_ns: u64) -> Vec<Slot> {
        LiveCore::held_back(self, now_ns)
    }

    fn commit_point(&mut self) -> live::CommitPoint {
        LiveCore::commit_point(self)
    }

    fn committed_through(&mut self, point: live::CommitPoint) -> Vec<(Slot, u64)> {
        LiveCore::committed_through(self, point)
    }

    fn status(&self) -> Vec<MachineStatus> {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        LiveCore::status(self, tracesync_common::clock::boottime_ns(), unix_ms)
    }

    fn estimate(&self, slot: Slot) -> Option<tracesync_core::sync::SyncEstimate> {
        LiveCore::estimate_of(self, slot)
    }

    fn record_metrics(&self) {
        crate::metrics::record_live(&LiveCore::stats(self), LiveCore::queued(self));
    }
}

impl Writer<SyncUpdate> for RollingWriter {
    fn write(&mut self, packet: &OutPacket, now: SystemTime) -> io::Result<()> {
        RollingWriter::write(self, packet, now)
    }

    fn commit(&mut self) -> io::Result<()> {
        RollingWriter::commit(self)
    }

    fn request_commit(&mut self) -> io::Result<Option<u64>> {
        RollingWriter::request_commit(self)
    }

    fn poll_commits(&mut self) -> io::Result<Option<u64>> {
        RollingWriter::poll_commits(self)
    }

    fn wait_commits(&mut self) -> io::Result<Option<u64>> {
        RollingWriter::wait_commits(self)
    }

    fn set_commit_waker(&mut self, waker: super::engine::CommitWaker) {
        RollingWriter::set_commit_waker(self, waker);
    }

    fn write_sync_samples(&mut self, update: &SyncUpdate) -> io::Result<()> {
        if update.samples.is_empty() {
            return Ok(());
        }
        RollingWriter::write_sync_samples(self, &update.samples)
    }

    fn current_path(&self) -> Option<PathBuf> {
        Some(RollingWriter::current_path(self).to_path_buf())
    }

    fn preamble(&self) -> Vec<(u32, bytes::Bytes)> {
        RollingWriter::preamble(self)
    }

    fn add_index_entry(&mut self, entry: tracesync_capture::index::IndexEntry) {
        RollingWriter::add_index_entry(self, entry);
    }

    fn set_limits(&mut self, limits: &crate::reload::OutputLimits) {
        RollingWriter::set_limits(
            self,
            limits.max_file_bytes,
            limits.max_file_age,
            limits.retain_bytes,
            limits.retain_age,
        );
    }

    fn close(self) -> io::Result<()> {
        RollingWriter::close(self)
    }

    fn record_metrics(&self) {
        let (bytes, seq) = RollingWriter::current_file(self);
        crate::metrics::record_output(&RollingWriter::stats(self), bytes, seq);
    }

    fn output_status(&self, status: OutputStatus) -> OutputStatus {
        let stats = RollingWriter::stats(self);
        OutputStatus {
            vanished: stats.vanished,
            symlinks_refused: stats.symlinks_refused,
            ..status
        }
    }
}

impl ProbeRegistry for ProbeSessions {
    fn register(&self, session_id: u64, slot: Slot, machine_raw_id: u32, probe_key: [u8; 32]) {
        let registration = Registration {
            slot,
            machine_raw_id,
            probe_key,
        };
        ProbeSessions::register(self, session_id, registration);
    }

    fn unregister(&self, session_id: u64) {
        ProbeSessions::unregister(self, session_id);
    }
}

impl Fanout for ControlHub {
    fn publish(&self, packet: &OutPacket) {
        // A perfetto tail gets its preamble from the writer
        // (`ControlHub::subscribe_with_preamble`); text and jsonl tails may
        // start with the history.
        self.publish_drain(std::slice::from_ref(packet));
    }

    fn publish_all(&self, packets: &[OutPacket]) {
        // History for `tail -n` / `--since`, then the subscribers.
        self.publish_drain(packets);
    }

    fn subscribers(&self) -> usize {
        self.packets.receiver_count()
    }
}
