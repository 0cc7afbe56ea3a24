//! Steps of the relay clock that the live estimator took for queueing,
//! found once the capture is closed (sans-IO).
//!
//! On a link whose queueing is larger than a step (Wi-Fi: ~1 ms per leg,
//! a step of 200 µs), no single sample contradicts the old line, and the
//! estimator never confirms the step. The envelopes still see it: a step
//! moves the fastest requests' bound (`h >= t1 - t2`, `h = host - relay`)
//! and the fastest replies' bound (`h <= t4 - t3`) by the same amount,
//! while a change of path delay moves them apart or together. At each
//! candidate time the legs of the window before it and of the window after
//! it are fitted with one slope (the clock's, which a step leaves alone)
//! and a level each: the step is the change of level both envelopes agree
//! on.
//!
//! Invariants:
//! - **Cuts, not bounds.** What this finds only splits a segment; each
//!   part keeps the estimator's hard interval of its own samples, and the
//!   samples whose side the legs cannot tell are left to neither part. A
//!   false step costs accuracy near it, never coverage.
//! - **Deterministic.** Same exchanges, same steps (a fixed grid, a fixed
//!   number of search steps, ties broken by time).
//! - **Bounded.** Memory is the segment's legs and one fit per candidate
//!   (every [`GRID_NS`] within [`WINDOW_NS`] of a leg: a gap in the
//!   samples costs nothing); time is the fits (one per candidate, and
//!   again for those within [`WINDOW_NS`] of each step found, at most one
//!   step per [`MIN_SEGMENT_NS`]) plus a heap of them (the largest
//!   apparent step next, without a scan of all candidates per step).

use std::collections::BinaryHeap;

use super::Exchange;
use crate::sync::corridor::{Leg, Side, golden_max, grid_near, hull, legs};

/// Half-width of the windows compared at a candidate (ns of relay time).
/// Wide, so the common slope is the clock's: over 16 s Wi-Fi's few fast
/// legs tilted it by ~5 ppm, ~100 µs at the point, as large as the steps
/// sought; at 48 s the step-free simulator scenarios' largest apparent
/// step on Wi-Fi was ~20 µs.
const WINDOW_NS: u64 = 48_000_000_000;

/// Spacing of the candidates (ns of relay time).
const GRID_NS: u64 = 500_000_000;

/// Fewest legs of each kind on each side of a candidate.
const MIN_LEGS: usize = 16;

/// A step must exceed this many times the envelopes' own noise (the gap
/// between a window's fastest and second fastest leg of a kind). Step-free
/// Wi-Fi and LAN runs of the simulator reached 12; 200 µs steps on Wi-Fi
/// 40 and more.
const MIN_NOISES: f64 = 16.0;

/// ... and this many times the median apparent step of the segment's
/// candidates: a clock that bends shows an apparent step everywhere (a
/// 60 s sinusoid of 5 ppm: 5-7x its median at its largest; Wi-Fi with
/// frequency wander of 1e-14/s, once in 1800 s, 13x). Wi-Fi's 200 µs
/// steps stood at 115-120x.
const MIN_TYPICAL: f64 = 20.0;

/// A step must keep this share of its size in windows half as wide; a
/// bend of the clock that the common slope took for one shrinks.
const SHARP: f64 = 0.6;

/// Windows stop this far short of a step already found (ns).
const CLIP_NS: u64 = 1_000_000_000;

/// Shortest part a cut may leave (ns of relay time): a few seconds of
/// Wi-Fi fit a slope ~10 ppm off (a 4 s part between two cuts made its
/// events 130 µs wrong).
const MIN_SEGMENT_NS: u64 = 12_000_000_000;

/// Where a step may lie: the candidates showing at least this share of it
/// ...
const PLATEAU: f64 = 0.5;
/// ... widened by this much either side (ns), then narrowed by the legs.
const PAD_NS: u64 = 2_000_000_000;

