//! A relay's hold on the watermark: which of its clocks count, and when a
//! relay whose clock stopped advancing lets go (the rule is in the module
//! docs of [`crate::live`], "Watermark").
//!
//! Two clocks are at work. Host BOOTTIME (`now`) places a relay's clocks:
//! mapped by its sync estimate, a clock read before the frame carrying it
//! arrived cannot lie after that arrival (beyond the estimate's bound and
//! [`CLOCK_AHEAD_SLACK_NS`]). The [`ReadingClock`] measures how long the
//! daemon has been reading frames: it runs with host time while the ingest
//! loop drains, but a gap between drains longer than
//! [`READING_STEP_MAX_NS`] counts only that much (the daemon was stopped,
//! starved, or not taking frames because its output failed: the relays'
//! frames waited in their sockets, through no fault of theirs). The stall
//! grace is measured on it.

use super::estimate::SyncEstimate;

/// A relay clock may map this far past host now, beyond its estimate's
/// bound, and still count (timestamp reads, an estimate not yet caught up
/// with a small step). A clock ahead of host now cannot hold the watermark
/// anyway (host now bounds it); refusing it keeps the relay's later, true
/// clocks from looking backwards.
pub const CLOCK_AHEAD_SLACK_NS: u64 = 1_000_000_000;

/// Longest step of the [`ReadingClock`] between two drains. The ingest
/// loop drains every 10 ms; a longer gap means it was not reading.
pub const READING_STEP_MAX_NS: u64 = 250_000_000;

/// How long the ingest loop has been reading frames (ns, from an arbitrary
/// origin): host time between drains, each gap capped at
/// [`READING_STEP_MAX_NS`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ReadingClock {
    /// Host BOOTTIME of the last drain (None before the first).
    last_now: Option<u64>,
    /// Reading time at the last drain.
    at_last: u64,
}

impl ReadingClock {
    /// Reading time at host BOOTTIME `now` (not recorded).
    pub fn at(&self, now: u64) -> u64 {
        match self.last_now {
            None => 0,
            Some(last) => self
                .at_last
                .saturating_add(now.saturating_sub(last).min(READING_STEP_MAX_NS)),
        }
    }

    /// A drain at host BOOTTIME `now`: the reading clock advances.
    pub fn drained(&mut self, now: u64) -> u64 {
        let at = self.at(now);
        self.at_last = at;
        self.last_now = Some(self.last_now.map_or(now, |l| l.max(now)));
        at
    }
}

/// What became of a clock a frame carried.
#[must_use = "a refused clock is counted"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Accepted,
    /// Earlier than the last one accepted this session, or implausible
    /// against the relay's sync estimate: it does not move the relay's hold.
    Refused,
}

/// A relay's watermark clock within one session.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Hold {
    /// The latest relay BOOTTIME accepted this session.
    clock: Option<u64>,
    /// Host BOOTTIME when that clock arrived.
    arrived: u64,
    /// Accepted while the relay had no sync estimate: checked when the
    /// first one comes.
    unchecked: bool,
    /// Reading time the relay's accepted clocks cover: set to the reading
    /// time of a session's first clock, then advanced by how far each later
    /// one moved (times a drift allowance), never past the reading time of
    /// its arrival. The relay lags by reading now minus this.
    fresh_at: u64,
    /// Counted as stalled; cleared when its clock catches up.
    stalled: bool,
    /// The core holds its connection back (its frames are not read): the
    /// grace does not run.
    paused: bool,
}

/// Relay clock progress credited as reading time: the progress plus 1/1024
/// (~1000 ppm, over any crystal's error and the estimator's 500 ppm clamp),
/// so a relay whose clock runs a little slow is never taken for stalled.
fn credit(progress: u64) -> u64 {
    progress.saturating_add(progress / 1024)
}

/// Whether relay BOOTTIME `b` arriving at host BOOTTIME `arrived` fits
/// `e`: not past `arrived` by more than the estimate's bound there plus
/// [`CLOCK_AHEAD_SLACK_NS`], and, if `behind_ns` is given, not before it
/// by more than that plus the bound.
fn plausible(e: &SyncEstimate, b: u64, arrived: u64, behind_ns: Option<u64>) -> bool {
    let host = i128::from(e.to_host(b));
    let bound = i128::from(e.bound_at(b));
    let arrived = i128::from(arrived);
    if host > arrived + bound + i128::from(CLOCK_AHEAD_SLACK_NS) {
        return false;
    }
    behind_ns.is_none_or(|behind| host >= arrived - bound - i128::from(behind))
}

impl Hold {
    /// A new session: nothing of the last one counts.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// The accepted clock, if any.
    pub fn clock(&self) -> Option<u64> {
        self.clock
    }

    /// A clock `b` arrived at host BOOTTIME `now`, reading time `reading`.
    /// Refused: earlier than the last accepted one; with an `estimate`,
    /// mapping past `now` beyond its bound and the slack; for the session's
    /// first clock, mapping before `now` by more than `behind_ns` (a
    /// frame's clocks are read when it is sent).
    pub fn saw(
        &mut self,
        b: u64,
        now: u64,
        reading: u64,
        estimate: Option<&SyncEstimate>,
        behind_ns: u64,
    ) -> Verdict {
        let first = self.clock.is_none();
        if self.clock.is_some_and(|last| b < last) {
            return Verdict::Refused;
        }
        if let Some(e) = estimate
            && !plausible(e, b, now, first.then_some(behind_ns))
        {
            return Verdict::Refused;
        }
        self.fresh_at = match self.clock {
            None => reading,
            Some(last) => self.fresh_at.saturating_add(credit(b - last)).min(reading),
        };
        self.clock = Some(b);
        self.arrived = now;
        self.unchecked = estimate.is_none();
        Verdict::Accepted
    }

    /// The relay's first estimate (or a new one): a clock accepted without
    /// one is checked now, as the session's first would have been; if it
    /// does not fit, it is forgotten (Refused) and the next clock counts as
    /// the session's first.
    pub fn estimated(&mut self, e: &SyncEstimate, behind_ns: u64) -> Verdict {
        let Some(b) = self.clock.filter(|_| self.unchecked) else {
            return Verdict::Accepted;
        };
        self.unchecked = false;
        if plausible(e, b, self.arrived, Some(behind_ns)) {
            Verdict::Accepted
        } else {
            self.clock = None;
            Verdict::Refused
        }
    }

    /// Whether its accepted clock has lagged the reading clock by more than
    /// `grace_ns` at reading time `reading` (never while paused).
    pub fn lags(&self, reading: u64, grace_ns: u64) -> bool {
        !self.paused && reading.saturating_sub(self.fresh_at) > grace_ns
    }

    /// Marks it stalled if it [`lags`](Self::lags) and has a clock: whether
    /// that is new (to be counted). Cleared once it no longer lags.
    pub fn check_stall(&mut self, reading: u64, grace_ns: u64) -> bool {
        let lags = self.clock.is_some() && self.lags(reading, grace_ns);
        let new = lags && !self.stalled;
        self.stalled = lags;
        new
    }

    /// Held back (or no longer) at reading time `reading`: when reading
    /// resumes, the grace starts again.
    pub fn set_paused(&mut self, paused: bool, reading: u64) {
        if self.paused && !paused {
            self.fresh_at = self.fresh_at.max(reading);
        }
        self.paused = paused;
    }
}
