//! One-way envelope fit of a closed segment (sans-IO): the line that runs
//! midway through the widest corridor the probe legs leave open. The
//! final mapping (`super::smoother`) fits a grid of such lines per
//! segment; the live estimator (`super::estimator_fit`) fits one over its
//! window with `steady_midline` (`midline` unless the legs' floor is
//! soft, `steady`); the final's lines use it too, where the floor is
//! clearly soft (`widest`).
//!
//! Each leg of an exchange bounds the relay's offset on one side only:
//! the request left the host at t1 and reached the relay at t2, so the
//! host time of relay t2 is at least t1 (`h(t2) >= t1 - t2`, with
//! `h = host - relay`); the reply left at t3 and reached the host at t4,
//! so `h(t3) <= t4 - t3`. A per-sample offset needs *both* legs of one
//! exchange to be fast; the envelope needs each leg to be fast only
//! once among many, which queueing of independent legs allows far more
//! often (with exponential queueing the fastest of N legs is ~1/N of the
//! mean late). Over a short window the clock is a line, so the fit is the
//! line maximising its smallest distance to both envelopes; its middle
//! is off by half the difference of the two legs' fastest delays.
//!
//! Invariants:
//! - **Estimate, not bound.** The point assumes equal fastest delays on
//!   both legs (the same assumption as every two-way method); the caller
//!   keeps its hard interval and clamps into it.
//! - **Local.** A grid point's line rests on the legs within 16 s of it
//!   (32 or 64 s in a segment where that window does clearly better, see
//!   `choose_window`), so a mapping never reaches across more than that;
//!   the caller gives one segment (no step or suspend inside). A gap
//!   without lines (no legs for more than a window) is crossed by the
//!   cubic through its edge lines' points along the slopes of a window
//!   of legs either side (`gap`). A segment shorter than two half-widths
//!   is one window: one curve over all its legs, from its first leg to
//!   its last (a line, or a parabola where legs held out from the fit
//!   show it bends: `held_out`).
//! - **Deterministic.** Same legs in, same lines out (no randomness, a
//!   fixed number of search steps).
//! - **Bounded.** One line per [`GRID_NS`] of the segment's span within
//!   two windows of a leg: a gap without legs costs none.

/// Half-width of the window a grid point's line is fitted over by
/// default (ns of relay time). Wide enough that a jittery link (Wi-Fi: ~1 ms of
/// queueing per leg) has a fast leg of each kind within µs of its floor;
/// narrow enough that frequency wander bends the line by little.
pub const WINDOW_NS: u64 = 16_000_000_000;

/// Spacing of the grid points (ns of relay time); mappings in between
/// blend the two neighbours' lines.
pub const GRID_NS: u64 = 1_000_000_000;

/// Fewest legs of each kind a grid point's window must hold (half of
/// them on each side of the point).
const MIN_LEGS: usize = 4;

mod gap;
mod geometry;
mod held_out;
mod steady;
use gap::{EdgeSlopes, across, edge_slopes};
use geometry::golden_max_in;
pub(crate) use geometry::{Side, golden_max, hull};
use held_out::parabola_predicts_better;
pub(crate) use steady::{SOFT, steady_midline};

/// One leg's bound on `h = host - relay` at a relay time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Leg {
    pub(crate) relay_ns: u64,
    pub(crate) h_ns: i128,
}

/// The legs of exchanges `[t1, t2, t3, t4]` (host t1/t4, relay t2/t3, ns),
/// each kind sorted by relay time: the requests' lower bounds on `h` and
/// the replies' upper bounds. Exchanges with reversed timestamps are left
/// out.
pub(crate) fn legs(exchanges: impl Iterator<Item = [u64; 4]>) -> (Vec<Leg>, Vec<Leg>) {
    let mut lower = Vec::new();
    let mut upper = Vec::new();
    for [t1, t2, t3, t4] in exchanges {
        if t4 < t1 || t3 < t2 {
            continue;
        }
        lower.push(Leg {
            relay_ns: t2,
            h_ns: t1 as i128 - t2 as i128,
        });
        upper.push(Leg {
            relay_ns: t3,
            h_ns: t4 as i128 - t3 as i128,
        });
    }
    lower.sort_by_key(|l| l.relay_ns);
    upper.sort_by_key(|l| l.relay_ns);
    (lower, upper)
}

