//! A relay with TLS on at a plaintext daemon: refused with the fix named.

use std::net::SocketAddr;

use tokio_util::codec::Framed;
use tracing::warn;

use super::{MAX_HELLO_FRAME_BYTES, PEER_FAULTS, codec, refuse_counted};
use crate::server::{Failed, Shared};
use crate::tls::DataStream;

/// A relay with TLS on at this plaintext daemon (its first bytes are a
/// ClientHello): counted and logged with the fix, and answered with a
/// Refused frame, whose bytes tell the relay's TLS client that the daemon
/// speaks plaintext.
pub async fn refuse_tls_relay<P, S: DataStream>(stream: S, peer: SocketAddr, shared: &Shared<P>) {
    let mut link = Framed::new(stream, codec(MAX_HELLO_FRAME_BYTES));
    if let Some(suppressed) = PEER_FAULTS.admit(Failed::TlsRelay.label()) {
        warn!(
            %peer,
            "a relay with TLS on reached this plaintext daemon (tls.mode = \"off\"): give both \
             the same mode (the relay's --tls off, or the daemon's [tls] cert, key and \
             client-ca){suppressed}"
        );
    }
    let reason = "this daemon speaks plaintext (tls.mode = \"off\") and the relay TLS: give \
                  both the same mode";
    refuse_counted(&mut link, peer, shared, Failed::TlsRelay, reason).await;
}
