//! The flight recorder on the ingest thread: triggers from the control
//! socket and from relays (TriggerRequest, placed at the relay's moment
//! on the host's clock) fired through core's trigger table (limit per name, ids,
//! remembered for relays that connect later), and each ring relay sent its
//! Trigger once its clock estimate maps the window. The decisions are
//! core's ([`Triggers`], [`RingRelays`]); this module only moves frames.
//!
//! Windows: each part is staged on disk as it comes (`crate::snapshot`);
//! when core's [`Snapshots`] says a snapshot is due, a writer thread
//! assembles and writes it; once it is durable, its index line goes to the
//! rolling writer and each relay in it gets its WindowAck.
//!
//! Invariants: a Trigger frame is handed to a session's bounded outgoing
//! channel without waiting; one that does not fit stays owed and is tried
//! again at the next host tick or sync update.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::mpsc;
use std::time::SystemTime;

use tracesync_capture::index::IndexEntry;
use tracesync_common::clock::{Clock, SystemClock};

use tokio::sync::mpsc::error::TrySendError;
use tracesync_capture::names::SnapshotName;
use tracesync_core::control::TriggerAnswer;
use tracesync_core::sync::SyncEstimate;
use tracesync_core::trigger::{
    Decision, Fired, RingRelays, Snapshots, TriggerConfig, TriggerRequest, Triggers, host_time_of,
    settled_for, tighter_over,
};
use tracesync_protocol::relay::v1;
use tracing::{info, warn};

use super::SessionEntry;
use crate::control::TriggerAsk;
use crate::server::engine::Slot;
use crate::snapshot::write::{Job, Outcome};
use crate::snapshot::{PartOutcome, RelayInfo, Staging};

/// A fired trigger's wall-clock time, for its snapshot's name.
#[derive(Clone, Debug)]
pub(super) struct FiredAt {
    pub fired: Fired,
    pub wall: SystemTime,
}

pub(super) struct Flight {
    triggers: Triggers,
    ring: RingRelays,
    /// The fired triggers still remembered, with their wall-clock times.
    fired: VecDeque<FiredAt>,
    /// Each connected ring relay, as its Hello named it.
    relays: HashMap<Slot, RelayInfo>,
    /// The machines of every ring relay seen this run: a snapshot takes
    /// their windows from their rings only, never from the output.
    ring_machines: BTreeSet<u32>,
    /// Which snapshots to write when.
    snapshots: Snapshots,
    /// Made with the output directory at the first window part.
    staging: Option<Staging>,
    /// The last estimate of each ring relay instance's previous
    /// connection: a window shipped after a reconnect may map better with
    /// it than with the young estimate of the new one.
    earlier: HashMap<u64, SyncEstimate>,
    /// Host BOOTTIME each connected ring relay's session began at.
    since: HashMap<Slot, u64>,
    /// Whole windows waiting for their relay's first estimate, or for a
    /// young one to settle ([`settled_for`]): (trigger, relay instance,
    /// slot).
    unsynced: Vec<(u64, u64, Slot)>,
    /// Triggers forgotten past their remember time (newest last): a
    /// window of theirs shipped later is acknowledged and dropped, so its
    /// relay frees its ring.
    expired: VecDeque<u64>,
    /// Snapshot writers' outcomes.
    done_tx: mpsc::Sender<Outcome>,
    done_rx: mpsc::Receiver<Outcome>,
}

/// How long past a window's end its snapshot waits for windows still
/// missing (a relay cut off); a window later than that rewrites the file.
const SNAPSHOT_PATIENCE_NS: u64 = 30_000_000_000;

/// Ring relays' machines remembered at most (far above any fleet).
const MAX_RING_MACHINES: usize = 1 << 16;

/// Whole windows waiting for an estimate at most (one per relay and
/// trigger owed is far below it).
const MAX_UNSYNCED: usize = 1024;

