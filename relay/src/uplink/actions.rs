//! The session's actions executed on the daemon connection (and the
//! daemon's Welcome they follow from): connect,
//! Hello, batches from the spool, heartbeats, acks into the spool, the
//! probe responder, closing. A frame that cannot be queued counts as lost
//! and the session is told the connection is.

use std::net::SocketAddr;
use std::time::Instant;

use tracesync_protocol::relay::PROTOCOL_VERSION;
use tracesync_protocol::relay::v1::{self, frame::Body};
use tracesync_protocol::text::Escaped;

use super::Uplink;
use super::connection::{Connection, OutFrame};
use crate::session::Action;

impl Uplink {
    /// Does what the session asked for.
    pub(super) fn execute(&mut self, action: Action, now: Instant) {
        match action {
            Action::Connect => {
                // The queue holds at most a window of batches plus control frames.
                let queue = self.config.session.window_batches + 8;
                self.connection = Some(Connection::open(
                    self.config.host.clone(),
                    self.config.connect_timeout,
                    self.config.tls.clone(),
                    queue,
                ));
                self.peer = None;
            }
            Action::SendHello => self.send_hello(now),
            Action::SendBatch(seq) => self.send_batch(seq, now),
            Action::SendHeartbeat { last_batch_sent } => self.send_heartbeat(last_batch_sent),
            Action::AckSpool(through) => {
                let acked = through
                    .saturating_add(1)
                    .saturating_sub(self.spool.oldest_unacked());
                crate::metrics::batches_acked(acked);
                if let Err(error) = self.spool.ack(through) {
                    self.log_error(&error, now);
                }
            }
            Action::StartProbe {
                session_id,
                sync_udp_port,
                probe_key,
            } => {
                if let (Some(connection), Some(peer)) = (&self.connection, self.peer) {
                    let target = crate::probe::ProbeTarget {
                        daemon: SocketAddr::new(peer.ip(), sync_udp_port),
                        session_id,
                        probe_key,
                    };
                    (self.start_probe)(target, connection.token.child_token());
                }
            }
            Action::Close { reason } => {
                if !reason.is_empty() {
                    tracing::warn!(
                        "daemon {}: {}; reconnecting",
                        self.config.host,
                        Escaped(&reason)
                    );
                }
                self.connection = None;
            }
            Action::Reject { reason } => {
                tracing::error!(
                    "daemon {}: {reason}; closing the connection, keeping the spool and \
                     retrying later",
                    self.config.host
                );
                self.connection = None;
            }
            Action::Exit { reason } => {
                tracing::error!(
                    "daemon {} refused this relay: {}",
                    self.config.host,
                    Escaped(&reason)
                );
                self.connection = None;
                self.refusal = Some(reason);
            }
        }
    }

    /// The daemon's Welcome: the session resumes, the fault run (if any)
    /// is over, ring mode learns whether the daemon takes windows.
    pub(super) fn on_welcome(&mut self, welcome: &v1::Welcome, now: Instant) -> Vec<Action> {
        let actions = self.session.welcome(
            welcome.acked_through_batch,
            welcome.session_id,
            welcome.sync_udp_port,
            &welcome.probe_key,
            self.spool.oldest_unacked(),
            now,
        );
        self.triggers.daemon_takes_triggers = welcome.takes_trigger_requests;
        if self.session.is_streaming()
            && let Some(ring) = &mut self.ring
        {
            ring.welcomed(welcome.takes_windows, &self.config.host);
        }
        if self.session.is_streaming() {
            if let Some(run) = self.fault.take() {
                tracing::info!(
                    "daemon {}: {} fixed after {} attempts",
                    self.config.host,
                    run.fault.label(),
                    run.attempts
                );
            }
            tracing::info!(
                "daemon {} welcomed relay instance {}: acked through batch {}, resending from {}",
                self.config.host,
                crate::spool::instance_fingerprint(self.spool.instance_id()),
                welcome.acked_through_batch,
                welcome
                    .acked_through_batch
                    .saturating_add(1)
                    .max(self.spool.oldest_unacked())
            );
        }
        actions
    }

