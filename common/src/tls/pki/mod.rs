//! A lab PKI for `tracesync pki`: one CA, the daemon's certificate, and
//! one certificate per relay machine (rcgen, ECDSA P-256).
//!
//! Files in DIR: `ca.crt` `ca.key` (keep the key off the relays),
//! `daemon.crt` `daemon.key`, `<name>.crt` `<name>.key` per relay, and
//! `ca.crl` once a certificate is revoked. The CA's subject is fixed, so
//! `issue` rebuilds the issuer from `ca.key` alone.
//!
//! Validity: leaf certificates are valid from an hour ago (clock skew
//! between machines) for [`DEFAULT_DAYS`] unless told otherwise, the CA
//! for [`CA_DAYS`] (or longer, to cover the daemon's certificate); no
//! certificate is issued past its CA's end. `renew` issues a new key and
//! certificate for an existing name with the same subject alternative
//! names; `revoke` adds a certificate's serial to `ca.crl`, signed by the
//! CA.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SanType, SerialNumber,
};

use super::x509::{self, San};
use super::{URI_MACHINE, URI_MACHINE_ID};

mod ca;
mod error;
pub use error::PkiError;

use ca::{Ca, read_cert, read_crl, read_file};

/// Days a leaf certificate is valid by default (`--days`).
pub const DEFAULT_DAYS: u32 = 365;
/// Days the lab CA is valid (at least as long as the daemon's certificate).
pub const CA_DAYS: u32 = 3650;
/// The most `--days` may ask for (100 years).
pub const MAX_DAYS: u32 = 36_500;
/// Certificates and CRLs start this long before they are made, so a
/// machine whose clock is a little behind still accepts them.
pub const BACKDATE: Duration = Duration::from_secs(3600);
/// The CRL `revoke` writes in DIR.
pub const CRL_FILE: &str = "ca.crl";

/// The lab CA's common name, followed by a short id of its key (so two
/// lab CAs never share a subject, and `issue` can rebuild it from the key).
pub const CA_NAME: &str = "tracesync lab CA";

/// Seconds since the Unix epoch now.
fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn at(unix: i64) -> Result<time::OffsetDateTime, PkiError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(PkiError::Time)
}

/// Sets `params` valid from [`BACKDATE`] ago for `days` days from `now`.
fn set_validity(params: &mut CertificateParams, now: i64, days: u32) -> Result<(), PkiError> {
    if days == 0 || days > MAX_DAYS {
        return Err(PkiError::DaysOutOfRange { days });
    }
    params.not_before = at(now - BACKDATE.as_secs() as i64)?;
    params.not_after = at(now + i64::from(days) * 86_400)?;
    Ok(())
}

fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut params = CertificateParams::default();
    let id: String = params
        .key_identifier(key)
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{CA_NAME} {id}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn leaf_params(
    common_name: &str,
    sans: Vec<SanType>,
    eku: ExtendedKeyUsagePurpose,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![eku];
    params.use_authority_key_identifier_extension = true;
    params
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new self-signed CA, valid for [`CA_DAYS`].
pub fn new_ca() -> Result<Issued, PkiError> {
    new_ca_for(CA_DAYS)
}

/// A new self-signed CA valid for `days`.
pub fn new_ca_for(days: u32) -> Result<Issued, PkiError> {
    let key = KeyPair::generate().map_err(PkiError::Rcgen)?;
    let mut params = ca_params(&key);
    set_validity(&mut params, now_unix(), days)?;
    let cert = params.self_signed(&key).map_err(PkiError::Rcgen)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The SAN for a name: an IP address, a DNS name, or else a
/// `tracesync:machine/` URI (names DNS does not allow, e.g. with spaces).
fn san_for(name: &str) -> Result<SanType, PkiError> {
    if let Ok(ip) = name.parse() {
        return Ok(SanType::IpAddress(ip));
    }
    if let Ok(dns) = name.try_into()
        && is_dns_name(name)
    {
        return Ok(SanType::DnsName(dns));
    }
    uri_san(name, &format!("{URI_MACHINE}{name}"))
}

/// A URI SAN; `name` is the name it is made for (said if it cannot be).
fn uri_san(name: &str, uri: &str) -> Result<SanType, PkiError> {
    Ok(SanType::URI(uri.try_into().map_err(|e| bad_name(name, e))?))
}

fn bad_name(name: &str, source: rcgen::Error) -> PkiError {
    PkiError::BadName {
        name: name.to_owned(),
        source,
    }
}

fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Signs a daemon (server) certificate for `names` (host names, IPs),
/// valid for [`DEFAULT_DAYS`].
pub fn daemon_cert(ca_key_pem: &str, names: &[String]) -> Result<Issued, PkiError> {
    daemon_cert_for(ca_key_pem, names, DEFAULT_DAYS)
}

/// [`daemon_cert`] valid for `days`.
pub fn daemon_cert_for(ca_key_pem: &str, names: &[String], days: u32) -> Result<Issued, PkiError> {
    let sans = names.iter().map(|n| san_for(n)).collect::<Result<_, _>>()?;
    let first = names.first().map_or("tracesyncd", String::as_str);
    sign(
        ca_key_pem,
        leaf_params(first, sans, ExtendedKeyUsagePurpose::ServerAuth),
        days,
    )
}

/// Signs a relay (client) certificate for machine `name`, optionally
/// binding its raw machine id too, valid for [`DEFAULT_DAYS`].
pub fn relay_cert(ca_key_pem: &str, name: &str, raw_id: Option<u32>) -> Result<Issued, PkiError> {
    relay_cert_for(ca_key_pem, name, raw_id, DEFAULT_DAYS)
}

/// [`relay_cert`] valid for `days`.
pub fn relay_cert_for(
    ca_key_pem: &str,
    name: &str,
    raw_id: Option<u32>,
    days: u32,
) -> Result<Issued, PkiError> {
    // A machine name is never an IP SAN (the daemon reads DNS and URI SANs).
    let mut sans = vec![if name.parse::<std::net::IpAddr>().is_ok() {
        uri_san(name, &format!("{URI_MACHINE}{name}"))?
    } else {
        san_for(name)?
    }];
    if let Some(id) = raw_id {
        sans.push(uri_san(name, &format!("{URI_MACHINE_ID}{id}"))?);
    }
    sign(
        ca_key_pem,
        leaf_params(name, sans, ExtendedKeyUsagePurpose::ClientAuth),
        days,
    )
}

/// The CA's issuer, rebuilt from its key.
fn issuer(ca_key_pem: &str) -> Result<Issuer<'static, KeyPair>, PkiError> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(PkiError::CaKey)?;
    Ok(Issuer::new(ca_params(&ca_key), ca_key))
}

fn sign(ca_key_pem: &str, mut params: CertificateParams, days: u32) -> Result<Issued, PkiError> {
    let issuer = issuer(ca_key_pem)?;
    set_validity(&mut params, now_unix(), days)?;
    let key = KeyPair::generate().map_err(PkiError::Rcgen)?;
    let cert = params.signed_by(&key, &issuer).map_err(PkiError::Rcgen)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes `issued` as `<dir>/<stem>.crt` and `.key` (the key mode 0600);
/// refuses to overwrite.
pub fn write(dir: &Path, stem: &str, issued: &Issued) -> Result<(PathBuf, PathBuf), PkiError> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    write_new(&key, &issued.key_pem, 0o600)?;
    write_new(&cert, &issued.cert_pem, 0o644)?;
    Ok((cert, key))
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|source| PkiError::Create {
            path: path.to_owned(),
            source,
        })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| PkiError::Write {
            path: path.to_owned(),
            source,
        })
}

/// Replaces `<dir>/<stem>.key` and `.crt` by `issued` (each atomically:
/// temporary, fsync, rename; the key first, mode 0600).
fn replace(dir: &Path, stem: &str, issued: &Issued) -> Result<(PathBuf, PathBuf), PkiError> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    for (path, text, mode) in [
        (&key, &issued.key_pem, 0o600),
        (&cert, &issued.cert_pem, 0o644),
    ] {
        crate::files::replace(path, text.as_bytes(), mode).map_err(|source| PkiError::Replace {
            path: path.clone(),
            source,
        })?;
    }
    Ok((cert, key))
}

