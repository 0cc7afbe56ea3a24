//! One snapshot's packets, sans-IO: every ring relay's window is fed,
//! relay after relay, through a live core of the snapshot's own (the
//! relay's clock estimate given, its window's preamble first), so each
//! packet is resolved, stamped, given its sync point and sync-quality
//! values exactly as a live packet is; the stream relays' and the host's
//! packets come from the daemon's own output, already resolved, stamped
//! and placed ([`Assembly::output_packet`], read back with
//! `crate::readback`); what comes out is cut to the trigger's host window
//! [T - before, T + after] and framed as a trace.
//!
//! Invariants:
//! - A data packet is written only if its host time is inside the window.
//! - Before a machine's first packet inside the window comes the state in
//!   force for it (the rolling writer's preamble rule, `crate::preamble`):
//!   its SystemInfo, ClockSnapshots, sync point, incremental state and
//!   sync-quality values, so the file decodes alone; the host's SystemInfo
//!   and ClockSnapshot are written once, before the first machine's.
//! - Memory: one relay's parts in flight at a time (the caller feeds them
//!   from its staging file) plus the core's and the preamble's own bounds;
//!   [`Assembly::take_bytes`] hands the framed bytes out as they are made.

use std::collections::BTreeMap;

use bytes::Bytes;
use tracesync_protocol::relay::v1::RelayClocks;
use tracesync_protocol::wire;

use super::Fired;
use crate::live::{HelloInfo, LiveConfig, LiveCore, OutPacket, Recovered, Role};
use crate::preamble::{PreambleLimits, PreambleState};
use crate::sync::SyncEstimate;

/// What a snapshot holds, for its index line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssemblyStats {
    /// Packets written, the replayed state included.
    pub packets: u64,
    pub bytes: u64,
    /// Of them, replayed state (SystemInfo, snapshots, sync points, ...).
    pub preamble_packets: u64,
    pub preamble_bytes: u64,
    /// Host times of the first and last data packet written.
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// The machines written (raw id, name).
    pub machines: BTreeMap<u32, Option<String>>,
    /// Data packets of the relays' windows outside the host window (the
    /// relays ship a superset: the bound's margin and their source lag).
    pub cut: u64,
}

/// The relay being fed.
struct Current {
    slot: u32,
    next_seq: u64,
    next_index: u64,
}

pub struct Assembly {
    core: LiveCore,
    preamble: PreambleState,
    from: i64,
    to: i64,
    now: u64,
    host_written: bool,
    /// Machines whose state in force is written (before their first
    /// packet in the window).
    started: std::collections::BTreeSet<u32>,
    current: Option<Current>,
    out: Vec<u8>,
    drained: Vec<OutPacket>,
    stats: AssemblyStats,
}

impl Assembly {
    /// A snapshot of `fired`, assembled at host BOOTTIME `now` (after the
    /// window's end); `host_clocks` are the host's clocks read together,
    /// for the host's own ClockSnapshot.
    pub fn new(config: LiveConfig, fired: &Fired, now: u64, host_clocks: &[(u32, u64)]) -> Self {
        let (from, to) = fired.host_window();
        let mut core = LiveCore::new(config, Recovered::default());
        core.host_tick(now, host_clocks);
        // The host's SystemInfo and ClockSnapshot are known before any
        // machine's first packet, so the file opens with the host: a reader
        // that meets a remote machine first (Perfetto, `merge`) would take
        // it for the file's host.
        let mut drained = Vec::new();
        core.flush_all(&mut drained);
        let _ = core.committed();
        let mut preamble = PreambleState::new(PreambleLimits::default());
        for p in &drained {
            preamble.observe_packet(p.role, p.machine_raw_id, p.seq, &p.bytes);
        }
        drained.clear();
        Self {
            core,
            preamble,
            from: i64::try_from(from).unwrap_or(i64::MAX),
            to: i64::try_from(to).unwrap_or(i64::MAX),
            now,
            host_written: false,
            started: std::collections::BTreeSet::new(),
            current: None,
            out: Vec::new(),
            drained,
            stats: AssemblyStats::default(),
        }
    }

    /// Starts the window of the relay `hello` names, mapped with
    /// `estimate`; its `preamble` (whole packets from before the window)
    /// goes in first. Ends the previous relay's, if any.
    pub fn begin(
        &mut self,
        hello: HelloInfo,
        estimate: SyncEstimate,
        preamble: Vec<Bytes>,
    ) -> Result<(), String> {
        self.end();
        let name = hello.machine_name.clone();
        let connected = self
            .core
            .connect(hello, self.now)
            .map_err(|e| format!("relay {name}: {e}"))?;
        self.core
            .sync(connected.slot, estimate)
            .map_err(|e| e.to_string())?;
        self.current = Some(Current {
            slot: connected.slot,
            next_seq: 1,
            next_index: 0,
        });
        self.part(preamble, None);
        Ok(())
    }

