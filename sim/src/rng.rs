//! A tiny deterministic generator (splitmix64) and the distributions the
//! models need. Same seed, same numbers, on every platform.

/// splitmix64 (Steele, Lea, Flood 2014): 64-bit state, passes BigCrush.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// An independent stream for one purpose (clock, each link leg, events).
    pub fn fork(&mut self, stream: u64) -> Self {
        Self(self.next_u64() ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.unit() - f64::EPSILON).max(0.0)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() <= p
    }

    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }

    /// Pareto (Lomax form, >= 0) with shape `alpha` and the given mean.
    pub fn pareto(&mut self, mean: f64, alpha: f64) -> f64 {
        let scale = mean * (alpha - 1.0);
        scale * (self.unit().powf(-1.0 / alpha) - 1.0)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let r = (-2.0 * self.unit().ln()).sqrt();
        r * (std::f64::consts::TAU * self.unit()).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_roughly_calibrated() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        assert_eq!(a.next_u64(), b.next_u64());
        let n = 20_000;
        let mean = (0..n).map(|_| a.exponential(10.0)).sum::<f64>() / n as f64;
        assert!((mean - 10.0).abs() < 0.5, "{mean}");
        let mean = (0..n).map(|_| a.pareto(10.0, 2.5)).sum::<f64>() / n as f64;
        assert!((mean - 10.0).abs() < 1.5, "{mean}");
        let var = (0..n).map(|_| a.normal().powi(2)).sum::<f64>() / n as f64;
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }
}
