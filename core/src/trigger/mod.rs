//! The host's side of the flight recorder, sans-IO: a trigger (from the
//! control socket, or carried by a relay) is limited per name, given an id
//! and the host time T it fires at, and remembered for a while so a relay
//! that connects later still ships its window; for each relay in ring mode
//! its window [T - before, T + after] is mapped onto the relay's BOOTTIME
//! with the relay's current estimate, widened by the estimate's hard bound
//! ([`relay_window`]); [`RingRelays`] tracks what each connected ring relay
//! is still owed; [`Snapshots`] says when a trigger's snapshot is written
//! and [`Assembly`] makes its packets.
//!
//! Invariants:
//! - Per name, at most `max_per_name` triggers fire within any `per_ns` of
//!   host time; the rest are refused, counted ([`TriggerStats`]) and said
//!   (the refusal's reason is one line naming the limit).
//! - Ids are unique within a daemon run (a seeded counter: a restarted
//!   daemon's ids do not collide with windows relays still hold).
//! - At most `max_remembered` fired triggers are remembered, each for
//!   `remember_ns` after its window's end; the oldest go first.

pub mod assemble;
pub mod relays;
pub mod snapshots;
#[cfg(test)]
mod tests;

pub use assemble::{Assembly, AssemblyStats};
pub use relays::RingRelays;
pub use snapshots::{Due, Snapshots};

use std::collections::{HashMap, VecDeque};

use crate::sync::SyncEstimate;

/// Bounds of the trigger table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerConfig {
    /// Triggers of one name that may fire within `per_ns`.
    pub max_per_name: u32,
    pub per_ns: u64,
    /// How long after its window's end a trigger is still sent to relays
    /// that connect.
    pub remember_ns: u64,
    pub max_remembered: usize,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        Self {
            max_per_name: 10,
            per_ns: 3_600_000_000_000,
            remember_ns: 3_600_000_000_000,
            max_remembered: 64,
        }
    }
}

/// A trigger as asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerRequest {
    pub name: String,
    pub before_ns: u64,
    pub after_ns: u64,
}

/// A trigger that fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    pub id: u64,
    pub name: String,
    /// Host time T (host BOOTTIME ns).
    pub host_time_ns: u64,
    pub before_ns: u64,
    pub after_ns: u64,
}

impl Fired {
    /// [T - before, T + after] on the host's clock.
    pub fn host_window(&self) -> (u64, u64) {
        (
            self.host_time_ns.saturating_sub(self.before_ns),
            self.host_time_ns.saturating_add(self.after_ns),
        )
    }
}

/// What became of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Fired(Fired),
    /// Over the name's limit: not fired; the reason is one line.
    Refused(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TriggerStats {
    pub fired: u64,
    pub refused: u64,
}

#[derive(Debug)]
pub struct Triggers {
    config: TriggerConfig,
    /// Host times each name fired at within the last `per_ns`.
    recent: HashMap<String, VecDeque<u64>>,
    remembered: VecDeque<Fired>,
    next_id: u64,
    stats: TriggerStats,
}

impl Triggers {
    /// `seed` starts the ids (the daemon draws it at random).
    pub fn new(config: TriggerConfig, seed: u64) -> Self {
        Self {
            config,
            recent: HashMap::new(),
            remembered: VecDeque::new(),
            next_id: seed | 1,
            stats: TriggerStats::default(),
        }
    }

    /// Fires `request` at host time `now_ns` unless its name is over its
    /// limit.
    pub fn fire(&mut self, request: TriggerRequest, now_ns: u64) -> Decision {
        self.fire_at(request, now_ns, now_ns)
    }

    /// Fires `request`, asked for at host time `now_ns`, at host time
    /// `host_time_ns` (a relay's moment mapped to host time, at most a
    /// little before `now_ns`) unless its name is over its limit. The
    /// limit counts by `now_ns`: a trigger stamped in the past cannot
    /// slip past it.
    pub fn fire_at(&mut self, request: TriggerRequest, now_ns: u64, host_time_ns: u64) -> Decision {
        let per_ns = self.config.per_ns;
        let times = self.recent.entry(request.name.clone()).or_default();
        while times
            .front()
            .is_some_and(|&t| now_ns.saturating_sub(t) >= per_ns)
        {
            times.pop_front();
        }
        if times.len() >= self.config.max_per_name as usize {
            self.stats.refused += 1;
            return Decision::Refused(format!(
                "trigger {:?} refused: it fired {} times within {} s already (the limit per \
                 name); {} refused so far",
                request.name,
                times.len(),
                self.config.per_ns / 1_000_000_000,
                self.stats.refused
            ));
        }
        times.push_back(now_ns);
        self.recent.retain(|_, times| !times.is_empty());
        let fired = Fired {
            id: self.next_id,
            name: request.name,
            host_time_ns,
            before_ns: request.before_ns,
            after_ns: request.after_ns,
        };
        self.next_id = self.next_id.wrapping_add(2);
        self.stats.fired += 1;
        if self.remembered.len() >= self.config.max_remembered {
            self.remembered.pop_front();
        }
        self.remembered.push_back(fired.clone());
        Decision::Fired(fired)
    }

    /// The triggers a relay that connects at `now_ns` must still be sent
    /// (forgetting those past their time).
    pub fn for_new_relay(&mut self, now_ns: u64) -> Vec<Fired> {
        let remember = self.config.remember_ns;
        self.remembered
            .retain(|f| f.host_window().1.saturating_add(remember) > now_ns);
        self.remembered.iter().cloned().collect()
    }

    pub fn stats(&self) -> &TriggerStats {
        &self.stats
    }

    pub fn config(&self) -> &TriggerConfig {
        &self.config
    }
}

/// How a relay's trigger moment became host time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapped {
    /// Through the relay's clock estimate.
    Estimate,
    /// When the request came: no estimate yet, or the relay's time maps
    /// outside [now - `MAX_LOOKBACK_NS`, now + `MAX_AHEAD_NS`].
    Receipt,
}

