//! Hello admission: whether a relay's Hello passes the daemon's checks,
//! decided from the Hello and what the daemon holds ([`Context`]), with no
//! socket, task or file involved; the session's `welcome` reads the Hello,
//! calls [`admit`] and answers.
//!
//! The checks run in this order and the first that fails refuses: protocol
//! version; string lengths (before anything else reads the strings); the
//! mode (`stream`, `ring`, or empty: a relay from before ring mode); token;
//! `[auth] allow-machines`; under TLS, the certificate's identity, the raw
//! id rule (`[tls] raw-id-rule`) and the identity bindings. A refusal is
//! one [`Refused`] reason, which is both the counter's label and the
//! `Refused.code`, with its one-line message. The only state touched is the
//! bindings table in memory, and only once every other check passed: a
//! first claim binds the name there (saving it is the caller's,
//! [`Passed::new_binding`]).
//!
//! Under the `name` rule a certificate's relay may only claim the raw id
//! its boot id and certified name hash to, so a squatter cannot compute
//! and claim another machine's first. A squatter who crafts a boot id that
//! hashes to it all the same takes only the number: the machine it
//! belongs to is welcomed under an alternate raw id ([`Passed::raw_id`]),
//! never refused.

use tracesync_protocol::relay::{PROTOCOL_VERSION, check_hello_strings, v1};
use tracesync_protocol::trigger::RelayMode;

use crate::metrics::Refused;
use crate::tls::policy::{RAW_ID_ALTERNATES, alternate_raw_id};
use crate::tls::{Bindings, CertIdentity, Claimed, IdentityError, RawIdRule};

/// What a Hello is checked against.
pub struct Context<'a> {
    /// The token relays must present (None: any relay is accepted).
    pub token: Option<&'a str>,
    /// `[auth] allow-machines` (empty: every machine).
    pub allow_machines: &'a [String],
    /// The relay's verified leaf certificate (DER), under TLS.
    pub peer_certificate: Option<&'a [u8]>,
    /// Raw ids and relay instances bound to certificate names.
    pub bindings: &'a Bindings,
    /// Which raw ids a certificate that pins none may claim.
    pub raw_id_rule: RawIdRule,
}

/// A Hello that passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passed {
    /// The certificate's claim made a new binding: save the bindings before
    /// welcoming, so a restart right after cannot hand it to another
    /// certificate.
    pub new_binding: bool,
    /// The raw id the relay is welcomed under: the Hello's, or an
    /// alternate when another name holds it (see the module doc).
    pub raw_id: u32,
}

/// A Hello refused: why (counter label and `Refused.code`) and the one-line
/// reason the relay is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub why: Refused,
    pub reason: String,
}

impl Refusal {
    fn new(why: Refused, reason: impl Into<String>) -> Self {
        Self {
            why,
            reason: reason.into(),
        }
    }
}

