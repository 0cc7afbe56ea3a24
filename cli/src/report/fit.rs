//! The offset panel's numbers. A machine's offset drifts (50 ppm is 50 µs
//! a second), so the panel draws what is left of it around a line fitted
//! to it, one line per epoch: the residual, on the scale of the error
//! bound. The residual is the offset in force minus the line: each offset
//! sample holds until the next (the daemon writes one only when the
//! offset moved past its sync-point threshold, and Perfetto applies a
//! sync point until the next), up to the machine's last packet. The error
//! bound in force is a band around it.
//!
//! The line is the weighted least-squares line of the offset in force:
//! each held stretch weighs its length over its bound squared, so a
//! sample that holds for most of an epoch (a machine that stopped
//! drifting past the threshold gets no new one) counts as long as it is
//! drawn, and the first seconds' estimates, before the estimator has
//! fitted the frequency, count as little as their wide bounds say.
//!
//! Invariants: spans of a piece are in time order and touch (one's `b` is
//! the next one's `a`); every piece lies inside its epoch.

/// The smallest bound a stretch is weighed with (µs): a capture without
/// bound samples weighs by length alone.
const MIN_BOUND_US: f64 = 0.001;

/// The offset and the bound in force over `a..b` (s; µs).
#[derive(Clone, Copy, Debug)]
struct Held {
    a: f64,
    b: f64,
    offset: f64,
    bound: f64,
}

/// The line fitted to one epoch's offset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// The epoch's first sample (s from the capture's start).
    pub from_s: f64,
    /// The line's value there (µs).
    pub offset_us: f64,
    /// Its slope: µs per s, i.e. ppm.
    pub drift_ppm: f64,
}

impl Fit {
    /// The line's value at `t` (µs).
    pub fn at(&self, t: f64) -> f64 {
        self.offset_us + self.drift_ppm * (t - self.from_s)
    }

    /// The weighted least-squares line of `held` (time order, at least
    /// one; see the module's docs).
    fn of(held: &[Held]) -> Option<Self> {
        let first = held.first()?;
        let (from_s, v0) = (first.a, first.offset);
        // Moments from `from_s` and `v0`: µs of an offset of hours would
        // swamp the sums otherwise.
        let (mut s0, mut s1, mut s2, mut sv, mut stv) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for h in held {
            let w = 1.0 / h.bound.max(MIN_BOUND_US).powi(2);
            let (a, b) = (h.a - from_s, h.b - from_s);
            let (m0, m1) = (w * (b - a), w * (b * b - a * a) / 2.0);
            let m2 = w * (b * b * b - a * a * a) / 3.0;
            let d = h.offset - v0;
            s0 += m0;
            s1 += m1;
            s2 += m2;
            sv += d * m0;
            stv += d * m1;
        }
        let det = s0 * s2 - s1 * s1;
        if s0 <= 0.0 || det <= 1e-12 * s0 * s2 {
            // No time to fit over (one sample at the machine's last
            // packet): a flat line through the mean.
            let mean = held.iter().map(|h| h.offset - v0).sum::<f64>() / held.len() as f64;
            return Some(Self {
                from_s,
                offset_us: v0 + mean,
                drift_ppm: 0.0,
            });
        }
        let drift_ppm = (s0 * stv - s1 * sv) / det;
        Some(Self {
            from_s,
            offset_us: v0 + (sv - drift_ppm * s1) / s0,
            drift_ppm,
        })
    }
}

/// The residual over `a..b` (s): from `first` to `last` (µs), between
/// `lo` and `hi`, and the band `down..up` (at `a`, at `b`) around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub a: f64,
    pub b: f64,
    pub first: f64,
    pub last: f64,
    pub lo: f64,
    pub hi: f64,
    pub up: (f64, f64),
    pub down: (f64, f64),
}

impl Span {
    /// One span merged with the next (for drawing at a pixel's width).
    fn merge(self, next: Span) -> Span {
        let up = self.up.0.max(self.up.1).max(next.up.0).max(next.up.1);
        let down = self
            .down
            .0
            .min(self.down.1)
            .min(next.down.0)
            .min(next.down.1);
        Span {
            a: self.a,
            b: next.b,
            first: self.first,
            last: next.last,
            lo: self.lo.min(next.lo),
            hi: self.hi.max(next.hi),
            up: (up, up),
            down: (down, down),
        }
    }
}