/// `tracesync pki init DIR`: a CA and a daemon certificate for
/// `daemon_names`, valid for the defaults. Returns the files written.
pub fn init(dir: &Path, daemon_names: &[String]) -> Result<Vec<PathBuf>, PkiError> {
    init_for(dir, daemon_names, DEFAULT_DAYS)
}

/// `tracesync pki init [--days N] DIR`: the daemon's certificate is valid
/// for `days`, the CA for [`CA_DAYS`] or `days` if longer.
pub fn init_for(dir: &Path, daemon_names: &[String], days: u32) -> Result<Vec<PathBuf>, PkiError> {
    std::fs::create_dir_all(dir).map_err(|source| PkiError::Create {
        path: dir.to_owned(),
        source,
    })?;
    let ca = new_ca_for(days.max(CA_DAYS))?;
    let daemon = daemon_cert_for(&ca.key_pem, daemon_names, days)?;
    let (ca_crt, ca_key) = write(dir, "ca", &ca)?;
    let (d_crt, d_key) = write(dir, "daemon", &daemon)?;
    Ok(vec![ca_crt, ca_key, d_crt, d_key])
}

pub use super::group::{lookup_group, share_keys_with_group};

/// The file stem of machine `name`'s certificate in DIR.
pub fn stem_of(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `tracesync pki issue --name NAME DIR`: a relay certificate signed by
/// `DIR/ca.key`, valid for [`DEFAULT_DAYS`].
pub fn issue(dir: &Path, name: &str, raw_id: Option<u32>) -> Result<Vec<PathBuf>, PkiError> {
    issue_for(dir, name, raw_id, DEFAULT_DAYS)
}

/// `tracesync pki issue --name NAME [--days N] DIR`.
pub fn issue_for(
    dir: &Path,
    name: &str,
    raw_id: Option<u32>,
    days: u32,
) -> Result<Vec<PathBuf>, PkiError> {
    let ca = Ca::open(dir)?;
    ca.check_days(dir, days)?;
    let relay = relay_cert_for(&ca.key_pem, name, raw_id, days)?;
    let (crt, key) = write(dir, &stem_of(name), &relay)?;
    Ok(vec![crt, key])
}

/// Whose certificate `renew` replaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The relay certificate of machine NAME (`NAME.crt`).
    Relay(String),
    /// The daemon's certificate (`daemon.crt`), carrying these host names
    /// and IPs (none given: the current certificate's).
    Daemon { names: Vec<String> },
}

/// `tracesync pki renew --name NAME | --daemon [--daemon-name HOST]...
/// [--days N] DIR`: a new key and certificate with the subject alternative
/// names of the current one (machine name, raw id, daemon host names and
/// IPs) or, for the daemon, the names given, signed by the same CA,
/// replacing `NAME.crt`/`.key` (or `daemon.crt`/`.key`).
pub fn renew(dir: &Path, holder: &Holder, days: u32) -> Result<Vec<PathBuf>, PkiError> {
    let ca = Ca::open(dir)?;
    ca.check_days(dir, days)?;
    let stem = match holder {
        Holder::Relay(name) => stem_of(name),
        Holder::Daemon { .. } => "daemon".to_owned(),
    };
    let path = dir.join(format!("{stem}.crt"));
    let pem = read_file(&path)?;
    let old = read_cert(&path, &pem)?;
    ca.check_issued(&path, &old)?;
    let sans = old
        .sans
        .iter()
        .map(|san| {
            Ok(match san {
                San::Dns(n) => SanType::DnsName(n.as_str().try_into().map_err(|e| bad_name(n, e))?),
                San::Uri(u) => SanType::URI(u.as_str().try_into().map_err(|e| bad_name(u, e))?),
                San::Ip(ip) => SanType::IpAddress(*ip),
            })
        })
        .collect::<Result<Vec<_>, PkiError>>()?;
    let params = match holder {
        Holder::Relay(name) => {
            let names_it = old.sans.iter().any(|san| match san {
                San::Dns(n) => n.eq_ignore_ascii_case(name),
                San::Uri(u) => u
                    .strip_prefix(URI_MACHINE)
                    .is_some_and(|n| n.eq_ignore_ascii_case(name)),
                San::Ip(_) => false,
            });
            if !names_it {
                return Err(PkiError::NotNamed {
                    path,
                    name: name.clone(),
                });
            }
            leaf_params(name, sans, ExtendedKeyUsagePurpose::ClientAuth)
        }
        Holder::Daemon { names } if !names.is_empty() => {
            let sans = names.iter().map(|n| san_for(n)).collect::<Result<_, _>>()?;
            leaf_params(&names[0], sans, ExtendedKeyUsagePurpose::ServerAuth)
        }
        Holder::Daemon { .. } => {
            let first = old.sans.first().map_or_else(
                || "tracesyncd".to_owned(),
                |san| match san {
                    San::Dns(n) | San::Uri(n) => n.clone(),
                    San::Ip(ip) => ip.to_string(),
                },
            );
            leaf_params(&first, sans, ExtendedKeyUsagePurpose::ServerAuth)
        }
    };
    let issued = sign(&ca.key_pem, params, days)?;
    let (crt, key) = replace(dir, &stem, &issued)?;
    Ok(vec![crt, key])
}