/// Checks `hello` (see the module doc for the order).
pub fn admit(hello: &v1::Hello, context: &Context) -> Result<Passed, Refusal> {
    if hello.protocol_version != PROTOCOL_VERSION {
        return Err(Refusal::new(
            Refused::Version,
            format!(
                "protocol version {} is not supported (this daemon speaks {PROTOCOL_VERSION}); \
                 run matching tracesync versions",
                hello.protocol_version
            ),
        ));
    }
    // Before anything reads the strings (the allow-list, the certificate,
    // the core, logs): a name is at most 255 bytes, and so on.
    if let Err(reason) = check_hello_strings(hello) {
        return Err(Refusal::new(
            Refused::HelloTooLarge,
            format!("{reason}; relay and daemon versions must match"),
        ));
    }
    if RelayMode::from_hello(&hello.mode).is_none() {
        return Err(Refusal::new(
            Refused::Mode,
            format!(
                "Hello.mode {:?} is not a mode this daemon knows (stream or ring); run the \
                 relay with --mode stream, or upgrade the daemon",
                hello.mode
            ),
        ));
    }
    if let Some(expected) = context.token
        && !tokens_match(expected.as_bytes(), hello.token.as_bytes())
    {
        return Err(Refusal::new(
            Refused::Token,
            "bad token: give the relay the daemon's [auth] token (--token or TRACESYNC_TOKEN)",
        ));
    }
    if !crate::config::allowed(context.allow_machines, &hello.machine_name) {
        return Err(Refusal::new(
            Refused::MachineNotAllowed,
            format!(
                "machine {:?} is not in the daemon's [auth] allow-machines",
                hello.machine_name
            ),
        ));
    }
    let Some(der) = context.peer_certificate else {
        return Ok(Passed {
            new_binding: false,
            raw_id: hello.machine_raw_id,
        });
    };
    let refuse_identity = |reason: IdentityError| {
        let why = match reason {
            IdentityError::RawIdNotBound { .. } => Refused::RawIdNotBound,
            _ => Refused::CertificateIdentity,
        };
        Refusal::new(why, reason.to_string())
    };
    let identity = CertIdentity::from_der(der).map_err(refuse_identity)?;
    identity
        .check_claim(&hello.machine_name, hello.machine_raw_id)
        .map_err(refuse_identity)?;
    // Pinned raw ids (rule 3) are the certificate's own: no rule applies.
    let name_bound = context.raw_id_rule == RawIdRule::Name && identity.raw_ids.is_empty();
    if name_bound {
        let expected =
            tracesync_protocol::relay::name_bound_raw_id(&hello.boot_id, &hello.machine_name);
        if hello.machine_raw_id != expected {
            return Err(refuse_identity(IdentityError::RawIdNotBound {
                claimed: hello.machine_raw_id,
                name: hello.machine_name.clone(),
            }));
        }
    }
    let claim = |raw_id| {
        context
            .bindings
            .claim(&hello.machine_name, raw_id, hello.relay_instance_id)
            .map(|claimed| Passed {
                new_binding: claimed == Claimed::New,
                raw_id,
            })
    };
    match claim(hello.machine_raw_id) {
        Err(IdentityError::RawIdHeld { .. }) if name_bound => (1..=RAW_ID_ALTERNATES)
            .map(|k| alternate_raw_id(&hello.boot_id, &hello.machine_name, k))
            .find_map(|alternate| claim(alternate).ok())
            .ok_or_else(|| {
                Refusal::new(
                    Refused::CertificateIdentity,
                    format!(
                        "{}: raw machine id {} and its {RAW_ID_ALTERNATES} alternates are held \
                         by other machines on this daemon; pin one in the certificate \
                         (tracesync pki issue --raw-id)",
                        crate::tls::MISMATCH,
                        hello.machine_raw_id
                    ),
                )
            }),
        other => other.map_err(refuse_identity),
    }
}

