//! The relay-connection counters of the accept loop and the sessions, as
//! values: [`Counter`] names its series (metric and `reason` label) and, for
//! a refusal, the `Refused.code` the relay is sent. The `reason` labels of
//! `tracesync_connections_refused_total` are exactly [`Refused::ALL`], those of
//! `tracesync_connections_failed_total` exactly [`Failed::ALL`]; the exporter
//! starts every one at zero from these lists, and code that counts names a
//! variant, never a label string.

use tracesync_protocol::relay::RefusalCode;

use super::names::SESSIONS_WELCOMED;
use super::names::{ACCEPT_ERRORS, CONNECTIONS_ACCEPTED, CONNECTIONS_FAILED, CONNECTIONS_REFUSED};

/// Why a relay connection was refused with a Refused frame (the `reason`
/// of `tracesync_connections_refused_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every `limits.max-relays` slot taken (counted once the Hello passed).
    MaxRelays,
    Version,
    /// A first frame over `MAX_HELLO_FRAME_BYTES`, or a Hello string over
    /// its limit.
    HelloTooLarge,
    Token,
    /// Not in `[auth] allow-machines`.
    MachineNotAllowed,
    /// A certificate-authenticated relay claimed another machine.
    CertificateIdentity,
    /// Under `[tls] raw-id-rule = "name"`, a raw id that is not the hash of
    /// the Hello's boot id and certified name (another machine's, most
    /// likely: a squatter).
    RawIdNotBound,
    /// The certificate has `[tls] max-sessions-per-certificate` open.
    CertificateSessions,
    /// The live core refused the Hello (raw id 0, or held by a connected relay).
    Core,
    /// `Hello.mode` names a mode this daemon does not know.
    Mode,
}

impl Refused {
    pub const ALL: [Refused; 10] = [
        Refused::MaxRelays,
        Refused::Version,
        Refused::HelloTooLarge,
        Refused::Token,
        Refused::MachineNotAllowed,
        Refused::CertificateIdentity,
        Refused::RawIdNotBound,
        Refused::CertificateSessions,
        Refused::Core,
        Refused::Mode,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refused::MaxRelays => "max_relays",
            Refused::Version => "version",
            Refused::HelloTooLarge => "hello_too_large",
            Refused::Token => "token",
            Refused::MachineNotAllowed => "machine_not_allowed",
            Refused::CertificateIdentity => "certificate_identity",
            Refused::RawIdNotBound => "raw_id_not_bound",
            Refused::CertificateSessions => "certificate_sessions",
            Refused::Core => "core",
            Refused::Mode => "mode",
        }
    }

    /// The `Refused.code` the relay is sent.
    pub fn code(self) -> RefusalCode {
        match self {
            Refused::MaxRelays => RefusalCode::MaxRelays,
            Refused::Version => RefusalCode::BadVersion,
            Refused::HelloTooLarge => RefusalCode::HelloTooLarge,
            Refused::Token => RefusalCode::BadToken,
            Refused::MachineNotAllowed => RefusalCode::MachineNotAllowed,
            Refused::CertificateIdentity | Refused::RawIdNotBound => {
                RefusalCode::CertificateIdentityMismatch
            }
            Refused::CertificateSessions => RefusalCode::CertificateSessionLimit,
            Refused::Core => RefusalCode::RefusedByCore,
            Refused::Mode => RefusalCode::UnknownMode,
        }
    }
}

/// Why a relay connection was closed for a fault (the `reason` of
/// `tracesync_connections_failed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// No Hello within the hello timeout.
    HelloTimeout,
    /// A frame that does not decode (or holds no message).
    MalformedFrame,
    /// A frame over `limits.max-frame-bytes`.
    FrameTooLarge,
    /// A Batch of more than `MAX_BATCH_PACKETS` packets.
    BatchTooLarge,
    /// A frame of a kind the relay must not send now (a Batch before Hello,
    /// a second Hello, a Welcome, an Ack, ...).
    UnexpectedFrame,
    /// The core closed the session (a relay past a limit: unacknowledged
    /// batches, sequences).
    ClosedByCore,
    /// The TLS handshake failed (no, or an untrusted, relay certificate).
    TlsHandshake,
    /// After Hello, a frame not whole within `limits.frame-timeout-ms`.
    FrameTimeout,
    /// A connection still in TLS handshake or Hello closed for a newer one
    /// (more than `MAX_UNAUTHENTICATED` at once).
    UnauthenticatedLimit,
    /// The same, for a newer one from the same source (more than
    /// `MAX_UNAUTHENTICATED_PER_SOURCE` from one address or IPv6 /64).
    UnauthenticatedPerSource,
    /// After Hello, nothing received (no batch, heartbeat or byte) for
    /// `limits.idle-timeout-ms`.
    IdleTimeout,
    /// Closed to keep the partial frames of all peers within
    /// `PEER_BYTES` (it was unauthenticated, or held the largest).
    PeerBytes,
    /// A TLS ClientHello on a plaintext data port: the relay has TLS on,
    /// the daemon off.
    TlsRelay,
}

