//! Seeded per-direction link models (docs/clock-sync-accuracy.md, "Link profiles"):
//! base delay, one-sided queueing (exponential or pareto), a small
//! symmetric jitter term, spikes, loss and reordering. Pure functions of a
//! seeded generator, so a seed replays the same delays.

/// SplitMix64: small, fast, good enough for link models, and no crate.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator for one stream (`tag`) derived from `seed`.
    pub fn derive(seed: u64, tag: &[u64]) -> Self {
        let mut r = Self(seed ^ 0x5851_f42d_4c95_7f2d);
        for t in tag {
            r.0 ^= r.next_u64().wrapping_add(*t);
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1]: safe for logarithms and negative powers.
    fn open_unit(&mut self) -> f64 {
        1.0 - self.unit()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform integer in [lo, hi].
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.unit() * (hi - lo + 1) as f64) as u64
    }
}

/// The one-sided queueing term: never negative, so the base delay is the
/// floor a min-delay filter can find.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Queueing {
    None,
    /// Exponential with this mean (ns).
    Exp {
        mean_ns: f64,
    },
    /// Lomax (pareto shifted to start at 0) with tail index `alpha` (> 1)
    /// and this mean (ns).
    Pareto {
        alpha: f64,
        mean_ns: f64,
    },
}

impl Queueing {
    pub fn draw(&self, rng: &mut Rng) -> f64 {
        match *self {
            Queueing::None => 0.0,
            Queueing::Exp { mean_ns } => -mean_ns * rng.open_unit().ln(),
            Queueing::Pareto { alpha, mean_ns } => {
                let scale = mean_ns * (alpha - 1.0);
                scale * (rng.open_unit().powf(-1.0 / alpha) - 1.0)
            }
        }
    }
}

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DirectionModel {
    pub base_ns: u64,
    pub queue: Queueing,
    /// Symmetric term: uniform in [-jitter_ns, +jitter_ns] (the total is
    /// clamped at 0).
    pub jitter_ns: u64,
    /// Probability of a spike, and its uniform range (ns).
    pub spike_p: f64,
    pub spike_ns: (u64, u64),
    /// Datagram loss probability (TCP never loses).
    pub loss_p: f64,
    /// Probability that a datagram is held back by `reorder_ns` extra, so
    /// later ones overtake it (TCP is never reordered).
    pub reorder_p: f64,
    pub reorder_ns: u64,
}

impl DirectionModel {
    /// No impairment at all: forward as fast as the proxy can.
    pub const NONE: DirectionModel = DirectionModel {
        base_ns: 0,
        queue: Queueing::None,
        jitter_ns: 0,
        spike_p: 0.0,
        spike_ns: (0, 0),
        loss_p: 0.0,
        reorder_p: 0.0,
        reorder_ns: 0,
    };

    /// Base plus one-sided queueing, nothing else.
    pub const fn queued(base_ns: u64, queue: Queueing) -> Self {
        DirectionModel {
            base_ns,
            queue,
            ..Self::NONE
        }
    }
}

/// What happens to one datagram or one chunk of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Released this long (ns) after it was received.
    Deliver(u64),
    Lost,
}

/// Whether the model applies to datagrams (loss and reordering) or to a
/// byte stream (delay only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    Datagram,
    Stream,
}

impl DirectionModel {
    /// The fate of one unit. Always draws the same number of variates per
    /// call (for a given model and carrier), so seeds replay exactly.
    pub fn draw(&self, rng: &mut Rng, carrier: Carrier) -> Fate {
        let queue = self.queue.draw(rng);
        let jitter = if self.jitter_ns > 0 {
            (rng.unit() * 2.0 - 1.0) * self.jitter_ns as f64
        } else {
            0.0
        };
        let spike = if rng.chance(self.spike_p) {
            rng.between(self.spike_ns.0, self.spike_ns.1)
        } else {
            0
        };
        let lost = rng.chance(self.loss_p);
        let reordered = rng.chance(self.reorder_p);
        if carrier == Carrier::Datagram && lost {
            return Fate::Lost;
        }
        let mut delay = (self.base_ns as f64 + queue + jitter).max(0.0) as u64 + spike;
        if carrier == Carrier::Datagram && reordered {
            delay += self.reorder_ns;
        }
        Fate::Deliver(delay)
    }
}