/// Equal inputs compare in time that depends only on the expected token's
/// length, so a relay cannot learn the token byte by byte.
pub fn tokens_match(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(expected.len() != given.len());
    for (i, e) in expected.iter().enumerate() {
        diff |= e ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use tracesync_protocol::relay::RefusalCode;

    use super::*;

    fn hello(machine: &str, token: &str) -> v1::Hello {
        v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            machine_name: machine.into(),
            machine_raw_id: 7,
            relay_instance_id: 70,
            token: token.into(),
            ..v1::Hello::default()
        }
    }

    /// Checks `hello` with `token`, `allow` and no certificate.
    fn check(hello: &v1::Hello, token: Option<&str>, allow: &[&str]) -> Result<Passed, Refusal> {
        let allow: Vec<String> = allow.iter().map(|m| (*m).to_owned()).collect();
        let bindings = Bindings::default();
        admit(
            hello,
            &Context {
                token,
                allow_machines: &allow,
                peer_certificate: None,
                bindings: &bindings,
                raw_id_rule: RawIdRule::Name,
            },
        )
    }

    fn refused(result: Result<Passed, Refusal>) -> Refusal {
        result.expect_err("refused")
    }

    #[test]
    fn a_hello_passing_every_check_is_admitted() {
        let passed = check(&hello("phone", "s3cret"), Some("s3cret"), &["phone"]);
        assert_eq!(
            passed,
            Ok(Passed {
                new_binding: false,
                raw_id: 7
            })
        );
        // No token and no allow-list: any relay.
        assert!(check(&hello("phone", ""), None, &[]).is_ok());
    }

    #[test]
    fn another_protocol_version_is_refused() {
        let old = v1::Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ..hello("phone", "")
        };
        let r = refused(check(&old, None, &[]));
        assert_eq!(r.why, Refused::Version);
        assert_eq!(r.why.code(), RefusalCode::BadVersion);
        assert_eq!(
            r.reason,
            format!(
                "protocol version {} is not supported (this daemon speaks {PROTOCOL_VERSION}); \
                 run matching tracesync versions",
                PROTOCOL_VERSION + 1
            )
        );
    }

    #[test]
    fn a_string_over_its_limit_is_refused_before_the_token_is_read() {
        let long = hello(&"m".repeat(256), "wrong");
        let r = refused(check(&long, Some("s3cret"), &[]));
        assert_eq!(r.why, Refused::HelloTooLarge);
        assert_eq!(r.why.code(), RefusalCode::HelloTooLarge);
        assert_eq!(
            r.reason,
            "Hello.machine_name of 256 bytes is over its 255-byte limit; relay and daemon \
             versions must match"
        );
    }

    #[test]
    fn an_unknown_mode_is_refused_and_stream_ring_or_none_pass() {
        for mode in ["", "stream", "ring"] {
            let h = v1::Hello {
                mode: mode.into(),
                ..hello("phone", "")
            };
            assert!(check(&h, None, &[]).is_ok(), "{mode:?}");
        }
        let burst = v1::Hello {
            mode: "burst".into(),
            ..hello("phone", "")
        };
        let r = refused(check(&burst, None, &[]));
        assert_eq!(r.why, Refused::Mode);
        assert_eq!(r.why.code(), RefusalCode::UnknownMode);
        assert_eq!(
            r.reason,
            "Hello.mode \"burst\" is not a mode this daemon knows (stream or ring); run the \
             relay with --mode stream, or upgrade the daemon"
        );
    }

    #[test]
    fn a_bad_token_is_refused() {
        for given in ["guess", "", "s3cret2"] {
            let r = refused(check(&hello("phone", given), Some("s3cret"), &[]));
            assert_eq!(r.why, Refused::Token, "{given}");
            assert_eq!(r.why.code(), RefusalCode::BadToken);
            assert_eq!(
                r.reason,
                "bad token: give the relay the daemon's [auth] token (--token or TRACESYNC_TOKEN)"
            );
        }
    }

    #[test]
    fn a_machine_not_allowed_is_refused_after_the_token() {
        let r = refused(check(
            &hello("laptop", "s3cret"),
            Some("s3cret"),
            &["phone"],
        ));
        assert_eq!(r.why, Refused::MachineNotAllowed);
        assert_eq!(r.why.code(), RefusalCode::MachineNotAllowed);
        assert_eq!(
            r.reason,
            "machine \"laptop\" is not in the daemon's [auth] allow-machines"
        );
        let r = refused(check(&hello("laptop", "guess"), Some("s3cret"), &["phone"]));
        assert_eq!(r.why, Refused::Token);
    }

    /// DER certificates of a lab PKI, one per name.
    fn certificates(dir: &std::path::Path, names: &[&str]) -> Vec<Vec<u8>> {
        use crate::tls::{TlsKey, pki, read_certs};
        pki::init(dir, &["127.0.0.1".into()]).unwrap();
        names
            .iter()
            .map(|name| {
                pki::issue(dir, name, None).unwrap();
                let certs = read_certs(&dir.join(format!("{name}.crt")), TlsKey::Cert).unwrap();
                certs[0].to_vec()
            })
            .collect()
    }

    #[test]
    fn a_certificate_binds_its_machine_and_cannot_claim_another() {
        let dir = tempfile::tempdir().unwrap();
        let certs = certificates(dir.path(), &["phone", "other"]);
        let bindings = Bindings::default();
        let with = |der: &[u8], hello: &v1::Hello, token| {
            admit(
                hello,
                &Context {
                    token,
                    allow_machines: &[],
                    peer_certificate: Some(der),
                    bindings: &bindings,
                    raw_id_rule: RawIdRule::FirstCome,
                },
            )
        };
        let phone = hello("phone", "s3cret");

        // Refused for its token: no binding is made.
        let r = refused(with(&certs[0], &hello("phone", "guess"), Some("s3cret")));
        assert_eq!(r.why, Refused::Token);
        let first = with(&certs[0], &phone, Some("s3cret"));
        assert_eq!(
            first,
            Ok(Passed {
                new_binding: true,
                raw_id: 7
            })
        );
        let again = with(&certs[0], &phone, Some("s3cret"));
        assert_eq!(
            again,
            Ok(Passed {
                new_binding: false,
                raw_id: 7
            })
        );

        // "other"'s certificate claiming "phone".
        let r = refused(with(&certs[1], &phone, Some("s3cret")));
        assert_eq!(r.why, Refused::CertificateIdentity);
        assert_eq!(r.why.code(), RefusalCode::CertificateIdentityMismatch);
        assert!(
            r.reason.starts_with("certificate-identity-mismatch: ")
                && r.reason.contains("\"phone\""),
            "{}",
            r.reason
        );
        // "other" as itself, with the raw id "phone" holds.
        let r = refused(with(&certs[1], &hello("other", "s3cret"), Some("s3cret")));
        assert_eq!(r.why, Refused::CertificateIdentity);
        assert!(
            r.reason
                .contains("raw machine id 7 belongs to machine \"phone\""),
            "{}",
            r.reason
        );
    }

    #[test]
    fn under_the_name_rule_a_squatter_is_refused_and_the_machine_always_welcomed() {
        use tracesync_protocol::relay::name_bound_raw_id;
        let dir = tempfile::tempdir().unwrap();
        let certs = certificates(dir.path(), &["alice", "bob"]);
        let bindings = Bindings::default();
        let with = |der: &[u8], hello: &v1::Hello| {
            admit(
                hello,
                &Context {
                    token: None,
                    allow_machines: &[],
                    peer_certificate: Some(der),
                    bindings: &bindings,
                    raw_id_rule: RawIdRule::Name,
                },
            )
        };
        let bob_boot = "0f6a7b8c-1111-2222-3333-444455556666";
        let bobs = name_bound_raw_id(bob_boot, "bob");
        let bob = v1::Hello {
            boot_id: bob_boot.into(),
            machine_raw_id: bobs,
            relay_instance_id: 2,
            ..hello("bob", "")
        };
        // alice computes bob's raw id (his boot id is no secret) and claims
        // it first, with his boot id or her own.
        for boot in [bob_boot, "alice-boot"] {
            let squat = v1::Hello {
                boot_id: boot.into(),
                machine_raw_id: bobs,
                relay_instance_id: 1,
                ..hello("alice", "")
            };
            let r = refused(with(&certs[0], &squat));
            assert_eq!(r.why, Refused::RawIdNotBound, "{}", r.reason);
            assert_eq!(r.why.code(), RefusalCode::CertificateIdentityMismatch);
            assert!(r.reason.contains("raw-id-rule"), "{}", r.reason);
        }
        assert_eq!(
            with(&certs[1], &bob),
            Ok(Passed {
                new_binding: true,
                raw_id: bobs
            })
        );
        // A crafted boot id that hashes to bob's number all the same (here:
        // bound beforehand): bob is welcomed under an alternate, the same
        // one at every reconnect, and never refused.
        let fresh = Bindings::default();
        let _ = fresh.claim("alice", bobs, 1).unwrap();
        let with_fresh = |hello: &v1::Hello| {
            admit(
                hello,
                &Context {
                    token: None,
                    allow_machines: &[],
                    peer_certificate: Some(&certs[1]),
                    bindings: &fresh,
                    raw_id_rule: RawIdRule::Name,
                },
            )
        };
        let first = with_fresh(&bob).unwrap();
        assert_ne!(first.raw_id, bobs);
        assert_eq!(
            first.raw_id,
            crate::tls::policy::alternate_raw_id(bob_boot, "bob", 1)
        );
        assert!(first.new_binding);
        let again = with_fresh(&bob).unwrap();
        assert_eq!((again.raw_id, again.new_binding), (first.raw_id, false));
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match(b"secret", b"secret"));
        assert!(!tokens_match(b"secret", b"secreT"));
        assert!(!tokens_match(b"secret", b"secret2"));
        assert!(!tokens_match(b"secret", b"secre"));
        assert!(!tokens_match(b"secret", b""));
        assert!(tokens_match(b"", b""));
    }
}
