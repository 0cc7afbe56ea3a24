//! The sort of a release's new entries: a radix sort on the time (least
//! significant digits first, each pass stable), then the rare runs of equal
//! times put in key order by insertion. Both steps keep equal entries in
//! the order they were held, which is the order they were made: the
//! result is the order by (time, key, offset) a full sort gives.
//!
//! The events come in nearly in time order, but completes' ends go
//! anywhere; a comparison sort costs about 17 comparisons an entry at a
//! window's size, this about three passes.

use super::Held;

/// Bits of the time sorted per pass: a pass's counts (2^11 of 4 bytes)
/// fit in the first-level cache.
const DIGIT: u32 = 11;
const BUCKETS: usize = 1 << DIGIT;
/// Fewer entries than this are sorted by comparison: a radix pass's
/// counts would cost more.
const SMALL: usize = 1024;

/// A time as an unsigned number in the same order.
fn unsigned(ts: i64) -> u64 {
    (ts as u64) ^ (1 << 63)
}

/// Sorts `v` by (time, key), equal ones in their order, with `scratch`
/// (resized to `v`'s length) as the passes' room.
pub(super) fn sort(v: &mut [Held], scratch: &mut Vec<Held>) {
    let Some(&first) = v.first() else {
        return;
    };
    if v.len() < SMALL {
        v.sort_unstable_by_key(|h| (h.ts, h.key, h.off));
        return;
    }
    let (mut min, mut max) = (unsigned(first.ts), unsigned(first.ts));
    for h in v.iter() {
        let t = unsigned(h.ts);
        min = min.min(t);
        max = max.max(t);
    }
    let bits = 64 - (max - min).leading_zeros();
    let passes = bits.div_ceil(DIGIT) as usize;
    let mut counts = vec![[0_u32; BUCKETS]; passes];
    for h in v.iter() {
        let t = unsigned(h.ts) - min;
        for (p, c) in counts.iter_mut().enumerate() {
            c[((t >> (p as u32 * DIGIT)) as usize) & (BUCKETS - 1)] += 1;
        }
    }
    scratch.clear();
    scratch.resize(v.len(), first);
    let mut in_v = true;
    for (p, c) in counts.iter_mut().enumerate() {
        // Counts become each digit's first place.
        let mut sum = 0;
        for x in c.iter_mut() {
            let n = *x;
            *x = sum;
            sum += n;
        }
        let shift = p as u32 * DIGIT;
        let (from, to): (&[Held], &mut [Held]) = if in_v { (v, scratch) } else { (scratch, v) };
        for h in from {
            let slot = &mut c[(((unsigned(h.ts) - min) >> shift) as usize) & (BUCKETS - 1)];
            if let Some(place) = to.get_mut(*slot as usize) {
                *place = *h;
            }
            *slot += 1;
        }
        in_v = !in_v;
    }
    if !in_v {
        v.copy_from_slice(scratch);
    }
    order_equal_times(v);
}

/// Puts each run of equal times in key order, equal keys in their order.
fn order_equal_times(v: &mut [Held]) {
    for i in 1..v.len() {
        let h = v[i];
        let prev = v[i - 1];
        if h.ts != prev.ts || h.key >= prev.key {
            continue;
        }
        let mut j = i;
        while j > 0 && v[j - 1].ts == h.ts && v[j - 1].key > h.key {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = h;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries made in order (offsets rising) from a small generator.
    fn entries(n: usize, spread: u64, seed: u64) -> Vec<Held> {
        let mut x = seed | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let ts = ((x % spread) as i64).wrapping_sub((spread / 3) as i64);
                let key = match (x >> 40) % 4 {
                    0 => i64::MIN,
                    1 => i64::MAX,
                    _ => i64::MAX - ((x >> 20) % 3) as i64,
                };
                Held {
                    ts,
                    key,
                    off: i as u32 * 7,
                    len: 1,
                }
            })
            .collect()
    }

    #[test]
    fn same_order_as_a_full_sort() {
        let mut scratch = Vec::new();
        for (n, spread) in [
            (0, 1),
            (10, 5),
            (1500, 3),
            (5000, 1 << 12),
            (5000, u64::MAX),
        ] {
            for seed in 1..4 {
                let mut v = entries(n, spread, seed);
                let mut want = v.clone();
                want.sort_unstable_by_key(|h| (h.ts, h.key, h.off));
                sort(&mut v, &mut scratch);
                let got: Vec<_> = v.iter().map(|h| (h.ts, h.key, h.off)).collect();
                let want: Vec<_> = want.iter().map(|h| (h.ts, h.key, h.off)).collect();
                assert_eq!(got, want, "n {n} spread {spread}");
            }
        }
    }
}
