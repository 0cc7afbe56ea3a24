//! The relay's flight recorder (`--mode ring`), sans-IO: which spooled
//! batches the ring keeps, which triggers' windows it owes, and when each
//! window is whole. The driver ([`crate::uplink`]) reports batches as the
//! spool cuts them and triggers as the daemon sends them, with the
//! relay's BOOTTIME; it executes the [`RingAction`]s it gets back. No
//! clock is read here.
//!
//! Invariants:
//! - Batches are known oldest first, by their spool seq, each with the
//!   BOOTTIME it was cut at, never decreasing (a batch of an earlier run
//!   whose time was not kept takes its neighbour's, or the start's).
//! - [`RingAction::Release`] only ever grows: the spool frees its oldest
//!   batches (the ring uses the spool's ack as "no longer needed").
//! - Past the bounds (`seconds`, `bytes`) the oldest batches are released,
//!   counted; never a batch a waiting window still needs: while a window
//!   waits for its end (`relay_to_ns` plus the source lag) release stops at
//!   its first batch, so the ring may exceed its bounds by what arrives
//!   during the window's `after` and the lag, and only then.
//! - A window is collected once, when whole ([`RingAction::Collect`]):
//!   the driver copies its batches (and the state in force at its start,
//!   [`preamble`]) into a window file of its own, which stays until the
//!   daemon's WindowAck, across reconnects and restarts. At most
//!   [`MAX_WINDOWS`] are owed at once; a further trigger is refused,
//!   counted and logged.
//! - A trigger id is taken once: the daemon may send it again (a
//!   reconnect, a relay that came back) and gets the same window.

pub mod preamble;

use std::collections::VecDeque;
use std::time::Duration;

/// Windows owed at once (waiting for their end, or collected and not yet
/// acknowledged): each may hold up to the ring's bytes.
pub const MAX_WINDOWS: usize = 4;

/// The spool's segment size in ring mode: an eighth of the ring's bytes
/// (64 KiB..=64 MiB). A segment is deleted only once every batch in it has
/// left the ring, so the spool on disk holds the ring's bytes plus at most
/// one segment of batches already released; derived from the spool's disk
/// limit instead, that slack would be up to 64 MiB whatever the ring's size.
pub fn segment_bytes(ring_bytes: u64) -> u64 {
    (ring_bytes / 8).clamp(64 << 10, 64 << 20)
}

/// Trigger ids remembered to tell a resent trigger from a new one.
const REMEMBERED_TRIGGERS: usize = 256;

/// The ring's bounds and how late a packet may reach the relay after its
/// own timestamp (a file follower's poll, a producer's buffering).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingConfig {
    pub seconds: Duration,
    pub bytes: u64,
    /// Added to a window's end before it is collected: the window is
    /// chosen by the time a batch reached the relay (never earlier than
    /// its packets' own times), the daemon cuts it exactly by those.
    pub source_lag: Duration,
}

/// A trigger as the daemon sent it (protocol `Trigger`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerSpec {
    pub id: u64,
    pub name: String,
    pub host_time_ns: u64,
    pub before_ns: u64,
    pub after_ns: u64,
    /// The window on this relay's BOOTTIME, the daemon's error bound
    /// already added on both sides.
    pub relay_from_ns: u64,
    pub relay_to_ns: u64,
}

/// What the driver must do.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingAction {
    /// Copy batches `first..=last` (those that are still spooled) into
    /// this trigger's window file, after the state in force before batch
    /// `first`; at most `lost_packets` of the window were released before
    /// the trigger came (0: none).
    Collect {
        trigger: TriggerSpec,
        first: u64,
        last: u64,
        lost_packets: u64,
    },
    /// The spool may free every batch through this seq.
    Release(u64),
}

/// How a trigger was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerOutcome {
    /// A new window: it will be collected when whole.
    Taken,
    /// This id was taken before: nothing new to do.
    Again,
    /// Not taken; the reason is one line for the log.
    Refused(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RingBatch {
    seq: u64,
    cut_at_ns: u64,
    bytes: u64,
    packets: u64,
}

/// Counters for status and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    pub batches_released: u64,
    pub packets_released: u64,
    pub bytes_released: u64,
    pub triggers_taken: u64,
    pub triggers_refused: u64,
    pub windows_collected: u64,
}

