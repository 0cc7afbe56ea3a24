//! The relay's side of a daemon connection as a sans-IO state machine.
//!
//! The driver ([`crate::uplink`]) reports what happened (connected, frames
//! received, connection lost) with the current time and executes the
//! [`Action`]s it gets back; [`Session::poll`] says what to do next and
//! [`Session::deadline`] when to ask again. No clock is read here.
//!
//! Flow: connect -> Hello -> Welcome(acked_through) -> batches from
//! acked_through + 1 within a window of unacked batches, heartbeats when
//! idle, acks free the spool. A lost connection or a refusal other than
//! authentication means reconnecting after a capped exponential backoff
//! with jitter; the next Welcome says where to resume.
//!
//! The daemon's word is checked before it frees anything: a Welcome or Ack
//! may only acknowledge batches this relay instance ever sent, in this run
//! or an earlier one (the spool keeps the highest sent across restarts;
//! batches spooled while no daemon was reachable were never sent).
//! Anything beyond is a daemon that lies (another service on the port, a
//! daemon whose output was lost or replaced, a bug): the connection is
//! closed ([`Action::Reject`], counted), the spool keeps everything, and
//! the session reconnects after the backoff. Batch numbers are never
//! wrapped: every `+ 1` on them is checked.
//!
//! A daemon whose record of this instance was poisoned (in plaintext mode,
//! a stranger who learnt the instance id resumed it and pushed its ack
//! point past anything sent) would be rejected forever. After
//! [`NEW_INSTANCE_AFTER`] Welcomes rejected in a row the driver makes the
//! spool a new relay instance ([`Session::wants_new_instance`]): a daemon
//! starts a new record for it and takes every unacknowledged batch again.
//! Nothing is freed, so a lying daemon gains nothing by it; what it costs
//! is exactly-once for the batches a real daemon had written and not yet
//! acknowledged when its record was poisoned (written again).

use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tracesync_protocol::relay::RefusalCode;

/// Welcomes rejected in a row (each acknowledging batches never sent)
/// after which the relay continues as a new relay instance.
pub const NEW_INSTANCE_AFTER: u32 = 3;

#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Most batches sent and not yet acked.
    pub window_batches: usize,
    /// Most packet bytes sent and not yet acked.
    pub window_bytes: usize,
    /// A heartbeat goes out after this long without sending.
    pub heartbeat_idle: Duration,
    /// And at least this often while batches flow: it carries the
    /// sources' states, which the daemon's status shows.
    pub heartbeat_every: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Connecting and waiting for Welcome may take this long.
    pub hello_timeout: Duration,
    /// A connection that lasted this long resets the backoff.
    pub healthy_after: Duration,
    /// Stream mode: batches go out as they are spooled. Ring mode: none
    /// do (the ring ships a trigger's window in Window frames); the
    /// session keeps the connection, its heartbeats and the probes.
    pub ships_batches: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            // Bytes bound the window; the batch count only bounds the
            // in-flight bookkeeping (linger-cut batches can be tiny).
            window_batches: 1024,
            window_bytes: crate::config::DEFAULT_WINDOW_BYTES as usize,
            heartbeat_idle: Duration::from_millis(250),
            heartbeat_every: Duration::from_secs(2),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            hello_timeout: Duration::from_secs(10),
            healthy_after: Duration::from_secs(1),
            ships_batches: true,
        }
    }
}