/// A named pair of directions. `down` is daemon -> relay (the probe's way
/// out), `up` is relay -> daemon (the reply and the trace data).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    pub down: DirectionModel,
    pub up: DirectionModel,
    /// The link carries TCP only (as `adb reverse` does): the probes must
    /// take the relay's TCP transport, and no UDP is forwarded.
    pub tcp_only: bool,
}

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// One direction of the `usb` profile.
const USB_LEG: DirectionModel = DirectionModel {
    base_ns: 300 * US,
    queue: Queueing::Exp { mean_ns: 300e3 },
    jitter_ns: 20 * US,
    spike_p: 0.01,
    spike_ns: (8 * MS, 12 * MS),
    ..DirectionModel::NONE
};

/// The link profiles of docs/clock-sync-accuracy.md.
pub const PROFILES: &[Profile] = &[
    // Same host: the proxy adds only its own forwarding and scheduling.
    Profile {
        name: "loopback",
        down: DirectionModel::NONE,
        up: DirectionModel::NONE,
        tcp_only: false,
    },
    // Wired LAN, one switch: 90 us each way, exp 25 us per leg, a small
    // symmetric term.
    Profile {
        name: "lan",
        down: DirectionModel {
            jitter_ns: 2 * US,
            ..DirectionModel::queued(90 * US, Queueing::Exp { mean_ns: 25e3 })
        },
        up: DirectionModel {
            jitter_ns: 2 * US,
            ..DirectionModel::queued(90 * US, Queueing::Exp { mean_ns: 25e3 })
        },
        tcp_only: false,
    },
    // Wi-Fi: 1 ms base, exp 1 ms, 1% loss, 2% spikes of 20-150 ms (power
    // save, retries), some reordering.
    Profile {
        name: "wifi",
        down: DirectionModel {
            base_ns: MS,
            queue: Queueing::Exp { mean_ns: 1e6 },
            jitter_ns: 10 * US,
            spike_p: 0.02,
            spike_ns: (20 * MS, 150 * MS),
            loss_p: 0.01,
            reorder_p: 0.01,
            reorder_ns: 2 * MS,
        },
        up: DirectionModel {
            base_ns: MS,
            queue: Queueing::Exp { mean_ns: 1e6 },
            jitter_ns: 10 * US,
            spike_p: 0.02,
            spike_ns: (20 * MS, 150 * MS),
            loss_p: 0.01,
            reorder_p: 0.01,
            reorder_ns: 2 * MS,
        },
        tcp_only: false,
    },
    // Static asymmetry: 1 ms out (down), 3 ms back (up), small queueing.
    // The true offset error is the 1 ms half-difference: it must lie inside
    // the reported bound.
    Profile {
        name: "asym-static",
        down: DirectionModel::queued(MS, Queueing::Exp { mean_ns: 5e3 }),
        up: DirectionModel::queued(3 * MS, Queueing::Exp { mean_ns: 5e3 }),
        tcp_only: false,
    },
    // Asymmetric jitter: equal 1 ms bases, exp 50 us out, exp 2 ms back.
    Profile {
        name: "asym-jitter",
        down: DirectionModel::queued(MS, Queueing::Exp { mean_ns: 50e3 }),
        up: DirectionModel::queued(MS, Queueing::Exp { mean_ns: 2e6 }),
        tcp_only: false,
    },
    // Heavy-tailed LAN variant: pareto queueing (alpha 2.5).
    Profile {
        name: "lan-pareto",
        down: DirectionModel::queued(
            90 * US,
            Queueing::Pareto {
                alpha: 2.5,
                mean_ns: 25e3,
            },
        ),
        up: DirectionModel::queued(
            90 * US,
            Queueing::Pareto {
                alpha: 2.5,
                mean_ns: 25e3,
            },
        ),
        tcp_only: false,
    },
    // adb over USB (`adb reverse`): TCP only, through adb's user-space
    // forwarders on both ends and the USB bulk transfers between them:
    // 300 us + exp 300 us per leg (a few ms at the tail) +-20 us, and 1% of
    // chunks held 8-12 ms (a stalled transfer: the chunks behind it on that
    // connection wait too).
    Profile {
        name: "usb",
        down: USB_LEG,
        up: USB_LEG,
        tcp_only: true,
    },
];

pub fn profile(name: &str) -> Option<Profile> {
    PROFILES.iter().find(|p| p.name == name).copied()
}

