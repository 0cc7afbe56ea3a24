//! A relay's Hello to its Welcome: read under the hello timeout, admitted
//! ([`super::admission`]), a `max-relays` slot taken, the core asked, the
//! Welcome sent (a ring relay is told its windows are taken).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, oneshot};
use tokio::time::timeout_at;
use tracesync_protocol::relay::{PROTOCOL_VERSION, RefusalCode, v1};
use tracesync_protocol::text::Escaped;
use tracesync_protocol::trigger::RelayMode;
use tracing::{debug, warn};

use super::super::engine::ProbeRegistry;
use super::super::events::{EventSender, IngestEvent, Welcomed};
use super::super::preauth::PreAuth;
use super::super::{Counter, Failed, Refused, Shared};
use super::frames::{decode, kind, next_counted, read_failed, refuse, refuse_counted, send};
use super::peer_bytes::Account;
use super::{Link, admission};
use crate::tls::{Bindings, CertSession, DataStream, RawIdRule};

/// Writes the identity bindings (blocking, off the runtime's workers). A
/// failure is logged and counted; the binding still holds in memory and
/// the next new binding writes the whole table again.
async fn save_bindings(bindings: Arc<Bindings>, machine: &str) {
    let saved = tokio::task::spawn_blocking(move || {
        let path = bindings.path().map(|p| p.display().to_string());
        bindings.save().map_err(|e| (path.unwrap_or_default(), e))
    })
    .await;
    let error = match saved {
        Ok(Ok(())) => return,
        Ok(Err((path, e))) => format!("cannot write {path}: {e}"),
        Err(e) => format!("the writer panicked: {e}"),
    };
    crate::metrics::Event::IdentityBindingsSaveError.record();
    warn!(
        %machine,
        "identity bindings: {error}; the new binding holds until the daemon restarts (free \
         space or fix permissions in the output directory)"
    );
}

/// A relay welcomed: what the core answered, the raw id and probe key of
/// its probe registration, and its `max-relays` slot (held until the
/// session ends).
pub(super) struct Hello {
    pub(super) welcomed: Welcomed,
    /// The name the relay announced (as sent; escaped when logged).
    pub(super) machine: String,
    pub(super) machine_raw_id: u32,
    pub(super) probe_key: [u8; 32],
    /// The relay said ring mode (`Hello.mode`): it sends Window frames.
    pub(super) ring: bool,
    pub(super) slot: OwnedSemaphorePermit,
    /// Its place among its certificate's sessions, held until it ends.
    pub(super) _certificate_session: Option<CertSession>,
}

/// Reads Hello, admits it ([`admission::admit`]), takes a `max-relays`
/// slot, asks the core, sends Welcome. None: refused or gone (already
/// answered), or closed for a newer connection at the unauthenticated limit
/// (counted by the accept loop).
pub(super) async fn welcome<P: ProbeRegistry, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    session_id: u64,
    events: &EventSender,
    shared: &Shared<P>,
    pre: PreAuth,
    account: &Account,
) -> Option<Hello> {
    let mut hello = read_hello(link, peer, shared, &pre, account).await?;
    let token = shared.token();
    let allow_machines = shared.allow_machines();
    let tls = shared.settings.tls.as_ref();
    let context = admission::Context {
        token: token.as_deref(),
        allow_machines: &allow_machines,
        peer_certificate: link.get_ref().peer_certificate(),
        bindings: &shared.bindings,
        raw_id_rule: tls.map_or(RawIdRule::default(), |t| t.policy.raw_id_rule),
    };
    let passed = match admission::admit(&hello, &context) {
        Ok(passed) => passed,
        Err(refusal) => {
            refuse_counted(link, peer, shared, refusal.why, &refusal.reason).await;
            return None;
        }
    };
    // One certificate may not take every slot: its sessions are counted
    // before it gets one.
    let certificate_session = match (tls, link.get_ref().peer_certificate()) {
        (Some(tls), Some(der)) => {
            let limit = tls.policy.max_sessions_per_certificate;
            let Some(session) = tls.sessions.open(der, limit) else {
                let reason = format!(
                    "the certificate of machine {} has {limit} sessions open \
                     (tls.max-sessions-per-certificate); close one, or raise the limit",
                    Escaped(&hello.machine_name)
                );
                refuse_counted(link, peer, shared, Refused::CertificateSessions, &reason).await;
                return None;
            };
            Some(session)
        }
        _ => None,
    };
    if passed.raw_id != hello.machine_raw_id {
        warn!(
            %peer,
            "relay {}: raw id {} is held by another machine's certificate; welcomed under \
             raw id {} instead",
            Escaped(&hello.machine_name),
            hello.machine_raw_id,
            passed.raw_id
        );
        hello.machine_raw_id = passed.raw_id;
    }
    // A new binding is on disk before the relay is welcomed, so a restart
    // right after cannot hand it to another certificate.
    if passed.new_binding && shared.bindings.is_persistent() {
        save_bindings(shared.bindings.clone(), &hello.machine_name).await;
    }
    // Authenticated: a max-relays slot now (never for a connection that
    // has not passed TLS and the Hello checks), and the full frame limit.
    let Some(slot) = pre.authenticated() else {
        let max_relays = shared.settings.max_relays;
        let reason = format!("daemon at max-relays={max_relays}; raise limits.max-relays");
        refuse_counted(link, peer, shared, Refused::MaxRelays, &reason).await;
        return None;
    };
    link.codec_mut()
        .set_max_frame_length(shared.settings.max_frame_bytes);
    // The session's probe key: signs its probe datagrams (Welcome carries it).
    let Ok(probe_key) = tracesync_protocol::probe::new_probe_key() else {
        refuse(
            link,
            peer,
            RefusalCode::InternalError,
            "the daemon cannot draw a probe key from the OS random source; retry later",
        )
        .await;
        return None;
    };
    let machine = hello.machine_name.clone();
    let machine_raw_id = hello.machine_raw_id;
    let ring = RelayMode::from_hello(&hello.mode) == Some(RelayMode::Ring);
    let welcomed = join(link, peer, session_id, events, shared, hello, probe_key).await?;
    Some(Hello {
        welcomed,
        machine,
        machine_raw_id,
        probe_key,
        ring,
        slot,
        _certificate_session: certificate_session,
    })
}