/// What the driver must do.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a connection; report `connected` or `connection_lost`.
    Connect,
    /// Send Hello (with the spool's oldest unacked batch).
    SendHello,
    /// Send this batch, then report `sent`.
    SendBatch(u64),
    SendHeartbeat {
        last_batch_sent: u64,
    },
    /// The daemon has everything through this seq: free it in the spool.
    AckSpool(u64),
    /// Run the probe responder for this connection.
    StartProbe {
        session_id: u64,
        sync_udp_port: u16,
        /// Welcome.probe_key: signs the session's probe datagrams.
        probe_key: Vec<u8>,
    },
    /// Drop the connection (the session already plans the reconnect).
    Close {
        reason: String,
    },
    /// The daemon acknowledged batches this relay never sent: drop the
    /// connection and say so as an error. Nothing is freed from the spool;
    /// the session already plans the reconnect.
    Reject {
        reason: String,
    },
    /// Stop for good: the daemon refused our credentials.
    Exit {
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Not connected; connect at `retry_at`.
    Idle {
        retry_at: Instant,
    },
    /// Connecting or waiting for Welcome since `since`.
    Handshake {
        since: Instant,
    },
    Streaming {
        since: Instant,
    },
    Exited,
}

#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    state: State,
    backoff: Duration,
    rng: u64,
    acked_through: u64,
    next_to_send: u64,
    /// The last batch sent (after a reconnect, resends start lower).
    last_batch_sent: u64,
    /// The highest batch sent in this run, on any connection.
    highest_sent: u64,
    /// The highest batch earlier runs sent: with `highest_sent`, the most
    /// a daemon may ack.
    sent_before: u64,
    /// Welcomes and Acks that acknowledged batches never sent.
    invalid_welcomes: u64,
    /// Welcomes rejected since the last one accepted.
    welcomes_rejected_in_a_row: u32,
    /// Times the spool became a new relay instance.
    instance_renewals: u64,
    invalid_acks: u64,
    in_flight: VecDeque<(u64, usize)>,
    in_flight_bytes: usize,
    /// See [`Session::set_link_full`].
    link_full: bool,
    last_send_at: Instant,
    last_heartbeat_at: Instant,
    reconnects: u64,
}

impl Session {
    /// A session that connects at once. `seed` drives the backoff jitter;
    /// `sent_before` is the highest batch earlier runs of this relay
    /// instance sent (the spool's `sent_through`).
    pub fn new(config: SessionConfig, now: Instant, seed: u64, sent_before: u64) -> Self {
        Self {
            backoff: config.backoff_min,
            config,
            state: State::Idle { retry_at: now },
            rng: seed | 1,
            acked_through: 0,
            next_to_send: 1,
            last_batch_sent: 0,
            highest_sent: 0,
            sent_before,
            invalid_welcomes: 0,
            welcomes_rejected_in_a_row: 0,
            instance_renewals: 0,
            invalid_acks: 0,
            in_flight: VecDeque::new(),
            in_flight_bytes: 0,
            link_full: false,
            last_send_at: now,
            last_heartbeat_at: now,
            reconnects: 0,
        }
    }

    /// Whether the connection has as much queued for its socket as it
    /// should hold: no batch is sent until it drains (the window bounds
    /// what the daemon has not acked, this what waits in memory to be
    /// written).
    pub fn set_link_full(&mut self, full: bool) {
        self.link_full = full;
    }

    /// The daemon has acked everything through this seq.
    pub fn acked_through(&self) -> u64 {
        self.acked_through
    }

    pub fn is_streaming(&self) -> bool {
        matches!(self.state, State::Streaming { .. })
    }

    pub fn has_exited(&self) -> bool {
        self.state == State::Exited
    }

    /// Connections lost or refused so far.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Welcomes that acknowledged batches this relay never sent.
    pub fn invalid_welcomes(&self) -> u64 {
        self.invalid_welcomes
    }

    /// Whether [`NEW_INSTANCE_AFTER`] Welcomes in a row were rejected: the
    /// daemon's record of this instance is unusable (see the module doc).
    pub fn wants_new_instance(&self) -> bool {
        self.welcomes_rejected_in_a_row >= NEW_INSTANCE_AFTER
    }

    /// The spool is a new relay instance now (or failed to become one):
    /// count afresh.
    pub fn instance_renewed(&mut self, renewed: bool) {
        self.welcomes_rejected_in_a_row = 0;
        self.instance_renewals += u64::from(renewed);
    }

