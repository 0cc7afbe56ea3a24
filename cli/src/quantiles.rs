//! Histograms of ns values for the figures commands print (`check`,
//! `refine`): made at their first value, 3 significant digits (within
//! 0.1%), auto-resizing so a value of any size is recorded.

use hdrhistogram::Histogram;

/// Records `v` in `h`, making it first. hdrhistogram accepts 3
/// significant digits always; were it to refuse, the figure stays 0.
pub fn record(h: &mut Option<Histogram<u64>>, v: u64) {
    if h.is_none() {
        *h = Histogram::new(3).ok();
    }
    if let Some(h) = h {
        let _ = h.record(v);
    }
}

/// The value at quantile `q`; 0 for no values.
pub fn at(h: Option<&Histogram<u64>>, q: f64) -> u64 {
    h.filter(|h| !h.is_empty())
        .map_or(0, |h| h.value_at_quantile(q))
}
