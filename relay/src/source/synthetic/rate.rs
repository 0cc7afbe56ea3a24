//! [`TokenBucket`]: the synthetic source's pacing, sans-IO.

/// Packets allowed so far at `rate` per second, at most `burst` at once
/// (a stalled spool does not lead to a flood afterwards). Sans-IO.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ns: Option<u64>,
}

impl TokenBucket {
    /// Bursts are capped at 100 ms of packets (at least one).
    pub fn new(rate: f64) -> Self {
        Self {
            rate,
            burst: (rate * 0.1).max(1.0),
            tokens: 0.0,
            last_ns: None,
        }
    }

    /// Whole packets available at `now_ns` (any monotonic clock), taken.
    pub fn take(&mut self, now_ns: u64) -> u64 {
        let elapsed = self.last_ns.map_or(0, |last| now_ns.saturating_sub(last));
        self.last_ns = Some(now_ns);
        self.tokens = (self.tokens + elapsed as f64 * 1e-9 * self.rate).min(self.burst);
        let whole = self.tokens.floor();
        self.tokens -= whole;
        whole as u64
    }
}
