//! The relay instances the core knows and their sessions: which instance
//! is connected on which slot, the order they disconnected in (the
//! longest-gone idle ones are forgotten first), commit points and acks.

use super::recovered::RecoveredClocks;
use super::relay::{Relay, Session};
use super::types::{CommitPoint, HelloInfo, LiveConfig, RelaySlot, SessionError};
use crate::hash::IdMap;

#[derive(Debug)]
pub(super) struct Relays {
    by_instance: IdMap<u64, Relay>,
    /// Connected slot -> relay instance.
    slots: IdMap<RelaySlot, u64>,
    next_slot: RelaySlot,
    /// Commit points handed out so far.
    commit_point: u64,
    /// Disconnections so far.
    disconnects: u64,
    /// Fed to its clock graph when an instance connects.
    recovered_clocks: RecoveredClocks,
}

impl Relays {
    /// No relay yet; `recovered_clocks` wait for their instances.
    pub fn new(recovered_clocks: RecoveredClocks) -> Self {
        Self {
            by_instance: IdMap::default(),
            slots: IdMap::default(),
            next_slot: 1,
            commit_point: 0,
            disconnects: 0,
            recovered_clocks,
        }
    }

    /// The relay instance connected on `slot`.
    pub fn instance_of(&self, slot: RelaySlot) -> Result<u64, SessionError> {
        self.slots
            .get(&slot)
            .copied()
            .ok_or(SessionError::UnknownSlot(slot))
    }

    pub fn get(&self, instance: u64) -> Option<&Relay> {
        self.by_instance.get(&instance)
    }

    pub fn get_mut(&mut self, instance: u64) -> Option<&mut Relay> {
        self.by_instance.get_mut(&instance)
    }

    /// A new connection of the relay instance of `hello` at host BOOTTIME
    /// `now`, on a new slot. `recovered_streams` counts the instance's
    /// streams recovered from the output (asked only if it is new).
    pub fn connect(
        &mut self,
        hello: &HelloInfo,
        now: u64,
        config: &LiveConfig,
        recovered_streams: impl FnOnce() -> usize,
    ) -> Session {
        let instance = hello.relay_instance;
        let slot = self.next_slot;
        self.next_slot = self.next_slot.wrapping_add(1).max(1);
        let relay = self
            .by_instance
            .entry(instance)
            .or_insert_with(|| Relay::new(hello, now, recovered_streams(), config));
        let recovered = self.recovered_clocks.remove(&instance);
        let session = relay.open_session(hello, slot, now, recovered);
        if let Some(old) = session.replaced {
            self.slots.remove(&old);
        }
        self.slots.insert(slot, instance);
        session
    }

    /// The connection of `slot` ended: its instance and raw id, if it was
    /// connected.
    #[must_use = "its machine is no longer connected for"]
    pub fn disconnect(&mut self, slot: RelaySlot) -> Option<(u64, u32)> {
        let instance = self.slots.remove(&slot)?;
        self.disconnects += 1;
        let relay = self.by_instance.get_mut(&instance)?;
        relay.close_session(self.disconnects);
        Some((instance, relay.raw_id()))
    }

    /// While more than `max_records` instances are remembered, forgets the
    /// longest-disconnected idle one: its instance and raw id (None when
    /// none is to be forgotten).
    #[must_use = "its streams and machine row may go too"]
    pub fn forget_idle(&mut self, max_records: usize) -> Option<(u64, u32)> {
        if self.by_instance.len() <= max_records {
            return None;
        }
        let instance = self
            .by_instance
            .iter()
            .filter(|(_, r)| r.is_idle())
            .min_by_key(|(_, r)| r.disconnected_order())
            .map(|(&i, _)| i)?;
        let relay = self.by_instance.remove(&instance)?;
        Some((instance, relay.raw_id()))
    }

    /// Whether any instance is (or was last) connected for `raw_id`.
    pub fn refer_to_machine(&self, raw_id: u32) -> bool {
        self.by_instance.values().any(|r| r.raw_id() == raw_id)
    }

