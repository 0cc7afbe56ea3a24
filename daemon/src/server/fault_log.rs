//! Warnings about peers' faults (failed handshakes, refusals), at most one
//! line per reason per [`FAULT_LOG_EVERY`]: a flood of failing connections
//! must not become a flood of log. Invariants: the first fault of a reason
//! is always logged at once; a fault not logged is counted, and the next
//! line of its reason says how many were ([`Suppressed`]); the table holds
//! one entry per reason (a `'static` label), never per peer.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per reason per this long.
pub const FAULT_LOG_EVERY: Duration = Duration::from_secs(10);

/// The daemon's peer-fault log (one per process: a flood reaches every
/// listener alike).
pub static PEER_FAULTS: FaultLog = FaultLog::new(FAULT_LOG_EVERY);

#[derive(Debug)]
pub struct FaultLog {
    every: Duration,
    reasons: Mutex<BTreeMap<&'static str, Entry>>,
}

#[derive(Debug)]
struct Entry {
    logged_at: Instant,
    suppressed: u64,
}

/// How many faults of a reason went unlogged before this line; printed as
/// "" (none) or "; N more like it in the last S s not logged".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suppressed {
    pub count: u64,
    pub over: Duration,
}

impl fmt::Display for Suppressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 0 {
            return Ok(());
        }
        write!(
            f,
            "; {} more like it in the last {} s not logged",
            self.count,
            self.over.as_secs()
        )
    }
}

impl FaultLog {
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            reasons: Mutex::new(BTreeMap::new()),
        }
    }

    /// A fault of `reason` now: Some (log it, saying what was suppressed)
    /// or None (counted for the next line).
    pub fn admit(&self, reason: &'static str) -> Option<Suppressed> {
        self.admit_at(reason, Instant::now())
    }

    fn admit_at(&self, reason: &'static str, now: Instant) -> Option<Suppressed> {
        let mut reasons = self
            .reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match reasons.get_mut(reason) {
            Some(entry) if now < entry.logged_at + self.every => {
                entry.suppressed = entry.suppressed.saturating_add(1);
                None
            }
            Some(entry) => {
                let suppressed = Suppressed {
                    count: entry.suppressed,
                    over: now.saturating_duration_since(entry.logged_at),
                };
                *entry = Entry {
                    logged_at: now,
                    suppressed: 0,
                };
                Some(suppressed)
            }
            None => {
                let entry = Entry {
                    logged_at: now,
                    suppressed: 0,
                };
                reasons.insert(reason, entry);
                Some(Suppressed {
                    count: 0,
                    over: Duration::ZERO,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_reason_per_interval_with_the_count_of_the_rest() {
        let log = FaultLog::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let first = log.admit_at("closed", at(0)).expect("the first is logged");
        assert_eq!(first.to_string(), "");
        // 1,000 more within the interval: none logged; another reason is.
        for i in 1..=1_000 {
            assert!(log.admit_at("closed", at(i)).is_none());
        }
        assert!(log.admit_at("timeout", at(5)).is_some());
        let next = log
            .admit_at("closed", at(10_000))
            .expect("after the interval");
        assert_eq!(next.count, 1_000);
        assert_eq!(
            next.to_string(),
            "; 1000 more like it in the last 10 s not logged"
        );
        assert!(log.admit_at("closed", at(10_001)).is_none());
        assert_eq!(log.admit_at("closed", at(30_000)).map(|s| s.count), Some(1));
    }
}
