//! The search and the hulls the envelope fits rest on: the top of a
//! concave function by golden sections, and the convex hull vertices that
//! alone can bound a corridor.

/// Golden-section steps of the slope search: the interval shrinks by
/// 0.618 per step, from 2x the crystal tolerance to far below 1e-15.
pub(super) const SEARCH_STEPS: usize = 90;

/// Where the concave `f` is highest within `range`: a golden-section
/// search of [`SEARCH_STEPS`] steps (the interval shrinks by 0.618 per
/// step).
pub(crate) fn golden_max(f: impl FnMut(f64) -> f64, range: (f64, f64)) -> f64 {
    golden_max_in(f, range, SEARCH_STEPS)
}

/// [`golden_max`] in `steps` steps.
pub(super) fn golden_max_in(f: impl FnMut(f64) -> f64, range: (f64, f64), steps: usize) -> f64 {
    let (a, b) = golden_bracket(f, range, steps);
    (a + b) / 2.0
}

/// The bracket `steps` golden-section steps leave around the top of the
/// concave `f` within `range` (it shrinks by 0.618 per step).
pub(super) fn golden_bracket(
    mut f: impl FnMut(f64) -> f64,
    (mut a, mut b): (f64, f64),
    steps: usize,
) -> (f64, f64) {
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - ratio * (b - a);
    let mut d = a + ratio * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..steps {
        if fc >= fd {
            (b, d, fd) = (d, c, fc);
            c = b - ratio * (b - a);
            fc = f(c);
        } else {
            (a, c, fc) = (c, d, fd);
            d = a + ratio * (b - a);
            fd = f(d);
        }
    }
    (a, b)
}

/// Which convex hull of a point set [`hull`] keeps.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Side {
    Upper,
    Lower,
}

/// The vertices of the upper or lower convex hull of `points`, by x:
/// the points that maximise (upper) or minimise (lower) `y - slope * x`
/// for some slope.
pub(crate) fn hull(points: &[(f64, f64)], side: Side) -> Vec<(f64, f64)> {
    let flip = if side == Side::Upper { 1.0 } else { -1.0 };
    let mut sorted: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x, flip * y)).collect();
    if !sorted.is_sorted_by(|a, b| a.0 <= b.0) {
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    // Same x: only the highest can be a vertex.
    sorted.dedup_by(|next, kept| {
        let same = next.0 == kept.0;
        if same && next.1 > kept.1 {
            kept.1 = next.1;
        }
        same
    });
    let mut kept: Vec<(f64, f64)> = Vec::with_capacity(16);
    for p in sorted {
        while let [.., a, b] = kept[..] {
            if turns_right(a, b, p) {
                break;
            }
            kept.pop();
        }
        kept.push(p);
    }
    kept.into_iter().map(|(x, y)| (x, flip * y)).collect()
}

/// True when `a -> b -> c` turns clockwise (b lies strictly above the
/// chord a-c, so it stays on the upper hull).
fn turns_right(a: (f64, f64), b: (f64, f64), c: (f64, f64)) -> bool {
    (b.0 - a.0) * (c.1 - a.1) - (b.1 - a.1) * (c.0 - a.0) < 0.0
}