    /// The next packets of the current relay's window, in its order.
    pub fn part(&mut self, packets: Vec<Bytes>, clocks: Option<RelayClocks>) {
        let Some(current) = &mut self.current else {
            return;
        };
        let n = packets.len() as u64;
        let (slot, seq, index) = (current.slot, current.next_seq, current.next_index);
        current.next_seq += 1;
        current.next_index += n;
        if n > 0 {
            // A session error cannot come from a fresh slot of our own; if
            // it did, the part is left out (its packets are counted cut).
            if self
                .core
                .batch(slot, seq, index, packets, clocks, self.now)
                .is_err()
            {
                self.stats.cut += n;
            }
        }
        let mut drained = std::mem::take(&mut self.drained);
        self.core.drain(self.now, &mut drained);
        // Nothing is waiting on a commit here: every batch is done.
        let _ = self.core.committed();
        self.place(&mut drained);
        self.drained = drained;
    }

    /// A packet of the daemon's output (a stream relay's or the host's),
    /// read back in the output's order with its host time: placed as a
    /// relay's packet is, cut to the window. Ends the current relay's
    /// window, if any.
    pub fn output_packet(&mut self, packet: OutPacket) {
        self.end();
        let mut drained = std::mem::take(&mut self.drained);
        drained.push(packet);
        self.place(&mut drained);
        self.drained = drained;
    }

    /// Ends the current relay's window: what the core still holds comes
    /// out.
    pub fn end(&mut self) {
        let Some(current) = &self.current else {
            return;
        };
        let slot = current.slot;
        let mut drained = std::mem::take(&mut self.drained);
        self.core.flush_all(&mut drained);
        let _ = self.core.committed();
        self.place(&mut drained);
        self.drained = drained;
        self.core.disconnect(slot);
        self.current = None;
    }

    /// The framed bytes made since the last call (a trace's `packet`
    /// records), to append to the file.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Ends the last relay's window; the snapshot's figures.
    pub fn finish(mut self) -> (AssemblyStats, Vec<u8>) {
        self.end();
        (self.stats, self.out)
    }

    /// Cuts drained packets to the window, with the state in force before
    /// each machine's first.
    fn place(&mut self, drained: &mut Vec<OutPacket>) {
        for packet in drained.drain(..) {
            let inside = packet.ts >= self.from && packet.ts <= self.to;
            let kept_state = matches!(packet.role, Role::SystemInfo | Role::ClockSnapshot);
            if !inside {
                if packet.ts < self.from || kept_state {
                    self.preamble.observe_packet(
                        packet.role,
                        packet.machine_raw_id,
                        packet.seq,
                        &packet.bytes,
                    );
                }
                if packet.role == Role::Data && packet.origin.is_some() {
                    self.stats.cut += 1;
                }
                continue;
            }
            self.start_machine(packet.machine_raw_id);
            if packet.role == Role::Data || packet.origin.is_some() {
                self.stats.first_ts.get_or_insert(packet.ts);
                self.stats.last_ts =
                    Some(self.stats.last_ts.map_or(packet.ts, |t| t.max(packet.ts)));
            }
            self.stats
                .machines
                .entry(packet.machine_raw_id)
                .or_insert_with(|| packet.machine_name.as_deref().map(str::to_owned));
            let before = self.out.len();
            packet.bytes.write_framed(&mut self.out);
            self.stats.packets += 1;
            self.stats.bytes += (self.out.len() - before) as u64;
            self.preamble.observe_packet(
                packet.role,
                packet.machine_raw_id,
                packet.seq,
                &packet.bytes,
            );
        }
    }

    /// Before a machine's first packet in the window: the host's state
    /// (once) and the machine's.
    fn start_machine(&mut self, machine: u32) {
        let relay_starts = machine != 0 && self.started.insert(machine);
        let host_starts = !self.host_written;
        if !relay_starts && !host_starts {
            return;
        }
        if host_starts {
            self.stats.machines.entry(0).or_insert(None);
        }
        self.host_written = true;
        for (m, bytes) in self.preamble.packets_by_machine() {
            if (m == 0 && host_starts) || (m == machine && relay_starts && m != 0) {
                let before = self.out.len();
                wire::put_len_field(&mut self.out, 1, &bytes);
                self.stats.packets += 1;
                self.stats.preamble_packets += 1;
                let n = (self.out.len() - before) as u64;
                self.stats.bytes += n;
                self.stats.preamble_bytes += n;
            }
        }
    }
}
