//! Kernel receive timestamps mapped onto the clock a probe end stamps with
//! (sans-IO: the caller passes every clock read in).

use crate::clock::ClockPair;

/// Why a kernel receive timestamp was not used (the userspace stamp was).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxFallback {
    /// The datagram carried no timestamp (option off or not supported).
    Missing,
    /// After the REALTIME read right after the receive: REALTIME went back.
    AfterNow,
    /// Before every recent paired read: it waited longer than the mapper
    /// can vouch for (or REALTIME jumped forward).
    BeforeAnchor,
    /// REALTIME and the stamping clock moved apart between the paired read
    /// before the datagram and the one after: a step or slew of either one,
    /// so REALTIME intervals do not map onto the stamping clock.
    ClocksMoved,
}

/// Counters of a [`RxStampMapper`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxStampStats {
    /// Receive stamps taken from the kernel.
    pub kernel: u64,
    pub missing: u64,
    pub after_now: u64,
    pub before_anchor: u64,
    pub clocks_moved: u64,
}

impl RxStampStats {
    /// Datagrams stamped in userspace although the kernel was asked.
    pub fn fallbacks(&self) -> u64 {
        self.missing + self.after_now + self.before_anchor + self.clocks_moved
    }
}

/// Maps kernel software receive timestamps (CLOCK_REALTIME, from
/// `SO_TIMESTAMPNS`) onto the clock a probe end stamps with.
///
/// The caller gives a [`ClockPair`] read before it waits for a datagram
/// ([`note`](Self::note)) and one read right after the receive returns
/// ([`map`](Self::map)). The kernel stamp `k` is converted by the wakeup
/// latency measured in REALTIME: `clock_now - (realtime_now - k)`, so only
/// REALTIME *intervals* of microseconds are used, never its absolute value
/// (REALTIME can be stepped by NTP or an administrator; the stamping clock
/// may be BOOTTIME in a time namespace or a simulated clock). The result is
/// used only if `k` lies in [latest paired read at or before `k`, now] and
/// the two clocks kept the same distance between those two reads (within
/// [`Self::TOLERANCE_NS`] + [`Self::TOLERANCE_PPM`] of the time between
/// them); otherwise the userspace stamp (the clock read right after the
/// receive) is returned and the reason counted.
///
/// Anchors are kept [`Self::SPACING_NS`] apart (the newest is replaced
/// until it is that far from the one before it), so together they reach
/// back [`Self::ANCHORS`] spacings however fast datagrams come: under a
/// flood of junk datagrams, two paired reads per datagram pushed out every
/// anchor older than a few microseconds, and a relay's reply that waited
/// behind the flood in the socket's buffer fell back to the userspace
/// stamp, its queueing delay (tens of ms) counted as network delay.
#[derive(Clone, Debug, Default)]
pub struct RxStampMapper {
    /// Recent paired reads, oldest first.
    anchors: std::collections::VecDeque<ClockPair>,
    stats: RxStampStats,
}

impl RxStampMapper {
    /// Paired reads kept (a datagram that waited behind others still finds
    /// one before it).
    pub const ANCHORS: usize = 16;
    /// Least distance on the stamping clock between two anchors but the
    /// newest: 16 anchors reach back at least 375 ms, longer than a
    /// datagram waits in a full socket buffer drained at flood rate.
    pub const SPACING_NS: u64 = 25_000_000;
    /// Allowed change of `clock - REALTIME` between two paired reads, plus
    /// [`Self::TOLERANCE_PPM`] of the time between them: covers read jitter,
    /// NTP slews of REALTIME and simulated drift; a step larger than this
    /// falls back.
    pub const TOLERANCE_NS: i128 = 10_000;
    pub const TOLERANCE_PPM: i128 = 200;

    pub fn new() -> Self {
        Self::default()
    }

    /// Records a paired read taken before waiting for a datagram.
    pub fn note(&mut self, pair: ClockPair) {
        if let Some(last) = self.anchors.back()
            && (pair.realtime_ns < last.realtime_ns || pair.clock_ns < last.clock_ns)
        {
            // A clock went back: older anchors no longer order with it.
            self.anchors.clear();
        }
        let len = self.anchors.len();
        let close = len >= 2
            && self
                .anchors
                .get(len - 2)
                .is_some_and(|a| pair.clock_ns.saturating_sub(a.clock_ns) < Self::SPACING_NS);
        if close {
            // The newest moves on; the ones before it stay spaced.
            if let Some(newest) = self.anchors.back_mut() {
                *newest = pair;
            }
            return;
        }
        if len == Self::ANCHORS {
            self.anchors.pop_front();
        }
        self.anchors.push_back(pair);
    }

