//! Conversion: cache fast path, BFS path search and nearest-snapshot walk.

use super::cache::{CacheEntry, pack};
use super::{ClockGraph, ClockNode, ConvertError, MAX_PATH_HOPS, NodeIdx, SeriesId};

/// One edge of a path: from a clock to the next via one series.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hop {
    from: NodeIdx,
    series: SeriesId,
    to: NodeIdx,
}

/// Result of walking a path for one source value.
struct Walk {
    result: i128,
    /// Source-ns range over which every hop picks the same snapshots.
    min: i128,
    max: i128,
    cacheable: bool,
}

/// Perfetto's `ToNs`: raw value to ns, added to the accumulator if the
/// clock is incremental. Returns the new accumulator value in that case.
#[inline]
fn to_ns(value: u64, unit: i64, incremental: bool, last_ns: i64) -> Option<i64> {
    let ns = i64::try_from(value).ok()?.checked_mul(unit)?;
    if incremental {
        last_ns.checked_add(ns)
    } else {
        Some(ns)
    }
}

impl ClockGraph {
    /// The cache scan is kept small and inlinable; everything else is in
    /// the out-of-line slow path.
    #[inline]
    pub(super) fn convert_impl(
        &mut self,
        src: ClockNode,
        value: u64,
        dst: ClockNode,
        restricted: bool,
    ) -> Result<i64, ConvertError> {
        if src == dst {
            return self.identity(src, value);
        }
        let (src_key, dst_key) = (pack(src), pack(dst));
        if self.cache.unknown_source == (self.cache.generation(), src_key) {
            // What the slow path would find again (known clocks change
            // only with a snapshot, which moves the generation).
            self.stats.clock_sync_cache_miss += 1;
            return Err(ConvertError::UnknownSourceClock(src));
        }
        let tag = self.cache.tag(restricted);
        // ToNs runs at most once, as soon as some entry for (src, dst) exists.
        let mut ns = None;
        for entry in &self.cache.entries {
            if entry.tag != tag || entry.src != src_key || entry.dst != dst_key {
                continue;
            }
            let n = match ns {
                Some(n) => n,
                None => {
                    let last = if entry.incremental {
                        self.domains[entry.src_idx as usize].last_ns
                    } else {
                        0
                    };
                    let n = to_ns(value, entry.unit, entry.incremental, last)
                        .ok_or(ConvertError::Overflow)?;
                    ns = Some(n);
                    n
                }
            };
            if entry.min <= n && n < entry.max {
                let out = n
                    .checked_add(entry.translation)
                    .ok_or(ConvertError::Overflow)?;
                if entry.incremental {
                    self.domains[entry.src_idx as usize].last_ns = n;
                }
                self.stats.clock_sync_cache_hit += 1;
                return Ok(out);
            }
        }
        self.slow_path(src, value, dst, restricted, ns)
    }

    /// src == dst: nothing has to exist; the unit and accumulator apply if
    /// the clock is known.
    fn identity(&mut self, node: ClockNode, value: u64) -> Result<i64, ConvertError> {
        // Which clocks are known changes only with a snapshot, and every
        // snapshot moves the generation: a memo of the same generation holds.
        let key = pack(node);
        let generation = self.cache.generation();
        let known = match self.cache.identity {
            (g, k, idx) if g == generation && k == key => idx,
            _ => {
                let idx = self.known_idx(node);
                self.cache.identity = (generation, key, idx);
                idx
            }
        };
        let Some(idx) = known else {
            return i64::try_from(value).map_err(|_| ConvertError::Overflow);
        };
        let domain = &mut self.domains[idx as usize];
        let ns = to_ns(value, domain.unit, domain.incremental, domain.last_ns)
            .ok_or(ConvertError::Overflow)?;
        if domain.incremental {
            domain.last_ns = ns;
        }
        Ok(ns)
    }

