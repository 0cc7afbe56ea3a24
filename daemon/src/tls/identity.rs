//! Which machine a relay's certificate lets it speak for, and the rule the
//! session applies to its Hello.
//!
//! The rule (docs/reliability.md "Authentication and TLS"):
//!
//! 1. The certificate's machine names are its DNS subject alternative names
//!    plus every URI SAN `tracesync:machine/<name>`. The subject CN is not
//!    used (as in web PKI). A certificate naming no machine is refused.
//! 2. The Hello's `machine_name` must equal one of them (ASCII letters
//!    compared without case, like DNS names).
//! 3. If the certificate carries URI SANs `tracesync:machine-id/<decimal>`,
//!    the Hello's `machine_raw_id` must equal one of them.
//! 4. Otherwise, under `[tls] raw-id-rule = "name"`, the raw id must be the
//!    hash of the Hello's boot id and name (`super::policy`); under either
//!    rule the raw id (which relays derive from their boot id, so it
//!    changes at every boot) is bound to the first certificate-authenticated
//!    name that uses it, and so is the relay instance id: another name
//!    presenting either is refused. Each name keeps its
//!    [`BINDINGS_PER_NAME`](super::bindings::BINDINGS_PER_NAME) most recent raw ids and instances, so the table
//!    is bounded by the names the CA has issued. The bindings persist in
//!    the daemon's state directory (the output directory), so a restart
//!    does not hand them to whoever claims first ([`super::bindings`]).
//!
//! A refusal's reason ([`IdentityError`]'s text) starts with [`MISMATCH`],
//! unless the certificate itself cannot be read.

use tracesync_common::tls::x509::{self, San, X509Error};

pub use tracesync_common::tls::{URI_MACHINE, URI_MACHINE_ID};

/// The first word of every identity refusal.
pub const MISMATCH: &str = "certificate-identity-mismatch";