/// The curve of one grid point: `h(t) = h_ns + slope * d + curve * d^2`
/// with `d = t - relay_ns` (a line where `curve` is 0).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    relay_ns: u64,
    h_ns: f64,
    slope: f64,
    curve: f64,
}

/// What a segment's grid points fit over their windows: chosen per
/// segment by [`choose_window`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    /// Half-width of the window (ns of relay time).
    half: u64,
    /// A parabola instead of a line: for a clock whose frequency wanders
    /// within a window (a 60 s sinusoid of 5 ppm bends a line over 32 s
    /// by ~25 µs at its peaks).
    curved: bool,
}

/// Lines every [`GRID_NS`] over one segment.
#[derive(Debug, Default)]
pub struct Corridor {
    /// The `h` all stored values are relative to (keeps f64 exact).
    base_ns: i128,
    first_ns: u64,
    /// Grid points `0..points` sit at `first_ns + k * GRID_NS`.
    points: u64,
    /// `(k, line)` by `k`, for the points whose window held enough legs of
    /// both kinds: only points near legs are fitted or stored, so a
    /// segment with a long gap costs its legs, not its span.
    lines: Vec<(u64, Line)>,
    /// A segment within one window: the one line over all its legs, and
    /// the relay time of its last leg (see [`Corridor::fit`]).
    whole: Option<(Line, u64)>,
    /// The slopes either side of each gap between `lines` (see [`gap`]).
    edges: Vec<EdgeSlopes>,
    /// The first and last grid points with `MIN_LEGS / 2` legs of each
    /// kind at or before them and after them (`from > to`: none).
    surrounded: (u64, u64),
}

impl Corridor {
    /// Fits the grid from exchanges `[t1, t2, t3, t4]` (host t1/t4, relay
    /// t2/t3, ns) of one segment. Exchanges with reversed timestamps are
    /// left out. `max_abs_freq` bounds the slopes searched (dimensionless).
    pub fn fit(exchanges: impl Iterator<Item = [u64; 4]>, max_abs_freq: f64) -> Self {
        let (lower, upper) = legs(exchanges);
        let (Some(first), Some(last)) = (
            lower.first().map(|l| l.relay_ns),
            upper.last().map(|l| l.relay_ns),
        ) else {
            return Self::default();
        };
        let base_ns = lower[0].h_ns;
        let points = (last - first) / GRID_NS + 1;
        let max = max_abs_freq.abs().max(1e-9);
        let shape = choose_window(&lower, &upper, first, last, base_ns, max);
        let half = shape.half;
        let surrounded = surrounded(&lower, &upper, first);
        // Every grid point's window holds all of a segment shorter than
        // two half-widths: its lines are all one line over its legs, which
        // holds from the first leg to the last. A grid point needs legs
        // either side of it, so a segment of a second or two (the pieces
        // the estimator cuts a slew into) had none.
        if last - first < half.saturating_mul(2) {
            let enough = lower.len() >= MIN_LEGS && upper.len() >= MIN_LEGS;
            let mid = first + (last - first) / 2;
            return Self {
                base_ns,
                first_ns: first,
                points: 0,
                lines: Vec::new(),
                edges: Vec::new(),
                surrounded,
                whole: enough
                    .then(|| {
                        let line = widest(&lower, &upper, mid, base_ns, max, false, true)?;
                        // A long one may bend within its span (the
                        // wander of a real crystal over 15 s).
                        if last - first >= MIN_CURVE_SPAN_NS
                            && parabola_predicts_better(&lower, &upper, &line, base_ns, max)
                        {
                            widest(&lower, &upper, mid, base_ns, max, true, true)
                        } else {
                            Some(line)
                        }
                    })
                    .flatten()
                    .map(|line| (line, last)),
            };
        }
        // A point farther than a whole window from every leg cannot have
        // legs on both sides of it (span() widens to 2 * half at the ends).
        let lines = grid_near(&lower, first, points, half.saturating_mul(2), GRID_NS)
            .into_iter()
            .filter_map(|k| {
                let at = first + k * GRID_NS;
                let (from, to) = span(at, half, first, last);
                let lo = window(&lower, from, to);
                let up = window(&upper, from, to);
                // Legs of each kind on both sides of the point: a line
                // carried over a gap from one side is an extrapolation,
                // which the one-sided estimators already do better.
                let surrounded = |legs: &[Leg]| {
                    let before = legs.partition_point(|l| l.relay_ns <= at);
                    before >= MIN_LEGS / 2 && legs.len() - before >= MIN_LEGS / 2
                };
                if !surrounded(lo) || !surrounded(up) {
                    return None;
                }
                Some((k, widest(lo, up, at, base_ns, max, shape.curved, true)?))
            })
            .collect::<Vec<_>>();
        // Each side of a gap over a whole window's width of its own legs.
        let edges = edge_slopes(
            &lines,
            (&lower, &upper),
            (first, GRID_NS, half.saturating_mul(2)),
            |lo, up, at| widest(lo, up, at, base_ns, max, shape.curved, false),
        );
        Self {
            base_ns,
            first_ns: first,
            points,
            lines,
            edges,
            whole: None,
            surrounded,
        }
    }