/// A step the legs place no better than this (ns) is not cut: the events
/// within that span would sit on its wrong side more often than the cut
/// helps the rest (a 50 µs step on Wi-Fi placed within 13 s made its
/// run's p99 33 -> 70 µs).
const MAX_VAGUE_NS: u64 = 5_000_000_000;

/// A step found among a segment's exchanges: those whose relay midpoint
/// lies strictly between `from_ns` and `to_ns` may have been taken on
/// either side of it, the rest are surely on theirs; `likely_ns` is where
/// it most likely lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HiddenStep {
    pub from_ns: u64,
    pub to_ns: u64,
    pub likely_ns: u64,
}

/// The steps among `exchanges` (one segment), in time order.
pub(super) fn find(exchanges: &[Exchange], max_abs_freq: f64) -> Vec<HiddenStep> {
    let Some(legs) = Legs::new(exchanges, max_abs_freq) else {
        return Vec::new();
    };
    let steps = legs.search();
    steps
        .iter()
        .enumerate()
        .filter_map(|(k, &at)| {
            let mut others = steps.clone();
            others.remove(k);
            legs.locate(exchanges, at, &others)
        })
        .collect()
}

/// The two windows around one candidate, fitted with one slope.
#[derive(Clone, Copy, Debug)]
struct Fit {
    slope: f64,
    /// Lower and upper envelope before the candidate, then after it, at
    /// the candidate (relative to the segment's base).
    levels: [f64; 4],
    /// Mean gap between the fastest and second fastest leg of each kind
    /// and side (ns): for exponential queueing the fastest of N lies
    /// ~mean/N above the floor, and so does that gap.
    noise_ns: f64,
}

impl Fit {
    /// The step both envelopes agree on (0 when they moved apart).
    fn step_ns(&self) -> f64 {
        let [lower_a, upper_a, lower_b, upper_b] = self.levels;
        let (lower, upper) = (lower_b - lower_a, upper_b - upper_a);
        if lower.signum() != upper.signum() {
            return 0.0;
        }
        lower.signum() * lower.abs().min(upper.abs())
    }
}

/// A segment's legs, sorted by relay time.
struct Legs {
    lower: Vec<Leg>,
    upper: Vec<Leg>,
    base_ns: i128,
    first: u64,
    last: u64,
    max_abs_freq: f64,
}

impl Legs {
    fn new(exchanges: &[Exchange], max_abs_freq: f64) -> Option<Self> {
        let (lower, upper) = legs(exchanges.iter().map(|x| x.t));
        Some(Self {
            base_ns: lower.first()?.h_ns,
            first: lower.first()?.relay_ns,
            last: upper.last()?.relay_ns,
            lower,
            upper,
            max_abs_freq: max_abs_freq.abs().max(1e-9),
        })
    }

    /// The windows of candidate `at`: [`WINDOW_NS`] either side, stopping
    /// [`CLIP_NS`] short of the steps in `steps` (sorted).
    fn bounds(&self, at: u64, steps: &[u64]) -> (u64, u64) {
        let k = steps.partition_point(|&s| s < at);
        let mut from = at.saturating_sub(WINDOW_NS).max(self.first);
        let mut to = at
            .saturating_add(WINDOW_NS)
            .min(self.last.saturating_add(1));
        if let Some(&before) = k.checked_sub(1).and_then(|p| steps.get(p)) {
            from = from.max(before.saturating_add(CLIP_NS));
        }
        if let Some(&after) = steps.get(k) {
            to = to.min(after.saturating_sub(CLIP_NS));
        }
        (from, to)
    }

