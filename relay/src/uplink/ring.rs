//! Ring mode on the uplink: feeds the sans-IO [`Ring`] and its
//! [`Preamble`] the batches the spool cuts, executes the ring's actions on
//! the spool (release) and the window files (collect), takes the daemon's
//! Triggers, and ships the windows on disk in Window frames while the
//! connection has room. A WindowAck deletes a window's file.
//!
//! Invariants: a window is shipped only to a daemon whose Welcome said
//! `takes_windows`; a window not acknowledged is shipped again, from its
//! first part, on the next connection; parts stay under the frame limit.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracesync_protocol::relay::{MAX_BATCH_PACKETS, v1};

use crate::ring::preamble::Preamble;
use crate::ring::{Ring, RingAction, RingConfig, TriggerOutcome, TriggerSpec};
use crate::spool::ring_times::RingTimes;
use crate::spool::{Spool, SpoolError, windows};

use super::connection::{Connection, OutFrame};

/// Packet bytes of one Window part (the first also carries the preamble,
/// at most [`PREAMBLE_BYTES`]): both together stay well under a frame.
const PART_BYTES: usize = 1 << 20;
/// State kept per ring for the windows' preambles.
const PREAMBLE_BYTES: usize = 2 << 20;

/// A window being shipped on the current connection.
struct Shipping {
    window: v1::Window,
    next_part: u32,
    next_packet: usize,
}

pub(super) struct RingDriver {
    ring: Ring,
    preamble: Preamble,
    /// When each held batch was cut, kept on disk for a restart.
    times: RingTimes,
    spool_dir: PathBuf,
    /// The newest spool batch the ring has been told of.
    fed_through: u64,
    /// Trigger ids of the windows on disk, not yet acknowledged.
    on_disk: BTreeSet<u64>,
    /// Windows shipped whole on this connection (awaiting WindowAck).
    shipped: BTreeSet<u64>,
    shipping: Option<Shipping>,
    daemon_takes_windows: bool,
}

impl RingDriver {
    /// A ring over what the spool holds (read once, for the preamble),
    /// with the times and the windows and triggers an earlier run on this
    /// boot (`boot_id`) left on disk.
    pub(super) fn open(
        config: RingConfig,
        spool: &mut Spool,
        boot_id: &str,
        now_ns: u64,
    ) -> Result<Self, SpoolError> {
        let spool_dir = spool.dir().to_path_buf();
        let (windows, issues) = windows::read_windows(&spool_dir)?;
        for issue in issues {
            tracing::warn!("{issue}");
        }
        let on_disk: BTreeSet<u64> = windows.iter().map(|w| w.trigger_id).collect();
        if !on_disk.is_empty() {
            tracing::info!(
                "{} trigger window(s) from an earlier run wait for the daemon",
                on_disk.len()
            );
        }
        let held = spool.held_batches();
        let (times, kept) = RingTimes::open(&spool_dir, boot_id)?;
        // A batch whose time was not kept takes the one before it (or the
        // first kept, or now): never later than a batch behind it.
        let mut last_known = kept.values().next().copied().unwrap_or(now_ns);
        let restored: Vec<(u64, u64, u64, u64)> = held
            .iter()
            .map(|&(seq, bytes, packets)| {
                last_known = kept.get(&seq).copied().unwrap_or(last_known);
                (seq, bytes, packets, last_known)
            })
            .collect();
        let mut preamble = Preamble::new(PREAMBLE_BYTES);
        for &(seq, _, _) in &held {
            if let Some(batch) = spool.batch(seq) {
                for packet in batch.packets() {
                    preamble.observe(seq, &packet);
                }
            }
        }
        let fed_through = spool.last_seq();
        let mut driver = Self {
            ring: Ring::new(config, restored, on_disk.len()),
            preamble,
            times,
            spool_dir,
            fed_through,
            on_disk,
            shipped: BTreeSet::new(),
            shipping: None,
            daemon_takes_windows: false,
        };
        driver.retake_pending()?;
        Ok(driver)
    }