    /// Whether `relay_ns` lies between the first and last grid points
    /// with two legs of each kind either side: where a segment's grid has
    /// lines. Nearer its ends only a segment fitted as one line has one.
    pub fn surrounds(&self, relay_ns: u64) -> bool {
        let (from, to) = self.surrounded;
        from <= relay_ns && relay_ns <= to
    }

    /// Host time of relay time `relay_ns` (ns), or None outside the grid
    /// (before the first line or after the last).
    pub fn to_host(&self, relay_ns: u64) -> Option<i64> {
        let since = relay_ns.checked_sub(self.first_ns)?;
        if let Some((line, last)) = self.whole {
            if relay_ns > last {
                return None;
            }
            let host = relay_ns as i128 + self.base_ns + line.at(relay_ns).round() as i128;
            return i64::try_from(host).ok();
        }
        let k = since / GRID_NS;
        if k >= self.points {
            return None;
        }
        // The nearest line at or before k, and the nearest after it.
        let i = self.lines.partition_point(|&(kk, _)| kk <= k);
        let before = i.checked_sub(1).map(|j| self.lines[j]);
        let after = self.lines.get(i).copied();
        let h = match (before, after) {
            (Some((kb, here)), Some((ka, next))) if kb == k && ka == k + 1 => {
                let w = (since % GRID_NS) as f64 / GRID_NS as f64;
                (1.0 - w) * here.at(relay_ns) + w * next.at(relay_ns)
            }
            (Some((kb, here)), _) if kb == k && since % GRID_NS == 0 => here.at(relay_ns),
            // A gap in the samples (a partition): the points of the lines
            // on its edges, joined along the slopes either side.
            (Some((_, before)), Some((k_after, after))) => {
                let i = self.edges.partition_point(|e| e.after < k_after);
                let edges = self.edges.get(i).filter(|e| e.after == k_after);
                across(&before, &after, edges, relay_ns)
            }
            _ => return None,
        };
        let host = relay_ns as i128 + self.base_ns + h.round() as i128;
        i64::try_from(host).ok()
    }
}

/// See [`Corridor::surrounds`]: the first and last grid points (of a
/// segment starting at `first`) with two legs of each kind at or before
/// them and after them; `(1, 0)` (empty) when none has.
fn surrounded(lower: &[Leg], upper: &[Leg], first: u64) -> (u64, u64) {
    let k = MIN_LEGS / 2;
    if lower.len() < 2 * k || upper.len() < 2 * k {
        return (1, 0);
    }
    // Legs at or before `at` from the k-th on; after it below the k-th last.
    let from = lower[k - 1].relay_ns.max(upper[k - 1].relay_ns);
    let to = lower[lower.len() - k]
        .relay_ns
        .min(upper[upper.len() - k].relay_ns);
    // Rounded up to the grid; none when that lies beyond u64 (relay
    // times within a second of its end: a damaged sidecar).
    let Some(from) = (from - first)
        .div_ceil(GRID_NS)
        .checked_mul(GRID_NS)
        .and_then(|d| first.checked_add(d))
    else {
        return (1, 0);
    };
    let Some(before_to) = to.checked_sub(1).filter(|&t| t >= first) else {
        return (1, 0);
    };
    let to = first + (before_to - first) / GRID_NS * GRID_NS;
    if from > to { (1, 0) } else { (from, to) }
}

