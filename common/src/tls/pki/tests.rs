use super::*;
use crate::exit;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer};

fn cert_of(path: &Path) -> x509::CertFields {
    read_cert(path, &std::fs::read(path).unwrap()).unwrap()
}

/// Whether rustls (webpki), the daemon's verifier, accepts `dir/<stem>.crt`
/// as a client certificate of `dir/ca.crt` at `unix` (CRL: `dir/ca.crl` if given).
fn accepted_at(dir: &Path, stem: &str, unix: i64, crl: bool) -> Result<(), rustls::Error> {
    use rustls::server::WebPkiClientVerifier;
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_file(dir.join("ca.crt")).unwrap();
    roots.add(ca).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(std::sync::Arc::new(roots), provider);
    if crl {
        let crl = CertificateRevocationListDer::from_pem_file(dir.join(CRL_FILE)).unwrap();
        builder = builder.with_crls([crl]);
    }
    let verifier = builder.build().unwrap();
    let leaf = CertificateDer::from_pem_file(dir.join(format!("{stem}.crt"))).unwrap();
    let now = rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(unix as u64));
    verifier.verify_client_cert(&leaf, &[], now).map(|_| ())
}

#[test]
fn init_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), &["localhost".into()]).unwrap();
    let err = init(dir.path(), &["localhost".into()]).unwrap_err();
    let key = dir.path().join("ca.key");
    assert!(
        matches!(&err, PkiError::Create { path, .. } if *path == key),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), exit::CANTCREAT);
    assert_eq!(
        err.to_string(),
        format!("cannot create {}: File exists (os error 17)", key.display())
    );
    issue(dir.path(), "relay-a", None).unwrap();
    assert!(dir.path().join("relay-a.crt").exists());
}

#[test]
fn errors_say_what_to_do_and_choose_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let err = issue(dir.path(), "relay-a", None).unwrap_err();
    assert!(matches!(err, PkiError::NoCa { .. }), "{err:?}");
    assert_eq!(err.exit_code(), exit::NOINPUT);
    assert!(
        err.to_string()
            .ends_with("; run `tracesync pki init` first"),
        "{err}"
    );
    init(dir.path(), &["localhost".into()]).unwrap();
    // A name that cannot be a SAN (URIs are ASCII) is the caller's to change.
    let err = issue(dir.path(), "téléphone", None).unwrap_err();
    assert!(matches!(err, PkiError::BadName { .. }), "{err:?}");
    assert_eq!(err.exit_code(), exit::USAGE);
    assert!(
        err.to_string()
            .starts_with("\"téléphone\" cannot be a certificate name ("),
        "{err}"
    );
    // Not a certificate where one should be.
    std::fs::write(dir.path().join("junk.crt"), b"\x30\x03\x02\x01\x01").unwrap();
    let err = revoke(dir.path(), "junk").unwrap_err();
    assert!(matches!(err, PkiError::Malformed { .. }), "{err:?}");
    assert_eq!(err.exit_code(), exit::DATAERR);
    let junk = dir.path().join("junk.crt");
    assert!(
        err.to_string()
            .starts_with(&format!("{}: malformed certificate: ", junk.display())),
        "{err}"
    );
    let err = lookup_group("no-such-group-here").unwrap_err();
    assert_eq!(err.exit_code(), exit::NOUSER);
    assert_eq!(
        err.to_string(),
        "--group no-such-group-here: no such group; create it (systemd-sysusers \
         systemd/tracesync.sysusers makes `tracesync`) or give an existing one"
    );
}

