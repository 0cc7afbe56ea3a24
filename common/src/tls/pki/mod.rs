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
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer};

use super::x509::{self, San};
use super::{URI_MACHINE, URI_MACHINE_ID};

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

fn error(what: impl std::fmt::Display) -> String {
    what.to_string()
}

/// Seconds since the Unix epoch now.
fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn at(unix: i64) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(error)
}

/// Sets `params` valid from [`BACKDATE`] ago for `days` days from `now`.
fn set_validity(params: &mut CertificateParams, now: i64, days: u32) -> Result<(), String> {
    if days == 0 || days > MAX_DAYS {
        return Err(format!("--days must be in 1..={MAX_DAYS}, got {days}"));
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
pub fn new_ca() -> Result<Issued, String> {
    new_ca_for(CA_DAYS)
}

/// A new self-signed CA valid for `days`.
pub fn new_ca_for(days: u32) -> Result<Issued, String> {
    let key = KeyPair::generate().map_err(error)?;
    let mut params = ca_params(&key);
    set_validity(&mut params, now_unix(), days)?;
    let cert = params.self_signed(&key).map_err(error)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The SAN for a name: an IP address, a DNS name, or else a
/// `tracesync:machine/` URI (names DNS does not allow, e.g. with spaces).
fn san_for(name: &str) -> Result<SanType, String> {
    if let Ok(ip) = name.parse() {
        return Ok(SanType::IpAddress(ip));
    }
    if let Ok(dns) = name.try_into()
        && is_dns_name(name)
    {
        return Ok(SanType::DnsName(dns));
    }
    let uri = format!("{URI_MACHINE}{name}");
    Ok(SanType::URI(uri.as_str().try_into().map_err(error)?))
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
pub fn daemon_cert(ca_key_pem: &str, names: &[String]) -> Result<Issued, String> {
    daemon_cert_for(ca_key_pem, names, DEFAULT_DAYS)
}

/// [`daemon_cert`] valid for `days`.
pub fn daemon_cert_for(ca_key_pem: &str, names: &[String], days: u32) -> Result<Issued, String> {
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
pub fn relay_cert(ca_key_pem: &str, name: &str, raw_id: Option<u32>) -> Result<Issued, String> {
    relay_cert_for(ca_key_pem, name, raw_id, DEFAULT_DAYS)
}

/// [`relay_cert`] valid for `days`.
pub fn relay_cert_for(
    ca_key_pem: &str,
    name: &str,
    raw_id: Option<u32>,
    days: u32,
) -> Result<Issued, String> {
    // A machine name is never an IP SAN (the daemon reads DNS and URI SANs).
    let mut sans = vec![if name.parse::<std::net::IpAddr>().is_ok() {
        let uri = format!("{URI_MACHINE}{name}");
        SanType::URI(uri.as_str().try_into().map_err(error)?)
    } else {
        san_for(name)?
    }];
    if let Some(id) = raw_id {
        let uri = format!("{URI_MACHINE_ID}{id}");
        sans.push(SanType::URI(uri.as_str().try_into().map_err(error)?));
    }
    sign(
        ca_key_pem,
        leaf_params(name, sans, ExtendedKeyUsagePurpose::ClientAuth),
        days,
    )
}

/// The CA's issuer, rebuilt from its key.
fn issuer(ca_key_pem: &str) -> Result<Issuer<'static, KeyPair>, String> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| format!("the CA key: {e}"))?;
    Ok(Issuer::new(ca_params(&ca_key), ca_key))
}

fn sign(ca_key_pem: &str, mut params: CertificateParams, days: u32) -> Result<Issued, String> {
    let issuer = issuer(ca_key_pem)?;
    set_validity(&mut params, now_unix(), days)?;
    let key = KeyPair::generate().map_err(error)?;
    let cert = params.signed_by(&key, &issuer).map_err(error)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes `issued` as `<dir>/<stem>.crt` and `.key` (the key mode 0600);
/// refuses to overwrite.
pub fn write(dir: &Path, stem: &str, issued: &Issued) -> Result<(PathBuf, PathBuf), String> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    write_new(&key, &issued.key_pem, 0o600)?;
    write_new(&cert, &issued.cert_pem, 0o644)?;
    Ok((cert, key))
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Replaces `<dir>/<stem>.key` and `.crt` by `issued` (each atomically:
/// temporary, fsync, rename; the key first, mode 0600).
fn replace(dir: &Path, stem: &str, issued: &Issued) -> Result<(PathBuf, PathBuf), String> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    for (path, text, mode) in [
        (&key, &issued.key_pem, 0o600),
        (&cert, &issued.cert_pem, 0o644),
    ] {
        crate::files::replace(path, text.as_bytes(), mode)
            .map_err(|e| format!("cannot replace {}: {e}", path.display()))?;
    }
    Ok((cert, key))
}

/// `tracesync pki init DIR`: a CA and a daemon certificate for
/// `daemon_names`, valid for the defaults. Returns the files written.
pub fn init(dir: &Path, daemon_names: &[String]) -> Result<Vec<PathBuf>, String> {
    init_for(dir, daemon_names, DEFAULT_DAYS)
}

/// `tracesync pki init [--days N] DIR`: the daemon's certificate is valid
/// for `days`, the CA for [`CA_DAYS`] or `days` if longer.
pub fn init_for(dir: &Path, daemon_names: &[String], days: u32) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
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

/// The lab CA of DIR: its key (PEM) and, when `ca.crt` is there, what its
/// certificate says.
struct Ca {
    key_pem: String,
    cert: Option<x509::CertFields>,
}

impl Ca {
    fn open(dir: &Path) -> Result<Ca, String> {
        let key_path = dir.join("ca.key");
        let key_pem = std::fs::read_to_string(&key_path).map_err(|e| {
            format!(
                "cannot read {}: {e}; run `tracesync pki init` first",
                key_path.display()
            )
        })?;
        let crt = dir.join("ca.crt");
        let cert = match std::fs::read(&crt) {
            Ok(pem) => Some(read_cert(&crt, &pem)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read {}: {e}", crt.display())),
        };
        let ca = Ca { key_pem, cert };
        if let Some(cert) = &ca.cert
            && cert.subject != ca.subject()?
        {
            return Err(format!(
                "{} is not the `tracesync pki` CA of {}; issue, renew and revoke with the tools \
                 of the CA that made it (e.g. openssl ca)",
                crt.display(),
                key_path.display()
            ));
        }
        Ok(ca)
    }

    /// The CA's subject Name as its certificates name their issuer.
    fn subject(&self) -> Result<Vec<u8>, String> {
        let key = KeyPair::from_pem(&self.key_pem).map_err(|e| format!("the CA key: {e}"))?;
        let params = ca_params(&key);
        let probe = params.self_signed(&key).map_err(error)?;
        Ok(x509::certificate(probe.der()).map_err(error)?.subject)
    }

    /// Refuses a certificate that would outlive the CA.
    fn check_days(&self, dir: &Path, days: u32) -> Result<(), String> {
        let Some(cert) = &self.cert else {
            return Ok(());
        };
        let end = now_unix().saturating_add(i64::from(days) * 86_400);
        if end > cert.not_after {
            let left = (cert.not_after - now_unix()).max(0) / 86_400;
            return Err(format!(
                "{}: the CA is valid for {left} more days, less than the {days} asked; ask for \
                 fewer --days, or make a new PKI with `tracesync pki init` in another directory",
                dir.join("ca.crt").display()
            ));
        }
        Ok(())
    }

    /// Refuses a certificate this CA did not issue.
    fn check_issued(&self, path: &Path, cert: &x509::CertFields) -> Result<(), String> {
        if cert.issuer != self.subject()? {
            return Err(format!(
                "{} was not issued by this directory's CA",
                path.display()
            ));
        }
        Ok(())
    }
}

/// The first certificate of a PEM (or DER) file, read.
fn read_cert(path: &Path, bytes: &[u8]) -> Result<x509::CertFields, String> {
    let der = if bytes.starts_with(b"-----BEGIN") {
        CertificateDer::from_pem_slice(bytes)
            .map_err(|e| format!("{}: not a PEM certificate: {e}", path.display()))?
    } else {
        CertificateDer::from(bytes.to_vec())
    };
    x509::certificate(der.as_ref()).map_err(|e| format!("{}: {e}", path.display()))
}

/// `tracesync pki issue --name NAME DIR`: a relay certificate signed by
/// `DIR/ca.key`, valid for [`DEFAULT_DAYS`].
pub fn issue(dir: &Path, name: &str, raw_id: Option<u32>) -> Result<Vec<PathBuf>, String> {
    issue_for(dir, name, raw_id, DEFAULT_DAYS)
}

/// `tracesync pki issue --name NAME [--days N] DIR`.
pub fn issue_for(
    dir: &Path,
    name: &str,
    raw_id: Option<u32>,
    days: u32,
) -> Result<Vec<PathBuf>, String> {
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
    /// The daemon's certificate (`daemon.crt`).
    Daemon,
}

/// `tracesync pki renew --name NAME | --daemon [--days N] DIR`: a new key
/// and certificate with the subject alternative names of the current one
/// (machine name, raw id, daemon host names and IPs), signed by the same
/// CA, replacing `NAME.crt`/`.key` (or `daemon.crt`/`.key`).
pub fn renew(dir: &Path, holder: &Holder, days: u32) -> Result<Vec<PathBuf>, String> {
    let ca = Ca::open(dir)?;
    ca.check_days(dir, days)?;
    let stem = match holder {
        Holder::Relay(name) => stem_of(name),
        Holder::Daemon => "daemon".to_owned(),
    };
    let path = dir.join(format!("{stem}.crt"));
    let pem = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let old = read_cert(&path, &pem)?;
    ca.check_issued(&path, &old)?;
    let sans = old
        .sans
        .iter()
        .map(|san| {
            Ok(match san {
                San::Dns(n) => SanType::DnsName(n.as_str().try_into().map_err(error)?),
                San::Uri(u) => SanType::URI(u.as_str().try_into().map_err(error)?),
                San::Ip(ip) => SanType::IpAddress(*ip),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
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
                return Err(format!(
                    "{} does not name machine {name:?}; `tracesync pki issue --name {name}` \
                     makes a certificate for it",
                    path.display()
                ));
            }
            leaf_params(name, sans, ExtendedKeyUsagePurpose::ClientAuth)
        }
        Holder::Daemon => {
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
pub fn revoke(dir: &Path, name: &str) -> Result<(PathBuf, bool), String> {
    let ca = Ca::open(dir)?;
    let path = dir.join(format!("{}.crt", stem_of(name)));
    let pem = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let cert = read_cert(&path, &pem)?;
    ca.check_issued(&path, &cert)?;
    let crl_path = dir.join(CRL_FILE);
    let old = match std::fs::read(&crl_path) {
        Ok(bytes) => {
            let crl = read_crl(&crl_path, &bytes)?;
            if crl.issuer != ca.subject()? {
                return Err(format!(
                    "{} was not issued by this directory's CA; move it away to start a new one",
                    crl_path.display()
                ));
            }
            crl
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => x509::CrlFields::default(),
        Err(e) => return Err(format!("cannot read {}: {e}", crl_path.display())),
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
                return Err(format!("{}: CRL number too large", crl_path.display()));
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
            .collect::<Result<_, String>>()?,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&issuer(&ca.key_pem)?).map_err(error)?;
    let pem = crl.pem().map_err(error)?;
    crate::files::replace(&crl_path, pem.as_bytes(), 0o644)
        .map_err(|e| format!("cannot replace {}: {e}", crl_path.display()))?;
    Ok((crl_path, already))
}

fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let zeros = bytes.iter().take_while(|&&b| b == 0).count();
    &bytes[zeros..]
}

/// The first CRL of a PEM (or DER) file, read.
fn read_crl(path: &Path, bytes: &[u8]) -> Result<x509::CrlFields, String> {
    let der = if bytes.starts_with(b"-----BEGIN") {
        CertificateRevocationListDer::from_pem_slice(bytes)
            .map_err(|e| format!("{}: not a PEM CRL: {e}", path.display()))?
    } else {
        CertificateRevocationListDer::from(bytes.to_vec())
    };
    x509::crl(der.as_ref()).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