impl Line {
    fn at(&self, relay_ns: u64) -> f64 {
        let d = (relay_ns as i128 - self.relay_ns as i128) as f64;
        self.h_ns + d * (self.slope + self.curve * d)
    }
}

/// The window of the grid point at `at`: `half` either side, or, within
/// `half` of the segment's first or last leg, the `2 * half` at that end
/// (as far as the segment reaches). Clipped instead, a point near the end
/// of a capture rested on half the legs, few of them fast near the end,
/// and its line tilted: a 40 s Wi-Fi run's last 10 s were 8-18 µs off
/// where the live side was 2 µs; shifted, 1.3 µs (seed 2).
fn span(at: u64, half: u64, first: u64, last: u64) -> (u64, u64) {
    let whole = half.saturating_mul(2);
    if at.checked_add(half).is_none_or(|end| end > last) {
        (last.saturating_sub(whole).max(first), last)
    } else if at < first.saturating_add(half) {
        (first, first.saturating_add(whole).min(last))
    } else {
        (at - half, at + half)
    }
}

/// The window half-width and shape for a segment. Of [`WINDOWS_NS`], the
/// one whose lines fitted on either side of a point (over that width
/// each) disagree least at the point, in the median over points every
/// [`CHOICE_STEP_NS`]. Their disagreement is the window's noise (fewer
/// fast legs in a narrow one) plus its bend (the clock's wander across a
/// wide one): a quiet crystal on a jittery link wants a wide window, a
/// wandering one a narrow one. Where even the narrowest is chosen and the
/// next one disagrees more (its bend, not its noise, dominates), a
/// parabola over [`CURVE_HALF_NS`]. A [`WINDOW_NS`] line when the segment
/// is too short to tell.
fn choose_window(
    lower: &[Leg],
    upper: &[Leg],
    first: u64,
    last: u64,
    base_ns: i128,
    max: f64,
) -> Shape {
    let line = |half| Shape {
        half,
        curved: false,
    };
    let medians =
        WINDOWS_NS.map(|half| disagreement(lower, upper, first, last, base_ns, max, half));
    let mut best = (f64::INFINITY, line(WINDOW_NS));
    for (&half, median) in WINDOWS_NS.iter().zip(medians) {
        // A wider window must do clearly better: its bend on a clock
        // that wanders shows in few of the points judged.
        if let Some(median) = median.filter(|&m| m < WIDER_MUST_WIN * best.0) {
            best = (median, line(half));
        }
    }
    // The next window disagreeing clearly more: its bend, not its noise,
    // dominates (a 60 s sinusoid of 5 ppm on Wi-Fi: 2.2-2.8x; the other
    // simulator scenarios at most 1.04x).
    let bends =
        matches!(medians, [Some(narrow), Some(wider), _] if WIDER_MUST_WIN * wider > narrow);
    if best.1.half == WINDOWS_NS[0] && bends {
        return Shape {
            half: CURVE_HALF_NS,
            curved: true,
        };
    }
    best.1
}

/// The median disagreement at a point of the lines fitted over `half`
/// before it and `half` after it (see [`choose_window`]); None when the
/// segment has too few points to judge.
fn disagreement(
    lower: &[Leg],
    upper: &[Leg],
    first: u64,
    last: u64,
    base_ns: i128,
    max: f64,
    half: u64,
) -> Option<f64> {
    let mut gaps = Vec::new();
    let mut at = first.saturating_add(half);
    // Checked, not saturating: a segment ending at u64::MAX would
    // otherwise let `at + half` past it.
    while at.checked_add(half).is_some_and(|end| end <= last) {
        // Across a gap with no legs, on to the first point (of the same
        // steps) whose window reaches the next leg.
        if window(lower, at - half, at + half).is_empty() {
            let next = lower.partition_point(|l| l.relay_ns <= at + half);
            let Some(l) = lower.get(next) else { break };
            let steps = (l.relay_ns - half - at).div_ceil(CHOICE_STEP_NS);
            at = at.saturating_add(steps.max(1).saturating_mul(CHOICE_STEP_NS));
            continue;
        }
        let side = |from: u64, to: u64| {
            let (lo, up) = windows_with_enough(lower, upper, from, to)?;
            widest(lo, up, at, base_ns, max, false, false)
        };
        if let (Some(a), Some(b)) = (side(at - half, at), side(at, at + half)) {
            gaps.push((a.h_ns - b.h_ns).abs());
        }
        at = at.saturating_add(CHOICE_STEP_NS);
    }
    if gaps.len() < MIN_CHOICE_POINTS {
        return None;
    }
    let mid = gaps.len() / 2;
    Some(*gaps.select_nth_unstable_by(mid, f64::total_cmp).1)
}