/// The first frame, which must be a Hello within the hello timeout. None:
/// refused (already answered), gone, or evicted.
async fn read_hello<P, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    shared: &Shared<P>,
    pre: &PreAuth,
    account: &Account,
) -> Option<v1::Hello> {
    let first = tokio::select! {
        first = timeout_at(pre.deadline, next_counted(link, account)) => first,
        () = pre.ticket.evicted() => return None,
        () = account.closed() => {
            shared.counters.bump(Counter::Failed(Failed::PeerBytes));
            return None;
        }
    };
    let (why, reason) = match first {
        Ok(Some(Ok(bytes))) => match decode(&bytes) {
            Ok(v1::frame::Body::Hello(hello)) => return Some(hello),
            Ok(other) => (
                Failed::UnexpectedFrame,
                format!("expected Hello as the first frame, got {}", kind(&other)),
            ),
            Err(reason) => (Failed::MalformedFrame, reason),
        },
        Err(_) => {
            let limit = shared.settings.hello_timeout.as_millis();
            let reason = format!("no Hello within {limit} ms of connecting");
            (Failed::HelloTimeout, reason)
        }
        Ok(None) => return None,
        Ok(Some(Err(_))) if account.is_closed() => {
            shared.counters.bump(Counter::Failed(Failed::PeerBytes));
            return None;
        }
        Ok(Some(Err(e))) => {
            read_failed(link, peer, e, shared, true).await;
            return None;
        }
    };
    refuse_counted(link, peer, shared, why, &reason).await;
    None
}

/// Hands the admitted Hello to the core and, if it takes the relay, sends
/// Welcome. None: refused by the core (already answered) or gone.
async fn join<P, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    session_id: u64,
    events: &EventSender,
    shared: &Shared<P>,
    hello: v1::Hello,
    probe_key: [u8; 32],
) -> Option<Welcomed> {
    let (reply, answer) = oneshot::channel();
    let name = hello.machine_name.clone();
    // A ring relay is told its windows are taken (admission checked the mode).
    let takes_windows = RelayMode::from_hello(&hello.mode) == Some(RelayMode::Ring);
    let connect = IngestEvent::Connect {
        session_id,
        hello,
        reply,
    };
    if events.send(connect).await.is_err() {
        return None; // ingest loop gone: the daemon is stopping
    }
    let welcomed = match answer.await {
        Ok(Ok(welcomed)) => welcomed,
        Ok(Err(refused)) => {
            shared.counters.bump(Counter::Refused(Refused::Core));
            refuse(link, peer, refused.code, &refused.reason).await;
            return None;
        }
        Err(_) => return None,
    };
    let welcome = v1::frame::Body::Welcome(v1::Welcome {
        protocol_version: PROTOCOL_VERSION,
        acked_through_batch: welcomed.admitted.acked_through_batch,
        session_id,
        sync_udp_port: u32::from(shared.settings.sync_udp_port),
        probe_key: probe_key.to_vec().into(),
        takes_windows,
        // Every relay may send TriggerRequest (`tracesync-relay trigger`).
        takes_trigger_requests: true,
    });
    if let Err(e) = send(link, welcome).await {
        debug!(%peer, machine = %Escaped(&name), "cannot send Welcome: {e}");
        let slot = welcomed.admitted.slot;
        let _ = events
            .send(IngestEvent::Disconnected { slot, session_id })
            .await;
        return None;
    }
    Some(welcomed)
}