/// What the offset panel draws for one machine.
#[derive(Debug, Default)]
pub struct Residual {
    /// One per epoch with offset samples, in time order.
    pub fits: Vec<Fit>,
    /// One per fit: its residual, a line broken at epoch changes.
    pub pieces: Vec<Vec<Span>>,
}

/// The y range the offset panel shows: all of the residual and its band,
/// or, when a short stretch (the first seconds, before the estimator has
/// fitted the frequency, have bounds many times the steady ones) would
/// shrink the rest to a few pixels, the range the band keeps to for
/// [`KEPT`] of the time, with what is off scale said.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    /// (s off scale, the farthest value off scale), when clipped.
    pub off: Option<(f64, f64)>,
}

/// `lo..hi` with some room (8%, at least 0.5 µs each side).
pub fn padded(lo: f64, hi: f64) -> (f64, f64) {
    let pad = ((hi - lo) * 0.08).max(0.5);
    (lo - pad, hi + pad)
}

/// The share of the time the offset panel's range keeps on scale.
const KEPT: f64 = 0.99;

/// A full range more than this many times the kept one is clipped.
const CLIP_RATIO: f64 = 2.0;

/// The value `share` of the time stays at or below, of (value, duration).
fn time_quantile(mut weighted: Vec<(f64, f64)>, share: f64) -> Option<f64> {
    weighted.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total: f64 = weighted.iter().map(|w| w.1).sum();
    if total <= 0.0 {
        return None;
    }
    let mut seen = 0.0;
    for (value, duration) in &weighted {
        seen += duration;
        if seen >= share * total {
            return Some(*value);
        }
    }
    weighted.last().map(|w| w.0)
}

impl Residual {
    /// The smallest and largest value drawn (line and band), if any.
    pub fn extent(&self) -> Option<(f64, f64)> {
        self.pieces.iter().flatten().fold(None, |acc, s| {
            let lo = s.lo.min(s.down.0).min(s.down.1);
            let hi = s.hi.max(s.up.0).max(s.up.1);
            Some(acc.map_or((lo, hi), |(l, h): (f64, f64)| (l.min(lo), h.max(hi))))
        })
    }

    /// The range to draw, with room (always holding 0, the fit), see
    /// [`Scale`].
    pub fn scale(&self) -> Scale {
        let (lo, hi) = self.extent().unwrap_or((0.0, 0.0));
        let (lo, hi) = padded(lo.min(0.0), hi.max(0.0));
        let full = Scale { lo, hi, off: None };
        let spans = || self.pieces.iter().flatten();
        let up = spans()
            .map(|s| (s.hi.max(s.up.0).max(s.up.1), s.b - s.a))
            .collect();
        let down = spans()
            .map(|s| (-s.lo.min(s.down.0).min(s.down.1), s.b - s.a))
            .collect();
        let (Some(kept_hi), Some(kept_lo)) = (time_quantile(up, KEPT), time_quantile(down, KEPT))
        else {
            return full;
        };
        let (kept_lo, kept_hi) = padded((-kept_lo).min(0.0), kept_hi.max(0.0));
        if full.hi - full.lo <= CLIP_RATIO * (kept_hi - kept_lo) {
            return full;
        }
        let (mut seconds, mut farthest) = (0.0, 0.0f64);
        for s in spans() {
            let (top, bottom) = (
                s.hi.max(s.up.0).max(s.up.1),
                s.lo.min(s.down.0).min(s.down.1),
            );
            if top > kept_hi || bottom < kept_lo {
                seconds += s.b - s.a;
                for v in [top, bottom]
                    .into_iter()
                    .filter(|v| *v > kept_hi || *v < kept_lo)
                {
                    if v.abs() > farthest.abs() {
                        farthest = v;
                    }
                }
            }
        }
        Scale {
            lo: kept_lo,
            hi: kept_hi,
            off: Some((seconds, farthest)),
        }
    }
}