impl Flight {
    pub fn new(config: TriggerConfig) -> Self {
        let max_owed = config.max_remembered;
        let (done_tx, done_rx) = mpsc::channel();
        Self {
            triggers: Triggers::new(config, random_seed()),
            ring: RingRelays::new(max_owed),
            fired: VecDeque::new(),
            relays: HashMap::new(),
            ring_machines: BTreeSet::new(),
            snapshots: Snapshots::new(SNAPSHOT_PATIENCE_NS, max_owed),
            staging: None,
            earlier: HashMap::new(),
            since: HashMap::new(),
            unsynced: Vec::new(),
            expired: VecDeque::new(),
            done_tx,
            done_rx,
        }
    }

    /// A trigger from the control socket, at host BOOTTIME `now_ns`: fired
    /// (every ring relay owes it) or refused; the asker is answered.
    pub fn ask(&mut self, ask: TriggerAsk, now_ns: u64) -> Option<FiredAt> {
        match self.fire(ask.request, now_ns, now_ns, "the control socket") {
            Ok((at, answer)) => {
                // The asker may have gone: the trigger fired all the same.
                let _ = ask.reply.send(Ok(answer));
                Some(at)
            }
            Err(reason) => {
                let _ = ask.reply.send(Err(reason));
                None
            }
        }
    }

    /// A relay's TriggerRequest, received at host BOOTTIME `now_ns` from
    /// the relay on `slot` (`estimate`: its clock's): checked as the
    /// control socket checks, placed at the relay's moment on the host's
    /// clock, fired or refused. Returns the answer for the relay.
    pub fn relay_ask(
        &mut self,
        slot: Slot,
        request: &v1::TriggerRequest,
        estimate: Option<&SyncEstimate>,
        now_ns: u64,
    ) -> v1::TriggerResult {
        let checked =
            crate::control::trigger::check(&request.name, request.before_ns, request.after_ns);
        let checked = match checked {
            Ok(checked) => checked,
            Err(reason) => {
                crate::metrics::Event::TriggerRefused.record();
                warn!(slot, "a relay's trigger refused: {reason}");
                return refusal(request, &reason);
            }
        };
        let (host_time_ns, mapped) = host_time_of(request.relay_time_ns, estimate, now_ns);
        let origin = format!(
            "relay on slot {slot} ({}, placed by {})",
            tracesync_protocol::text::Escaped(&request.origin),
            mapped.as_str()
        );
        match self.fire(checked, now_ns, host_time_ns, &origin) {
            Ok((_, answer)) => v1::TriggerResult {
                request_id: request.request_id,
                fired: true,
                id: answer.id,
                host_time_ns: answer.host_time_ns,
                mapped_by: mapped.as_str().to_owned(),
                ring_relays: u32::try_from(answer.ring_relays).unwrap_or(u32::MAX),
                snapshot: answer.snapshot,
                reason: String::new(),
            },
            Err(reason) => refusal(request, &reason),
        }
    }

    /// Fires `request` (asked for at `now_ns`) at host time
    /// `host_time_ns` through the trigger table: every ring relay owes it,
    /// its snapshot is tracked; or the limit's refusal, counted and logged.
    fn fire(
        &mut self,
        request: TriggerRequest,
        now_ns: u64,
        host_time_ns: u64,
        from: &str,
    ) -> Result<(FiredAt, TriggerAnswer), String> {
        let name = request.name.clone();
        let fired = match self.triggers.fire_at(request, now_ns, host_time_ns) {
            Decision::Fired(fired) => fired,
            Decision::Refused(reason) => {
                crate::metrics::Event::TriggerRefused.record();
                warn!("{reason} (from {from})");
                return Err(reason);
            }
        };
        crate::metrics::Event::TriggerFired.record();
        let wall = SystemTime::now();
        let snapshot = SnapshotName::new(wall, &name).map_or_else(String::new, |n| n.to_string());
        self.ring.fired(&fired);
        self.track(&fired);
        let answer = TriggerAnswer {
            id: fired.id,
            name,
            host_time_ns: fired.host_time_ns,
            before_ns: fired.before_ns,
            after_ns: fired.after_ns,
            ring_relays: self.ring.slots().len(),
            snapshot,
        };
        info!(
            id = fired.id,
            ring_relays = answer.ring_relays,
            "trigger {} fired at host time {} ns from {from}: window {} ns before, {} ns after",
            answer.name,
            fired.host_time_ns,
            fired.before_ns,
            fired.after_ns
        );
        let at = FiredAt { fired, wall };
        self.remember(at.clone());
        Ok((at, answer))
    }