#[derive(Debug)]
pub struct Ring {
    config: RingConfig,
    batches: VecDeque<RingBatch>,
    held_bytes: u64,
    held_packets: u64,
    released_through: u64,
    waiting: Vec<TriggerSpec>,
    /// Windows handed to the driver to copy ([`RingAction::Collect`]):
    /// their batches stay until [`Ring::collected`].
    collecting: Vec<TriggerSpec>,
    /// Windows collected and not yet acknowledged (their files exist).
    locked: usize,
    seen: VecDeque<u64>,
    stats: RingStats,
}

impl Ring {
    /// A ring over the spool's batches of an earlier run (`restored`: seq,
    /// packet bytes, packets, cut BOOTTIME; oldest first); `locked`
    /// windows are on disk already.
    pub fn new(
        config: RingConfig,
        restored: impl IntoIterator<Item = (u64, u64, u64, u64)>,
        locked: usize,
    ) -> Self {
        let mut ring = Self {
            config,
            batches: VecDeque::new(),
            held_bytes: 0,
            held_packets: 0,
            released_through: 0,
            waiting: Vec::new(),
            collecting: Vec::new(),
            locked,
            seen: VecDeque::new(),
            stats: RingStats::default(),
        };
        for (seq, bytes, packets, cut_at_ns) in restored {
            ring.cut(seq, bytes, packets, cut_at_ns);
        }
        ring
    }

    /// The spool cut batch `seq` (after every earlier one) at `now_ns`.
    pub fn cut(&mut self, seq: u64, bytes: u64, packets: u64, now_ns: u64) {
        if self.batches.back().is_some_and(|b| b.seq >= seq) || seq <= self.released_through {
            return;
        }
        // Never before the batch ahead of it: a clock read is not ordered
        // with a time kept on disk by an earlier run.
        let cut_at_ns = self
            .batches
            .back()
            .map_or(now_ns, |b| b.cut_at_ns.max(now_ns));
        self.batches.push_back(RingBatch {
            seq,
            cut_at_ns,
            bytes,
            packets,
        });
        self.held_bytes += bytes;
        self.held_packets += packets;
    }

    /// A Trigger from the daemon.
    pub fn trigger(&mut self, trigger: TriggerSpec) -> TriggerOutcome {
        if self.seen.contains(&trigger.id) {
            return TriggerOutcome::Again;
        }
        if trigger.relay_from_ns > trigger.relay_to_ns {
            self.stats.triggers_refused += 1;
            return TriggerOutcome::Refused(format!(
                "trigger {:?} (id {:016x}) has its window's start after its end; ignored",
                trigger.name, trigger.id
            ));
        }
        if self.windows_owed() >= MAX_WINDOWS {
            self.stats.triggers_refused += 1;
            return TriggerOutcome::Refused(format!(
                "trigger {:?} (id {:016x}) refused: {MAX_WINDOWS} windows are owed to the \
                 daemon already (collected and not yet acknowledged, or waiting for their end)",
                trigger.name, trigger.id
            ));
        }
        if self.seen.len() >= REMEMBERED_TRIGGERS {
            self.seen.pop_front();
        }
        self.seen.push_back(trigger.id);
        self.stats.triggers_taken += 1;
        self.waiting.push(trigger);
        TriggerOutcome::Taken
    }

    /// The driver copied trigger `id`'s window into its file (`written`),
    /// or failed to (logged there; the window is given up): its batches
    /// may go. A written window is owed until acknowledged.
    pub fn collected(&mut self, id: u64, written: bool) {
        self.collecting.retain(|w| w.id != id);
        if written {
            self.locked += 1;
            self.stats.windows_collected += 1;
        }
    }

    /// The daemon acknowledged a window (its file is gone).
    pub fn acknowledged(&mut self) {
        self.locked = self.locked.saturating_sub(1);
    }

    /// The next thing to do at `now_ns` (call until None).
    pub fn poll(&mut self, now_ns: u64) -> Option<RingAction> {
        let lag = duration_ns(self.config.source_lag);
        if let Some(index) = self
            .waiting
            .iter()
            .position(|w| now_ns >= w.relay_to_ns.saturating_add(lag))
        {
            let trigger = self.waiting.remove(index);
            self.collecting.push(trigger.clone());
            return Some(self.collect(trigger, lag));
        }
        let through = self.release_point(now_ns);
        (through > self.released_through).then(|| {
            self.release(through);
            RingAction::Release(through)
        })
    }