    /// The legs of `[from, at)` against those of `[at, to)`, the legs of
    /// `[gap_from, gap_to)` left out. None when a side has too few.
    fn fit(&self, at: u64, (from, to): (u64, u64), (gap_from, gap_to): (u64, u64)) -> Option<Fit> {
        let rel = |legs: &[Leg]| -> Vec<(f64, f64)> {
            legs.iter()
                .map(|l| {
                    let x = (l.relay_ns as i128 - at as i128) as f64;
                    (x, (l.h_ns - self.base_ns) as f64)
                })
                .collect()
        };
        let before = |legs: &[Leg]| rel(window(legs, from, gap_from.min(at)));
        let after = |legs: &[Leg]| rel(window(legs, gap_to.max(at), to));
        let sides = [
            before(&self.lower),
            before(&self.upper),
            after(&self.lower),
            after(&self.upper),
        ];
        if sides.iter().any(|s| s.len() < MIN_LEGS) {
            return None;
        }
        common_slope(&sides, self.max_abs_freq)
    }

    /// The plain fit of candidate `at` among `steps`.
    fn fit_at(&self, at: u64, steps: &[u64]) -> Option<Fit> {
        self.fit(at, self.bounds(at, steps), (at, at))
    }

    /// The step times found, sorted: the strongest candidate first, each
    /// found step clipping its neighbours' windows; then every step judged
    /// again with only the others clipping it (one found first because a
    /// later step tilted its window goes), too-close pairs thinned, and
    /// steps not far above the segment's typical apparent step dropped.
    fn search(&self) -> Vec<u64> {
        // Only candidates with legs within a window: a gap costs nothing.
        let points = (self.last - self.first) / GRID_NS;
        let grid: Vec<u64> = grid_near(&self.lower, self.first, points, WINDOW_NS, GRID_NS)
            .into_iter()
            .filter(|&k| k > 0)
            .map(|k| self.first + k * GRID_NS)
            .collect();
        let mut fits: Vec<Option<Fit>> = grid.iter().map(|&at| self.fit_at(at, &[])).collect();
        let mut noises: Vec<f64> = fits.iter().flatten().map(|f| f.noise_ns).collect();
        if noises.is_empty() {
            return Vec::new();
        }
        let noise = median(&mut noises).max(1.0);
        let strong = |f: &Fit| f.step_ns().abs() >= MIN_NOISES * noise;

        let most = usize::try_from((self.last - self.first) / MIN_SEGMENT_NS).unwrap_or(0);
        let mut steps: Vec<u64> = Vec::new();
        let mut rejected: Vec<u64> = Vec::new();
        // Candidates by apparent step, largest first (the later of equals,
        // as the scan this replaces chose); an entry whose fit was redone
        // since it was pushed is stale and skipped.
        let size = |f: &Fit| f.step_ns().abs().to_bits();
        let mut version = vec![0u32; grid.len()];
        let mut queue: BinaryHeap<(u64, usize, u32)> = fits
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((size(f.as_ref()?), i, 0)))
            .collect();
        let mut decided = 0;
        while decided < 4 * most {
            let Some((_, i, v)) = queue.pop() else { break };
            let (at, Some(fit)) = (grid[i], fits[i]) else {
                continue;
            };
            let taken = steps
                .iter()
                .chain(&rejected)
                .any(|&s| s.abs_diff(at) <= 2 * CLIP_NS);
            if v != version[i] || taken {
                continue;
            }
            if !strong(&fit) {
                break;
            }
            decided += 1;
            if !self.sharp(at, &fit, &steps) {
                rejected.push(at);
                continue;
            }
            steps.insert(steps.partition_point(|&s| s < at), at);
            let near = grid.partition_point(|&g| g < at.saturating_sub(WINDOW_NS))
                ..grid.partition_point(|&g| g <= at.saturating_add(WINDOW_NS));
            for j in near {
                fits[j] = self.fit_at(grid[j], &steps);
                version[j] += 1;
                if let Some(f) = &fits[j] {
                    queue.push((size(f), j, version[j]));
                }
            }
            if steps.len() >= most {
                break;
            }
        }
        // Step k's size with only the other steps clipping its windows.
        let standing = |steps: &[u64], k: usize| {
            let mut others = steps.to_vec();
            let at = others.remove(k);
            self.fit_at(at, &others).map_or(0.0, |f| f.step_ns().abs())
        };
        // The weakest step that no longer stands with only its neighbours
        // clipping it, until all do.
        while let Some(k) = (0..steps.len())
            .map(|k| (k, standing(&steps, k)))
            .filter(|&(_, size)| size < MIN_NOISES * noise)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(k, _)| k)
        {
            steps.remove(k);
        }
        // Of two steps closer than a part may be, or one that close to an
        // end, the weaker goes.
        while let Some(k) = (0..steps.len()).find_map(|k| {
            let before = k.checked_sub(1).map_or(self.first, |p| steps[p]);
            let after = steps.get(k + 1).copied().unwrap_or(self.last);
            let near = if steps[k] - before < MIN_SEGMENT_NS {
                Some(k.checked_sub(1))
            } else if after - steps[k] < MIN_SEGMENT_NS {
                Some((k + 1 < steps.len()).then_some(k + 1))
            } else {
                None
            }?;
            Some(match near {
                Some(n) if standing(&steps, n) < standing(&steps, k) => n,
                _ => k,
            })
        }) {
            steps.remove(k);
        }
        let mut apparent: Vec<f64> = fits.iter().flatten().map(|f| f.step_ns().abs()).collect();
        let typical = median(&mut apparent).max(1.0);
        let keep: Vec<bool> = (0..steps.len())
            .map(|k| standing(&steps, k) >= MIN_TYPICAL * typical)
            .collect();
        let mut keep = keep.into_iter();
        steps.retain(|_| keep.next().unwrap_or(false));
        steps
    }

    /// Whether the step of `fit` at `at` keeps [`SHARP`] of its size in
    /// windows half as wide.
    fn sharp(&self, at: u64, fit: &Fit, steps: &[u64]) -> bool {
        let (from, to) = self.bounds(at, steps);
        let half = WINDOW_NS / 2;
        let narrow = (
            from.max(at.saturating_sub(half)),
            to.min(at.saturating_add(half)),
        );
        let step = fit.step_ns();
        self.fit(at, narrow, (at, at))
            .is_some_and(|f| f.step_ns() * step.signum() >= SHARP * step.abs())
    }

    /// Where the step at `at` lies: the candidates around it that show
    /// [`PLATEAU`] of it, widened by [`PAD_NS`]; within that span, the cuts
    /// between exchanges that leave no leg beyond its side's envelope
    /// (fitted without the span's legs). None when that leaves it vaguer
    /// than [`MAX_VAGUE_NS`].
    fn locate(&self, exchanges: &[Exchange], at: u64, others: &[u64]) -> Option<HiddenStep> {
        let bounds = self.bounds(at, others);
        let step = self.fit(at, bounds, (at, at))?.step_ns();
        let shows = |g: u64| {
            self.fit_at(g, others)
                .is_some_and(|f| f.step_ns() * step.signum() >= PLATEAU * step.abs())
        };
        let (from, to) = bounds;
        let mut lo = at;
        while lo >= from.saturating_add(GRID_NS) && shows(lo - GRID_NS) {
            lo -= GRID_NS;
        }
        let mut hi = at;
        while hi.saturating_add(GRID_NS) < to && shows(hi + GRID_NS) {
            hi += GRID_NS;
        }
        let (lo, hi) = (
            lo.saturating_sub(PAD_NS).max(from),
            hi.saturating_add(PAD_NS).min(to),
        );
        let fit = self.fit(at, bounds, (lo, hi))?;

        let mut span: Vec<&Exchange> = exchanges
            .iter()
            .filter(|x| x.t[1] <= x.t[2] && x.t[0] <= x.t[3])
            .filter(|x| (lo..hi).contains(&x.relay_mid_ns()))
            .collect();
        span.sort_by_key(|x| x.relay_mid_ns());
        // How far an exchange's legs reach beyond one side's envelope,
        // less that envelope's own noise.
        let slack = 2.0 * fit.noise_ns;
        let x_of = |t: u64| (t as i128 - at as i128) as f64;
        let outside = |x: &Exchange, lower: f64, upper: f64| {
            let [t1, t2, t3, t4] = x.t;
            let l = (t1 as i128 - t2 as i128 - self.base_ns) as f64;
            let u = (t4 as i128 - t3 as i128 - self.base_ns) as f64;
            (l - (lower + fit.slope * x_of(t2)) - slack).max(0.0)
                + ((upper + fit.slope * x_of(t3)) - u - slack).max(0.0)
        };
        let [lower_a, upper_a, lower_b, upper_b] = fit.levels;
        // cost(cut) = beyond "before" of 0..cut + beyond "after" of cut..
        let mut total: f64 = span.iter().map(|x| outside(x, lower_b, upper_b)).sum();
        let mut totals = Vec::with_capacity(span.len() + 1);
        totals.push(total);
        for x in &span {
            total += outside(x, lower_a, upper_a) - outside(x, lower_b, upper_b);
            totals.push(total);
        }
        let least = totals.iter().copied().fold(f64::INFINITY, f64::min);
        let earliest = totals.iter().position(|&t| t <= least)?;
        let latest = totals.iter().rposition(|&t| t <= least)?;
        let from_ns = earliest
            .checked_sub(1)
            .and_then(|i| span.get(i))
            .map_or(lo, |x| x.relay_mid_ns());
        let to_ns = span.get(latest).map_or(hi, |x| x.relay_mid_ns());
        (to_ns - from_ns <= MAX_VAGUE_NS).then_some(HiddenStep {
            from_ns,
            to_ns,
            likely_ns: from_ns + (to_ns - from_ns) / 2,
        })
    }
}