    fn remember(&mut self, at: FiredAt) {
        let max = self.triggers.config().max_remembered;
        if self.fired.len() >= max {
            self.fired.pop_front();
        }
        self.fired.push_back(at);
    }

    /// A relay was welcomed on `slot` at `now_ns`; a ring relay owes the
    /// triggers still remembered.
    pub fn connected(&mut self, slot: Slot, relay: Option<RelayInfo>, now_ns: u64) {
        if let Some(relay) = relay {
            let remembered = self.triggers.for_new_relay(now_ns);
            self.ring.connect(slot, remembered);
            if self.ring_machines.len() < MAX_RING_MACHINES {
                self.ring_machines.insert(relay.raw_id);
            }
            self.relays.insert(slot, relay);
            self.since.insert(slot, now_ns);
        }
    }

    /// The connection on `slot` ended; `estimate` is its relay's last.
    pub fn disconnected(&mut self, slot: Slot, estimate: Option<SyncEstimate>) {
        self.ring.disconnect(slot);
        self.since.remove(&slot);
        if let Some(relay) = self.relays.remove(&slot)
            && let Some(estimate) = estimate
        {
            if self.earlier.len() >= MAX_UNSYNCED {
                self.earlier.clear();
            }
            self.earlier.insert(relay.instance, estimate);
        }
    }

    /// The estimate `relay`'s window of `id` maps with: the current one or
    /// the one of its previous connection, whichever is tighter over the
    /// window.
    fn window_estimate(
        &self,
        id: u64,
        instance: u64,
        current: Option<SyncEstimate>,
    ) -> Option<SyncEstimate> {
        let earlier = self.earlier.get(&instance).copied();
        match (self.snapshots.fired(id), current, earlier) {
            (Some(fired), Some(now), Some(before)) => Some(tighter_over(fired, now, before)),
            (_, now, before) => now.or(before),
        }
    }

    /// The estimate `relay`'s window of `id` maps with at host BOOTTIME
    /// `now_ns`: [`Self::window_estimate`], unless that is the young
    /// estimate of a session that began after the window and has not
    /// settled yet (None: the window waits).
    fn mapping_estimate(
        &self,
        id: u64,
        instance: u64,
        slot: Slot,
        current: Option<SyncEstimate>,
        now_ns: u64,
    ) -> Option<SyncEstimate> {
        let chosen = self.window_estimate(id, instance, current)?;
        let settled = match (self.snapshots.fired(id), self.since.get(&slot)) {
            (Some(fired), Some(&since)) => settled_for(fired, since, now_ns),
            _ => true,
        };
        (Some(chosen) != current || settled).then_some(chosen)
    }

    /// Tracks `fired`'s snapshot; a trigger forgotten for it loses its
    /// staged windows.
    fn track(&mut self, fired: &Fired) {
        if let Some(forgotten) = self.snapshots.track(fired)
            && let Some(staging) = &mut self.staging
        {
            staging.forget(forgotten);
        }
    }

