//! Line or parabola, judged on legs the fit did not see.
//!
//! A parabola always leaves a corridor at least as wide as a line over
//! the same legs: its extra freedom also bends towards the few fastest
//! legs of a straight clock, and at a window's ends that bend is error.
//! Which of the two holds is told by cross-validation: each is fitted
//! on three quarters of the legs and judged by the corridor it leaves
//! among the held-out quarter, for each quarter in turn (every fourth
//! leg). The clock's true shape leaves the held-out fast legs where the
//! fitted ones were (the widest corridor); a wrong one (a line on a clock
//! that bends, a parabola bent to the fitted legs' noise) narrows it.
//!
//! The widths rest on a few fastest legs, so they are noisy by about the
//! spread of the fastest of n legs; a parabola must win in three folds of
//! four, by several times that spread in all. (Two folds of halves were
//! noisier: on one real segment they gave +11 and -28 µs where the four
//! folds gave +8 to +28 µs each.)

use super::{Leg, Line, widest};

/// Folds of the cross-validation: each fitted on three quarters of the
/// legs (little noisier than all of them), judged on the fourth.
const FOLDS: usize = 4;

/// Folds that must favour the parabola.
const MUST_FAVOUR: usize = 3;

/// How many times the spread of the fastest leg (see [`fastest_spread`])
/// the parabolas' held-out corridors must be wider by, summed over the
/// folds. Where three or four folds favoured the parabola on a straight
/// clock the sum reached at most 4.4 of it (15 s segments over 300 seeds
/// of the unit tests' legs; 2.9 in the simulator's step scenarios' first
/// segments): at 4.3 and 4.4 the parabola took the worst error from 0.13
/// and 0.35 to 0.9 and 1.6 µs over LAN legs. On the real-socket wandering
/// relay (5 ppm over 60 s) 4.3-157; the one at 4.3 is given up.
const MUST_WIN_BY: f64 = 6.0;

/// Whether a parabola describes the legs better than `line`, the line
/// over all of them, by four-fold cross-validation over the legs taken in
/// turn (see the module doc); the fits are centred where `line` is. False
/// when a fold is too small to fit.
pub(super) fn parabola_predicts_better(
    lower: &[Leg],
    upper: &[Leg],
    line: &Line,
    base_ns: i128,
    max: f64,
) -> bool {
    let at = line.relay_ns;
    let mut favoured = 0;
    let mut gained = 0.0;
    for fold in 0..FOLDS {
        let (lower_fit, lower_held) = split(lower, fold);
        let (upper_fit, upper_held) = split(upper, fold);
        let width = |curved: bool| {
            widest(&lower_fit, &upper_fit, at, base_ns, max, curved, false)
                .map(|curve| width_left(&curve, &lower_held, &upper_held, base_ns))
        };
        let (Some(line), Some(parabola)) = (width(false), width(true)) else {
            return false;
        };
        let gain = parabola - line;
        favoured += usize::from(gain > 0.0);
        gained += gain;
    }
    let Some(spread) = fastest_spread(lower, upper, line, base_ns) else {
        return false;
    };
    favoured >= MUST_FAVOUR && gained > MUST_WIN_BY * spread
}

/// The legs fitted on and the legs held out in fold `fold`: every
/// [`FOLDS`]-th leg from the `fold`-th is held out.
fn split(legs: &[Leg], fold: usize) -> (Vec<Leg>, Vec<Leg>) {
    let mut fit = Vec::with_capacity(legs.len());
    let mut held = Vec::with_capacity(legs.len() / FOLDS + 1);
    for (i, leg) in legs.iter().enumerate() {
        if i % FOLDS == fold {
            held.push(*leg);
        } else {
            fit.push(*leg);
        }
    }
    (fit, held)
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
/// q is read from the median lateness (q ln 2) against `line`, the line
/// over all legs. A scale for the folds' gains ([`MUST_WIN_BY`] was set
/// against it), not their exact noise. None when it is not finite.
fn fastest_spread(lower: &[Leg], upper: &[Leg], line: &Line, base_ns: i128) -> Option<f64> {
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
