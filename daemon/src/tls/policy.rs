//! What one relay certificate may hold: which raw ids it may claim
//! ([`RawIdRule`]) and how many sessions it may have open at once
//! ([`CertSessions`]).
//!
//! Invariants: a certificate never has more than its limit of welcomed
//! sessions (the count is taken before the `max-relays` slot and given
//! back when the session ends, by the guard's drop); the table holds one
//! entry per certificate with a session open, so it is bounded by
//! `limits.max-relays`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

/// Which raw machine ids a certificate that pins none may claim
/// (`[tls] raw-id-rule`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawIdRule {
    /// Only the hash of `<boot_id>/<machine name>` (what relays send under
    /// TLS), so another machine's raw id cannot be computed from its boot
    /// id and claimed first. If the number is taken all the same (a
    /// crafted boot id), the relay gets a number derived from it instead
    /// of a refusal ([`alternate_raw_id`]).
    #[default]
    Name,
    /// Any raw id, bound to the first certificate name that claims it
    /// (relays of versions that derive it from the boot id alone).
    FirstCome,
}

/// Alternates tried for a relay whose name-bound raw id another name holds:
/// more than a name keeps (`BINDINGS_PER_NAME`), so a squatter holding
/// all it may still leaves one free.
pub const RAW_ID_ALTERNATES: u32 = 64;

/// The `k`-th alternate raw id of `machine_name` on `boot_id` (k >= 1):
/// deterministic, so the same relay gets the same one at every reconnect.
pub fn alternate_raw_id(boot_id: &str, machine_name: &str, k: u32) -> u32 {
    tracesync_protocol::relay::raw_machine_id(&format!("{boot_id}/{machine_name}/{k}"))
}

/// The identity settings of `[tls]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentityPolicy {
    pub raw_id_rule: RawIdRule,
    pub max_sessions_per_certificate: NonZeroU32,
}

/// Sessions open per relay certificate (keyed by its DER bytes).
#[derive(Debug, Default)]
pub struct CertSessions {
    open: Mutex<HashMap<Vec<u8>, u32>>,
}

/// One session of a certificate; given back when dropped.
#[derive(Debug)]
pub struct CertSession {
    sessions: Arc<CertSessions>,
    certificate: Vec<u8>,
}

impl CertSessions {
    /// A session for `certificate`, unless it has `limit` open (None).
    pub fn open(self: &Arc<Self>, certificate: &[u8], limit: NonZeroU32) -> Option<CertSession> {
        let mut open = self.lock();
        let count = open.entry(certificate.to_vec()).or_insert(0);
        if *count >= limit.get() {
            return None;
        }
        *count += 1;
        Some(CertSession {
            sessions: self.clone(),
            certificate: certificate.to_vec(),
        })
    }

    /// Sessions `certificate` has open.
    pub fn count(&self, certificate: &[u8]) -> u32 {
        self.lock().get(certificate).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, u32>> {
        match self.open.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Drop for CertSession {
    fn drop(&mut self) {
        let mut open = self.sessions.lock();
        if let Some(count) = open.get_mut(&self.certificate) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.certificate);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_gets_its_limit_and_a_closed_session_frees_its_place() {
        let sessions = Arc::new(CertSessions::default());
        let limit = NonZeroU32::new(2).unwrap();
        let a = sessions.open(b"cert-a", limit).unwrap();
        let _a2 = sessions.open(b"cert-a", limit).unwrap();
        assert!(sessions.open(b"cert-a", limit).is_none(), "third refused");
        // Another certificate is not affected.
        let _b = sessions.open(b"cert-b", limit).unwrap();
        drop(a);
        assert_eq!(sessions.count(b"cert-a"), 1);
        assert!(sessions.open(b"cert-a", limit).is_some());
        assert_eq!(sessions.lock().len(), 2);
    }

    #[test]
    fn alternates_are_deterministic_and_distinct() {
        let first = alternate_raw_id("boot", "bob", 1);
        assert_eq!(first, alternate_raw_id("boot", "bob", 1));
        assert_ne!(first, alternate_raw_id("boot", "bob", 2));
        assert_ne!(
            first,
            tracesync_protocol::relay::name_bound_raw_id("boot", "bob")
        );
    }
}