    /// The receive stamp on the stamping clock for a datagram whose kernel
    /// timestamp is `kernel_realtime_ns` (None: it had none), given `now`,
    /// the paired read right after the receive returned. `now` becomes the
    /// newest anchor.
    pub fn map(&mut self, kernel_realtime_ns: Option<u64>, now: ClockPair) -> u64 {
        let mapped = self.convert(kernel_realtime_ns, now);
        match mapped {
            Ok(_) => self.stats.kernel += 1,
            Err(RxFallback::Missing) => self.stats.missing += 1,
            Err(RxFallback::AfterNow) => self.stats.after_now += 1,
            Err(RxFallback::BeforeAnchor) => self.stats.before_anchor += 1,
            Err(RxFallback::ClocksMoved) => self.stats.clocks_moved += 1,
        }
        self.note(now);
        mapped.unwrap_or(now.clock_ns)
    }

    /// The conversion alone (nothing recorded).
    pub fn convert(
        &self,
        kernel_realtime_ns: Option<u64>,
        now: ClockPair,
    ) -> Result<u64, RxFallback> {
        let k = kernel_realtime_ns.ok_or(RxFallback::Missing)?;
        if k > now.realtime_ns {
            return Err(RxFallback::AfterNow);
        }
        let anchor = self
            .anchors
            .iter()
            .rev()
            .find(|a| {
                a.realtime_ns <= k && a.realtime_ns <= now.realtime_ns && a.clock_ns <= now.clock_ns
            })
            .ok_or(RxFallback::BeforeAnchor)?;
        let span = (now.clock_ns - anchor.clock_ns) as i128;
        let moved = (now.gap() - anchor.gap()).abs();
        if moved > Self::TOLERANCE_NS + span * Self::TOLERANCE_PPM / 1_000_000 {
            return Err(RxFallback::ClocksMoved);
        }
        let latency = now.realtime_ns - k;
        // Never before the anchor on the stamping clock.
        Ok(now.clock_ns.saturating_sub(latency).max(anchor.clock_ns))
    }

    pub fn stats(&self) -> RxStampStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(realtime_ns: u64, clock_ns: u64) -> ClockPair {
        ClockPair {
            realtime_ns,
            clock_ns,
        }
    }

    /// REALTIME 1_700_000_000 s; the stamping clock (a relay's BOOTTIME in a
    /// time namespace) 5000 s + 123 ns; same rate.
    const R: u64 = 1_700_000_000_000_000_000;
    const C: u64 = 5_000_000_000_123;

    #[test]
    fn kernel_stamp_maps_by_the_wakeup_latency() {
        let mut m = RxStampMapper::new();
        m.note(pair(R, C));
        // Arrived 200 ms after the anchor, read 35 us later.
        let k = R + 200_000_000;
        let now = pair(k + 35_000, C + 200_035_000);
        assert_eq!(m.map(Some(k), now), C + 200_000_000);
        assert_eq!(m.stats().kernel, 1);
        assert_eq!(m.stats().fallbacks(), 0);
    }

    #[test]
    fn a_drifting_clock_maps_within_the_drift_over_the_latency() {
        // The stamping clock runs 50 ppm fast (the simulated relay clock).
        let mut m = RxStampMapper::new();
        m.note(pair(R, C));
        let k = R + 250_000_000;
        let at = |rt: u64| C + (rt - R) + (rt - R) / 20_000;
        let now = pair(k + 40_000, at(k + 40_000));
        let got = m.map(Some(k), now) as i64;
        assert!((got - at(k) as i64).abs() <= 3, "{got} vs {}", at(k));
    }