    /// Packets pending for a clock on the instances of `raw_id`.
    pub fn pending_of_machine(&self, raw_id: u32) -> u64 {
        self.by_instance
            .values()
            .filter(|r| r.raw_id() == raw_id)
            .map(|r| r.pending_len() as u64)
            .sum()
    }

    /// The relay's pending queue is at its bound, or the relays still
    /// waiting for their first estimate hold `pending_max_bytes` together
    /// (`unsynced_pending`: so their startup does not cost memory per relay:
    /// they are held back, their spools keep the data).
    fn pending_full(relay: &Relay, config: &LiveConfig, unsynced_pending: usize) -> bool {
        let max_bytes = config.pending_max_bytes;
        relay.pending_len() >= config.pending_max_packets
            || relay.pending_bytes() >= max_bytes
            || (!relay.has_estimate() && unsynced_pending >= max_bytes)
    }

    /// Pending bytes of all relays without a sync estimate.
    fn unsynced_pending_bytes(&self) -> usize {
        self.by_instance
            .values()
            .filter(|r| !r.has_estimate())
            .map(Relay::pending_bytes)
            .sum()
    }

    /// The slowest hold of a connected relay on the watermark (see
    /// [`Relay::watermark_hold`]), if any holds it.
    pub fn slowest(&self, now: u64, reading: u64, config: &LiveConfig) -> Option<i64> {
        self.by_instance
            .values()
            .filter_map(|r| r.watermark_hold(now, reading, config))
            .min()
    }

    /// Calls `stalled` with the raw id of every relay that just stopped
    /// holding the watermark because its clock stalled (see
    /// [`Relay::check_stall`]); the ones whose clock caught up hold again.
    pub fn check_stalls(&mut self, reading: u64, grace_ns: u64, mut stalled: impl FnMut(u32)) {
        for relay in self.by_instance.values_mut() {
            if relay.check_stall(reading, grace_ns) {
                stalled(relay.raw_id());
            }
        }
    }

    /// Connections to stop reading for now (see `LiveCore::held_back`): an
    /// unsynced relay whose pending queue is full; if `crowded`, a relay
    /// whose latest accepted clock maps past host time `ahead_from`. Each
    /// relay learns whether it is held back at reading time `reading` (its
    /// stall grace does not run meanwhile).
    pub fn held_back(
        &mut self,
        crowded: bool,
        ahead_from: i64,
        config: &LiveConfig,
        reading: u64,
    ) -> Vec<RelaySlot> {
        let unsynced_pending = self.unsynced_pending_bytes();
        let mut held = Vec::new();
        for relay in self.by_instance.values_mut() {
            let hold = relay.slot().is_some()
                && if relay.has_estimate() {
                    crowded && relay.latest_host_time().is_some_and(|t| t > ahead_from)
                } else {
                    Self::pending_full(relay, config, unsynced_pending)
                };
            relay.set_paused(hold, reading);
            if let (true, Some(slot)) = (hold, relay.slot()) {
                held.push(slot);
            }
        }
        held
    }

    /// Marks everything drained so far (see `LiveCore::commit_point`).
    pub fn commit_point(&mut self) -> CommitPoint {
        self.commit_point += 1;
        for relay in self.by_instance.values_mut() {
            relay.mark(self.commit_point);
        }
        CommitPoint(self.commit_point)
    }

    /// Everything drained before `point` is durable: the acks that moved.
    pub fn committed_through(&mut self, point: CommitPoint) -> Vec<(RelaySlot, u64)> {
        for relay in self.by_instance.values_mut() {
            relay.committed_through(point.0);
        }
        self.take_acks()
    }

    /// Everything drained so far is durable: the acks that moved.
    pub fn committed(&mut self) -> Vec<(RelaySlot, u64)> {
        for relay in self.by_instance.values_mut() {
            relay.committed_now();
        }
        self.take_acks()
    }

    fn take_acks(&mut self) -> Vec<(RelaySlot, u64)> {
        let mut acks: Vec<_> = self
            .by_instance
            .values_mut()
            .filter_map(Relay::take_ack)
            .collect();
        acks.sort_unstable();
        acks
    }
}
