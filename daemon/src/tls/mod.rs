//! Mutual TLS on the relay data connection (rustls, ring provider).
//!
//! The daemon presents `[tls] cert`/`key` and verifies every relay's
//! certificate against `[tls] client-ca`; a relay without a certificate
//! from that CA fails the handshake and never reaches Hello. The
//! certificate's names then bind what the relay may claim in Hello
//! ([`identity`], with the bindings of rule 4 kept across restarts by
//! [`bindings`]). With `[tls] crl`, a relay certificate that a CRL of its
//! CA revokes fails the handshake too. Plaintext only with `mode = "off"` (or `--tls off`),
//! and the daemon warns at startup. The `[auth] token` is checked as well
//! when set: both may be required.
//!
//! Only the data connection is wrapped; probe datagrams carry their own
//! per-session key, which travels inside this TLS stream (Welcome).

pub mod bindings;
pub mod identity;
pub mod policy;
pub use tracesync_common::tls::pki;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::server::session::peer_bytes::Account;

use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::net::TcpStream;
use toml::Spanned;

pub use bindings::{Bindings, BindingsFileError, Claimed};
pub use identity::{CertIdentity, IdentityError, MISMATCH};
pub use policy::{CertSession, CertSessions, IdentityPolicy, RawIdRule};
pub use tracesync_common::tls::{DEFAULT_TLS_DIR, TlsError, TlsKey, TlsMode, read_certs, read_key};

/// The daemon's `[tls]` section. Paths keep their position in the file so
/// an unreadable one is reported as `file:line:column`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TlsConfig {
    pub mode: TlsMode,
    /// The daemon's certificate chain (PEM), leaf first.
    pub cert: Spanned<PathBuf>,
    /// The daemon's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Spanned<PathBuf>,
    /// CA certificate(s) (PEM) that issue relay certificates.
    pub client_ca: Spanned<PathBuf>,
    /// Certificate revocation list(s) of those CAs (PEM or DER); a relay
    /// certificate one revokes fails the handshake. None: no CRL.
    pub crl: Option<Spanned<PathBuf>>,
    /// Which raw ids a certificate that pins none may claim.
    pub raw_id_rule: RawIdRule,
    /// Sessions one relay certificate may have open at once.
    pub max_sessions_per_certificate: std::num::NonZeroU32,
}

/// Default of `[tls] max-sessions-per-certificate`: the few relays one
/// machine plausibly runs (its own, one per time namespace or container).
pub const DEFAULT_SESSIONS_PER_CERTIFICATE: u32 = 4;

impl Default for TlsConfig {
    fn default() -> Self {
        let at = |file: &str| Spanned::new(0..0, Path::new(DEFAULT_TLS_DIR).join(file));
        Self {
            mode: TlsMode::Required,
            cert: at("daemon.crt"),
            key: at("daemon.key"),
            client_ca: at("ca.crt"),
            crl: None,
            raw_id_rule: RawIdRule::default(),
            max_sessions_per_certificate: std::num::NonZeroU32::new(
                DEFAULT_SESSIONS_PER_CERTIFICATE,
            )
            .unwrap_or(std::num::NonZeroU32::MIN),
        }
    }
}

/// The acceptor sessions run the handshake with (None in the config: off),
/// and the bindings of rule 4 relays are held to.
#[derive(Clone)]
pub struct DataTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// In memory unless [`DataTls::with_bindings`] gave a persistent table.
    pub bindings: Arc<Bindings>,
    pub policy: IdentityPolicy,
    /// Sessions open per certificate, held to `policy`.
    pub sessions: Arc<CertSessions>,
}

impl DataTls {
    /// Holds relays to `bindings` (the daemon's, loaded from its state
    /// directory).
    pub fn with_bindings(self, bindings: Arc<Bindings>) -> Self {
        Self { bindings, ..self }
    }
}

impl std::fmt::Debug for DataTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataTls(mutual, TLS 1.3)")
    }
}

impl TlsConfig {
    /// Reads the files and builds the acceptor; `Ok(None)` when off.
    pub fn load(&self) -> Result<Option<DataTls>, TlsError> {
        if self.mode == TlsMode::Off {
            return Ok(None);
        }
        let config = tracesync_common::tls::server_config(
            self.cert.get_ref(),
            self.key.get_ref(),
            self.client_ca.get_ref(),
            self.crl.as_ref().map(|c| c.get_ref().as_path()),
        )?;
        Ok(Some(DataTls {
            acceptor: tokio_rustls::TlsAcceptor::from(config),
            bindings: Arc::default(),
            policy: IdentityPolicy {
                raw_id_rule: self.raw_id_rule,
                max_sessions_per_certificate: self.max_sessions_per_certificate,
            },
            sessions: Arc::default(),
        }))
    }