impl Mapped {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Estimate => "estimate",
            Self::Receipt => "receipt",
        }
    }
}

/// How far before its receipt a relay's trigger may be placed: a relay
/// asks as soon as it is stamped, so more is a clock gone wrong.
pub const MAX_LOOKBACK_NS: u64 = 60_000_000_000;
/// How far after its receipt (the estimate's error, at most).
pub const MAX_AHEAD_NS: u64 = 1_000_000_000;

/// The host time of a trigger stamped `relay_ns` on a relay's BOOTTIME,
/// received at host time `now_ns`: through `estimate` when there is one
/// and it maps the moment near `now_ns`, else `now_ns`.
pub fn host_time_of(relay_ns: u64, estimate: Option<&SyncEstimate>, now_ns: u64) -> (u64, Mapped) {
    let mapped = estimate
        .filter(|_| relay_ns > 0)
        .and_then(|e| e.checked_to_host(relay_ns))
        .and_then(|t| u64::try_from(t).ok())
        .filter(|&t| {
            t >= now_ns.saturating_sub(MAX_LOOKBACK_NS) && t <= now_ns.saturating_add(MAX_AHEAD_NS)
        });
    match mapped {
        Some(t) => (t, Mapped::Estimate),
        None => (now_ns, Mapped::Receipt),
    }
}

/// A fired trigger's window on a relay's BOOTTIME: its host window mapped
/// with the relay's estimate, each end moved out by the estimate's hard
/// bound there (the window the relay ships holds every packet of the host
/// window, whatever the truth within the bound). None when the relay's
/// clock is not estimated yet or the window is beyond the clock's range.
pub fn relay_window(fired: &Fired, estimate: &SyncEstimate) -> Option<(u64, u64)> {
    let (from, to) = fired.host_window();
    let from_relay = to_relay(from, estimate)?;
    let to_relay_ns = to_relay(to, estimate)?;
    let from_bound = estimate.bound_at(from_relay);
    let to_bound = estimate.bound_at(to_relay_ns);
    if from_bound == u64::MAX || to_bound == u64::MAX {
        return None;
    }
    Some((
        from_relay.saturating_sub(from_bound),
        to_relay_ns.saturating_add(to_bound),
    ))
}

/// Of two estimates of one relay, the one whose hard bound is smaller
/// over the trigger's window: a relay that reconnected (or restarted) has
/// a young estimate, and the one from before may be far tighter where the
/// window lies; `a` on a tie.
pub fn tighter_over(fired: &Fired, a: SyncEstimate, b: SyncEstimate) -> SyncEstimate {
    let (from, to) = fired.host_window();
    let worst = |e: &SyncEstimate| {
        [from, to]
            .into_iter()
            .map(|h| to_relay(h, e).map_or(u64::MAX, |r| e.bound_at(r)))
            .max()
            .unwrap_or(u64::MAX)
    };
    if worst(&b) < worst(&a) { b } else { a }
}

/// Longest a window shipped after a reconnect waits for the relay's new
/// estimate to settle ([`settled_for`]) (ns).
pub const SETTLE_MAX_NS: u64 = 60_000_000_000;

/// Whether, at host time `now_ns`, the estimate of a relay session that
/// began at `connected_ns` may map a window of `fired`. A session that
/// began after the window's end has a young estimate: its first samples
/// (a burst over ~0.1 s) leave its frequency loose by up to hundreds of
/// ppm, and carried tens of seconds back to the window it places packets
/// milliseconds off. That stays inside its bound, but the window is cut
/// to [T - before, T + after] by the mapped times, so packets near its
/// ends land on the wrong side. It maps once its session has lasted as
/// long as the distance back to the window (its samples then pin the
/// frequency over that distance), or [`SETTLE_MAX_NS`].
pub fn settled_for(fired: &Fired, connected_ns: u64, now_ns: u64) -> bool {
    let end = fired.host_window().1;
    let distance = connected_ns.saturating_sub(end).min(SETTLE_MAX_NS);
    now_ns >= connected_ns.saturating_add(distance)
}

/// The relay BOOTTIME the estimate maps to host time `host_ns`: relay =
/// host + offset(relay), solved by two fixed-point steps (the offset moves
/// by ppm of the distance, so the second step is exact to well under a
/// nanosecond for any window of hours).
fn to_relay(host_ns: u64, estimate: &SyncEstimate) -> Option<u64> {
    let host = i64::try_from(host_ns).ok()?;
    let mut relay = host.checked_add(estimate.offset_ns)?;
    for _ in 0..2 {
        let at = u64::try_from(relay).ok()?;
        relay = host.checked_add(estimate.offset_at(at))?;
    }
    u64::try_from(relay).ok()
}