    /// Times the spool became a new relay instance.
    pub fn instance_renewals(&self) -> u64 {
        self.instance_renewals
    }

    /// Acks of batches this relay never sent.
    pub fn invalid_acks(&self) -> u64 {
        self.invalid_acks
    }

    /// The most a daemon may acknowledge: what this run or an earlier one
    /// sent.
    fn ack_limit(&self) -> u64 {
        self.sent_before
            .max(self.highest_sent)
            .max(self.acked_through)
    }

    /// The next thing to do now, if any (call until None).
    /// `oldest_spooled` and `last_spooled` bound the batches that exist.
    pub fn poll(&mut self, now: Instant, oldest_spooled: u64, last_spooled: u64) -> Option<Action> {
        match self.state {
            State::Idle { retry_at } if now >= retry_at => {
                self.state = State::Handshake { since: now };
                Some(Action::Connect)
            }
            State::Handshake { since } if now >= since + self.config.hello_timeout => {
                Some(self.lose(now, "no Welcome from the daemon in time".into()))
            }
            State::Streaming { .. } => {
                // Dropped (drop-oldest) batches are skipped.
                self.next_to_send = self.next_to_send.max(oldest_spooled);
                let window_open = !self.link_full
                    && self.in_flight.len() < self.config.window_batches
                    && self.in_flight_bytes < self.config.window_bytes;
                if now >= self.last_heartbeat_at + self.config.heartbeat_every {
                    self.last_heartbeat_at = now;
                    self.last_send_at = now;
                    return Some(Action::SendHeartbeat {
                        last_batch_sent: self.last_batch_sent,
                    });
                }
                if self.config.ships_batches && window_open && self.next_to_send <= last_spooled {
                    let seq = self.next_to_send;
                    // u64::MAX is never a batch (the spool stops short of it).
                    if let Some(next) = seq.checked_add(1) {
                        self.next_to_send = next;
                        return Some(Action::SendBatch(seq));
                    }
                }
                if now >= self.last_send_at + self.config.heartbeat_idle {
                    self.last_send_at = now;
                    self.last_heartbeat_at = now;
                    return Some(Action::SendHeartbeat {
                        last_batch_sent: self.last_batch_sent,
                    });
                }
                None
            }
            _ => None,
        }
    }