    fn send_hello(&mut self, now: Instant) {
        let hello = &self.config.hello;
        let frame = Body::Hello(v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            token: hello.token.clone(),
            relay_instance_id: self.spool.instance_id(),
            boot_id: hello.boot_id.clone(),
            machine_name: hello.machine_name.clone(),
            machine_raw_id: hello.machine_raw_id,
            oldest_unacked_batch: self.spool.oldest_unacked(),
            clocks: Some(self.clocks()),
            mode: self.config.mode().as_str().to_owned(),
        });
        self.send(frame, now);
    }

    fn send_batch(&mut self, seq: u64, now: Instant) {
        let Some(batch) = self.spool.batch(seq) else {
            // Dropped by the spool since: nothing to send.
            self.session.sent(seq, 0, now);
            return;
        };
        // Kept before it is on the wire: no daemon may acknowledge a batch
        // this instance never sent, in this run or a later one.
        if let Err(error) = self.spool.note_sent(seq) {
            self.log_error(&error, now);
            self.connection = None;
            self.session.connection_lost(now);
            return;
        }
        let bytes = batch.bytes;
        // The spool's wire-form packets go out as they are.
        let frame = OutFrame::batch(seq, batch.first_packet_index, batch.wire, &self.clocks());
        if self.send_out(frame, now) {
            self.session.sent(seq, bytes, now);
            crate::metrics::batch_sent(bytes);
        }
    }

    fn send_heartbeat(&mut self, last_batch_sent: u64) {
        let frame = Body::Heartbeat(v1::Heartbeat {
            clocks: Some(self.clocks()),
            last_batch_sent,
            sources: self.source_states(),
            ring: self.ring.as_ref().map(super::ring::RingDriver::fill),
        });
        // A full queue means the link is busy, which says as much as a
        // heartbeat; a closed one reports itself as Lost.
        if let Some(connection) = &self.connection
            && let Ok(frame) = OutFrame::encode(&v1::Frame { body: Some(frame) })
        {
            connection.send(frame);
        }
    }

    /// Queues a frame; a full queue or a dead connection counts as lost.
    fn send(&mut self, body: Body, now: Instant) -> bool {
        self.send_out(OutFrame::encode(&v1::Frame { body: Some(body) }), now)
    }

    /// Queues an encoded frame; a frame that cannot be encoded (over the
    /// frame limit), a full queue or a dead connection counts as lost.
    fn send_out(&mut self, frame: std::io::Result<OutFrame>, now: Instant) -> bool {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::error!("daemon {}: cannot send: {e}", self.config.host);
                self.connection = None;
                self.session.connection_lost(now);
                return false;
            }
        };
        let sent = self.connection.as_ref().is_some_and(|c| c.send(frame));
        if !sent && self.connection.as_ref().is_some_and(Connection::is_closed) {
            // The writer ended: the reader's Lost event says why (a
            // certificate the daemon refused, a peer that is no daemon),
            // and reconnects then. The frame stays unacknowledged.
            return false;
        }
        if !sent {
            tracing::warn!(
                "daemon {}: connection not writable; reconnecting",
                self.config.host
            );
            self.connection = None;
            self.session.connection_lost(now);
        }
        sent
    }

    /// How each source is doing, for the daemon's status.
    fn source_states(&self) -> Vec<v1::SourceState> {
        self.config
            .sources
            .iter()
            .map(|(spec, stats)| {
                let state = stats.state();
                v1::SourceState {
                    spec: spec.clone(),
                    state: state.condition.as_str().to_owned(),
                    detail: state.detail,
                }
            })
            .collect()
    }

    pub(super) fn clocks(&self) -> v1::RelayClocks {
        let now = self.clock.now();
        v1::RelayClocks {
            boottime_ns: now.boottime,
            monotonic_ns: now.monotonic,
            realtime_ns: now.realtime,
            monotonic_raw_ns: now.monotonic_raw,
        }
    }
}
