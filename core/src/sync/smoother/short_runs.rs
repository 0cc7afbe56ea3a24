//! Short segments joined where one line holds them (sans-IO).
//!
//! A relay NTP slew (the clock runs some hundred ppm fast for a few
//! seconds) is a change of rate, not of phase, but the live estimator
//! confirms it as a run of "steps" a fraction of a second apart: after
//! each, a burst of samples fits a new line whose slope few samples can
//! set, the next samples leave it, and another step follows. Each piece
//! is then its own segment, a line over a few hundred milliseconds of
//! legs that misses the clock by microseconds. Two neighbouring segments,
//! one of them short, are one when a single line fits their legs and the
//! samples between them as well as it fits each alone: the corridor of
//! one line over the joined legs is not narrower than the narrower of
//! the two corridors by more than the envelopes' own noise. A kink (the
//! slew's start or end) or a step between them narrows it by the misfit.
//!
//! Invariants:
//! - **Only what one line holds.** A step or kink larger than a few times
//!   the envelopes' noise keeps its segments apart; a join never crosses
//!   a step found by the envelopes, a suspend or an epoch change.
//! - **Bounded.** Each test reads the legs of at most [`NEAR_NS`] either
//!   side of the boundary.

use std::ops::Range;

use super::Exchange;
use crate::sync::EstimatorConfig;
use crate::sync::corridor::{Leg, legs, midline};

/// A segment shorter than this (relay time between its first and last
/// sample) may be joined to a neighbour.
const SHORT_NS: u64 = 5_000_000_000;

/// Relay time of each neighbour's legs, from the boundary, that the test
/// reads: a long segment's line bends with the clock's wander further
/// out.
const NEAR_NS: u64 = 10_000_000_000;

/// The joined corridor may be narrower than the narrower alone by this
/// many times the envelopes' noise ...
const NOISES: f64 = 4.0;
/// ... plus this much (ns): the timestamps' grain.
const SLACK_NS: f64 = 1_000.0;

/// `parts` (index ranges of `exchanges`, each with the step found by the
/// envelopes before it) with neighbours joined where one line holds both
/// and one is short; a joined part keeps the samples between them.
pub(super) fn join(
    config: EstimatorConfig,
    exchanges: &[Exchange],
    parts: Vec<(Range<usize>, Option<u64>)>,
) -> Vec<(Range<usize>, Option<u64>)> {
    let max_freq = super::slope_range(config);
    let mut out: Vec<(Range<usize>, Option<u64>)> = Vec::with_capacity(parts.len());
    for (range, found) in parts {
        if let Some((last, _)) = out.last_mut()
            && found.is_none()
            && (span(exchanges, last) < SHORT_NS || span(exchanges, &range) < SHORT_NS)
            && same_epoch(config, exchanges, last, &range)
            && one_line(exchanges, last, &range, max_freq)
        {
            last.end = range.end;
            continue;
        }
        out.push((range, found));
    }
    out
}

/// Relay time from the first to the last sample of `r`.
fn span(exchanges: &[Exchange], r: &Range<usize>) -> u64 {
    let (lo, hi) = exchanges[r.clone()]
        .iter()
        .map(Exchange::relay_mid_ns)
        .fold((u64::MAX, 0), |(lo, hi), m| (lo.min(m), hi.max(m)));
    hi.saturating_sub(lo)
}

/// Whether ranges `a` and `b` of `xs` lie in one epoch (no suspend
/// between them).
pub(super) fn same_epoch(
    config: EstimatorConfig,
    xs: &[Exchange],
    a: &Range<usize>,
    b: &Range<usize>,
) -> bool {
    let bmm = |r: &Range<usize>| i128::from(xs[r.start].boottime_minus_monotonic_ns);
    (bmm(a) - bmm(b)).unsigned_abs() <= u128::from(config.epoch_jump_ns)
}

/// Whether one line fits the legs of `a`'s end, the samples between `a`
/// and `b`, and `b`'s start as well as it fits each of `a` and `b` alone.
fn one_line(xs: &[Exchange], a: &Range<usize>, b: &Range<usize>, max_freq: f64) -> bool {
    let boundary = xs[a.end - 1].relay_mid_ns();
    let near_a: Vec<[u64; 4]> = xs[a.clone()]
        .iter()
        .filter(|x| x.relay_mid_ns().saturating_add(NEAR_NS) >= boundary)
        .map(|x| x.t)
        .collect();
    let start_b = xs[b.start].relay_mid_ns();
    let near_b: Vec<[u64; 4]> = xs[b.clone()]
        .iter()
        .filter(|x| x.relay_mid_ns() <= start_b.saturating_add(NEAR_NS))
        .map(|x| x.t)
        .collect();
    let between = xs[a.end..b.start].iter().map(|x| x.t);
    let joined: Vec<[u64; 4]> = near_a
        .iter()
        .copied()
        .chain(between)
        .chain(near_b.iter().copied())
        .collect();
    let (Some(wa), Some(wb), Some(wj)) = (
        widest(&near_a, max_freq),
        widest(&near_b, max_freq),
        widest(&joined, max_freq),
    ) else {
        return false;
    };
    let narrower = if wa.width <= wb.width { wa } else { wb };
    let noise = wa.noise.max(wb.noise);
    wj.width >= narrower.width - NOISES * noise - SLACK_NS
}

/// The widest corridor one line leaves between the legs of `exchanges`,
/// and their noise (the mean gap between the fastest and the second
/// fastest leg of each kind about that line).
#[derive(Clone, Copy, Debug)]
struct Widest {
    width: f64,
    noise: f64,
}

