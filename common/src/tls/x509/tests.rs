//! What x509-parser reads from certificates and CRLs the lab PKI (rcgen)
//! writes, field by field against what was asked, and the odd cases: both
//! time forms and their edges, sign bytes of serials, long names, non-ASCII
//! names, garbage.

use super::*;
use crate::tls::pki;
use rcgen::{
    CertificateParams, CertificateRevocationListParams, DnType, Issuer, KeyIdMethod, KeyPair,
    RevokedCertParams, SanType, SerialNumber,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

fn at(unix: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(unix).unwrap()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().unwrap())
}

fn uri(text: &str) -> SanType {
    SanType::URI(text.try_into().unwrap())
}

/// A self-signed certificate: serial, common name, validity and SANs.
fn self_signed(serial: &[u8], cn: &str, valid: (i64, i64), sans: Vec<SanType>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    params.serial_number = Some(SerialNumber::from_slice(serial));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    (params.not_before, params.not_after) = (at(valid.0), at(valid.1));
    params.subject_alt_names = sans;
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

/// `der` with the first `from` replaced by `to` (of the same length).
fn patched(der: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = der
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{from:?} is not in the certificate"));
    let mut out = der.to_vec();
    out[at..at + to.len()].copy_from_slice(to);
    out
}

/// Whether `name` is one whole DER TLV (tag SEQUENCE, then its length).
fn is_whole_sequence(name: &[u8]) -> bool {
    let (len, header) = match name {
        [0x30, n, ..] if *n < 0x80 => (usize::from(*n), 2),
        [0x30, 0x81, n, ..] => (usize::from(*n), 3),
        [0x30, 0x82, hi, lo, ..] => (usize::from(*hi) << 8 | usize::from(*lo), 4),
        _ => return false,
    };
    name.len() == header + len
}

#[test]
fn lab_pki_certificates_read_back_as_issued() {
    let ca = pki::new_ca().unwrap();
    let ca_der = der_of(&ca.cert_pem);
    let ca_fields = certificate(&ca_der).unwrap();
    assert_eq!(ca_fields.issuer, ca_fields.subject, "self-signed");
    assert!(is_whole_sequence(&ca_fields.subject));
    let name = pki::CA_NAME.as_bytes();
    assert!(ca_fields.subject.windows(name.len()).any(|w| w == name));
    assert!(ca_fields.sans.is_empty());
    let days = i64::from(pki::CA_DAYS) * 86_400;
    let backdate = pki::BACKDATE.as_secs() as i64;
    assert_eq!(ca_fields.not_after - ca_fields.not_before, days + backdate);

    let names = ["tracesync-host", "10.0.0.5", "::1"].map(String::from);
    let cases = [
        (
            pki::daemon_cert(&ca.key_pem, &names).unwrap(),
            vec![
                San::Dns("tracesync-host".into()),
                San::Ip("10.0.0.5".parse().unwrap()),
                San::Ip("::1".parse().unwrap()),
            ],
        ),
        (
            pki::relay_cert(&ca.key_pem, "pixel 7", Some(42)).unwrap(),
            vec![
                San::Uri("tracesync:machine/pixel 7".into()),
                San::Uri("tracesync:machine-id/42".into()),
            ],
        ),
        (
            pki::relay_cert(&ca.key_pem, "10.0.0.7", None).unwrap(),
            vec![San::Uri("tracesync:machine/10.0.0.7".into())],
        ),
        (
            pki::relay_cert(&ca.key_pem, "relay-a", None).unwrap(),
            vec![San::Dns("relay-a".into())],
        ),
    ];
    let mut serials = vec![ca_fields.serial.clone()];
    for (issued, sans) in cases {
        let der = der_of(&issued.cert_pem);
        let fields = certificate(&der).unwrap();
        assert_eq!(fields.sans, sans);
        assert_eq!(fields.issuer, ca_fields.subject, "issued by the CA");
        assert!(is_whole_sequence(&fields.subject));
        assert_ne!(fields.subject, fields.issuer);
        let days = i64::from(pki::DEFAULT_DAYS) * 86_400;
        assert_eq!(fields.not_after - fields.not_before, days + backdate);
        // The serial is read as written: the INTEGER's content bytes.
        let serial = [&[0x02, fields.serial.len() as u8][..], &fields.serial].concat();
        assert!(der.windows(serial.len()).any(|w| w == serial));
        assert!(!serials.contains(&fields.serial));
        serials.push(fields.serial);
    }
}

#[test]
fn times_in_both_forms() {
    // rcgen writes UTCTime up to 2049 and GeneralizedTime from 2050 on.
    for (valid, forms) in [
        (
            (0, 2_524_607_999),
            [&b"\x17\x0d700101000000Z"[..], b"\x17\x0d491231235959Z"],
        ),
        (
            (1_709_208_000, 2_524_608_000),
            [&b"\x17\x0d240229120000Z"[..], b"\x18\x0f20500101000000Z"],
        ),
        (
            (946_684_799, 67_090_118_400),
            [&b"\x17\x0d991231235959Z"[..], b"\x18\x0f40960101000000Z"],
        ),
    ] {
        let der = self_signed(&[1], "t", valid, vec![]);
        for form in forms {
            assert!(der.windows(form.len()).any(|w| w == form), "{valid:?}");
        }
        let fields = certificate(&der).unwrap();
        assert_eq!((fields.not_before, fields.not_after), valid);
    }
}

#[test]
fn times_not_in_either_form_are_errors() {
    let der = self_signed(&[1], "t", (0, 2_524_607_999), vec![]);
    let utc = b"\x17\x0d700101000000Z";
    for bad in [
        &b"\x17\x0d70010100000aZ"[..], // not a digit
        b"\x17\x0d7001010000000",      // no Z
        b"\x17\x0d701301000000Z",      // month 13
        b"\x18\x0d700101000000Z",      // GeneralizedTime of 12 digits
    ] {
        let err = certificate(&patched(&der, utc, bad)).unwrap_err();
        assert!(matches!(err, X509Error::Certificate(_)), "{bad:?}: {err}");
        assert!(err.to_string().starts_with("malformed certificate: "));
    }
}

#[test]
fn serials_keep_their_sign_byte() {
    for (asked, read) in [
        (&[0x01][..], &[0x01][..]),
        (&[0x7f, 0xff], &[0x7f, 0xff]),
        (&[0x80, 0x01], &[0x00, 0x80, 0x01]),
    ] {
        let der = self_signed(asked, "t", (0, 86_400), vec![]);
        assert_eq!(certificate(&der).unwrap().serial, read, "{asked:?}");
    }
}

#[test]
fn long_names_are_whole_tlvs() {
    let long = "n".repeat(300);
    let der = self_signed(&[1], &long, (0, 86_400), vec![]);
    let fields = certificate(&der).unwrap();
    assert_eq!(fields.subject[..2], [0x30, 0x82], "a long-form length");
    assert!(is_whole_sequence(&fields.subject));
    assert_eq!(fields.issuer, fields.subject);
}

#[test]
fn sans_in_order_other_kinds_skipped_non_ascii_refused() {
    let sans = vec![
        dns("relay-xx"),
        SanType::Rfc822Name("ops@example.invalid".try_into().unwrap()),
        SanType::IpAddress("192.0.2.1".parse().unwrap()),
        uri("tracesync:machine/yy"),
    ];
    let der = self_signed(&[1], "t", (0, 86_400), sans);
    assert_eq!(
        certificate(&der).unwrap().sans,
        [
            San::Dns("relay-xx".into()),
            San::Ip("192.0.2.1".parse().unwrap()),
            San::Uri("tracesync:machine/yy".into()),
        ]
    );
    // UTF-8 that is not ASCII, and bytes that are not UTF-8, in a DNS and
    // in a URI name.
    for (from, to) in [
        (&b"xx"[..], "é".as_bytes()),
        (b"xx", b"\xff\xfe"),
        (b"yy", "é".as_bytes()),
        (b"yy", b"\xff\xfe"),
    ] {
        let err = certificate(&patched(&der, from, to)).unwrap_err();
        assert_eq!(err, X509Error::SanNotAscii, "{to:?}");
    }
    assert_eq!(ip_address(&[1, 2, 3, 4, 5]), Err(X509Error::SanIpLength));
}

#[test]
fn a_second_subject_alt_name_extension_is_refused() {
    let mut params = CertificateParams::default();
    params.subject_alt_names = vec![dns("a")];
    // subjectAltName again: SEQUENCE { dNSName "b" }
    let again = rcgen::CustomExtension::from_oid_content(
        &[2, 5, 29, 17],
        vec![0x30, 0x03, 0x82, 0x01, b'b'],
    );
    params.custom_extensions = vec![again];
    let key = KeyPair::generate().unwrap();
    let der = params.self_signed(&key).unwrap().der().to_vec();
    assert_eq!(
        certificate(&der),
        Err(X509Error::Certificate(ParserError::DuplicateExtensions))
    );
}

#[test]
fn crls_read_back_as_signed() {
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = rcgen::DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "crl test CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    let ca_fields = certificate(ca_params.self_signed(&key).unwrap().der()).unwrap();
    let issuer = Issuer::new(ca_params, key);
    let revoked = |serial: &[u8], when: i64| RevokedCertParams {
        serial_number: SerialNumber::from_slice(serial),
        revocation_time: at(when),
        reason_code: None,
        invalidity_date: None,
    };
    for (number, read, entries) in [
        (&[3u8][..], &[3u8][..], vec![]),
        (
            &[0x80, 0, 0],
            &[0x80, 0, 0],
            vec![
                (&[0x01][..], 1_700_000_000),
                (&[0x80, 0x01], 2_524_608_000), // GeneralizedTime
            ],
        ),
    ] {
        let params = CertificateRevocationListParams {
            this_update: at(1_700_000_000),
            next_update: at(1_800_000_000),
            crl_number: SerialNumber::from_slice(number),
            issuing_distribution_point: None,
            revoked_certs: entries.iter().map(|(s, t)| revoked(s, *t)).collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let der = params.signed_by(&issuer).unwrap().der().to_vec();
        let fields = crl(&der).unwrap();
        assert_eq!(fields.issuer, ca_fields.subject);
        assert_eq!(fields.this_update, 1_700_000_000);
        assert_eq!(fields.number.as_deref(), Some(read));
        let want: Vec<_> = entries
            .iter()
            .map(|(s, t)| {
                let sign = if s[0] & 0x80 != 0 { &[0u8][..] } else { &[] };
                ([sign, s].concat(), *t)
            })
            .collect();
        assert_eq!(fields.revoked, want);
        assert!(matches!(certificate(&der), Err(X509Error::Certificate(_))));
    }
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"\x30",
        b"\x30\x84\xff\xff\xff\xff",
        b"\x1f\x00",
        b"\x30\x00",
        b"\x30\x05\x30\x03\x02",
    ] {
        assert!(matches!(certificate(bytes), Err(X509Error::Certificate(_))));
        let err = crl(bytes).unwrap_err();
        assert!(matches!(err, X509Error::Crl(_)), "{err}");
        assert!(err.to_string().starts_with("malformed CRL: "), "{err}");
    }
}