/// Candidate half-widths of a segment's window (ns of relay time). Not
/// 8 s: on the simulator's LAN links it was chosen and did worse (the
/// partition's and the VM link's p99 1.0 -> 3.0 and 1.5 -> 2.2 µs). 64 s
/// only because a wider window must win by [`WIDER_MUST_WIN`]: chosen
/// without that margin, Wi-Fi with wander went from 12 to 25 µs.
const WINDOWS_NS: [u64; 3] = [16_000_000_000, 32_000_000_000, 64_000_000_000];

/// Half-width of a parabola's window (ns of relay time): wider than the
/// narrowest line's, as its extra freedom costs noise, narrow enough that
/// the bend it leaves (the clock's third derivative) stays small.
const CURVE_HALF_NS: u64 = 20_000_000_000;

/// Shortest segment within one window that may be fitted as a parabola
/// (ns of relay time): a shorter one bends less than its legs let see.
const MIN_CURVE_SPAN_NS: u64 = 10_000_000_000;

/// Largest curvature a parabola is searched over (per ns): half the
/// largest rate of frequency change, 10 ppm per second.
const MAX_CURVE: f64 = 0.5 * 10e-6 / 1e9;

/// Golden-section steps of the curvature search: down to ~1e-22 per ns,
/// well under a ns over a window.
const CURVE_STEPS: usize = 40;

/// How much smaller a wider window's median disagreement must be.
const WIDER_MUST_WIN: f64 = 0.7;

/// Spacing of the points a window is judged at (ns of relay time).
const CHOICE_STEP_NS: u64 = 10_000_000_000;

/// Fewest points a window must be judged at to be chosen.
const MIN_CHOICE_POINTS: usize = 10;

/// Legs with relay time in `[from, to]` (`legs` sorted by relay time).
fn window(legs: &[Leg], from: u64, to: u64) -> &[Leg] {
    let start = legs.partition_point(|l| l.relay_ns < from);
    let end = legs.partition_point(|l| l.relay_ns <= to);
    &legs[start..end]
}

/// The legs of each kind with relay time in `[from, to]`, None when
/// either kind has fewer than [`MIN_LEGS`] there.
fn windows_with_enough<'a>(
    lower: &'a [Leg],
    upper: &'a [Leg],
    from: u64,
    to: u64,
) -> Option<(&'a [Leg], &'a [Leg])> {
    let lo = window(lower, from, to);
    let up = window(upper, from, to);
    (lo.len() >= MIN_LEGS && up.len() >= MIN_LEGS).then_some((lo, up))
}

