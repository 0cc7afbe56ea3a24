//! Signed probe datagrams: the envelope (`ProbeDatagram`), its MAC and the
//! replay window both sides keep.
//!
//! Every datagram of the sync channel (UDP datagram or TCP-fallback frame)
//! is `ProbeDatagram { session_id, body, mac }` where `body` is an encoded
//! `ProbeBody` and `mac = HMAC-SHA256(probe_key, body)` with the 32-byte key
//! the daemon drew for the session and sent in `Welcome.probe_key`. A
//! receiver looks the key up by the envelope's session id, checks the MAC
//! over the exact received bytes (constant time), then decodes the body and
//! checks that it names the same session.

use prost::Message;
use ring::hmac;

use crate::relay::MAX_PROBE_DATAGRAM_BYTES;
use crate::relay::v1::{ProbeBody, ProbeDatagram, probe_body::Kind};

/// Length of `Welcome.probe_key`.
pub const PROBE_KEY_BYTES: usize = 32;

/// Length of `ProbeDatagram.mac` (HMAC-SHA256).
pub const PROBE_MAC_BYTES: usize = 32;

/// A session's probe key, ready to sign and verify.
#[derive(Clone)]
pub struct ProbeKey(hmac::Key);

impl std::fmt::Debug for ProbeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeKey(..)")
    }
}

impl ProbeKey {
    /// The key from `Welcome.probe_key`; None unless it is exactly
    /// [`PROBE_KEY_BYTES`] long.
    pub fn new(bytes: &[u8]) -> Option<Self> {
        (bytes.len() == PROBE_KEY_BYTES).then(|| Self(hmac::Key::new(hmac::HMAC_SHA256, bytes)))
    }

    fn sign(&self, body: &[u8]) -> Vec<u8> {
        hmac::sign(&self.0, body).as_ref().to_vec()
    }

    fn verify(&self, body: &[u8], mac: &[u8]) -> bool {
        hmac::verify(&self.0, body, mac).is_ok()
    }
}

/// Draws a fresh probe key from the operating system's random source.
pub fn new_probe_key() -> Result<[u8; PROBE_KEY_BYTES], ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut key = [0u8; PROBE_KEY_BYTES];
    ring::rand::SystemRandom::new().fill(&mut key)?;
    Ok(key)
}

/// Why a received datagram was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// Too long, not a ProbeDatagram, or a body that does not decode.
    Malformed,
    /// The MAC does not match the session's key.
    BadMac,
    /// The signed body names another session than the envelope.
    SessionMismatch,
}

/// Encodes `kind` for `session_id`, signed with `key`.
pub fn seal(key: &ProbeKey, session_id: u64, kind: Kind) -> Vec<u8> {
    let body = ProbeBody {
        session_id,
        kind: Some(kind),
    }
    .encode_to_vec();
    let mac = key.sign(&body);
    ProbeDatagram {
        session_id,
        body: body.into(),
        mac: mac.into(),
    }
    .encode_to_vec()
}

/// Decodes the envelope only (size-checked); the caller picks the key by
/// its session id and calls [`open`].
pub fn envelope(bytes: &[u8]) -> Result<ProbeDatagram, OpenError> {
    if bytes.len() > MAX_PROBE_DATAGRAM_BYTES {
        return Err(OpenError::Malformed);
    }
    ProbeDatagram::decode(bytes).map_err(|_| OpenError::Malformed)
}

/// Checks the MAC of `datagram` with `key`, then decodes its body.
pub fn open(key: &ProbeKey, datagram: &ProbeDatagram) -> Result<Kind, OpenError> {
    if datagram.mac.len() != PROBE_MAC_BYTES || !key.verify(&datagram.body, &datagram.mac) {
        return Err(OpenError::BadMac);
    }
    let body = ProbeBody::decode(&datagram.body[..]).map_err(|_| OpenError::Malformed)?;
    if body.session_id != datagram.session_id {
        return Err(OpenError::SessionMismatch);
    }
    body.kind.ok_or(OpenError::Malformed)
}

/// Sliding anti-replay window over increasing nonces (as IPsec's): a nonce
/// is new if it is above the highest seen, or at most `WIDTH - 1` below it
/// and not seen yet. Nonce 0 is never valid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    highest: u64,
    /// Bit i set: nonce `highest - i` was seen.
    seen: u64,
}

/// Why a nonce was not accepted by a [`ReplayWindow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceRejected {
    /// Seen before.
    Replay,
    /// Older than the window (or 0): cannot tell, so refused.
    TooOld,
}

impl ReplayWindow {
    pub const WIDTH: u64 = 64;