    /// Takes again the triggers an earlier run had taken and not
    /// collected (a window on disk already wins).
    fn retake_pending(&mut self) -> Result<(), SpoolError> {
        let (pending, issues) = windows::read_pending(&self.spool_dir)?;
        for issue in issues {
            tracing::warn!("{issue}");
        }
        for trigger in pending {
            if self.on_disk.contains(&trigger.id) {
                windows::delete_pending(&self.spool_dir, trigger.id)?;
                continue;
            }
            tracing::info!(
                "trigger {:?} (id {:016x}) from an earlier run: its window is taken again",
                trigger.name,
                trigger.id
            );
            let _ = self.ring.trigger(spec_of(&trigger));
        }
        Ok(())
    }

    /// Tells the ring of the batches the spool cut since the last call.
    pub(super) fn feed(&mut self, spool: &mut Spool, now_ns: u64) {
        let last = spool.last_seq();
        while self.fed_through < last {
            self.fed_through += 1;
            let seq = self.fed_through;
            if let Some(batch) = spool.batch(seq) {
                for packet in batch.packets() {
                    self.preamble.observe(seq, &packet);
                }
                self.ring.cut(
                    seq,
                    batch.bytes as u64,
                    u64::from(batch.packet_count),
                    now_ns,
                );
                if let Err(error) = self.times.note(seq, now_ns) {
                    tracing::error!("{error}");
                }
            }
        }
    }

    /// Executes what the ring wants now.
    pub(super) fn drive(&mut self, spool: &mut Spool, now_ns: u64) -> Result<(), SpoolError> {
        while let Some(action) = self.ring.poll(now_ns) {
            match action {
                RingAction::Release(through) => {
                    self.preamble.forget_before(through.saturating_add(1));
                    spool.ack(through)?;
                    if self.times.wants_compaction(self.ring.held_batches()) {
                        self.times.compact(&self.ring.held_times())?;
                    }
                }
                RingAction::Collect {
                    trigger,
                    first,
                    last,
                    lost_packets,
                } => {
                    let id = trigger.id;
                    let written = self.collect(spool, trigger, first, last, lost_packets);
                    if let Err(error) = &written {
                        tracing::error!("{error}; trigger {id:016x}'s window is given up");
                    }
                    self.ring.collected(id, written.is_ok());
                    windows::delete_pending(&self.spool_dir, id)?;
                }
            }
        }
        Ok(())
    }

    /// When the ring next has something to do, on BOOTTIME.
    pub(super) fn deadline_ns(&self) -> Option<u64> {
        self.ring.deadline_ns()
    }

    /// The daemon's Welcome: whether it takes windows. A new connection
    /// ships every window on disk again from its start.
    pub(super) fn welcomed(&mut self, takes_windows: bool, host: &str) {
        self.daemon_takes_windows = takes_windows;
        self.shipped.clear();
        self.shipping = None;
        if !takes_windows {
            tracing::warn!(
                "daemon {host} takes no trigger windows (it predates ring mode): this relay \
                 keeps its ring and {} window(s) but ships nothing; upgrade the daemon or run \
                 with --mode stream",
                self.on_disk.len()
            );
        }
    }

    pub(super) fn connection_lost(&mut self) {
        self.daemon_takes_windows = false;
        self.shipped.clear();
        self.shipping = None;
    }

    pub(super) fn trigger(&mut self, trigger: v1::Trigger) {
        if let Err(reason) = tracesync_protocol::trigger::check_trigger_name(&trigger.name) {
            tracing::warn!("trigger id {:016x} ignored: {reason}", trigger.id);
            return;
        }
        let name = trigger.name.clone();
        match self.ring.trigger(spec_of(&trigger)) {
            TriggerOutcome::Taken => {
                tracing::info!(
                    "trigger {name:?} (id {:016x}): window taken, shipped once whole",
                    trigger.id
                );
                // Kept so a restart before the window is whole takes it again.
                if let Err(error) = windows::write_pending(&self.spool_dir, &trigger) {
                    tracing::error!("{error}; a restart before its window is whole loses it");
                }
            }
            TriggerOutcome::Again => {}
            TriggerOutcome::Refused(reason) => tracing::warn!("{reason}"),
        }
    }