/// The line at `at` (a parabola when `curved`) that maximises its smallest
/// vertical distance to the lower legs (below it) and the upper legs
/// (above it), through the middle of that corridor. The corridor's width
/// is concave in the slope and curvature (a minimum of linear functions
/// minus a maximum of them), so a golden-section search finds its top,
/// and one over the curvature the top of those tops. With `steady`, where
/// the legs' floor is clearly soft, the slope (at that curvature) lies
/// midway between that one and the one the fastest few legs of each side
/// choose ([`steady_midline`] at [`steady::SOFT_FINAL`]): for the lines a
/// mapping is read from. The window choice, the gap's edge slopes and the
/// parabola's held-out test keep the single fastest legs: with the steady
/// slope in the window choice too, the k fastest legs' steadier lines
/// made the widest window win on a wandering clock, whose bend then
/// showed (`lan-20ppm` seed 11, 300 s: final p99 0.54 -> 1.76 µs).
fn widest(
    lower: &[Leg],
    upper: &[Leg],
    at: u64,
    base_ns: i128,
    max: f64,
    curved: bool,
    steady: bool,
) -> Option<Line> {
    let rel = |l: &Leg| {
        (
            (l.relay_ns as i128 - at as i128) as f64,
            (l.h_ns - base_ns) as f64,
        )
    };
    let lower: Vec<(f64, f64)> = lower.iter().map(rel).collect();
    let upper: Vec<(f64, f64)> = upper.iter().map(rel).collect();
    let unbent = |points: &[(f64, f64)], curve: f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .map(|&(x, y)| (x, y - curve * x * x))
            .collect()
    };
    let curve = if curved {
        let width = |curve: f64| {
            midline(&unbent(&lower, curve), &unbent(&upper, curve), (-max, max))
                .map_or(f64::NEG_INFINITY, |m| m.2)
        };
        golden_max_in(width, (-MAX_CURVE, MAX_CURVE), CURVE_STEPS)
    } else {
        0.0
    };
    let (lower, upper) = (unbent(&lower, curve), unbent(&upper, curve));
    let sharp = midline(&lower, &upper, (-max, max))?;
    let leaning = steady
        .then(|| steady::steady_slope(&lower, &upper, (-max, max), sharp, steady::SOFT_FINAL))
        .flatten();
    // Midway between the two slopes: their errors are partly independent
    // (on real captures either alone was off by tenths of a ppm now and
    // then where the other was not).
    let (h_ns, slope, _) = match leaning {
        Some(slope) => middle_at(&lower, &upper, (slope + sharp.1) / 2.0)?,
        None => sharp,
    };
    Some(Line {
        relay_ns: at,
        h_ns,
        slope,
        curve,
    })
}

/// The line `y = value + slope * x` that keeps the largest vertical
/// distance to the points `lower` (below it) and `upper` (above it), with
/// its slope in `slopes`: its value at x = 0, its slope and the corridor's
/// width. None when either set is empty.
pub(crate) fn midline(
    lower: &[(f64, f64)],
    upper: &[(f64, f64)],
    slopes: (f64, f64),
) -> Option<(f64, f64, f64)> {
    if lower.is_empty() || upper.is_empty() {
        return None;
    }
    // Only hull vertices can be the highest lower or lowest upper
    // intercept for some slope: the search then costs the hulls' few
    // points per step instead of every leg's.
    let lower = &hull(lower, Side::Upper);
    let upper = &hull(upper, Side::Lower);
    let width = |slope: f64| {
        let (floor, ceiling) = edges(lower, upper, slope);
        ceiling - floor
    };
    middle_at(lower, upper, golden_max(width, slopes))
}

/// For a slope: (highest lower intercept, lowest upper intercept).
fn edges(lower: &[(f64, f64)], upper: &[(f64, f64)], slope: f64) -> (f64, f64) {
    let floor = lower
        .iter()
        .map(|&(x, y)| y - slope * x)
        .fold(f64::NEG_INFINITY, f64::max);
    let ceiling = upper
        .iter()
        .map(|&(x, y)| y - slope * x)
        .fold(f64::INFINITY, f64::min);
    (floor, ceiling)
}

/// The line of `slope` midway between `lower`'s highest and `upper`'s
/// lowest intercept, as [`midline`] returns it.
fn middle_at(lower: &[(f64, f64)], upper: &[(f64, f64)], slope: f64) -> Option<(f64, f64, f64)> {
    let (floor, ceiling) = edges(lower, upper, slope);
    let value = (floor + ceiling) / 2.0;
    value.is_finite().then_some((value, slope, ceiling - floor))
}

/// The grid points `k` in `0..points` (at `first + k * step`) within
/// `reach` of a leg of `legs` (sorted), ascending: at most
/// `legs.len() * (2 * reach / step + 1)` of them, whatever the span.
pub(crate) fn grid_near(legs: &[Leg], first: u64, points: u64, reach: u64, step: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for l in legs {
        let since = l.relay_ns.saturating_sub(first);
        let from = since.saturating_sub(reach).div_ceil(step);
        let to = (since.saturating_add(reach) / step).min(points.saturating_sub(1));
        let from = out.last().map_or(from, |&k| from.max(k + 1));
        out.extend(from..=to);
    }
    out
}

#[cfg(test)]
mod tests;