    #[test]
    fn falls_back_to_the_userspace_stamp_and_counts_why() {
        let mut m = RxStampMapper::new();
        let now = pair(R + 1_000_000, C + 1_000_000);
        // No anchor yet: cannot vouch for the stamp.
        assert_eq!(m.map(Some(R + 999_000), now), now.clock_ns);
        assert_eq!(m.stats().before_anchor, 1);
        // No timestamp.
        let now2 = pair(R + 2_000_000, C + 2_000_000);
        assert_eq!(m.map(None, now2), now2.clock_ns);
        assert_eq!(m.stats().missing, 1);
        // REALTIME stepped back 1 s between arrival and the read.
        let now3 = pair(R + 3_000_000, C + 3_000_000);
        assert_eq!(m.map(Some(R + 1_003_000_000), now3), now3.clock_ns);
        assert_eq!(m.stats().after_now, 1);
        // Older than every anchor (queued for long, or REALTIME jumped
        // forward since).
        let now4 = pair(R + 4_000_000, C + 4_000_000);
        assert_eq!(m.map(Some(R + 500_000), now4), now4.clock_ns);
        assert_eq!(m.stats().before_anchor, 2);
        // Inside the window, but the stamping clock stepped +200 us between
        // the anchor and now (the relay's simulated step): not used.
        let now5 = pair(R + 5_000_000, C + 5_200_000);
        assert_eq!(m.map(Some(R + 4_900_000), now5), now5.clock_ns);
        assert_eq!(m.stats().clocks_moved, 1);
        assert_eq!(m.stats().kernel, 0);
        assert_eq!(m.stats().fallbacks(), 5);
        // After the step both clocks agree again: kernel stamps are back.
        let now6 = pair(R + 6_000_000, C + 6_200_000);
        assert_eq!(m.map(Some(R + 5_990_000), now6), C + 6_190_000);
        assert_eq!(m.stats().kernel, 1);
    }

    #[test]
    fn a_datagram_queued_behind_another_finds_an_older_anchor() {
        let mut m = RxStampMapper::new();
        m.note(pair(R, C));
        // Two datagrams arrive 10 us apart; the first is read 50 us after
        // its arrival, the second right after that.
        let now1 = pair(R + 1_050_000, C + 1_050_000);
        assert_eq!(m.map(Some(R + 1_000_000), now1), C + 1_000_000);
        let now2 = pair(R + 1_052_000, C + 1_052_000);
        assert_eq!(m.map(Some(R + 1_010_000), now2), C + 1_010_000);
        assert_eq!(m.stats().kernel, 2);
    }

    /// A relay's reply arrives, then 10,000 junk datagrams are received
    /// (one paired read before each wait, one after each receive, 1 us
    /// apart) before the reply is read, 10 ms after its arrival. With the
    /// last 8 paired reads as anchors it fell back to the userspace stamp,
    /// 10 ms late; with spaced anchors it keeps the kernel's.
    #[test]
    fn a_reply_read_after_a_flood_keeps_its_kernel_stamp() {
        let mut m = RxStampMapper::new();
        m.note(pair(R, C));
        let arrival = R + 1_000_000;
        let mut t = arrival;
        for _ in 0..10_000 {
            t += 500;
            m.note(pair(t, C + (t - R)));
            t += 500;
            let junk = t - 20_000;
            let _ = m.map(Some(junk), pair(t, C + (t - R)));
        }
        let now = pair(t + 1_000, C + (t + 1_000 - R));
        let stamp = m.map(Some(arrival), now);
        assert_eq!(stamp, C + 1_000_000, "{} ns late", stamp - (C + 1_000_000));
        assert_eq!(m.stats().before_anchor, 0);
        assert!(m.anchors.len() <= RxStampMapper::ANCHORS);
    }

    #[test]
    fn slow_slews_stay_within_tolerance_and_a_backward_clock_resets() {
        let mut m = RxStampMapper::new();
        m.note(pair(R, C));
        // 100 ppm slew of REALTIME over 1 s: 100 us apart, allowed (10 us +
        // 200 ppm of 1 s = 210 us).
        let k = R + 1_000_100_000 - 30_000;
        let now = pair(R + 1_000_100_000, C + 1_000_000_000);
        assert_eq!(m.map(Some(k), now), C + 1_000_000_000 - 30_000);
        // The stamping clock goes back (a new anchor older than the last):
        // earlier anchors are forgotten.
        m.note(pair(R + 2_000_000_000, C));
        assert_eq!(m.anchors.len(), 1);
    }
}