/// Why a relay may not speak for the machine its Hello names: the text is
/// the reason of the `CertificateIdentityMismatch` refusal it gets.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum IdentityError {
    /// The certificate's fields cannot be read.
    #[error("{0}")]
    Certificate(#[from] X509Error),
    /// A `tracesync:machine-id/` URI SAN that is not a decimal u32.
    #[error("bad raw id in URI SAN {uri:?}")]
    BadRawId { uri: String },
    /// Rule 1: no DNS SAN and no `tracesync:machine/` URI.
    #[error(
        "{MISMATCH}: the relay certificate names no machine (give it a DNS SAN or a URI SAN \
         {URI_MACHINE}<name>)"
    )]
    NoMachineName,
    /// Rule 2: the Hello's name is not one of the certificate's.
    #[error(
        "{MISMATCH}: Hello names machine {claimed:?} but the certificate is for {}; use the \
         certificate issued for this machine or set the relay's name to match",
        quoted(certified)
    )]
    NameNotCertified {
        claimed: String,
        certified: Vec<String>,
    },
    /// Rule 3: the certificate binds raw ids, not the Hello's.
    #[error(
        "{MISMATCH}: Hello claims raw machine id {claimed} but the certificate binds {}",
        listed(certified)
    )]
    RawIdNotCertified { claimed: u32, certified: Vec<u32> },
    /// `[tls] raw-id-rule = "name"`: the raw id is not the hash of the
    /// Hello's boot id and name.
    #[error(
        "{MISMATCH}: Hello claims raw machine id {claimed}, which is not the hash of its boot \
         id and machine name {name:?} that this daemon's [tls] raw-id-rule = \"name\" asks \
         for; run a relay of this version, or set raw-id-rule = \"first-come\" while older \
         relays remain"
    )]
    RawIdNotBound { claimed: u32, name: String },
    /// Rule 4: another name holds the raw id.
    #[error(
        "{MISMATCH}: raw machine id {raw_id} belongs to machine {holder:?} on this daemon; a \
         certificate for {name:?} cannot send as it"
    )]
    RawIdHeld {
        raw_id: u32,
        holder: String,
        name: String,
    },
    /// Rule 4: another name holds the relay instance.
    #[error(
        "{MISMATCH}: relay instance {instance:016x} belongs to machine {holder:?} on this \
         daemon; a certificate for {name:?} cannot resume it"
    )]
    InstanceHeld {
        instance: u64,
        holder: String,
        name: String,
    },
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn listed(ids: &[u32]) -> String {
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The identities a verified relay certificate carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertIdentity {
    /// Machine names (DNS SANs and `tracesync:machine/` URIs), in order.
    pub names: Vec<String>,
    /// Raw machine ids (`tracesync:machine-id/` URIs).
    pub raw_ids: Vec<u32>,
}

impl CertIdentity {
    /// Reads the names out of a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Self, IdentityError> {
        let sans = x509::certificate(der)?.sans;
        let mut identity = CertIdentity::default();
        for san in sans {
            match san {
                San::Ip(_) => {} // an address is not a machine name
                San::Dns(name) => identity.names.push(name),
                San::Uri(uri) => {
                    if let Some(name) = uri.strip_prefix(URI_MACHINE) {
                        identity.names.push(name.to_owned());
                    } else if let Some(id) = uri.strip_prefix(URI_MACHINE_ID) {
                        let id = id
                            .parse()
                            .map_err(|_| IdentityError::BadRawId { uri: uri.clone() })?;
                        identity.raw_ids.push(id);
                    }
                }
            }
        }
        Ok(identity)
    }

    /// Rules 1 to 3: may this certificate say it is `name` with `raw_id`?
    pub fn check_claim(&self, name: &str, raw_id: u32) -> Result<(), IdentityError> {
        if self.names.is_empty() {
            return Err(IdentityError::NoMachineName);
        }
        if !self.names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(IdentityError::NameNotCertified {
                claimed: name.to_owned(),
                certified: self.names.clone(),
            });
        }
        if !self.raw_ids.is_empty() && !self.raw_ids.contains(&raw_id) {
            return Err(IdentityError::RawIdNotCertified {
                claimed: raw_id,
                certified: self.raw_ids.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_common::tls::pki;

    fn cert(sans: Vec<rcgen::SanType>) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = sans;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn dns(n: &str) -> rcgen::SanType {
        rcgen::SanType::DnsName(n.try_into().unwrap())
    }

    fn uri(u: &str) -> rcgen::SanType {
        rcgen::SanType::URI(u.try_into().unwrap())
    }

    #[test]
    fn reads_dns_and_uri_names_and_raw_ids() {
        let der = cert(vec![
            dns("relay-a"),
            rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap()),
            uri("tracesync:machine/pixel 7"),
            uri("tracesync:machine-id/12345"),
            uri("https://example.invalid/other"),
        ]);
        let id = CertIdentity::from_der(&der).unwrap();
        assert_eq!(id.names, ["relay-a", "pixel 7"]);
        assert_eq!(id.raw_ids, [12345]);
    }

    #[test]
    fn no_san_means_no_names() {
        let id = CertIdentity::from_der(&cert(vec![])).unwrap();
        assert_eq!(id, CertIdentity::default());
        let err = id.check_claim("a", 7).unwrap_err();
        assert_eq!(err, IdentityError::NoMachineName);
        assert_eq!(
            err.to_string(),
            "certificate-identity-mismatch: the relay certificate names no machine (give it a \
             DNS SAN or a URI SAN tracesync:machine/<name>)"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &b""[..],
            b"\x30",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x1f\x00",
            b"\x30\x00",
        ] {
            let _ = CertIdentity::from_der(bytes);
        }
        let err = CertIdentity::from_der(b"\x30\x05\x30\x03\x02").unwrap_err();
        assert!(matches!(err, IdentityError::Certificate(_)), "{err}");
        assert!(
            err.to_string().starts_with("malformed certificate: "),
            "{err}"
        );
        let bad_id = cert(vec![dns("a"), uri("tracesync:machine-id/x")]);
        let err = CertIdentity::from_der(&bad_id).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad raw id in URI SAN \"tracesync:machine-id/x\""
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn any_bytes_are_read_without_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
        ) {
            let _ = CertIdentity::from_der(&bytes);
        }

        #[test]
        fn a_damaged_certificate_is_read_without_panic(
            at in 0usize..4096,
            value in proptest::prelude::any::<u8>(),
            cut in 0usize..4096,
        ) {
            let mut der = sample_cert().to_vec();
            let n = der.len();
            der[at % n] = value;
            der.truncate(n - cut % n);
            let _ = CertIdentity::from_der(&der);
        }
    }

    fn sample_cert() -> &'static [u8] {
        static DER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        DER.get_or_init(|| cert(vec![dns("relay-a"), uri("tracesync:machine-id/9")]))
    }

    #[test]
    fn name_must_be_in_the_certificate() {
        let id = CertIdentity {
            names: vec!["relay-a".into(), "Lab-B".into()],
            raw_ids: vec![],
        };
        assert!(id.check_claim("relay-a", 1).is_ok());
        assert!(id.check_claim("lab-b", 1).is_ok(), "ASCII case is ignored");
        assert!(id.check_claim("RELAY-A", 99).is_ok());
        let err = id.check_claim("relay-b", 1).unwrap_err();
        assert!(
            matches!(&err, IdentityError::NameNotCertified { claimed, .. } if claimed == "relay-b"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "certificate-identity-mismatch: Hello names machine \"relay-b\" but the certificate \
             is for \"relay-a\", \"Lab-B\"; use the certificate issued for this machine or set \
             the relay's name to match"
        );
        assert!(id.check_claim("relay-a.example", 1).is_err());
        assert!(id.check_claim("", 1).is_err());
    }

    #[test]
    fn bound_raw_id_must_match() {
        let id = CertIdentity {
            names: vec!["a".into()],
            raw_ids: vec![10, 11],
        };
        assert!(id.check_claim("a", 10).is_ok());
        assert!(id.check_claim("a", 11).is_ok());
        let err = id.check_claim("a", 12).unwrap_err();
        assert_eq!(
            err.to_string(),
            "certificate-identity-mismatch: Hello claims raw machine id 12 but the certificate \
             binds 10, 11"
        );
    }

    #[test]
    fn relay_certificates_carry_the_identity() {
        let ca = pki::new_ca().unwrap();
        let relay = pki::relay_cert(&ca.key_pem, "relay-a", Some(42)).unwrap();
        let der = rustls_pki_types::CertificateDer::from_pem_slice(relay.cert_pem.as_bytes());
        use rustls_pki_types::pem::PemObject;
        let id = CertIdentity::from_der(der.unwrap().as_ref()).unwrap();
        assert_eq!(id.names, ["relay-a"]);
        assert_eq!(id.raw_ids, [42]);
        let odd = pki::relay_cert(&ca.key_pem, "my phone", None).unwrap();
        let der =
            rustls_pki_types::CertificateDer::from_pem_slice(odd.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            CertIdentity::from_der(der.as_ref()).unwrap().names,
            ["my phone"]
        );
        let ip = pki::relay_cert(&ca.key_pem, "10.0.0.7", None).unwrap();
        let der = rustls_pki_types::CertificateDer::from_pem_slice(ip.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            CertIdentity::from_der(der.as_ref()).unwrap().names,
            ["10.0.0.7"]
        );
    }
}