    /// A part of the window of the ring relay on `slot`, whose estimate is
    /// `estimate` now; `output_dir` holds the staging area.
    pub fn on_window(
        &mut self,
        slot: Slot,
        window: &v1::Window,
        estimate: Option<SyncEstimate>,
        output_dir: Option<&Path>,
        sessions: &HashMap<Slot, SessionEntry>,
    ) {
        let Some(relay) = self.relays.get(&slot).cloned() else {
            return;
        };
        let id = window.trigger_id;
        if self.expired.contains(&id) {
            if window.part == 0 {
                warn!(
                    slot,
                    trigger = id,
                    "relay {}: a window of a trigger past its remember time ([trigger] \
                     remember-seconds after its window's end): dropped and acknowledged",
                    relay.name
                );
            }
            send_ack(sessions, slot, id);
            return;
        }
        // A trigger this daemon does not remember (it restarted since): the
        // window's first part says what it was.
        if window.part == 0
            && self.snapshots.fired(id).is_none()
            && let Some(t) = &window.trigger
            && t.id == id
            && tracesync_protocol::trigger::check_trigger_name(&t.name).is_ok()
        {
            let fired = Fired {
                id,
                name: t.name.clone(),
                host_time_ns: t.host_time_ns,
                before_ns: t.before_ns,
                after_ns: t.after_ns,
            };
            self.remember(FiredAt {
                fired: fired.clone(),
                wall: SystemTime::now(),
            });
            self.track(&fired);
        }
        if self.snapshots.fired(id).is_none() {
            warn!(
                slot,
                trigger = id,
                "a window of a trigger this daemon does not know: ignored"
            );
            return;
        }
        let now_ns = tracesync_common::clock::boottime_ns();
        let estimate = self.mapping_estimate(id, relay.instance, slot, estimate, now_ns);
        let staging = match (&mut self.staging, output_dir) {
            (Some(staging), _) => staging,
            (None, Some(dir)) => self.staging.insert(Staging::new(dir)),
            (None, None) => return,
        };
        match staging.part(&relay, window, estimate) {
            Ok(PartOutcome::Whole) if self.snapshots.is_written(id, relay.instance) => {
                // Its snapshot is on disk already: the relay missed the ack.
                send_ack(sessions, slot, id);
            }
            Ok(PartOutcome::Whole) => {
                info!(slot, trigger = id, "window of relay {} whole", relay.name);
                self.snapshots.whole(id, relay.instance);
            }
            Ok(PartOutcome::NeedsEstimate) => {
                if self.unsynced.len() < MAX_UNSYNCED {
                    self.unsynced.push((id, relay.instance, slot));
                }
            }
            Ok(PartOutcome::More | PartOutcome::Ignored) => {}
            Err(e) => warn!(
                slot,
                trigger = id,
                "cannot stage a window part in the output directory: {e}; the relay ships \
                 it again on its next connection (free space in the output directory)"
            ),
        }
    }

    /// Takes the snapshots written since (acknowledging their windows to
    /// the relays connected; the others are acknowledged when they ship
    /// them again) and starts those due at host BOOTTIME `now_ns`, the
    /// output being durable through host time `output_ns`. Returns the
    /// index lines of the snapshots written.
    pub fn tick(
        &mut self,
        now_ns: u64,
        output_ns: u64,
        output_dir: Option<&Path>,
        sessions: &HashMap<Slot, SessionEntry>,
        estimate: impl Fn(Slot) -> Option<SyncEstimate>,
        mut list: impl FnMut(IndexEntry),
    ) {
        let remember_ns = self.triggers.config().remember_ns;
        for id in self.snapshots.expire(now_ns, remember_ns) {
            if let Some(staging) = &mut self.staging {
                staging.forget(id);
            }
            info!(
                trigger = id,
                "trigger past its remember time: its staged windows dropped"
            );
            if self.expired.len() >= MAX_UNSYNCED {
                self.expired.pop_front();
            }
            self.expired.push_back(id);
        }
        let mut ready = Vec::new();
        for (id, instance, slot) in std::mem::take(&mut self.unsynced) {
            if !sessions.contains_key(&slot) {
                continue; // gone: it ships the window again
            }
            match self.mapping_estimate(id, instance, slot, estimate(slot), now_ns) {
                Some(e) => ready.push((id, instance, e)),
                None => self.unsynced.push((id, instance, slot)),
            }
        }
        if let Some(staging) = &mut self.staging {
            for (id, instance, e) in ready {
                if staging.set_estimate(id, instance, e) {
                    self.snapshots.whole(id, instance);
                }
            }
        }
        while let Ok(outcome) = self.done_rx.try_recv() {
            match outcome {
                Ok(written) => {
                    crate::metrics::Event::SnapshotWritten.record();
                    info!(
                        trigger = written.trigger_id,
                        windows = written.instances.len(),
                        output_packets = written.output_packets,
                        output_whole = written.output_whole,
                        packets = written.entry.packets,
                        cut = written.cut,
                        "snapshot {} written",
                        written.entry.name
                    );
                    self.snapshots.written(
                        written.trigger_id,
                        &written.instances,
                        written.output_whole,
                    );
                    // Listed before the windows are acknowledged: a relay
                    // that sees its ack finds the snapshot in the index.
                    list(written.entry);
                    for (slot, relay) in &self.relays {
                        if written.instances.contains(&relay.instance) {
                            send_ack(sessions, *slot, written.trigger_id);
                        }
                    }
                }
                Err((id, e)) => {
                    crate::metrics::Event::SnapshotFailed.record();
                    warn!(trigger = id, "cannot write a snapshot: {e}; retried");
                    self.snapshots.failed(id);
                }
            }
        }
        let Some(dir) = output_dir else {
            return;
        };
        for due in self.snapshots.due(now_ns, output_ns) {
            let id = due.fired.id;
            let wall = self.fired_at(id).map_or_else(SystemTime::now, |f| f.wall);
            let windows = self
                .staging
                .as_ref()
                .map(|s| s.windows_of(id, &due.instances))
                .unwrap_or_default();
            let job = Job {
                windows,
                ring_machines: self.ring_machines.clone(),
                output_whole: due.output_whole,
                fired: due.fired,
                wall,
                output_dir: dir.to_path_buf(),
                now_ns,
                host_clocks: SystemClock::default().now().snapshot().to_vec(),
            };
            if let Err(e) = job.spawn(self.done_tx.clone()) {
                warn!(trigger = id, "cannot start a snapshot writer: {e}; retried");
                self.snapshots.failed(id);
            }
        }
    }

