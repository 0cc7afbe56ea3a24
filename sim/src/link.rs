//! Link model, per direction: base delay, one-sided queueing (exponential
//! or pareto), a small symmetric term, spikes, reordering holds; per link:
//! Gilbert-Elliott burst loss and partitions.

use super::rng::Rng;

/// One-sided queueing distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Queue {
    None,
    /// Exponential with this mean (ns).
    Exp(f64),
    /// Pareto (Lomax) with this mean (ns) and shape.
    Pareto(f64, f64),
}

/// One direction of the link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Leg {
    pub base_ns: f64,
    pub queue: Queue,
    /// Symmetric term: uniform in +-this (ns), kept below the base.
    pub symmetric_ns: f64,
    /// Probability of a spike of 20-150 ms (Wi-Fi power save, retries).
    pub spike_p: f64,
    /// Probability that the packet is held (reordered) 0-`reorder_ns` more.
    pub reorder_p: f64,
    pub reorder_ns: f64,
}

impl Leg {
    pub fn new(base_ns: f64, queue: Queue) -> Self {
        Self {
            base_ns,
            queue,
            symmetric_ns: 0.0,
            spike_p: 0.0,
            reorder_p: 0.0,
            reorder_ns: 0.0,
        }
    }

    /// One one-way delay (ns, > 0).
    pub fn delay(&self, rng: &mut Rng) -> f64 {
        let queue = match self.queue {
            Queue::None => 0.0,
            Queue::Exp(mean) => rng.exponential(mean),
            Queue::Pareto(mean, alpha) => rng.pareto(mean, alpha),
        };
        let symmetric = rng.uniform(-self.symmetric_ns, self.symmetric_ns);
        let mut d = self.base_ns + queue + symmetric;
        if self.spike_p > 0.0 && rng.chance(self.spike_p) {
            d += rng.uniform(20e6, 150e6);
        }
        if self.reorder_p > 0.0 && rng.chance(self.reorder_p) {
            d += rng.uniform(0.0, self.reorder_ns);
        }
        d.max(1.0)
    }
}

/// Gilbert-Elliott loss: a good and a bad state, each with its loss rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BurstLoss {
    pub good_to_bad: f64,
    pub bad_to_good: f64,
    pub loss_good: f64,
    pub loss_bad: f64,
}

impl BurstLoss {
    pub const NONE: Self = Self {
        good_to_bad: 0.0,
        bad_to_good: 1.0,
        loss_good: 0.0,
        loss_bad: 0.0,
    };

    /// About `rate` of packets lost, in bursts of mean length `burst`.
    pub fn bursty(rate: f64, burst: f64) -> Self {
        let bad_to_good = 1.0 / burst.max(1.0);
        Self {
            good_to_bad: rate * bad_to_good / (1.0 - rate).max(1e-9),
            bad_to_good,
            loss_good: 0.0,
            loss_bad: 1.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LinkModel {
    /// Host -> relay (probe).
    pub forward: Leg,
    /// Relay -> host (reply).
    pub backward: Leg,
    pub loss: BurstLoss,
    /// Host-time intervals (s) in which nothing gets through.
    pub partitions: Vec<(f64, f64)>,
    /// Relay hold between receive and reply: fixed + exponential (ns).
    pub hold_ns: f64,
    pub hold_exp_ns: f64,
}

impl LinkModel {
    pub fn symmetric(leg: Leg) -> Self {
        Self {
            forward: leg,
            backward: leg,
            loss: BurstLoss::NONE,
            partitions: Vec::new(),
            hold_ns: 5_000.0,
            hold_exp_ns: 2_000.0,
        }
    }
}

/// The loss state machine of one link.
#[derive(Clone, Debug)]
pub struct LossState {
    bad: bool,
}

impl LossState {
    pub fn new() -> Self {
        Self { bad: false }
    }

    /// Whether the next packet is lost.
    pub fn lost(&mut self, model: &BurstLoss, rng: &mut Rng) -> bool {
        let flip = if self.bad {
            model.bad_to_good
        } else {
            model.good_to_bad
        };
        if rng.chance(flip) {
            self.bad = !self.bad;
        }
        rng.chance(if self.bad {
            model.loss_bad
        } else {
            model.loss_good
        })
    }
}

impl Default for LossState {
    fn default() -> Self {
        Self::new()
    }
}
