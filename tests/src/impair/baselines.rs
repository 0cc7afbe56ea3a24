//! Baselines of the real-socket run: the raw probe samples of the
//! `.sync.jsonl` sidecars, and the naive and Perfetto-style offsets they
//! give (docs/clock-sync-accuracy.md, "Real sockets").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Perfetto-style baseline: one averaged constant per round of this length.
const PERFETTO_ROUND_NS: u64 = 30_000_000_000;

/// One raw probe exchange from a `.sync.jsonl` sidecar.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub t4: u64,
}

impl Sample {
    /// Relay minus host, assuming a symmetric path (ns).
    pub fn offset(&self) -> i64 {
        ((self.t2 as i128 - self.t1 as i128 + self.t3 as i128 - self.t4 as i128) / 2) as i64
    }
}

/// Probe samples by machine raw id, sorted by t4.
pub fn read_samples(dir: &Path) -> BTreeMap<u64, Vec<Sample>> {
    let mut out: BTreeMap<u64, Vec<Sample>> = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.to_string_lossy().ends_with(".sync.jsonl"));
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap_or_default().lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let get = |k: &str| v[k].as_u64();
            if let (Some(id), Some(t1), Some(t2), Some(t3), Some(t4)) = (
                get("machine_raw_id"),
                get("t1"),
                get("t2"),
                get("t3"),
                get("t4"),
            ) {
                out.entry(id).or_default().push(Sample { t1, t2, t3, t4 });
            }
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|s| s.t4);
    }
    out
}

/// The two baselines' offsets at host time `t` (causal: samples received
/// by then). None before the first sample.
pub struct Baselines<'a> {
    samples: &'a [Sample],
}

impl<'a> Baselines<'a> {
    pub fn new(samples: &'a [Sample]) -> Self {
        Self { samples }
    }

    fn received_by(&self, t: u64) -> usize {
        self.samples.partition_point(|s| s.t4 <= t)
    }

    /// Offset of the latest sample received by `t`.
    pub fn naive(&self, t: u64) -> Option<i64> {
        let k = self.received_by(t);
        (k > 0).then(|| self.samples[k - 1].offset())
    }

    /// Perfetto-style: rounds of 30 s from the first sample; in round r the
    /// mean offset of round r-1's samples (in round 0, of those so far).
    pub fn perfetto(&self, t: u64) -> Option<i64> {
        let first = self.samples.first()?.t4;
        if t < first {
            return None;
        }
        let round = (t - first) / PERFETTO_ROUND_NS;
        let (from, to) = if round == 0 {
            (first, t)
        } else {
            (
                first + (round - 1) * PERFETTO_ROUND_NS,
                first + round * PERFETTO_ROUND_NS - 1,
            )
        };
        let used: Vec<i64> = self
            .samples
            .iter()
            .filter(|s| s.t4 >= from && s.t4 <= to)
            .map(Sample::offset)
            .collect();
        if used.is_empty() {
            return self.naive(t);
        }
        Some((used.iter().map(|&o| o as i128).sum::<i128>() / used.len() as i128) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t1: u64, t2: u64, t3: u64, t4: u64) -> Sample {
        Sample { t1, t2, t3, t4 }
    }

    #[test]
    fn baselines_are_causal() {
        // Relay is 1000 ahead; symmetric 10 each way.
        let samples = vec![
            s(100, 1110, 1111, 121),
            s(200, 1210, 1211, 221),
            s(
                PERFETTO_ROUND_NS + 200,
                PERFETTO_ROUND_NS + 1250,
                PERFETTO_ROUND_NS + 1251,
                PERFETTO_ROUND_NS + 221,
            ),
        ];
        let b = Baselines::new(&samples);
        assert_eq!(b.naive(50), None);
        assert_eq!(b.naive(121), Some(1000));
        assert_eq!(b.perfetto(150), Some(1000));
        let last = PERFETTO_ROUND_NS + 300;
        assert_eq!(b.naive(last), Some(1040));
        // Round 1 uses round 0's mean (1000), not the newer sample.
        assert_eq!(b.perfetto(last), Some(1000));
    }
}