    pub(super) fn window_acked(&mut self, trigger_id: u64) -> Result<(), SpoolError> {
        if self.on_disk.remove(&trigger_id) {
            self.ring.acknowledged();
            tracing::info!("trigger {trigger_id:016x}: the daemon has the window");
        }
        self.shipped.remove(&trigger_id);
        windows::delete_window(&self.spool_dir, trigger_id).map(|_| ())
    }

    /// Sends Window parts while the connection has room.
    pub(super) fn ship(&mut self, connection: Option<&Connection>, clocks: &v1::RelayClocks) {
        let Some(connection) = connection.filter(|_| self.daemon_takes_windows) else {
            return;
        };
        while !connection.is_full() {
            if self.shipping.is_none() && !self.start_next() {
                return;
            }
            let Some(shipping) = self.shipping.as_mut() else {
                return;
            };
            let part = next_part(shipping, clocks);
            let last = part.last;
            let id = part.trigger_id;
            let frame = OutFrame::encode(&v1::Frame {
                body: Some(v1::frame::Body::Window(part)),
            });
            match frame {
                Ok(frame) => {
                    if !connection.send(frame) {
                        // Not queued (the connection is going): the
                        // window starts over, from its first part.
                        self.shipping = None;
                        return;
                    }
                }
                Err(error) => {
                    tracing::error!("trigger {id:016x}: a window part cannot be sent: {error}");
                    self.shipping = None;
                    self.shipped.insert(id);
                    return;
                }
            }
            if last {
                self.shipping = None;
                self.shipped.insert(id);
            }
        }
    }

    pub(super) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// How full the ring is, for the Heartbeat.
    pub(super) fn fill(&self) -> v1::RingFill {
        let ring = &self.ring;
        v1::RingFill {
            bytes_held: ring.held_bytes(),
            packets_held: ring.held_packets(),
            bytes_limit: ring.config().bytes,
            seconds_limit: ring.config().seconds.as_secs(),
            oldest_relay_ns: ring.oldest_cut_ns().unwrap_or(0),
            windows_owed: u32::try_from(ring.windows_owed()).unwrap_or(u32::MAX),
        }
    }

    /// Loads the oldest window on disk not yet shipped on this connection.
    fn start_next(&mut self) -> bool {
        let Some(&id) = self.on_disk.iter().find(|id| !self.shipped.contains(id)) else {
            return false;
        };
        let loaded = windows::read_windows(&self.spool_dir)
            .map(|(windows, _)| windows.into_iter().find(|w| w.trigger_id == id));
        match loaded {
            Ok(Some(window)) => {
                self.shipping = Some(Shipping {
                    window,
                    next_part: 0,
                    next_packet: 0,
                });
                true
            }
            Ok(None) => {
                // Gone or damaged (reported by the read): nothing to ship.
                self.on_disk.remove(&id);
                self.ring.acknowledged();
                false
            }
            Err(error) => {
                tracing::error!("{error}");
                self.shipped.insert(id);
                false
            }
        }
    }