    /// When `poll` may next have something (besides new spooled batches
    /// and received frames).
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Idle { retry_at } => Some(retry_at),
            State::Handshake { since } => Some(since + self.config.hello_timeout),
            State::Streaming { .. } => Some(
                (self.last_send_at + self.config.heartbeat_idle)
                    .min(self.last_heartbeat_at + self.config.heartbeat_every),
            ),
            State::Exited => None,
        }
    }

    /// The connection is open: say Hello.
    pub fn connected(&mut self, now: Instant) -> Vec<Action> {
        self.state = State::Handshake { since: now };
        self.last_send_at = now;
        vec![Action::SendHello]
    }

    /// A batch from `SendBatch` went out (`bytes` of packets; 0 if the
    /// spool no longer had it).
    pub fn sent(&mut self, seq: u64, bytes: usize, now: Instant) {
        self.in_flight.push_back((seq, bytes));
        self.in_flight_bytes += bytes;
        self.last_batch_sent = seq;
        self.highest_sent = self.highest_sent.max(seq);
        self.last_send_at = now;
    }

    pub fn welcome(
        &mut self,
        acked_through: u64,
        session_id: u64,
        sync_udp_port: u32,
        probe_key: &[u8],
        oldest_spooled: u64,
        now: Instant,
    ) -> Vec<Action> {
        if !matches!(self.state, State::Handshake { .. }) {
            return vec![self.lose(now, "unexpected Welcome".into())];
        }
        let limit = self.ack_limit();
        let resume = acked_through
            .checked_add(1)
            .filter(|_| acked_through <= limit);
        let Some(resume) = resume else {
            self.invalid_welcomes += 1;
            self.welcomes_rejected_in_a_row = self.welcomes_rejected_in_a_row.saturating_add(1);
            let reason = format!(
                "Welcome acknowledges batch {acked_through}, but this relay instance sent at \
                 most batch {} in this run and batch {} before it: the daemon does not hold \
                 this relay's data (another service on its port, a lost or replaced output, \
                 or a bug); nothing is freed from the spool",
                self.highest_sent, self.sent_before
            );
            return vec![self.reject(now, reason)];
        };
        self.state = State::Streaming { since: now };
        self.welcomes_rejected_in_a_row = 0;
        self.acked_through = self.acked_through.max(acked_through);
        self.next_to_send = resume.max(oldest_spooled);
        self.last_send_at = now;
        let mut actions = vec![Action::AckSpool(acked_through)];
        if let Ok(port) = u16::try_from(sync_udp_port)
            && port != 0
        {
            actions.push(Action::StartProbe {
                session_id,
                sync_udp_port: port,
                probe_key: probe_key.to_vec(),
            });
        }
        actions
    }

    /// The daemon's Refused: a final code (credentials, identity) ends
    /// the relay; any other (or none, from an older daemon) is retried.
    pub fn refused(
        &mut self,
        code: Option<RefusalCode>,
        reason: &str,
        now: Instant,
    ) -> Vec<Action> {
        if code.is_some_and(RefusalCode::is_final) {
            self.state = State::Exited;
            return vec![Action::Exit {
                reason: reason.to_owned(),
            }];
        }
        vec![self.lose(now, format!("refused: {reason}"))]
    }

    pub fn ack(&mut self, through: u64, now: Instant) -> Vec<Action> {
        if !self.is_streaming() {
            return vec![self.lose(now, "Ack before Welcome".into())];
        }
        if through > self.ack_limit() {
            self.invalid_acks += 1;
            let reason = format!(
                "Ack of batch {through}, but this relay instance sent at most batch {} in this \
                 run and batch {} before it; nothing is freed from the spool",
                self.highest_sent, self.sent_before
            );
            return vec![self.reject(now, reason)];
        }
        if through <= self.acked_through {
            return Vec::new();
        }
        self.acked_through = through;
        while let Some(&(seq, bytes)) = self.in_flight.front() {
            if seq > through {
                break;
            }
            self.in_flight.pop_front();
            self.in_flight_bytes -= bytes;
        }
        vec![Action::AckSpool(through)]
    }

    /// The connection failed or closed: plan the reconnect.
    pub fn connection_lost(&mut self, now: Instant) {
        if self.state != State::Exited {
            let _ = self.lose(now, String::new());
        }
    }

    /// The daemon acknowledged what it cannot have: drop the connection
    /// like [`Session::lose`], as an error.
    fn reject(&mut self, now: Instant, reason: String) -> Action {
        match self.lose(now, reason) {
            Action::Close { reason } => Action::Reject { reason },
            other => other,
        }
    }

    /// A protocol-level reason to drop the connection: back to Idle with a
    /// backoff; unacked batches will be resent after the next Welcome.
    fn lose(&mut self, now: Instant, reason: String) -> Action {
        let healthy = matches!(self.state, State::Streaming { since }
            if now >= since + self.config.healthy_after);
        if healthy {
            self.backoff = self.config.backoff_min;
        }
        let delay = self.jittered(self.backoff);
        self.backoff = (self.backoff * 2).min(self.config.backoff_max);
        self.state = State::Idle {
            retry_at: now + delay,
        };
        self.in_flight.clear();
        self.in_flight_bytes = 0;
        self.reconnects += 1;
        Action::Close { reason }
    }

    /// A delay in [d/2, d]: relays that lost the daemon together do not
    /// come back in lockstep.
    fn jittered(&mut self, delay: Duration) -> Duration {
        // xorshift64: tiny, deterministic for tests.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let fraction = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        delay.mul_f64(0.5 + 0.5 * fraction)
    }
}

#[cfg(test)]
mod tests;
