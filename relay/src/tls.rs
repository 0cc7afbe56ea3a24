//! Mutual TLS on the uplink (rustls, ring provider): the relay verifies the
//! daemon against `[tls] ca` and presents `[tls] cert`/`key`, whose names
//! the daemon binds to the machine the relay may speak for. Plaintext only
//! with `mode = "off"` (or `--tls off`), and the relay warns.

use std::path::{Path, PathBuf};

use rustls_pki_types::ServerName;
use serde::Deserialize;
use toml::Spanned;

pub use tracesync_common::tls::{DEFAULT_TLS_DIR, TlsError, TlsKey, TlsMode};

/// The `[tls]` section of relay.toml (every key optional).
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TlsSection {
    mode: Option<TlsMode>,
    ca: Option<Spanned<PathBuf>>,
    cert: Option<Spanned<PathBuf>>,
    key: Option<Spanned<PathBuf>>,
    server_name: Option<Spanned<String>>,
}

/// The flags that override `[tls]`.
#[derive(Debug, Default, Clone)]
pub struct TlsFlags {
    pub mode: Option<TlsMode>,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

/// The merged TLS settings. Spans are empty for defaults and flags.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayTls {
    pub mode: TlsMode,
    /// CA certificate(s) the daemon's certificate must chain to.
    pub ca: Spanned<PathBuf>,
    /// This relay's certificate chain (leaf first).
    pub cert: Spanned<PathBuf>,
    pub key: Spanned<PathBuf>,
    /// The name the daemon's certificate must carry (default: the host
    /// part of the daemon address).
    pub server_name: Option<Spanned<String>>,
}

impl Default for RelayTls {
    fn default() -> Self {
        let at = |file: &str| Spanned::new(0..0, Path::new(DEFAULT_TLS_DIR).join(file));
        Self {
            mode: TlsMode::Required,
            ca: at("ca.crt"),
            cert: at("relay.crt"),
            key: at("relay.key"),
            server_name: None,
        }
    }
}

/// What the connection needs to run TLS.
#[derive(Clone)]
pub struct ClientTls {
    pub connector: tokio_rustls::TlsConnector,
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientTls({:?})", self.server_name)
    }
}

impl RelayTls {
    /// File section, then flags, over the defaults.
    pub fn merge(section: Option<TlsSection>, flags: &TlsFlags) -> Self {
        let section = section.unwrap_or_default();
        let defaults = Self::default();
        let pick = |flag: &Option<PathBuf>, file: Option<Spanned<PathBuf>>, default| match flag {
            Some(p) => Spanned::new(0..0, p.clone()),
            None => file.unwrap_or(default),
        };
        Self {
            mode: flags.mode.or(section.mode).unwrap_or_default(),
            ca: pick(&flags.ca, section.ca, defaults.ca),
            cert: pick(&flags.cert, section.cert, defaults.cert),
            key: pick(&flags.key, section.key, defaults.key),
            server_name: match &flags.server_name {
                Some(n) => Some(Spanned::new(0..0, n.clone())),
                None => section.server_name,
            },
        }
    }

    /// The span of a key in the file (None: default or flag).
    pub fn span(&self, key: TlsKey) -> Option<std::ops::Range<usize>> {
        let span = match key {
            TlsKey::Ca => self.ca.span(),
            TlsKey::Cert => self.cert.span(),
            TlsKey::Key => self.key.span(),
            TlsKey::ServerName => self.server_name.as_ref().map(Spanned::span)?,
            TlsKey::ClientCa | TlsKey::Crl => return None,
        };
        Some(span).filter(|s| !s.is_empty())
    }

    /// Reads the files; `Ok(None)` when off. `host` is the daemon address
    /// (HOST:PORT), whose host part is the default server name.
    pub fn client(&self, host: &str) -> Result<Option<ClientTls>, TlsError> {
        if self.mode == TlsMode::Off {
            return Ok(None);
        }
        let fail = |key, message| TlsError { key, message };
        let name = match &self.server_name {
            Some(n) => n.get_ref().clone(),
            None => host_part(host).to_owned(),
        };
        let server_name = ServerName::try_from(name.clone()).map_err(|e| {
            fail(
                TlsKey::ServerName,
                format!("{name:?} is not a DNS name or IP address: {e}"),
            )
        })?;
        let config = tracesync_common::tls::client_config(
            self.ca.get_ref(),
            self.cert.get_ref(),
            self.key.get_ref(),
        )?;
        Ok(Some(ClientTls {
            connector: tokio_rustls::TlsConnector::from(config),
            server_name,
        }))
    }
}

/// `HOST` of `HOST:PORT` (`[v6]:PORT` gives `v6`).
fn host_part(host: &str) -> &str {
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_part_strips_port_and_brackets() {
        assert_eq!(host_part("127.0.0.1:7410"), "127.0.0.1");
        assert_eq!(host_part("daemon.lan:7410"), "daemon.lan");
        assert_eq!(host_part("[::1]:7410"), "::1");
    }

    #[test]
    fn flags_win_over_the_section_and_off_needs_no_files() {
        let section: TlsSection =
            toml::from_str("mode = \"required\"\nca = \"/x/ca.crt\"\n").unwrap();
        let flags = TlsFlags {
            mode: Some(TlsMode::Off),
            cert: Some("/y/relay.crt".into()),
            ..TlsFlags::default()
        };
        let tls = RelayTls::merge(Some(section), &flags);
        assert_eq!(tls.mode, TlsMode::Off);
        assert_eq!(tls.ca.get_ref(), Path::new("/x/ca.crt"));
        assert!(tls.span(TlsKey::Ca).is_some());
        assert_eq!(tls.cert.get_ref(), Path::new("/y/relay.crt"));
        assert!(tls.span(TlsKey::Cert).is_none());
        assert!(tls.client("127.0.0.1:1").unwrap().is_none());
    }

    #[test]
    fn missing_files_name_their_key() {
        let tls = RelayTls {
            ca: Spanned::new(0..0, "/nonexistent/ca.crt".into()),
            ..RelayTls::default()
        };
        let err = tls.client("127.0.0.1:7410").unwrap_err();
        assert_eq!(err.key, TlsKey::Ca);
        assert!(err.message.contains("/nonexistent/ca.crt"), "{err:?}");
        let bad_name = RelayTls {
            server_name: Some(Spanned::new(0..0, "not a name".into())),
            ..RelayTls::default()
        };
        assert_eq!(
            bad_name.client("127.0.0.1:7410").unwrap_err().key,
            TlsKey::ServerName
        );
    }
}