    fn collect(
        &mut self,
        spool: &mut Spool,
        trigger: TriggerSpec,
        first: u64,
        last: u64,
        lost_packets: u64,
    ) -> Result<(), SpoolError> {
        let mut packets: Vec<Bytes> = Vec::new();
        for seq in first..=last {
            if let Some(batch) = spool.batch(seq) {
                packets.extend(
                    batch
                        .packets()
                        .into_iter()
                        .map(|p| Bytes::copy_from_slice(&p)),
                );
            }
        }
        let preamble = self.preamble.before(first);
        let id = trigger.id;
        let window = v1::Window {
            trigger_id: id,
            part: 0,
            last: true,
            packets,
            clocks: None,
            packets_dropped: lost_packets,
            trigger: Some(v1::Trigger {
                id,
                name: trigger.name.clone(),
                host_time_ns: trigger.host_time_ns,
                before_ns: trigger.before_ns,
                after_ns: trigger.after_ns,
                relay_from_ns: trigger.relay_from_ns,
                relay_to_ns: trigger.relay_to_ns,
            }),
            preamble,
        };
        windows::write_window(&self.spool_dir, &window)?;
        tracing::info!(
            "trigger {:?} (id {id:016x}): window collected: {} packets, {} of state before it{}",
            trigger.name,
            window.packets.len(),
            window.preamble.len(),
            if lost_packets > 0 {
                format!("; up to {lost_packets} packets had left the ring before the trigger")
            } else {
                String::new()
            }
        );
        self.on_disk.insert(id);
        Ok(())
    }
}

impl super::Uplink {
    /// Ring mode's turn of the loop: new batches in, the ring's actions
    /// out, windows onto the connection.
    pub(super) fn drive_ring(&mut self) {
        let clocks = self.clocks();
        let Some(ring) = &mut self.ring else {
            return;
        };
        let now_ns = clocks.boottime_ns;
        if !self.session.is_streaming() {
            ring.connection_lost();
        }
        ring.feed(&mut self.spool, now_ns);
        if let Err(error) = ring.drive(&mut self.spool, now_ns) {
            tracing::error!("{error}");
        }
        ring.ship(self.connection.as_ref(), &clocks);
    }

    /// A Trigger or WindowAck from the daemon.
    pub(super) fn on_ring_frame(&mut self, body: v1::frame::Body) {
        let Some(ring) = &mut self.ring else {
            return;
        };
        match body {
            v1::frame::Body::Trigger(trigger) => ring.trigger(trigger),
            v1::frame::Body::WindowAck(ack) => {
                if let Err(error) = ring.window_acked(ack.trigger_id) {
                    tracing::error!("{error}");
                }
            }
            _ => {}
        }
    }

    /// When the ring next has something to do.
    pub(super) fn ring_deadline(&self, now: Instant) -> Option<Instant> {
        let due_ns = self.ring.as_ref()?.deadline_ns()?;
        let now_ns = self.clock.boottime();
        Some(now + Duration::from_nanos(due_ns.saturating_sub(now_ns)))
    }
}

fn spec_of(trigger: &v1::Trigger) -> TriggerSpec {
    TriggerSpec {
        id: trigger.id,
        name: trigger.name.clone(),
        host_time_ns: trigger.host_time_ns,
        before_ns: trigger.before_ns,
        after_ns: trigger.after_ns,
        relay_from_ns: trigger.relay_from_ns,
        relay_to_ns: trigger.relay_to_ns,
    }
}

/// The next part of a window: the first carries the trigger and the
/// preamble; each holds at most [`PART_BYTES`] of packets (at least one).
fn next_part(shipping: &mut Shipping, clocks: &v1::RelayClocks) -> v1::Window {
    let window = &shipping.window;
    let start = shipping.next_packet;
    let mut end = start;
    let mut bytes = 0;
    while let Some(packet) = window.packets.get(end) {
        if end > start && (bytes + packet.len() > PART_BYTES || end - start >= MAX_BATCH_PACKETS) {
            break;
        }
        bytes += packet.len();
        end += 1;
    }
    let first = shipping.next_part == 0;
    let part = v1::Window {
        trigger_id: window.trigger_id,
        part: shipping.next_part,
        last: end >= window.packets.len(),
        packets: window.packets.get(start..end).unwrap_or_default().to_vec(),
        clocks: Some(*clocks),
        packets_dropped: if first { window.packets_dropped } else { 0 },
        trigger: if first { window.trigger.clone() } else { None },
        preamble: if first {
            window.preamble.clone()
        } else {
            Vec::new()
        },
    };
    shipping.next_part += 1;
    shipping.next_packet = end;
    part
}