fn widest(exchanges: &[[u64; 4]], max_freq: f64) -> Option<Widest> {
    let (lower, upper) = legs(exchanges.iter().copied());
    if lower.len() < 2 || upper.len() < 2 {
        return None;
    }
    let origin = lower[0].relay_ns;
    let base = lower[0].h_ns;
    let points = |legs: &[Leg]| -> Vec<(f64, f64)> {
        legs.iter()
            .map(|l| {
                let x = (l.relay_ns as i128 - origin as i128) as f64;
                (x, (l.h_ns - base) as f64)
            })
            .collect()
    };
    let (lower, upper) = (points(&lower), points(&upper));
    let (_, slope, width) = midline(&lower, &upper, (-max_freq, max_freq))?;
    // Gap between the two legs of one kind nearest the line of `slope`
    // (`sign` -1: the lower bounds, whose nearest are the highest).
    let two_fastest = |pts: &[(f64, f64)], sign: f64| {
        let mut v: Vec<f64> = pts.iter().map(|&(x, y)| sign * (y - slope * x)).collect();
        v.select_nth_unstable_by(1, f64::total_cmp);
        (v[1] - v[0]).abs()
    };
    let noise = (two_fastest(&lower, -1.0) + two_fastest(&upper, 1.0)) / 2.0;
    Some(Widest { width, noise })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relay time of host time `h` (ns): 20 ppm fast, plus `extra_ppm`
    /// between host seconds `from_s` and `to_s` (a slew), plus `step_ns`
    /// from host second `step_s` on.
    struct Clock {
        extra_ppm: f64,
        from_s: f64,
        to_s: f64,
        step_s: f64,
        step_ns: f64,
    }

    impl Clock {
        fn relay(&self, h: u64) -> u64 {
            let s = h as f64 / 1e9;
            let slewed = (s.min(self.to_s) - self.from_s).max(0.0);
            let mut r = h as f64 + 5e6 + 20e-6 * h as f64 + self.extra_ppm * 1e-6 * slewed * 1e9;
            if s >= self.step_s {
                r += self.step_ns;
            }
            r.round() as u64
        }
    }

    /// Exchanges every 100 ms of host time over 60 s, each leg 90 µs plus
    /// exponential queueing of mean 25 µs (splitmix64, seed 7).
    fn exchanges(clock: &Clock) -> Vec<Exchange> {
        let mut state = 7u64;
        let mut delay = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
            90_000 + (-(1.0 - u).ln() * 25_000.0) as u64
        };
        (1..600u64)
            .map(|i| {
                let h = i * 100_000_000;
                let (d1, d2) = (delay(), delay());
                let t2 = clock.relay(h + d1);
                Exchange {
                    t: [h, t2, t2 + 20_000, h + d1 + 20_000 + d2],
                    boottime_minus_monotonic_ns: 0,
                }
            })
            .collect()
    }

    /// Parts cut before the exchanges sent at these host seconds.
    fn parts(xs: &[Exchange], cuts_s: &[f64]) -> Vec<(Range<usize>, Option<u64>)> {
        let mut at: Vec<usize> = cuts_s
            .iter()
            .map(|&c| xs.partition_point(|x| (x.t[0] as f64) < c * 1e9))
            .collect();
        at.insert(0, 0);
        at.push(xs.len());
        at.windows(2).map(|w| (w[0]..w[1], None)).collect()
    }

    fn starts_s(xs: &[Exchange], joined: &[(Range<usize>, Option<u64>)]) -> Vec<f64> {
        joined
            .iter()
            .map(|(r, _)| (xs[r.start].t[0] as f64 / 1e8).round() / 10.0)
            .collect()
    }

    #[test]
    fn the_pieces_of_a_slew_are_one_segment_and_its_kinks_stay_cuts() {
        // +500 ppm from 30 s to 32 s, cut as the live estimator cuts a
        // slew: a piece of its first half second, the rest, and half a
        // second after its end.
        let clock = Clock {
            extra_ppm: 500.0,
            from_s: 30.0,
            to_s: 32.0,
            step_s: f64::INFINITY,
            step_ns: 0.0,
        };
        let xs = exchanges(&clock);
        let cut = parts(&xs, &[30.0, 30.5, 32.0, 32.5]);
        let joined = join(EstimatorConfig::default(), &xs, cut);
        assert_eq!(starts_s(&xs, &joined), [0.1, 30.0, 32.0]);
    }

    #[test]
    fn a_step_keeps_short_segments_apart() {
        let clock = Clock {
            extra_ppm: 0.0,
            from_s: 0.0,
            to_s: 0.0,
            step_s: 30.0,
            step_ns: 50_000.0,
        };
        let xs = exchanges(&clock);
        let joined = join(
            EstimatorConfig::default(),
            &xs,
            parts(&xs, &[29.0, 30.0, 31.0]),
        );
        assert_eq!(starts_s(&xs, &joined), [0.1, 30.0]);
    }

    #[test]
    fn a_step_found_by_the_envelopes_or_a_suspend_is_never_joined() {
        let clock = Clock {
            extra_ppm: 0.0,
            from_s: 0.0,
            to_s: 0.0,
            step_s: f64::INFINITY,
            step_ns: 0.0,
        };
        let mut xs = exchanges(&clock);
        let mut cut = parts(&xs, &[29.0, 30.0, 31.0]);
        cut[2].1 = Some(xs[cut[2].0.start].t[1]);
        for x in &mut xs[cut[3].0.clone()] {
            x.boottime_minus_monotonic_ns = 40_000_000_000;
        }
        let joined = join(EstimatorConfig::default(), &xs, cut);
        // The one-line pieces either side of 29 s are joined; the found
        // step at 30 s and the new epoch at 31 s are not.
        assert_eq!(starts_s(&xs, &joined), [0.1, 30.0, 31.0]);
    }
}