#[test]
fn issued_certificates_are_valid_for_the_days_asked_parsed_back_from_the_der() {
    let dir = tempfile::tempdir().unwrap();
    let before = now_unix();
    init_for(dir.path(), &["localhost".into()], 30).unwrap();
    issue(dir.path(), "relay-a", None).unwrap();
    issue_for(dir.path(), "relay-b", Some(7), 1).unwrap();
    let after = now_unix();
    let within = |t: i64, lo: i64, hi: i64| assert!(lo <= t && t <= hi, "{t} not in {lo}..={hi}");
    let back = BACKDATE.as_secs() as i64;
    for (stem, days) in [
        ("ca", i64::from(CA_DAYS)),
        ("daemon", 30),
        ("relay-a", i64::from(DEFAULT_DAYS)),
        ("relay-b", 1),
    ] {
        let cert = cert_of(&dir.path().join(format!("{stem}.crt")));
        within(cert.not_before, before - back, after - back);
        within(
            cert.not_after,
            before + days * 86_400,
            after + days * 86_400,
        );
    }
    // Not the old 1975..4096 of rcgen's defaults.
    assert!(cert_of(&dir.path().join("ca.crt")).not_after < after + 11 * 365 * 86_400);
    // The daemon's own verifier agrees: valid now and an hour ago (skew),
    // not two hours ago, not past the day.
    let now = now_unix();
    accepted_at(dir.path(), "relay-b", now, false).unwrap();
    accepted_at(dir.path(), "relay-b", now - 3000, false).unwrap();
    accepted_at(dir.path(), "relay-b", now + 86_000, false).unwrap();
    for t in [now - 2 * 3600, now + 86_400 + 120] {
        let err = accepted_at(dir.path(), "relay-b", t, false).unwrap_err();
        assert!(
            matches!(err, rustls::Error::InvalidCertificate(_)),
            "{err:?}"
        );
    }
    // Bounds of --days.
    let err = issue_for(dir.path(), "c", None, 0).unwrap_err();
    assert!(
        matches!(err, PkiError::DaysOutOfRange { days: 0 }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "--days must be in 1..=36500, got 0");
    assert_eq!(err.exit_code(), exit::USAGE);
    let err = issue_for(dir.path(), "c", None, MAX_DAYS + 1).unwrap_err();
    assert!(err.to_string().contains("--days"), "{err}");
    assert_eq!(err.exit_code(), exit::USAGE);
    // Nothing outlives its CA.
    let err = issue_for(dir.path(), "c", None, CA_DAYS + 1).unwrap_err();
    assert!(matches!(err, PkiError::OutlivesCa { .. }), "{err:?}");
    assert!(err.to_string().contains("the CA is valid for"), "{err}");
}

#[test]
fn renew_keeps_the_names_and_the_ca_with_a_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "tracesync-host".to_owned(),
        "10.0.0.5".to_owned(),
        "::1".to_owned(),
    ];
    init(dir.path(), &names).unwrap();
    issue_for(dir.path(), "pixel 7", Some(42), 1).unwrap();
    let stem = stem_of("pixel 7");
    let crt = dir.path().join(format!("{stem}.crt"));
    let key = dir.path().join(format!("{stem}.key"));
    let (old, old_key) = (cert_of(&crt), std::fs::read(&key).unwrap());
    let files = renew(dir.path(), &Holder::Relay("pixel 7".into()), 90).unwrap();
    assert_eq!(files, [crt.clone(), key.clone()]);
    let new = cert_of(&crt);
    assert_eq!(new.sans, old.sans);
    assert_eq!(
        new.sans,
        [
            San::Uri("tracesync:machine/pixel 7".into()),
            San::Uri("tracesync:machine-id/42".into())
        ]
    );
    assert_eq!(new.issuer, old.issuer);
    assert_ne!(new.serial, old.serial);
    assert_ne!(std::fs::read(&key).unwrap(), old_key, "a new key");
    assert!(new.not_after > old.not_after + 80 * 86_400);
    accepted_at(dir.path(), &stem, now_unix(), false).unwrap();
    assert!(!crate::files::temporary_of(&crt).exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let old = cert_of(&dir.path().join("daemon.crt"));
    renew(dir.path(), &Holder::Daemon { names: Vec::new() }, 30).unwrap();
    let new = cert_of(&dir.path().join("daemon.crt"));
    assert_eq!(new.sans, old.sans);
    assert_eq!(new.sans.len(), 3);
    // Reissued for another host name, by the same CA (a relay that meets
    // a daemon certificate without the host's name is told this).
    let moved_names = vec!["daemon.example".to_owned(), "10.1.2.3".to_owned()];
    renew(dir.path(), &Holder::Daemon { names: moved_names }, 30).unwrap();
    let moved = cert_of(&dir.path().join("daemon.crt"));
    assert_eq!(moved.issuer, old.issuer);
    assert_eq!(
        moved.sans,
        [
            San::Dns("daemon.example".into()),
            San::Ip("10.1.2.3".parse().unwrap())
        ]
    );

    let err = renew(dir.path(), &Holder::Relay("nobody".into()), 30).unwrap_err();
    assert!(matches!(err, PkiError::Read { .. }), "{err:?}");
    assert!(err.to_string().starts_with("cannot read "), "{err}");
    // A certificate of another CA is not renewed by this one.
    let other = tempfile::tempdir().unwrap();
    init(other.path(), &names).unwrap();
    issue(other.path(), "stranger", None).unwrap();
    std::fs::copy(
        other.path().join("stranger.crt"),
        dir.path().join("stranger.crt"),
    )
    .unwrap();
    let err = renew(dir.path(), &Holder::Relay("stranger".into()), 30).unwrap_err();
    assert!(matches!(err, PkiError::NotIssuedHere { .. }), "{err:?}");
    assert_eq!(err.exit_code(), exit::DATAERR);
    assert!(
        err.to_string()
            .ends_with(" was not issued by this directory's CA"),
        "{err}"
    );
}

#[test]
fn revoke_makes_and_extends_a_crl_the_verifier_applies() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), &["localhost".into()]).unwrap();
    for name in ["a", "b", "c"] {
        issue(dir.path(), name, None).unwrap();
    }
    let (path, already) = revoke(dir.path(), "a").unwrap();
    assert_eq!(path, dir.path().join(CRL_FILE));
    assert!(!already);
    let (_, already) = revoke(dir.path(), "b").unwrap();
    assert!(!already);
    let (_, already) = revoke(dir.path(), "b").unwrap();
    assert!(already);
    let crl = read_crl(&path, &std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(crl.number.as_deref(), Some(&[3u8][..]));
    let serials: Vec<_> = crl.revoked.iter().map(|(s, _)| strip_zeros(s)).collect();
    assert_eq!(serials.len(), 2);
    for name in ["a", "b"] {
        let cert = cert_of(&dir.path().join(format!("{name}.crt")));
        assert!(serials.contains(&strip_zeros(&cert.serial)), "{name}");
    }
    let now = now_unix();
    for name in ["a", "b"] {
        let err = accepted_at(dir.path(), name, now, true).unwrap_err();
        assert!(
            matches!(
                err,
                rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked)
            ),
            "{name}: {err:?}"
        );
    }
    accepted_at(dir.path(), "c", now, true).unwrap();
    let err = revoke(dir.path(), "nobody").unwrap_err();
    assert!(matches!(err, PkiError::Read { .. }), "{err:?}");
    assert_eq!(err.exit_code(), exit::NOINPUT);
}