/// `tracesync pki revoke --name NAME DIR`: adds the serial of `NAME.crt` to
/// `DIR/ca.crl` (made if missing), signed by the CA, with the next CRL
/// number; entries already there are kept. Returns the CRL's path and
/// whether the certificate was already revoked.
pub fn revoke(dir: &Path, name: &str) -> Result<(PathBuf, bool), PkiError> {
    let ca = Ca::open(dir)?;
    let path = dir.join(format!("{}.crt", stem_of(name)));
    let pem = read_file(&path)?;
    let cert = read_cert(&path, &pem)?;
    ca.check_issued(&path, &cert)?;
    let crl_path = dir.join(CRL_FILE);
    let old = match std::fs::read(&crl_path) {
        Ok(bytes) => {
            let crl = read_crl(&crl_path, &bytes)?;
            if crl.issuer != ca.subject()? {
                return Err(PkiError::ForeignCrl { path: crl_path });
            }
            crl
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => x509::CrlFields::default(),
        Err(source) => {
            return Err(PkiError::Read {
                path: crl_path,
                source,
            });
        }
    };
    let same = |a: &[u8], b: &[u8]| strip_zeros(a) == strip_zeros(b);
    let already = old.revoked.iter().any(|(s, _)| same(s, &cert.serial));
    let now = now_unix();
    let mut revoked = old.revoked.clone();
    if !already {
        revoked.push((cert.serial.clone(), now));
    }
    let number = match &old.number {
        None => 1u128,
        Some(bytes) => {
            let bytes = strip_zeros(bytes);
            if bytes.len() > 15 {
                return Err(PkiError::CrlNumberTooLarge { path: crl_path });
            }
            bytes.iter().fold(0u128, |n, &b| (n << 8) | u128::from(b)) + 1
        }
    };
    let params = CertificateRevocationListParams {
        this_update: at(now - BACKDATE.as_secs() as i64)?,
        next_update: at(now + i64::from(DEFAULT_DAYS) * 86_400)?,
        crl_number: SerialNumber::from_slice(strip_zeros(&number.to_be_bytes())),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|(serial, when)| {
                Ok(RevokedCertParams {
                    serial_number: SerialNumber::from_slice(serial),
                    revocation_time: at(*when)?,
                    reason_code: None,
                    invalidity_date: None,
                })
            })
            .collect::<Result<_, PkiError>>()?,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params
        .signed_by(&issuer(&ca.key_pem)?)
        .map_err(PkiError::Rcgen)?;
    let pem = crl.pem().map_err(PkiError::Rcgen)?;
    if let Err(source) = crate::files::replace(&crl_path, pem.as_bytes(), 0o644) {
        return Err(PkiError::Replace {
            path: crl_path,
            source,
        });
    }
    Ok((crl_path, already))
}

fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let zeros = bytes.iter().take_while(|&&b| b == 0).count();
    &bytes[zeros..]
}

#[cfg(test)]
mod tests;
