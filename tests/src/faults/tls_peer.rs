//! A peer of the daemon's data port under mutual TLS, driven by hand over a
//! blocking socket: rustls with a certificate of the lab CA, frames of the
//! relay protocol written and read by the test (hostile peers that a real
//! relay would never be).

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tracesync_protocol::relay::{MAX_FRAME_BYTES, v1};

pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects to `addr` trusting `ca_dir/ca.crt` and presenting
/// `ca_dir/<cert>.crt` and its key; the handshake completes on the first
/// write or read.
pub fn connect(addr: SocketAddr, ca_dir: &Path, cert: &str) -> io::Result<TlsStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_dir.join("ca.crt")).map_err(io::Error::other)? {
        roots
            .add(c.map_err(io::Error::other)?)
            .map_err(io::Error::other)?;
    }
    let chain = CertificateDer::pem_file_iter(ca_dir.join(format!("{cert}.crt")))
        .map_err(io::Error::other)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io::Error::other)?;
    let key = PrivateKeyDer::from_pem_file(ca_dir.join(format!("{cert}.key")))
        .map_err(io::Error::other)?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(io::Error::other)?;
    let name = ServerName::try_from(addr.ip().to_string()).map_err(io::Error::other)?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(rustls::StreamOwned::new(conn, sock))
}

/// Frames read from a stream with a short read timeout, so one thread can
/// both write and read: bytes are kept across timeouts until a frame is
/// whole.
#[derive(Default)]
pub struct FrameBuffer {
    bytes: Vec<u8>,
}

impl FrameBuffer {
    /// The next whole frame, reading once if none is buffered; Ok(None)
    /// when the read timed out first. EOF and a bad frame are errors.
    pub fn next(&mut self, s: &mut impl Read) -> io::Result<Option<v1::Frame>> {
        if let Some(body) = self.take()? {
            return Ok(Some(body));
        }
        let mut chunk = [0u8; 16 << 10];
        match s.read(&mut chunk) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                self.bytes.extend_from_slice(&chunk[..n]);
                self.take()
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn take(&mut self) -> io::Result<Option<v1::Frame>> {
        let Some(head) = self.bytes.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(io::Error::other(format!("{len}-byte frame announced")));
        }
        if self.bytes.len() < 4 + len {
            return Ok(None);
        }
        let frame = v1::Frame::decode(&self.bytes[4..4 + len]).map_err(io::Error::other)?;
        self.bytes.drain(..4 + len);
        Ok(Some(frame))
    }
}
