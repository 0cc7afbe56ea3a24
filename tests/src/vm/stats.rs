//! Quantiles and a least-squares line, for the VM run's figures.

/// The `q` quantile (0..=1, nearest rank) of `values`; None if empty.
pub fn quantile(values: &[u64], q: f64) -> Option<u64> {
    let mut v = values.to_vec();
    v.sort_unstable();
    let last = v.len().checked_sub(1)?;
    v.get(((last as f64) * q.clamp(0.0, 1.0)).round() as usize)
        .copied()
}

/// p50 and p99 of `values` as "p50 X / p99 Y" in µs with one decimal.
pub fn p50_p99_us(values: &[u64]) -> String {
    match (quantile(values, 0.5), quantile(values, 0.99)) {
        (Some(a), Some(b)) => format!(
            "p50 {:.1} µs / p99 {:.1} µs",
            a as f64 / 1e3,
            b as f64 / 1e3
        ),
        _ => "none".into(),
    }
}

/// Least-squares line y = slope * x + intercept through the points, with
/// x and y taken relative to the first point (ns values are large).
/// None for fewer than 3 points or all x equal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    pub slope: f64,
    pub intercept: f64,
    pub x0: f64,
}

impl Line {
    pub fn fit(points: &[(f64, f64)]) -> Option<Line> {
        if points.len() < 3 {
            return None;
        }
        let x0 = points[0].0;
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0 - x0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for &(x, y) in points {
            let dx = x - x0 - mx;
            sxx += dx * dx;
            sxy += dx * (y - my);
        }
        if sxx <= 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        Some(Line {
            slope,
            intercept: my - slope * mx,
            x0,
        })
    }

    pub fn at(&self, x: f64) -> f64 {
        self.slope * (x - self.x0) + self.intercept
    }

    /// |y - line(x)| of every point, rounded to ns.
    pub fn abs_residuals(&self, points: &[(f64, f64)]) -> Vec<u64> {
        points
            .iter()
            .map(|&(x, y)| (y - self.at(x)).abs().round() as u64)
            .collect()
    }

    /// The slope as parts per million (x and y in the same unit).
    pub fn ppm(&self) -> f64 {
        self.slope * 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(51));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn a_line_with_20_ppm_is_found_with_its_residuals() {
        // Offsets growing 20 ns per ms (20 ppm) around 5 µs, ±100 ns.
        let points: Vec<(f64, f64)> = (0..50)
            .map(|i| {
                let x = 1.0e13 + i as f64 * 1e6;
                let wobble = if i % 2 == 0 { 100.0 } else { -100.0 };
                (x, 5000.0 + 20.0 * i as f64 + wobble)
            })
            .collect();
        let line = Line::fit(&points).unwrap();
        assert!((line.ppm() - 20.0).abs() < 0.5, "{}", line.ppm());
        let res = line.abs_residuals(&points);
        // The alternating wobble tilts the fit a little: residuals 100 ± 6.
        assert!(res.iter().all(|r| (90..=110).contains(r)), "{res:?}");
        assert_eq!(Line::fit(&points[..2]), None);
    }
}