    /// The span of `key` in the config file (None: default or flag).
    pub fn span(&self, key: TlsKey) -> Option<std::ops::Range<usize>> {
        let span = match key {
            TlsKey::Cert => self.cert.span(),
            TlsKey::Key => self.key.span(),
            TlsKey::ClientCa => self.client_ca.span(),
            TlsKey::Crl => self.crl.as_ref()?.span(),
            TlsKey::Ca | TlsKey::ServerName => return None,
        };
        Some(span).filter(|s| !s.is_empty())
    }
}

/// A relay data stream: plain TCP or TCP under TLS, both [`Metered`].
/// Sessions are generic over it; the certificate is there only under TLS.
pub trait DataStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The peer's verified leaf certificate (DER), under TLS.
    fn peer_certificate(&self) -> Option<&[u8]>;
    /// Bytes read from the socket so far (under TLS: before decryption, so
    /// a frame trickled inside a TLS record shows as progress too).
    fn bytes_received(&self) -> u64;
}

impl DataStream for Metered<TcpStream> {
    fn peer_certificate(&self) -> Option<&[u8]> {
        None
    }

    fn bytes_received(&self) -> u64 {
        self.received
    }
}

impl DataStream for tokio_rustls::server::TlsStream<TlsSocket> {
    fn peer_certificate(&self) -> Option<&[u8]> {
        let (_, connection) = self.get_ref();
        connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.as_ref())
    }

    fn bytes_received(&self) -> u64 {
        self.get_ref().0.get_ref().received
    }
}

/// Socket bytes read ahead for rustls on a relay connection. rustls asks
/// its socket for one TLS record at a time (at most 16 KiB of plaintext):
/// without a buffer under it, every record is a `recv` of its own, and
/// those calls (and the window updates they send) cost the daemon more
/// than the copy out of this buffer does. Four full records per `recv`.
pub const TLS_READ_AHEAD: usize = 64 << 10;

/// What rustls reads from and writes to: the [`Metered`] socket (counting
/// what the socket gave) behind a read-ahead buffer of [`TLS_READ_AHEAD`]
/// bytes. Writes pass through unbuffered.
pub type TlsSocket<S = TcpStream> = BufReader<Metered<S>>;

/// `stream` with its read-ahead buffer, for the TLS handshake.
pub fn tls_socket<S: AsyncRead + Unpin>(stream: Metered<S>) -> TlsSocket<S> {
    BufReader::with_capacity(TLS_READ_AHEAD, stream)
}

/// Bytes a [`Metered`] stream counted in a budget reads at once.
const BUDGET_READ_CHUNK: usize = 64 << 10;

/// A stream that counts the bytes read from it (the session's frame
/// timeout sees a frame begin by them; the unauthenticated table sees a
/// handshake progress by them).
#[derive(Debug)]
pub struct Metered<S> {
    inner: S,
    received: u64,
    /// Where the count is also published, for others to read.
    reported: Option<Arc<AtomicU64>>,
    /// The peers' byte budget this connection's reads are counted in; once
    /// it closed the connection, reads fail.
    budget: Option<Arc<Account>>,
}

