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
