//! Test models shared by the estimator's tests: a deterministic noise
//! source and a relay clock with offset and drift.

/// Small deterministic generator (xorshift64*), so the tests need no crate.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    pub(super) fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with the given mean (ns): one-sided queueing noise.
    pub(super) fn exponential(&mut self, mean_ns: f64) -> u64 {
        (-mean_ns * self.unit().ln()) as u64
    }
}

/// A relay clock: relay = host + offset + (host - origin) * ppm.
pub(super) struct RelayModel {
    pub(super) offset_ns: i64,
    pub(super) drift_ppm: f64,
    pub(super) origin_ns: u64,
}

impl RelayModel {
    pub(super) fn relay(&self, host_ns: u64) -> u64 {
        let elapsed = host_ns as f64 - self.origin_ns as f64;
        (host_ns as i64 + self.offset_ns + (elapsed * self.drift_ppm * 1e-6) as i64) as u64
    }
}

/// One exchange starting at host time `t1`, each leg's one-way delay
/// drawn by `leg`, the relay's hold a few µs.
pub(super) fn exchange_with(
    model: &RelayModel,
    rng: &mut Rng,
    t1: u64,
    leg: impl Fn(&mut Rng) -> u64,
) -> [u64; 4] {
    let forward = leg(rng);
    let hold = 3_000 + rng.exponential(1_000.0);
    let backward = leg(rng);
    let t2_host = t1 + forward;
    let t3_host = t2_host + hold;
    [
        t1,
        model.relay(t2_host),
        model.relay(t3_host),
        t3_host + backward,
    ]
}