/// The median of `values` (reordered); 0 when empty.
fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mid = values.len() / 2;
    *values.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// Legs with relay time in `[from, to)` (`legs` sorted by relay time).
fn window(legs: &[Leg], from: u64, to: u64) -> &[Leg] {
    let start = legs.partition_point(|l| l.relay_ns < from);
    let end = legs.partition_point(|l| l.relay_ns < to).max(start);
    &legs[start..end]
}

/// The lower and upper legs before and after a candidate (`x` = ns from
/// it) fitted with one slope: the one whose two corridors are widest in
/// sum (each width is concave in the slope, so their sum is, and a
/// golden-section search finds its top).
fn common_slope(sides: &[Vec<(f64, f64)>; 4], max: f64) -> Option<Fit> {
    let hulls = [
        hull(&sides[0], Side::Upper),
        hull(&sides[1], Side::Lower),
        hull(&sides[2], Side::Upper),
        hull(&sides[3], Side::Lower),
    ];
    let floor = |h: &[(f64, f64)], slope: f64| {
        h.iter()
            .map(|&(x, y)| y - slope * x)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let ceiling = |h: &[(f64, f64)], slope: f64| {
        h.iter()
            .map(|&(x, y)| y - slope * x)
            .fold(f64::INFINITY, f64::min)
    };
    let levels = |slope: f64| {
        [
            floor(&hulls[0], slope),
            ceiling(&hulls[1], slope),
            floor(&hulls[2], slope),
            ceiling(&hulls[3], slope),
        ]
    };
    let width = |slope: f64| {
        let [la, ua, lb, ub] = levels(slope);
        (ua - la) + (ub - lb)
    };
    let slope = golden_max(width, (-max, max));
    let levels = levels(slope);
    // Gap between the fastest and second fastest leg of one kind.
    let gap = |legs: &[(f64, f64)], sign: f64| {
        let mut v: Vec<f64> = legs.iter().map(|&(x, y)| sign * (y - slope * x)).collect();
        if v.len() < 2 {
            return 0.0;
        }
        v.select_nth_unstable_by(1, f64::total_cmp);
        (v[1] - v[0]).abs()
    };
    let noise_ns =
        (gap(&sides[0], -1.0) + gap(&sides[1], 1.0) + gap(&sides[2], -1.0) + gap(&sides[3], 1.0))
            / 4.0;
    levels.iter().all(|l| l.is_finite()).then_some(Fit {
        slope,
        levels,
        noise_ns,
    })
}