    pub fn is_ring(&self, slot: Slot) -> bool {
        self.ring.is_ring(slot)
    }

    /// The wall-clock time trigger `id` fired at, while remembered.
    pub fn fired_at(&self, id: u64) -> Option<&FiredAt> {
        self.fired.iter().find(|f| f.fired.id == id)
    }

    /// Sends every ring relay the Triggers its estimate can map now.
    pub fn send_due(
        &mut self,
        sessions: &HashMap<Slot, SessionEntry>,
        estimate: impl Fn(Slot) -> Option<SyncEstimate>,
    ) {
        for slot in self.ring.slots() {
            let Some(entry) = sessions.get(&slot) else {
                continue;
            };
            let estimate = estimate(slot);
            for trigger in self.ring.due(slot, estimate.as_ref()) {
                let frame = v1::frame::Body::Trigger(trigger.clone());
                match entry.outgoing.try_send(frame) {
                    Ok(()) => {
                        if let Some(relay) = self.relays.get(&slot) {
                            self.snapshots.expect(trigger.id, relay.instance);
                        }
                        info!(
                            slot,
                            id = trigger.id,
                            "trigger {} sent: relay window [{}, {}] ns",
                            trigger.name,
                            trigger.relay_from_ns,
                            trigger.relay_to_ns
                        );
                    }
                    Err(TrySendError::Full(_)) => self.ring.unsend(slot, &trigger),
                    // The session is ending: its Disconnected follows.
                    Err(TrySendError::Closed(_)) => {}
                }
            }
        }
    }
}

/// Acknowledges trigger `id`'s window to the relay on `slot` (a full
/// channel drops it: the relay ships the window again and is acknowledged
/// then).
fn send_ack(sessions: &HashMap<Slot, SessionEntry>, slot: Slot, id: u64) {
    if let Some(entry) = sessions.get(&slot) {
        let ack = v1::frame::Body::WindowAck(v1::WindowAck { trigger_id: id });
        let _ = entry.outgoing.try_send(ack);
    }
}

/// The answer refusing a relay's `request` for `reason`.
pub(super) fn refusal(request: &v1::TriggerRequest, reason: &str) -> v1::TriggerResult {
    v1::TriggerResult {
        request_id: request.request_id,
        fired: false,
        reason: reason.to_owned(),
        ..v1::TriggerResult::default()
    }
}

/// A seed for trigger ids that differs between daemon runs (std's
/// per-process random hash keys, mixed with the clock).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(tracesync_common::clock::boottime_ns());
    hasher.write_u64(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    hasher.finish()
}