fn sorted(series: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = series.to_vec();
    out.sort_by(|x, y| x.0.total_cmp(&y.0));
    out
}

/// The value in force at `t`: the last sample at or before it.
fn held(series: &[(f64, f64)], t: f64) -> Option<f64> {
    let i = series.partition_point(|s| s.0 <= t);
    series.get(i.checked_sub(1)?).map(|s| s.1)
}

/// The residual of `offsets` (µs) with the band of `bounds` (µs), fitted
/// per epoch (`epochs`: the times epochs change), held until `end_s` (the
/// machine's last packet), drawn with at most about `buckets` spans a
/// piece.
pub fn residual(
    offsets: &[(f64, f64)],
    bounds: &[(f64, f64)],
    epochs: &[f64],
    end_s: f64,
    buckets: usize,
) -> Residual {
    let (offsets, bounds) = (sorted(offsets), sorted(bounds));
    let mut out = Residual::default();
    let mut rest = offsets.as_slice();
    while let Some(&(t0, _)) = rest.first() {
        // An epoch's samples: those before the next epoch change.
        let epoch = epochs.partition_point(|&e| e <= t0);
        let next = epochs.get(epoch).copied().unwrap_or(f64::INFINITY);
        let n = rest.partition_point(|s| s.0 < next).max(1);
        let (samples, after) = rest.split_at(n);
        rest = after;
        let last = samples.last().map_or(t0, |s| s.0);
        let until = if next.is_finite() { next } else { end_s };
        let held = held_stretches(samples, &bounds, until.max(last));
        let Some(fit) = Fit::of(&held) else {
            continue;
        };
        out.fits.push(fit);
        out.pieces
            .push(decimate(spans(&held, &fit), end_s, buckets));
    }
    out
}

/// The stretches from the first sample to `end` over which the offset
/// and the bound in force hold (one of no length if the sample is at
/// `end`).
fn held_stretches(samples: &[(f64, f64)], bounds: &[(f64, f64)], end: f64) -> Vec<Held> {
    let start = samples.first().map_or(end, |s| s.0);
    let mut cuts: Vec<f64> = samples.iter().map(|s| s.0).collect();
    cuts.extend(bounds.iter().map(|s| s.0).filter(|&t| t > start && t < end));
    cuts.push(end);
    cuts.sort_by(f64::total_cmp);
    cuts.dedup();
    if cuts.len() == 1 {
        cuts.push(end);
    }
    cuts.windows(2)
        .filter_map(|w| {
            Some(Held {
                a: w[0],
                b: w[1],
                offset: held(samples, w[0])?,
                bound: held(bounds, w[0]).unwrap_or(0.0),
            })
        })
        .collect()
}

/// The residual of each stretch around `fit`.
fn spans(held: &[Held], fit: &Fit) -> Vec<Span> {
    held.iter()
        .map(|h| {
            let (first, last) = (h.offset - fit.at(h.a), h.offset - fit.at(h.b));
            Span {
                a: h.a,
                b: h.b,
                first,
                last,
                lo: first.min(last),
                hi: first.max(last),
                up: (first + h.bound, last + h.bound),
                down: (first - h.bound, last - h.bound),
            }
        })
        .collect()
}

/// Spans merged per bucket of `span_s / buckets` seconds when a piece has
/// many more than `buckets` (a long capture's line would be drawn many
/// times per pixel); the merged spans keep each bucket's extremes.
fn decimate(spans: Vec<Span>, span_s: f64, buckets: usize) -> Vec<Span> {
    if spans.len() <= buckets.saturating_mul(2) || buckets == 0 || span_s <= 0.0 {
        return spans;
    }
    let width = span_s / buckets as f64;
    let bucket = |s: &Span| (s.a / width).floor();
    let mut out: Vec<Span> = Vec::with_capacity(buckets + 1);
    for s in spans {
        match out.last_mut() {
            Some(prev) if bucket(prev) == bucket(&s) => *prev = prev.merge(s),
            _ => out.push(s),
        }
    }
    out
}