    /// Accepts and records `nonce`, or says why not (nothing recorded).
    pub fn accept(&mut self, nonce: u64) -> Result<(), NonceRejected> {
        if nonce == 0 {
            return Err(NonceRejected::TooOld);
        }
        if nonce > self.highest {
            let shift = nonce - self.highest;
            self.seen = if shift >= Self::WIDTH {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = nonce;
            return Ok(());
        }
        let behind = self.highest - nonce;
        if behind >= Self::WIDTH {
            return Err(NonceRejected::TooOld);
        }
        let bit = 1u64 << behind;
        if self.seen & bit != 0 {
            return Err(NonceRejected::Replay);
        }
        self.seen |= bit;
        Ok(())
    }

    /// Whether `nonce` was accepted before (false for nonces older than the
    /// window: those are unknown).
    pub fn is_seen(&self, nonce: u64) -> bool {
        nonce != 0
            && nonce <= self.highest
            && self.highest - nonce < Self::WIDTH
            && self.seen & (1u64 << (self.highest - nonce)) != 0
    }

    /// Highest nonce accepted so far (0: none).
    pub fn highest(&self) -> u64 {
        self.highest
    }
}

/// A read of the kernel's CLOCK_REALTIME and of the clock a side stamps
/// with (host BOOTTIME, a relay's BOOTTIME, or its simulated clock), taken
/// together: REALTIME is read before and after the stamping clock and
/// `realtime_ns` is the midpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockPair {
    pub realtime_ns: u64,
    pub clock_ns: u64,
}

impl ClockPair {
    /// `clock_ns - realtime_ns`: constant while neither clock steps.
    fn gap(&self) -> i128 {
        self.clock_ns as i128 - self.realtime_ns as i128
    }
}

/// Whether the probe sockets ask the kernel for receive timestamps
/// (`SO_TIMESTAMPNS`), from the environment variable
/// [`KERNEL_RX_TIMESTAMPS_ENV`]: unset, `on` or `1` yes; `off` or `0` no;
/// anything else is an error (the caller says so and uses the default).
pub fn kernel_rx_timestamps_from_env() -> Result<bool, String> {
    match std::env::var(KERNEL_RX_TIMESTAMPS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(KERNEL_RX_TIMESTAMPS_DEFAULT),
        Ok(v) => parse_kernel_rx_timestamps(&v),
        Err(e) => Err(format!("{KERNEL_RX_TIMESTAMPS_ENV}: {e}")),
    }
}

/// `on`/`1` or `off`/`0` (the value of [`KERNEL_RX_TIMESTAMPS_ENV`]).
pub fn parse_kernel_rx_timestamps(value: &str) -> Result<bool, String> {
    match value {
        "on" | "1" => Ok(true),
        "off" | "0" => Ok(false),
        other => Err(format!(
            "{KERNEL_RX_TIMESTAMPS_ENV}={other:?}: use on or off; using the default ({})",
            if KERNEL_RX_TIMESTAMPS_DEFAULT {
                "on"
            } else {
                "off"
            }
        )),
    }
}

/// Whether a probe socket asks for kernel receive timestamps: the config
/// key's value (`[sync] kernel-rx-timestamps` of either end), unless
/// [`KERNEL_RX_TIMESTAMPS_ENV`] is set (a switch for test harnesses and
/// diagnosis; it wins). The error names a bad environment value; the
/// caller logs it and keeps the configured value.
pub fn kernel_rx_timestamps(configured: bool) -> (bool, Option<String>) {
    match std::env::var(KERNEL_RX_TIMESTAMPS_ENV) {
        Err(std::env::VarError::NotPresent) => (configured, None),
        Ok(v) => match parse_kernel_rx_timestamps(&v) {
            Ok(on) => (on, None),
            Err(why) => (configured, Some(why)),
        },
        Err(e) => (configured, Some(format!("{KERNEL_RX_TIMESTAMPS_ENV}: {e}"))),
    }
}

/// Environment switch of kernel receive timestamps on both probe ends.
pub const KERNEL_RX_TIMESTAMPS_ENV: &str = "TRACESYNC_KERNEL_RX_TIMESTAMPS";

/// Default of [`kernel_rx_timestamps_from_env`].
pub const KERNEL_RX_TIMESTAMPS_DEFAULT: bool = true;

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
#[derive(Clone, Debug, Default)]
pub struct RxStampMapper {
    /// Recent paired reads, oldest first.
    anchors: std::collections::VecDeque<ClockPair>,
    stats: RxStampStats,
}

