//! Line or parabola, judged on legs the fit did not see.
//!
//! A parabola always leaves a corridor at least as wide as a line over
//! the same legs: its extra freedom also bends towards the few fastest
//! legs of a straight clock, and at a window's ends that bend is error.
//! Which of the two holds is told by fitting each on every other leg and
//! measuring the corridor the fitted curve leaves among the other half:
//! the clock's true shape leaves the held-out fast legs where the fitted
//! half's were (the widest corridor), a wrong one (a line on a clock that
//! bends, a parabola bent to one half's noise) narrows it.
//!
//! The widths rest on a few fastest legs, so they are noisy by about the
//! spread of the fastest of n legs; a parabola must win on both halves,
//! by several times that spread in all.

use super::{Leg, Line, widest};

/// How many times the spread of the fastest leg (see [`fastest_spread`])
/// the parabolas' held-out corridors must be wider by, summed over both
/// halves. Where both halves favoured the parabola on a straight clock
/// (the simulator's step scenarios' first 10-15 s segments, seeds 5-24)
/// the sum reached 0.7-4.2 of it (at 4.2 the parabola doubled that run's
/// p99); on the real-socket wandering relay (5 ppm over 60 s) 4.7-95.
const MUST_WIN_BY: f64 = 5.0;

/// Whether a parabola at `at` describes the legs better than a line, by
/// two-fold cross-validation over alternate legs (see the module doc).
/// False when either half is too small to fit.
pub(super) fn parabola_predicts_better(
    lower: &[Leg],
    upper: &[Leg],
    at: u64,
    base_ns: i128,
    max: f64,
) -> bool {
    let (lower_a, lower_b) = alternate(lower);
    let (upper_a, upper_b) = alternate(upper);
    let held_out = |curved: bool| -> Option<(f64, f64)> {
        let a = widest(&lower_a, &upper_a, at, base_ns, max, curved)?;
        let b = widest(&lower_b, &upper_b, at, base_ns, max, curved)?;
        Some((
            width_left(&a, &lower_b, &upper_b, base_ns),
            width_left(&b, &lower_a, &upper_a, base_ns),
        ))
    };
    let (Some(line), Some(parabola)) = (held_out(false), held_out(true)) else {
        return false;
    };
    let gains = (parabola.0 - line.0, parabola.1 - line.1);
    let Some(spread) = fastest_spread(lower, upper, at, base_ns, max) else {
        return false;
    };
    gains.0 > 0.0 && gains.1 > 0.0 && gains.0 + gains.1 > MUST_WIN_BY * spread
}

/// Every other leg, from the first and from the second.
fn alternate(legs: &[Leg]) -> (Vec<Leg>, Vec<Leg>) {
    let a = legs.iter().step_by(2).copied().collect();
    let b = legs.iter().skip(1).step_by(2).copied().collect();
    (a, b)
}

/// The width of the corridor `curve` (moved up or down freely) leaves
/// between `lower` and `upper`: negative where no shift clears both.
fn width_left(curve: &Line, lower: &[Leg], upper: &[Leg], base_ns: i128) -> f64 {
    let residual = |l: &Leg| (l.h_ns - base_ns) as f64 - curve.at(l.relay_ns);
    let floor = lower.iter().map(residual).fold(f64::NEG_INFINITY, f64::max);
    let ceiling = upper.iter().map(residual).fold(f64::INFINITY, f64::min);
    ceiling - floor
}

/// How much the fastest leg of each kind among half the legs scatters
/// (ns), summed over both kinds: with exponential queueing of mean q the
/// fastest of n legs is late by q / n on average, with that spread too;
/// q is read from the median lateness (q ln 2) against the line over all
/// legs. None when that line cannot be fitted.
fn fastest_spread(lower: &[Leg], upper: &[Leg], at: u64, base_ns: i128, max: f64) -> Option<f64> {
    let line = widest(lower, upper, at, base_ns, max, false)?;
    let lateness = |legs: &[Leg], sign: f64| {
        let mut late: Vec<f64> = legs
            .iter()
            .map(|l| sign * (line.at(l.relay_ns) - (l.h_ns - base_ns) as f64))
            .collect();
        let fastest = late.iter().copied().fold(f64::INFINITY, f64::min);
        let mid = late.len() / 2;
        let median = *late.select_nth_unstable_by(mid, f64::total_cmp).1;
        let mean_queue = (median - fastest) / std::f64::consts::LN_2;
        mean_queue / (legs.len() as f64 / 2.0)
    };
    let spread = lateness(lower, 1.0) + lateness(upper, -1.0);
    spread.is_finite().then_some(spread)
}