impl Failed {
    pub const ALL: [Failed; 13] = [
        Failed::HelloTimeout,
        Failed::MalformedFrame,
        Failed::FrameTooLarge,
        Failed::BatchTooLarge,
        Failed::UnexpectedFrame,
        Failed::ClosedByCore,
        Failed::TlsHandshake,
        Failed::FrameTimeout,
        Failed::UnauthenticatedLimit,
        Failed::UnauthenticatedPerSource,
        Failed::IdleTimeout,
        Failed::PeerBytes,
        Failed::TlsRelay,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Failed::HelloTimeout => "hello_timeout",
            Failed::MalformedFrame => "malformed_frame",
            Failed::FrameTooLarge => "frame_too_large",
            Failed::BatchTooLarge => "batch_too_large",
            Failed::UnexpectedFrame => "unexpected_frame",
            Failed::ClosedByCore => "closed_by_core",
            Failed::TlsHandshake => "tls_handshake",
            Failed::FrameTimeout => "frame_timeout",
            Failed::UnauthenticatedLimit => "unauthenticated_limit",
            Failed::UnauthenticatedPerSource => "unauthenticated_per_source",
            Failed::IdleTimeout => "idle_timeout",
            Failed::PeerBytes => "peer_bytes",
            Failed::TlsRelay => "tls_relay",
        }
    }

    /// The `Refused.code` the relay is sent (None: the connection closes
    /// without a Refused frame, before any frame could be exchanged).
    pub fn code(self) -> Option<RefusalCode> {
        Some(match self {
            Failed::HelloTimeout => RefusalCode::NoHello,
            Failed::MalformedFrame => RefusalCode::BadFrame,
            Failed::FrameTooLarge => RefusalCode::FrameTooLarge,
            Failed::BatchTooLarge => RefusalCode::BatchTooLarge,
            Failed::UnexpectedFrame => RefusalCode::UnexpectedFrame,
            Failed::ClosedByCore => RefusalCode::ClosedByCore,
            Failed::FrameTimeout => RefusalCode::FrameTimeout,
            // The relay's TLS client reads no frame; that its bytes are one
            // tells it the daemon speaks plaintext.
            Failed::TlsRelay => RefusalCode::BadFrame,
            // Nothing came to answer, or the idle relay would not read it.
            Failed::TlsHandshake
            | Failed::UnauthenticatedLimit
            | Failed::UnauthenticatedPerSource
            | Failed::IdleTimeout
            | Failed::PeerBytes => return None,
        })
    }
}

/// A relay-connection event the accept loop or a session counts (also
/// kept for the status report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    ConnectionsAccepted,
    SessionsWelcomed,
    /// `accept()` failed on the data listener.
    AcceptErrors,
    Refused(Refused),
    Failed(Failed),
}

impl From<Refused> for Counter {
    fn from(reason: Refused) -> Self {
        Counter::Refused(reason)
    }
}

impl From<Failed> for Counter {
    fn from(reason: Failed) -> Self {
        Counter::Failed(reason)
    }
}

impl Counter {
    /// The counters without a `reason`.
    const PLAIN: [Counter; 3] = [
        Counter::ConnectionsAccepted,
        Counter::SessionsWelcomed,
        Counter::AcceptErrors,
    ];

    /// How many counters there are ([`Counter::index`] is below it).
    pub const COUNT: usize = Self::PLAIN.len() + Refused::ALL.len() + Failed::ALL.len();

    /// Every counter, each once.
    pub fn all() -> impl Iterator<Item = Counter> {
        Self::PLAIN
            .into_iter()
            .chain(Refused::ALL.map(Counter::Refused))
            .chain(Failed::ALL.map(Counter::Failed))
    }

    /// A dense index (0..[`Counter::COUNT`]) for a table of values.
    pub fn index(self) -> usize {
        let refused = Self::PLAIN.len();
        let failed = refused + Refused::ALL.len();
        match self {
            Counter::ConnectionsAccepted => 0,
            Counter::SessionsWelcomed => 1,
            Counter::AcceptErrors => 2,
            Counter::Refused(r) => refused + r as usize,
            Counter::Failed(f) => failed + f as usize,
        }
    }

    /// `Refused.code` of a refusal (None for the other counters).
    pub fn code(self) -> Option<RefusalCode> {
        match self {
            Counter::Refused(r) => Some(r.code()),
            Counter::Failed(f) => f.code(),
            Counter::ConnectionsAccepted | Counter::SessionsWelcomed | Counter::AcceptErrors => {
                None
            }
        }
    }

    /// The key of the status report's `relays_refused` (None for counters
    /// that send no refusal): the wire code, but the cause where the code
    /// alone would mislead (a raw id another relay holds; a TLS relay at a
    /// plaintext daemon, whose code is only what its TLS client reads).
    pub fn report_key(self) -> Option<&'static str> {
        match self {
            Counter::Refused(Refused::Core) => Some("raw_id_conflict"),
            Counter::Refused(Refused::RawIdNotBound) => Some("raw_id_not_bound"),
            Counter::Failed(Failed::TlsRelay) => Some("tls_relay"),
            Counter::Failed(Failed::IdleTimeout) => Some("idle_timeout"),
            Counter::Failed(Failed::PeerBytes) => Some("peer_bytes"),
            _ => self.code().map(RefusalCode::as_str),
        }
    }

    /// The metric (see [`super::names`]) and its `reason` label.
    pub fn series(self) -> (&'static str, Option<&'static str>) {
        match self {
            Counter::ConnectionsAccepted => (CONNECTIONS_ACCEPTED, None),
            Counter::SessionsWelcomed => (SESSIONS_WELCOMED, None),
            Counter::AcceptErrors => (ACCEPT_ERRORS, None),
            Counter::Refused(r) => (CONNECTIONS_REFUSED, Some(r.label())),
            Counter::Failed(f) => (CONNECTIONS_FAILED, Some(f.label())),
        }
    }

    /// Adds `n` to the counter's series.
    pub fn add(self, n: u64) {
        match self.series() {
            (name, Some(reason)) => metrics::counter!(name, "reason" => reason).increment(n),
            (name, None) => metrics::counter!(name).increment(n),
        }
    }
}