pub fn profile_names() -> Vec<&'static str> {
    PROFILES.iter().map(|p| p.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(model: &DirectionModel, seed: u64, n: usize, carrier: Carrier) -> Vec<Fate> {
        let mut rng = Rng::derive(seed, &[1, 2]);
        (0..n).map(|_| model.draw(&mut rng, carrier)).collect()
    }

    #[test]
    fn same_seed_same_fates_other_seed_other_fates() {
        let wifi = profile("wifi").unwrap().up;
        let a = delays(&wifi, 7, 5000, Carrier::Datagram);
        assert_eq!(a, delays(&wifi, 7, 5000, Carrier::Datagram));
        assert_ne!(a, delays(&wifi, 8, 5000, Carrier::Datagram));
        // Streams derived from one seed with other tags differ too.
        let mut r1 = Rng::derive(7, &[1, 2]);
        let mut r2 = Rng::derive(7, &[2, 1]);
        assert_ne!(r1.next_u64(), r2.next_u64());
    }

    #[test]
    fn queueing_is_one_sided_with_the_configured_mean() {
        for queue in [
            Queueing::Exp { mean_ns: 25e3 },
            Queueing::Pareto {
                alpha: 2.5,
                mean_ns: 25e3,
            },
        ] {
            let model = DirectionModel::queued(90_000, queue);
            let fates = delays(&model, 3, 200_000, Carrier::Datagram);
            let d: Vec<u64> = fates
                .iter()
                .map(|f| match f {
                    Fate::Deliver(d) => *d,
                    Fate::Lost => panic!("no loss configured"),
                })
                .collect();
            let min = *d.iter().min().unwrap();
            assert!(min >= 90_000, "{queue:?}: delay {min} below the base");
            assert!(min < 90_100, "{queue:?}: the floor is reachable ({min})");
            let mean = d.iter().sum::<u64>() as f64 / d.len() as f64 - 90_000.0;
            assert!((mean - 25e3).abs() < 25e3 * 0.05, "{queue:?}: mean {mean}");
            // One-sided: the median sits below the mean (right-skewed).
            let mut sorted = d.clone();
            sorted.sort_unstable();
            let median = sorted[sorted.len() / 2] as f64 - 90_000.0;
            assert!(median < mean, "{queue:?}: median {median} mean {mean}");
        }
    }

    #[test]
    fn loss_and_reordering_only_for_datagrams() {
        let model = DirectionModel {
            loss_p: 0.1,
            reorder_p: 0.1,
            reorder_ns: 5_000_000,
            ..DirectionModel::queued(1000, Queueing::None)
        };
        let dgram = delays(&model, 11, 20_000, Carrier::Datagram);
        let lost = dgram.iter().filter(|f| **f == Fate::Lost).count();
        assert!((1500..2500).contains(&lost), "lost {lost}");
        let held = dgram
            .iter()
            .filter(|f| **f == Fate::Deliver(5_001_000))
            .count();
        assert!((1300..2300).contains(&held), "held {held}");
        let stream = delays(&model, 11, 20_000, Carrier::Stream);
        assert!(stream.iter().all(|f| *f == Fate::Deliver(1000)));
    }

    #[test]
    fn the_usb_profile_is_tcp_only_with_hundreds_of_us_and_rare_10_ms_stalls() {
        let usb = profile("usb").unwrap();
        assert!(usb.tcp_only);
        assert!(PROFILES.iter().filter(|p| p.tcp_only).count() == 1);
        let fates = delays(&usb.up, 4, 100_000, Carrier::Stream);
        let mut d: Vec<u64> = fates
            .iter()
            .map(|f| match f {
                Fate::Deliver(d) => *d,
                Fate::Lost => panic!("streams never lose"),
            })
            .collect();
        d.sort_unstable();
        let at = |q: f64| d[((d.len() - 1) as f64 * q) as usize];
        assert!((400_000..700_000).contains(&at(0.5)), "p50 {}", at(0.5));
        assert!(
            (1_000_000..3_000_000).contains(&at(0.98)),
            "p98 {}",
            at(0.98)
        );
        let stalls = d.iter().filter(|&&x| x >= 8_000_000).count();
        assert!((700..1300).contains(&stalls), "{stalls} stalls");
        assert!(*d.last().unwrap() < 16_000_000);
        assert_eq!(
            crate::impair::wiring::Wiring::of("usb").map(crate::impair::wiring::Wiring::tcp_only),
            Some(true)
        );
        assert_eq!(
            crate::impair::wiring::Wiring::of("lan").map(crate::impair::wiring::Wiring::tcp_only),
            Some(false)
        );
    }

    #[test]
    fn asymmetric_static_profile_has_the_configured_bases() {
        let p = profile("asym-static").unwrap();
        assert_eq!((p.down.base_ns, p.up.base_ns), (1_000_000, 3_000_000));
        assert!(profile("nope").is_none());
        assert_eq!(
            profile("loopback")
                .unwrap()
                .down
                .draw(&mut Rng::new(1), Carrier::Datagram),
            Fate::Deliver(0)
        );
    }
}
