//! When a trigger's snapshot is written, sans-IO: a trigger expects a
//! window from every ring relay it was sent to, and the windows of the
//! stream relays (and the host) from the daemon's own output once that
//! output is durable past the window's end (the caller's watermark); the
//! snapshot is written once every expected window is whole and the output
//! is past the window, or at the deadline with what is there by then; a
//! window that is whole later, or the output passing the window's end
//! later, makes it written again (the file replaced whole).
//!
//! Invariants: a snapshot is asked for only when some whole window is not
//! in the file written last, or the output's part of the file was read
//! before the output was past the window; at most one write per trigger is
//! in flight;
//! at most `max` triggers are tracked, the oldest forgotten first, and none
//! longer than the trigger's remember time after its window's end (the
//! caller deletes their staged windows).

use std::collections::{BTreeMap, BTreeSet};

use super::Fired;

#[derive(Debug)]
struct Pending {
    fired: Fired,
    /// Relay instances sent the trigger.
    expected: BTreeSet<u64>,
    /// Relay instances whose window is whole (staged).
    whole: BTreeSet<u64>,
    /// Relay instances in the snapshot on disk.
    written: BTreeSet<u64>,
    /// The snapshot on disk holds the output's whole window (read once the
    /// output was durable past its end).
    output_written: bool,
    /// A snapshot of it is on disk.
    on_disk: bool,
    in_flight: bool,
    deadline_ns: u64,
}

/// A snapshot to write now: its trigger and the relay instances whose
/// windows go in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub fired: Fired,
    pub instances: Vec<u64>,
    /// The output is durable past the window's end: its part is whole.
    pub output_whole: bool,
}

#[derive(Debug)]
pub struct Snapshots {
    pending: BTreeMap<u64, Pending>,
    /// How long past a window's end the snapshot waits for missing windows.
    patience_ns: u64,
    max: usize,
}

impl Snapshots {
    pub fn new(patience_ns: u64, max: usize) -> Self {
        Self {
            pending: BTreeMap::new(),
            patience_ns,
            max: max.max(1),
        }
    }

    /// Starts tracking `fired` (again: a no-op). Returns the id of a
    /// trigger forgotten to make room.
    pub fn track(&mut self, fired: &Fired) -> Option<u64> {
        if self.pending.contains_key(&fired.id) {
            return None;
        }
        let mut forgotten = None;
        if self.pending.len() >= self.max {
            // Ids are not in time order; the earliest fired goes.
            forgotten = self
                .pending
                .iter()
                .min_by_key(|(_, p)| p.fired.host_time_ns)
                .map(|(&id, _)| id);
            if let Some(id) = forgotten {
                self.pending.remove(&id);
            }
        }
        let deadline_ns = fired.host_window().1.saturating_add(self.patience_ns);
        self.pending.insert(
            fired.id,
            Pending {
                fired: fired.clone(),
                expected: BTreeSet::new(),
                whole: BTreeSet::new(),
                written: BTreeSet::new(),
                output_written: false,
                on_disk: false,
                in_flight: false,
                deadline_ns,
            },
        );
        forgotten
    }

    pub fn fired(&self, id: u64) -> Option<&Fired> {
        self.pending.get(&id).map(|p| &p.fired)
    }