impl RxStampMapper {
    /// Paired reads kept (a datagram that waited behind a few others still
    /// finds one before it).
    pub const ANCHORS: usize = 8;
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
        if self.anchors.len() == Self::ANCHORS {
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
    use crate::relay::v1::{Probe, ProbeRegister, ProbeReply};

    fn key(byte: u8) -> ProbeKey {
        ProbeKey::new(&[byte; PROBE_KEY_BYTES]).expect("32 bytes")
    }

    #[test]
    fn keys_must_be_32_bytes() {
        assert!(ProbeKey::new(&[]).is_none());
        assert!(ProbeKey::new(&[1; 31]).is_none());
        assert!(ProbeKey::new(&[1; 33]).is_none());
        assert_eq!(format!("{:?}", key(1)), "ProbeKey(..)");
        let a = new_probe_key().expect("OS RNG");
        let b = new_probe_key().expect("OS RNG");
        assert_ne!(a, b);
    }

    #[test]
    fn sealed_datagrams_open_with_the_same_key_only() {
        let reply = Kind::Reply(ProbeReply {
            nonce: 9,
            t2_ns: 1,
            t3_ns: 2,
            boottime_minus_monotonic_ns: -3,
        });
        let bytes = seal(&key(1), 77, reply);
        assert!(bytes.len() <= MAX_PROBE_DATAGRAM_BYTES);
        let datagram = envelope(&bytes).expect("decodes");
        assert_eq!(datagram.session_id, 77);
        assert_eq!(open(&key(1), &datagram), Ok(reply));
        assert_eq!(open(&key(2), &datagram), Err(OpenError::BadMac));
    }

    #[test]
    fn any_changed_byte_breaks_the_mac_or_the_decode() {
        let bytes = seal(&key(1), 5, Kind::Probe(Probe { nonce: 1 << 40 }));
        for i in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 0x01;
            let opened = envelope(&changed).and_then(|d| {
                // Tampering with the envelope's session id is caught as a
                // mismatch with the signed body.
                open(&key(1), &d)
            });
            assert!(opened.is_err(), "byte {i} changed and still accepted");
        }
    }

    #[test]
    fn a_body_moved_to_another_session_is_refused() {
        let bytes = seal(&key(1), 5, Kind::Register(ProbeRegister { nonce: 1 }));
        let mut datagram = envelope(&bytes).expect("decodes");
        datagram.session_id = 6;
        assert_eq!(open(&key(1), &datagram), Err(OpenError::SessionMismatch));
        assert_eq!(envelope(&[0xff; 3]), Err(OpenError::Malformed));
        assert_eq!(
            envelope(&vec![0; MAX_PROBE_DATAGRAM_BYTES + 1]),
            Err(OpenError::Malformed)
        );
        let unsigned = ProbeDatagram {
            session_id: 5,
            body: datagram.body.clone(),
            mac: Default::default(),
        };
        assert_eq!(open(&key(1), &unsigned), Err(OpenError::BadMac));
    }

    #[test]
    fn replay_window_accepts_each_nonce_once() {
        let mut window = ReplayWindow::default();
        assert_eq!(window.accept(0), Err(NonceRejected::TooOld));
        assert_eq!(window.accept(5), Ok(()));
        assert_eq!(window.accept(5), Err(NonceRejected::Replay));
        assert!(window.is_seen(5) && !window.is_seen(4) && !window.is_seen(0));
        // Reordered but inside the window.
        assert_eq!(window.accept(3), Ok(()));
        assert_eq!(window.accept(3), Err(NonceRejected::Replay));
        assert_eq!(window.accept(4), Ok(()));
        assert_eq!(window.accept(100), Ok(()));
        assert_eq!(window.accept(5), Err(NonceRejected::TooOld));
        assert_eq!(window.accept(37), Ok(()));
        assert_eq!(window.accept(36), Err(NonceRejected::TooOld));
        assert_eq!(window.accept(37), Err(NonceRejected::Replay));
        assert_eq!(window.accept(100), Err(NonceRejected::Replay));
        assert_eq!(window.accept(u64::MAX), Ok(()));
        assert_eq!(window.accept(100), Err(NonceRejected::TooOld));
        assert_eq!(window.highest(), u64::MAX);
    }
}

#[cfg(test)]
mod rx_stamp_tests {
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

    #[test]
    fn switch_values_parse() {
        assert_eq!(parse_kernel_rx_timestamps("on"), Ok(true));
        assert_eq!(parse_kernel_rx_timestamps("0"), Ok(false));
        assert!(parse_kernel_rx_timestamps("yes").is_err());
    }
}