    /// When [`Ring::poll`] may next have something (besides new batches
    /// and triggers).
    pub fn deadline_ns(&self) -> Option<u64> {
        let lag = duration_ns(self.config.source_lag);
        let window_end = self
            .waiting
            .iter()
            .map(|w| w.relay_to_ns.saturating_add(lag))
            .min();
        let oldest_expires = self
            .batches
            .front()
            .map(|b| b.cut_at_ns.saturating_add(duration_ns(self.config.seconds)));
        window_end.into_iter().chain(oldest_expires).min()
    }

    /// Every batch held: seq -> cut BOOTTIME (what the spool keeps on
    /// disk of the ring's times).
    pub fn held_times(&self) -> std::collections::BTreeMap<u64, u64> {
        self.batches.iter().map(|b| (b.seq, b.cut_at_ns)).collect()
    }

    /// Batches held.
    pub fn held_batches(&self) -> usize {
        self.batches.len()
    }

    /// Packet bytes held.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Packets held.
    pub fn held_packets(&self) -> u64 {
        self.held_packets
    }

    pub fn config(&self) -> &RingConfig {
        &self.config
    }

    /// BOOTTIME the oldest held batch was cut at.
    pub fn oldest_cut_ns(&self) -> Option<u64> {
        self.batches.front().map(|b| b.cut_at_ns)
    }

    /// Windows owed to the daemon (waiting or collected).
    pub fn windows_owed(&self) -> usize {
        self.waiting.len() + self.collecting.len() + self.locked
    }

    pub fn stats(&self) -> &RingStats {
        &self.stats
    }

    fn collect(&mut self, trigger: TriggerSpec, lag: u64) -> RingAction {
        let from = trigger.relay_from_ns;
        let to = trigger.relay_to_ns.saturating_add(lag);
        // A batch cut at t holds packets that reached the relay in the
        // linger before t: the first batch cut at or after `from` is the
        // first that may hold the window.
        let inside: Vec<&RingBatch> = self
            .batches
            .iter()
            .filter(|b| b.cut_at_ns >= from && b.cut_at_ns <= to)
            .collect();
        let next_seq = self.batches.back().map_or(self.released_through, |b| b.seq) + 1;
        let first = inside.first().map_or(next_seq, |b| b.seq);
        let last = inside.last().map_or(first.saturating_sub(1), |b| b.seq);
        let lost_packets = self.lost_inside(from);
        RingAction::Collect {
            trigger,
            first,
            last,
            lost_packets,
        }
    }

    /// Packets released that a window starting at `from` might have held:
    /// 0 when the window starts inside the ring; else every packet released
    /// so far (the ring forgets released batches' times: an upper bound,
    /// said as such).
    fn lost_inside(&self, from: u64) -> u64 {
        match self.batches.front() {
            Some(oldest) if oldest.cut_at_ns <= from => 0,
            _ if self.released_through == 0 => 0,
            _ => self.stats.packets_released,
        }
    }

    /// The newest seq that may be released at `now_ns`.
    fn release_point(&self, now_ns: u64) -> u64 {
        let horizon = now_ns.saturating_sub(duration_ns(self.config.seconds));
        // Release stops before the first batch any window still needs.
        let keep_from = self
            .waiting
            .iter()
            .chain(&self.collecting)
            .filter_map(|w| {
                self.batches
                    .iter()
                    .find(|b| b.cut_at_ns >= w.relay_from_ns)
                    .map(|b| b.seq)
            })
            .min()
            .unwrap_or(u64::MAX);
        let mut bytes = self.held_bytes;
        let mut through = self.released_through;
        for batch in &self.batches {
            let over = bytes > self.config.bytes || batch.cut_at_ns < horizon;
            if !over || batch.seq >= keep_from {
                break;
            }
            bytes -= batch.bytes;
            through = batch.seq;
        }
        through
    }

    fn release(&mut self, through: u64) {
        while let Some(batch) = self.batches.front().copied() {
            if batch.seq > through {
                break;
            }
            self.batches.pop_front();
            self.held_bytes -= batch.bytes;
            self.held_packets -= batch.packets;
            self.stats.batches_released += 1;
            self.stats.packets_released += batch.packets;
            self.stats.bytes_released += batch.bytes;
        }
        self.released_through = through;
    }
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