    /// Relay `instance` was sent trigger `id`.
    pub fn expect(&mut self, id: u64, instance: u64) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.expected.insert(instance);
        }
    }

    /// The window of `instance` for `id` is whole (staged).
    pub fn whole(&mut self, id: u64, instance: u64) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.expected.insert(instance);
            p.whole.insert(instance);
        }
    }

    /// Whether the snapshot on disk holds `instance`'s window of `id`.
    pub fn is_written(&self, id: u64, instance: u64) -> bool {
        self.pending
            .get(&id)
            .is_some_and(|p| p.written.contains(&instance))
    }

    /// The snapshots to write at host BOOTTIME `now_ns`, the daemon's
    /// output being durable through host time `output_ns`; each is marked
    /// in flight until [`Self::written`] or [`Self::failed`].
    pub fn due(&mut self, now_ns: u64, output_ns: u64) -> Vec<Due> {
        let mut out = Vec::new();
        for p in self.pending.values_mut() {
            let output_whole = output_ns > p.fired.host_window().1;
            let news = p.whole.difference(&p.written).next().is_some()
                || (output_whole && !p.output_written);
            let all_in = p.expected.is_subset(&p.whole) && output_whole;
            let first = !p.on_disk;
            // At the deadline the file is written with what there is, even
            // nothing whole yet (the output's part so far).
            let news = news || (first && now_ns >= p.deadline_ns);
            if p.in_flight || !news || !(all_in || now_ns >= p.deadline_ns) {
                continue;
            }
            p.in_flight = true;
            out.push(Due {
                fired: p.fired.clone(),
                instances: p.whole.iter().copied().collect(),
                output_whole,
            });
        }
        out
    }

    /// The snapshot of `id` with these instances' windows (and the
    /// output's whole window if `output_whole`) is durable.
    pub fn written(&mut self, id: u64, instances: &[u64], output_whole: bool) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.in_flight = false;
            p.written.extend(instances.iter().copied());
            p.output_written |= output_whole;
            p.on_disk = true;
        }
    }

    /// Forgets the triggers whose window ended more than `remember_ns`
    /// before host BOOTTIME `now_ns` (none in flight); their ids, for the
    /// caller to delete their staged windows and to turn away a window of
    /// theirs shipped later.
    pub fn expire(&mut self, now_ns: u64, remember_ns: u64) -> Vec<u64> {
        let old: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                !p.in_flight && p.fired.host_window().1.saturating_add(remember_ns) < now_ns
            })
            .map(|(&id, _)| id)
            .collect();
        for id in &old {
            self.pending.remove(id);
        }
        old
    }

    /// Writing the snapshot of `id` failed: tried again at the next call
    /// of [`Self::due`].
    pub fn failed(&mut self, id: u64) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.in_flight = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    /// The output durable past every window.
    const PAST: u64 = u64::MAX;

    fn fired(id: u64, t: u64) -> Fired {
        Fired {
            id,
            name: "crash".into(),
            host_time_ns: t * S,
            before_ns: 30 * S,
            after_ns: 5 * S,
        }
    }

    #[test]
    fn written_when_every_window_is_whole_or_at_the_deadline_and_again_for_a_late_one() {
        let mut s = Snapshots::new(60 * S, 8);
        assert_eq!(s.track(&fired(1, 1000)), None);
        for relay in [10, 11, 12] {
            s.expect(1, relay);
        }
        s.whole(1, 10);
        s.whole(1, 11);
        // Relay 12 is cut off: nothing before the deadline (1005 + 60 s).
        assert!(s.due(1010 * S, PAST).is_empty());
        let due = s.due(1065 * S, PAST);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].instances, [10, 11]);
        // In flight: not asked twice.
        assert!(s.due(1066 * S, PAST).is_empty());
        s.written(1, &[10, 11], true);
        assert!(s.is_written(1, 10) && !s.is_written(1, 12));
        assert!(s.due(1070 * S, PAST).is_empty());
        // Relay 12 reconnects minutes later: the file is made again whole.
        s.whole(1, 12);
        let due = s.due(1300 * S, PAST);
        assert_eq!(due[0].instances, [10, 11, 12]);
        s.failed(1);
        assert_eq!(s.due(1301 * S, PAST).len(), 1);
    }

    #[test]
    fn all_windows_in_write_at_once_and_the_oldest_trigger_goes_first() {
        let mut s = Snapshots::new(60 * S, 2);
        s.track(&fired(5, 1000));
        s.expect(5, 1);
        s.whole(5, 1);
        assert_eq!(s.due(1001 * S, PAST).len(), 1);
        s.track(&fired(3, 2000));
        assert_eq!(s.track(&fired(4, 3000)), Some(5));
        assert!(s.fired(5).is_none() && s.fired(3).is_some());
    }

    #[test]
    fn the_output_part_waits_for_the_watermark_and_a_later_watermark_rewrites() {
        let mut s = Snapshots::new(60 * S, 8);
        s.track(&fired(1, 1000));
        s.expect(1, 10);
        s.whole(1, 10);
        // The ring window is whole but the output is not past 1005 s yet.
        assert!(s.due(1006 * S, 1004 * S).is_empty());
        let due = s.due(1007 * S, 1006 * S);
        assert_eq!(due.len(), 1);
        assert!(due[0].output_whole);
        s.written(1, &[10], true);
        assert!(s.due(1100 * S, PAST).is_empty());

        // A stream-only fleet: no ring window; due once the output passes.
        s.track(&fired(2, 2000));
        assert!(s.due(2003 * S, 2004 * S).is_empty());
        let due = s.due(2006 * S, 2006 * S);
        assert_eq!((due.len(), due[0].instances.len()), (1, 0));
        s.written(2, &[], true);
        assert!(s.due(2007 * S, PAST).is_empty());

        // The output stalled: at the deadline the file is written with what
        // there is, and again once the output passes the window's end.
        s.track(&fired(3, 3000));
        assert!(s.due(3064 * S, 3001 * S).is_empty());
        let due = s.due(3065 * S, 3001 * S);
        assert!(!due[0].output_whole);
        s.written(3, &[], false);
        assert!(s.due(3066 * S, 3002 * S).is_empty());
        assert_eq!(s.due(3067 * S, 3006 * S).len(), 1);
    }

    #[test]
    fn triggers_past_their_remember_time_are_forgotten() {
        let mut s = Snapshots::new(60 * S, 8);
        s.track(&fired(1, 1000));
        s.track(&fired(2, 5000));
        s.expect(1, 10);
        // Window of 1 ends at 1005 s: remembered 3600 s after.
        assert!(s.expire(4605 * S, 3600 * S).is_empty());
        assert_eq!(s.expire(4606 * S, 3600 * S), [1]);
        assert!(s.fired(1).is_none() && s.fired(2).is_some());
    }
}