impl<S> Metered<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            received: 0,
            reported: None,
            budget: None,
        }
    }

    /// The same, its reads counted in `budget` (and failing once the
    /// budget closed it).
    pub fn counted_in(self, budget: Arc<Account>) -> Self {
        Self {
            budget: Some(budget),
            ..self
        }
    }

    /// The same, publishing the count to `progress` after every read.
    pub fn reporting(inner: S, progress: Arc<AtomicU64>) -> Self {
        Self {
            reported: Some(progress),
            ..Self::new(inner)
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let (polled, read) = match &this.budget {
            None => {
                let before = buf.filled().len();
                let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
                (polled, buf.filled().len().saturating_sub(before))
            }
            Some(budget) if budget.is_closed() => {
                return Poll::Ready(Err(std::io::Error::other(
                    "closed: the partial frames of all peers are over the daemon's budget",
                )));
            }
            // At most a chunk per read, so that the budget sees the bytes
            // before more are read (a socket may hold megabytes).
            Some(_) => {
                let want = buf.remaining().min(BUDGET_READ_CHUNK);
                let mut chunk = ReadBuf::new(buf.initialize_unfilled_to(want));
                let polled = Pin::new(&mut this.inner).poll_read(cx, &mut chunk);
                let read = chunk.filled().len();
                buf.advance(read);
                (polled, read)
            }
        };
        this.received = this.received.saturating_add(read as u64);
        if let Some(progress) = &this.reported {
            progress.store(this.received, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(budget) = &this.budget {
            budget.add(read);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A stream that counts the reads that gave bytes.
    struct CountReads {
        inner: DuplexStream,
        reads: Arc<AtomicUsize>,
    }

    impl AsyncRead for CountReads {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let this = self.get_mut();
            let before = buf.filled().len();
            let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
            if buf.filled().len() > before {
                this.reads.fetch_add(1, Ordering::Relaxed);
            }
            polled
        }
    }

    impl AsyncWrite for CountReads {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
        }
    }

    #[tokio::test]
    async fn rustls_reads_the_socket_several_records_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        pki::init(dir.path(), &["localhost".into()]).unwrap();
        pki::issue(dir.path(), "relay-a", None).unwrap();
        let at = |f: &str| Spanned::new(0..0, dir.path().join(f));
        let server = TlsConfig {
            mode: TlsMode::Required,
            cert: at("daemon.crt"),
            key: at("daemon.key"),
            client_ca: at("ca.crt"),
            crl: None,
            raw_id_rule: RawIdRule::default(),
            max_sessions_per_certificate: std::num::NonZeroU32::new(
                DEFAULT_SESSIONS_PER_CERTIFICATE,
            )
            .unwrap_or(std::num::NonZeroU32::MIN),
        }
        .load()
        .unwrap()
        .unwrap();
        let client = tracesync_common::tls::client_config(
            &dir.path().join("ca.crt"),
            &dir.path().join("relay-a.crt"),
            &dir.path().join("relay-a.key"),
        )
        .unwrap();
        let (relay_end, daemon_end) = tokio::io::duplex(4 << 20);
        let reads = Arc::new(AtomicUsize::new(0));
        let socket = tls_socket(Metered::new(CountReads {
            inner: daemon_end,
            reads: reads.clone(),
        }));
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let (relay, daemon) = tokio::join!(
            tokio_rustls::TlsConnector::from(client).connect(name, relay_end),
            server.acceptor.accept(socket)
        );
        let (mut relay, mut daemon) = (relay.unwrap(), daemon.unwrap());
        // 1 MiB, 64 full records, all in the pipe before the daemon reads.
        let sent: Vec<u8> = (0..1u32 << 20).map(|i| i as u8).collect();
        relay.write_all(&sent).await.unwrap();
        relay.flush().await.unwrap();
        let (reads_before, bytes_before) = (
            reads.load(Ordering::Relaxed),
            daemon.get_ref().0.get_ref().received,
        );
        let mut got = vec![0; sent.len()];
        daemon.read_exact(&mut got).await.unwrap();
        assert!(got == sent, "the plaintext came through changed");
        let reads = reads.load(Ordering::Relaxed) - reads_before;
        let bytes = daemon.get_ref().0.get_ref().received - bytes_before;
        // One read per record (64) without the read-ahead buffer.
        assert!(
            reads <= bytes as usize / TLS_READ_AHEAD + 2,
            "{reads} reads for {bytes} bytes"
        );
        // The socket's bytes are counted, records' overhead included.
        assert!(bytes > sent.len() as u64, "{bytes}");
    }

    #[test]
    fn off_loads_nothing_and_missing_files_name_their_key() {
        let off = TlsConfig {
            mode: TlsMode::Off,
            ..TlsConfig::default()
        };
        assert!(off.load().unwrap().is_none());
        let dir = tempfile::tempdir().unwrap();
        let missing = TlsConfig {
            client_ca: Spanned::new(0..0, dir.path().join("nope.crt")),
            ..TlsConfig::default()
        };
        let err = missing.load().unwrap_err();
        assert_eq!(err.key, TlsKey::ClientCa);
        assert!(
            err.to_string().starts_with("tls.client-ca: cannot read "),
            "{err}"
        );
    }

    #[test]
    fn a_lab_pki_loads() {
        let dir = tempfile::tempdir().unwrap();
        pki::init(dir.path(), &["localhost".into()]).unwrap();
        let config = TlsConfig {
            mode: TlsMode::Required,
            cert: Spanned::new(0..0, dir.path().join("daemon.crt")),
            key: Spanned::new(0..0, dir.path().join("daemon.key")),
            client_ca: Spanned::new(0..0, dir.path().join("ca.crt")),
            crl: None,
            raw_id_rule: RawIdRule::default(),
            max_sessions_per_certificate: std::num::NonZeroU32::new(
                DEFAULT_SESSIONS_PER_CERTIFICATE,
            )
            .unwrap_or(std::num::NonZeroU32::MIN),
        };
        assert!(config.load().unwrap().is_some());
        // A key that does not belong to the certificate is refused.
        pki::issue(dir.path(), "relay-a", None).unwrap();
        let wrong = TlsConfig {
            key: Spanned::new(0..0, dir.path().join("relay-a.key")),
            ..config
        };
        let err = wrong.load().unwrap_err();
        assert_eq!(err.key, TlsKey::Key, "{err}");
    }
}