    #[inline(never)]
    fn slow_path(
        &mut self,
        src: ClockNode,
        value: u64,
        dst: ClockNode,
        restricted: bool,
        ns: Option<i64>,
    ) -> Result<i64, ConvertError> {
        self.stats.clock_sync_cache_miss += 1;
        let Some(src_idx) = self.known_idx(src) else {
            self.cache.unknown_source = (self.cache.generation(), pack(src));
            return Err(ConvertError::UnknownSourceClock(src));
        };
        let dst_idx = self
            .known_idx(dst)
            .ok_or(ConvertError::UnknownTargetClock(dst))?;
        let path = self
            .find_path(src_idx, dst_idx, restricted)
            .ok_or(ConvertError::NoPath { src, dst })?;
        let domain = &self.domains[src_idx as usize];
        let (unit, incremental) = (domain.unit, domain.incremental);
        let ns = match ns {
            Some(n) => n,
            None => {
                to_ns(value, unit, incremental, domain.last_ns).ok_or(ConvertError::Overflow)?
            }
        };
        let walk = self
            .walk(ns, &path)
            .ok_or(ConvertError::NoPath { src, dst })?;
        let out = i64::try_from(walk.result).map_err(|_| ConvertError::Overflow)?;
        if incremental {
            self.domains[src_idx as usize].last_ns = ns;
        }
        let translation = i64::try_from(walk.result - i128::from(ns));
        if let (true, Ok(translation)) = (walk.cacheable, translation) {
            // Infinite bounds become the i64 extremes (i64::MAX itself then
            // misses, harmlessly).
            let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            let tag = self.cache.tag(restricted);
            self.cache.insert(CacheEntry {
                tag,
                src: pack(src),
                dst: pack(dst),
                src_idx,
                incremental,
                unit,
                min: clamp(walk.min),
                max: clamp(walk.max),
                translation,
            });
        }
        Ok(out)
    }

    /// Fewest-hops path by BFS over edges in (target clock, series) order;
    /// `restricted` keeps it on the source's machine.
    pub(super) fn find_path(
        &self,
        src: NodeIdx,
        dst: NodeIdx,
        restricted: bool,
    ) -> Option<Vec<Hop>> {
        let machine = self.domains[src as usize].node.machine;
        let mut parent: Vec<Option<Hop>> = vec![None; self.domains.len()];
        let mut visited = vec![false; self.domains.len()];
        visited[src as usize] = true;
        let mut frontier = vec![src];
        for _ in 0..MAX_PATH_HOPS {
            let mut next = Vec::new();
            for &from in &frontier {
                for &(node, series, to) in &self.domains[from as usize].edges {
                    if (restricted && node.machine != machine) || visited[to as usize] {
                        continue;
                    }
                    visited[to as usize] = true;
                    parent[to as usize] = Some(Hop { from, series, to });
                    if to == dst {
                        let mut path = Vec::new();
                        let mut cur = dst;
                        while let Some(hop) = parent[cur as usize] {
                            path.push(hop);
                            cur = hop.from;
                        }
                        path.reverse();
                        return Some(path);
                    }
                    next.push(to);
                }
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        None
    }

    /// Applies nearest-snapshot resolution along `path` (Perfetto Convert
    /// step 4) and tracks the source range over which the result is valid.
    fn walk(&self, ns: i64, path: &[Hop]) -> Option<Walk> {
        let start = i128::from(ns);
        let mut cur = start;
        let mut walk = Walk {
            result: 0,
            min: i128::MIN,
            max: i128::MAX,
            cacheable: true,
        };
        for hop in path {
            let from = self.domains[hop.from as usize].series.get(&hop.series)?;
            let to = self.domains[hop.to as usize].series.get(&hop.series)?;
            let ts = &from.ts;
            // Last snapshot <= cur (the last of equal ones); the first one
            // if cur is below all of them (extrapolated backwards).
            let it = ts
                .partition_point(|&t| i128::from(t) <= cur)
                .saturating_sub(1);
            let shift = cur - start;
            if it > 0 {
                walk.min = walk.min.max(i128::from(ts[it]) - shift);
            }
            if let Some(&next) = ts.get(it + 1) {
                walk.max = walk.max.min(i128::from(next) - shift);
            }
            // The target is found by snapshot id: its values may be unsorted
            // (a non-monotonic clock is allowed as a target).
            let (from_pos, to_pos) = match to.ids.binary_search(from.ids.get(it)?) {
                Ok(j) => (it, j),
                Err(_) => {
                    walk.cacheable = false;
                    shared_snapshot(&from.ids, &to.ids, it)?
                }
            };
            cur += i128::from(to.ts[to_pos]) - i128::from(ts[from_pos]);
        }
        walk.result = cur;
        Some(walk)
    }
}

/// The snapshot nearest to `it` (earlier first, then later) that both
/// clocks of a hop have; only partially applied snapshots make this needed.
fn shared_snapshot(
    from: &[super::SnapshotId],
    to: &[super::SnapshotId],
    it: usize,
) -> Option<(usize, usize)> {
    let find = |i: usize| to.binary_search(&from[i]).ok().map(|j| (i, j));
    (0..it)
        .rev()
        .find_map(find)
        .or_else(|| (it + 1..from.len()).find_map(find))
}
