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
//! may only acknowledge batches this relay instance sent in this run or
//! had spooled before it started (an earlier run may have sent those).
//! Anything beyond is a daemon that lies (another service on the port, a
//! daemon whose output was lost or replaced, a bug): the connection is
//! closed ([`Action::Reject`], counted), the spool keeps everything, and
//! the session reconnects after the backoff. Batch numbers are never
//! wrapped: every `+ 1` on them is checked.

use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tracesync_protocol::relay::RefusalCode;

#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Most batches sent and not yet acked.
    pub window_batches: usize,
    /// Most packet bytes sent and not yet acked.
    pub window_bytes: usize,
    /// A heartbeat goes out after this long without sending.
    pub heartbeat_idle: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Connecting and waiting for Welcome may take this long.
    pub hello_timeout: Duration,
    /// A connection that lasted this long resets the backoff.
    pub healthy_after: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            // Bytes bound the window; the batch count only bounds the
            // in-flight bookkeeping (linger-cut batches can be tiny).
            window_batches: 1024,
            window_bytes: crate::config::DEFAULT_WINDOW_BYTES as usize,
            heartbeat_idle: Duration::from_millis(250),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            hello_timeout: Duration::from_secs(10),
            healthy_after: Duration::from_secs(1),
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
    /// The newest batch spooled before this run started (an earlier run
    /// may have sent it): with `highest_sent`, the most a daemon may ack.
    spooled_before: u64,
    /// Welcomes and Acks that acknowledged batches never sent.
    invalid_welcomes: u64,
    invalid_acks: u64,
    in_flight: VecDeque<(u64, usize)>,
    in_flight_bytes: usize,
    /// See [`Session::set_link_full`].
    link_full: bool,
    last_send_at: Instant,
    reconnects: u64,
}

impl Session {
    /// A session that connects at once. `seed` drives the backoff jitter;
    /// `spooled_before` is the spool's last seq when this run opened it
    /// (batches an earlier run may have sent).
    pub fn new(config: SessionConfig, now: Instant, seed: u64, spooled_before: u64) -> Self {
        Self {
            backoff: config.backoff_min,
            config,
            state: State::Idle { retry_at: now },
            rng: seed | 1,
            acked_through: 0,
            next_to_send: 1,
            last_batch_sent: 0,
            highest_sent: 0,
            spooled_before,
            invalid_welcomes: 0,
            invalid_acks: 0,
            in_flight: VecDeque::new(),
            in_flight_bytes: 0,
            link_full: false,
            last_send_at: now,
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

    /// Acks of batches this relay never sent.
    pub fn invalid_acks(&self) -> u64 {
        self.invalid_acks
    }

    /// The most a daemon may acknowledge: what this run sent, or what was
    /// spooled before it started.
    fn ack_limit(&self) -> u64 {
        self.spooled_before
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
                if window_open && self.next_to_send <= last_spooled {
                    let seq = self.next_to_send;
                    // u64::MAX is never a batch (the spool stops short of it).
                    if let Some(next) = seq.checked_add(1) {
                        self.next_to_send = next;
                        return Some(Action::SendBatch(seq));
                    }
                }
                if now >= self.last_send_at + self.config.heartbeat_idle {
                    self.last_send_at = now;
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
            State::Streaming { .. } => Some(self.last_send_at + self.config.heartbeat_idle),
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
            let reason = format!(
                "Welcome acknowledges batch {acked_through}, but this relay instance sent at \
                 most batch {} in this run and had spooled through batch {} before it: the \
                 daemon does not hold this relay's data (another service on its port, a lost \
                 or replaced output, or a bug); nothing is freed from the spool",
                self.highest_sent, self.spooled_before
            );
            return vec![self.reject(now, reason)];
        };
        self.state = State::Streaming { since: now };
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
                 run and had spooled through batch {} before it; nothing is freed from the spool",
                self.highest_sent, self.spooled_before
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
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A session with a small window (64 batches, 16 MiB), welcomed.
    fn welcomed(acked: u64, oldest: u64) -> (Session, Instant) {
        let config = SessionConfig {
            window_batches: 64,
            window_bytes: 16 << 20,
            ..SessionConfig::default()
        };
        welcomed_with(config, acked, oldest)
    }

    /// A session whose spool held batches through `acked` when it started
    /// (so the daemon may ack them), welcomed with `acked`.
    fn welcomed_with(config: SessionConfig, acked: u64, oldest: u64) -> (Session, Instant) {
        let t0 = Instant::now();
        let mut s = Session::new(config, t0, 42, acked);
        assert_eq!(s.poll(t0, oldest, 0), Some(Action::Connect));
        assert_eq!(s.connected(t0), vec![Action::SendHello]);
        let actions = s.welcome(acked, 7, 7411, &[1; 32], oldest, t0);
        assert_eq!(
            actions,
            vec![
                Action::AckSpool(acked),
                Action::StartProbe {
                    session_id: 7,
                    sync_udp_port: 7411,
                    probe_key: vec![1; 32],
                }
            ]
        );
        (s, t0)
    }

    /// Drains poll at `now`, reporting every batch as sent with `bytes`.
    fn pump(s: &mut Session, now: Instant, last: u64, bytes: usize) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(action) = s.poll(now, 1, last) {
            if let Action::SendBatch(seq) = action {
                s.sent(seq, bytes, now);
            }
            out.push(action);
            if out.len() > 1000 {
                break;
            }
        }
        out
    }

    #[test]
    fn sends_from_after_the_welcome_ack_within_the_window() {
        let (mut s, t0) = welcomed(10, 3);
        let actions = pump(&mut s, t0, 200, 100);
        let seqs: Vec<u64> = actions
            .iter()
            .filter_map(|a| match a {
                Action::SendBatch(seq) => Some(*seq),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, (11..11 + 64).collect::<Vec<_>>());
        // Acks open the window again.
        assert_eq!(s.ack(20, t0), vec![Action::AckSpool(20)]);
        let more = pump(&mut s, t0, 200, 100);
        assert_eq!(more.first(), Some(&Action::SendBatch(75)));
        assert_eq!(more.len(), 10);
    }

    #[test]
    fn byte_window_limits_in_flight() {
        let (mut s, t0) = welcomed(0, 1);
        let actions = pump(&mut s, t0, 100, 4 << 20);
        assert_eq!(actions.len(), 4);
    }

    #[test]
    fn a_full_link_holds_batches_back_not_heartbeats() {
        let (mut s, t0) = welcomed(0, 1);
        s.set_link_full(true);
        assert_eq!(s.poll(t0, 1, 5), None);
        assert_eq!(
            s.poll(t0 + 250 * MS, 1, 5),
            Some(Action::SendHeartbeat { last_batch_sent: 0 })
        );
        s.set_link_full(false);
        assert_eq!(s.poll(t0 + 250 * MS, 1, 5), Some(Action::SendBatch(1)));
    }

    #[test]
    fn default_window_is_bounded_by_bytes() {
        // Full 512 KiB batches: 64 MiB in flight, not the batch count.
        let (mut s, t0) = welcomed_with(SessionConfig::default(), 0, 1);
        let actions = pump(&mut s, t0, 10_000, 512 << 10);
        assert_eq!(actions.len(), 128);
    }

    #[test]
    fn heartbeat_after_idle() {
        let (mut s, t0) = welcomed(0, 1);
        assert_eq!(s.poll(t0 + 249 * MS, 1, 0), None);
        assert_eq!(s.deadline(), Some(t0 + 250 * MS));
        assert_eq!(
            s.poll(t0 + 250 * MS, 1, 0),
            Some(Action::SendHeartbeat { last_batch_sent: 0 })
        );
        assert_eq!(s.poll(t0 + 251 * MS, 1, 0), None);
        // Sending resets the idle timer.
        assert_eq!(s.poll(t0 + 300 * MS, 1, 1), Some(Action::SendBatch(1)));
        s.sent(1, 10, t0 + 300 * MS);
        assert_eq!(s.poll(t0 + 501 * MS, 1, 1), None);
        assert_eq!(
            s.poll(t0 + 550 * MS, 1, 1),
            Some(Action::SendHeartbeat { last_batch_sent: 1 })
        );
    }

    #[test]
    fn reconnect_resends_unacked_batches() {
        let (mut s, t0) = welcomed(0, 1);
        pump(&mut s, t0, 5, 10);
        s.ack(2, t0);
        s.connection_lost(t0 + 10 * MS);
        assert!(!s.is_streaming());
        let retry = s.deadline().unwrap();
        assert!(retry >= t0 + 60 * MS && retry <= t0 + 110 * MS, "{retry:?}");
        assert_eq!(s.poll(retry, 3, 5), Some(Action::Connect));
        s.connected(retry);
        // The daemon wrote batch 3 before the drop.
        s.welcome(3, 8, 0, &[], 3, retry);
        let seqs = pump(&mut s, retry, 5, 10);
        assert_eq!(seqs, vec![Action::SendBatch(4), Action::SendBatch(5)]);
    }

    #[test]
    fn skips_batches_the_spool_dropped() {
        let (mut s, t0) = welcomed(0, 1);
        assert_eq!(s.poll(t0, 9, 12), Some(Action::SendBatch(9)));
    }

    #[test]
    fn backoff_grows_capped_with_jitter_and_resets_after_a_healthy_connection() {
        let t0 = Instant::now();
        let mut s = Session::new(SessionConfig::default(), t0, 7, 0);
        let mut now = t0;
        let mut delays = Vec::new();
        for _ in 0..12 {
            assert_eq!(s.poll(now, 1, 0), Some(Action::Connect));
            s.connection_lost(now);
            let retry = s.deadline().unwrap();
            delays.push(retry - now);
            now = retry;
        }
        let nominal = [100u64, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000];
        for (delay, nominal) in delays.iter().zip(nominal) {
            let nominal = Duration::from_millis(nominal);
            assert!(
                *delay >= nominal / 2 && *delay <= nominal,
                "{delay:?} vs {nominal:?}"
            );
        }
        assert!(delays[11] <= Duration::from_secs(10));
        // Not all equal: jitter is there.
        assert_ne!(delays[8], delays[9]);
        // A connection that lived for a while starts over at the minimum.
        s.poll(now, 1, 0);
        s.connected(now);
        s.welcome(0, 1, 0, &[], 1, now);
        s.connection_lost(now + Duration::from_secs(2));
        let delay = s.deadline().unwrap() - (now + Duration::from_secs(2));
        assert!(delay <= 100 * MS, "{delay:?}");
    }

    #[test]
    fn refusals() {
        let t0 = Instant::now();
        let mut s = Session::new(SessionConfig::default(), t0, 1, 0);
        s.poll(t0, 1, 0);
        s.connected(t0);
        let actions = s.refused(
            Some(RefusalCode::MaxRelays),
            "daemon busy: 32 relays connected",
            t0,
        );
        assert!(matches!(actions[..], [Action::Close { .. }]));
        assert!(!s.has_exited());
        let retry = s.deadline().unwrap();
        s.poll(retry, 1, 0);
        s.connected(retry);
        // The reason alone decides nothing: a token problem without its code is retried.
        let actions = s.refused(None, "bad token; set --token or TRACESYNC_TOKEN", retry);
        assert!(matches!(actions[..], [Action::Close { .. }]));
        let retry = s.deadline().unwrap();
        s.poll(retry, 1, 0);
        s.connected(retry);
        let actions = s.refused(Some(RefusalCode::BadToken), "bad token; set --token", retry);
        assert!(matches!(actions[..], [Action::Exit { .. }]));
        assert!(s.has_exited());
        assert_eq!(s.poll(retry + Duration::from_secs(60), 1, 0), None);
    }

    #[test]
    fn protocol_violations_close_the_connection() {
        let (mut s, t0) = welcomed(0, 1);
        pump(&mut s, t0, 2, 10);
        assert!(matches!(s.ack(5, t0)[..], [Action::Reject { .. }]));
        let (mut s, t0) = welcomed(0, 1);
        assert!(matches!(
            s.welcome(0, 1, 0, &[], 1, t0)[..],
            [Action::Close { .. }]
        ));
        // A stale ack is ignored.
        let (mut s, t0) = welcomed(4, 1);
        assert!(s.ack(3, t0).is_empty());
    }

    /// Connects a fresh session (spool last seq `spooled_before`) and hands
    /// it a Welcome of `acked`.
    fn welcome_fresh(spooled_before: u64, acked: u64) -> (Session, Vec<Action>, Instant) {
        let t0 = Instant::now();
        let mut s = Session::new(SessionConfig::default(), t0, 9, spooled_before);
        assert_eq!(s.poll(t0, 1, spooled_before), Some(Action::Connect));
        s.connected(t0);
        let actions = s.welcome(acked, 3, 0, &[], 1, t0);
        (s, actions, t0)
    }

    #[test]
    fn a_welcome_beyond_every_batch_sent_or_spooled_is_rejected_and_frees_nothing() {
        for lie in [u64::MAX, u64::MAX - 1, 121, 1 << 40] {
            let (mut s, actions, t0) = welcome_fresh(120, lie);
            let [Action::Reject { reason }] = &actions[..] else {
                panic!("Welcome({lie}): {actions:?}");
            };
            assert!(
                reason.contains(&format!("acknowledges batch {lie}")),
                "{reason}"
            );
            assert!(reason.contains("through batch 120"), "{reason}");
            assert_eq!(s.invalid_welcomes(), 1);
            assert_eq!(s.acked_through(), 0, "nothing acknowledged");
            assert!(!s.is_streaming());
            assert!(!s.has_exited(), "a lying daemon is retried, not obeyed");
            assert_eq!(s.reconnects(), 1);
            // The reconnect is planned: a truthful daemon later resumes it.
            let retry = s.deadline().unwrap();
            assert!(retry > t0 && retry <= t0 + 100 * MS, "{retry:?}");
            assert_eq!(s.poll(retry, 1, 130), Some(Action::Connect));
            s.connected(retry);
            assert_eq!(
                s.welcome(40, 4, 0, &[], 1, retry),
                vec![Action::AckSpool(40)]
            );
            assert_eq!(s.poll(retry, 41, 130), Some(Action::SendBatch(41)));
        }
        // At the limit: everything spooled before this run is acked.
        let (s, actions, _) = welcome_fresh(120, 120);
        assert_eq!(actions, vec![Action::AckSpool(120)]);
        assert_eq!(s.invalid_welcomes(), 0);
        // A new spool: only 0 is true.
        let (_, actions, _) = welcome_fresh(0, 1);
        assert!(
            matches!(actions[..], [Action::Reject { .. }]),
            "{actions:?}"
        );
    }

    #[test]
    fn batch_numbers_at_the_end_of_the_range_never_wrap() {
        // The spool never gets there; the session must still not wrap.
        let (mut s, actions, t0) = welcome_fresh(u64::MAX, u64::MAX);
        assert!(
            matches!(actions[..], [Action::Reject { .. }]),
            "{actions:?}"
        );
        assert_eq!(s.acked_through(), 0);
        let retry = s.deadline().unwrap();
        s.poll(retry, u64::MAX, u64::MAX);
        s.connected(retry);
        assert_eq!(
            s.welcome(u64::MAX - 1, 1, 0, &[], u64::MAX, retry),
            vec![Action::AckSpool(u64::MAX - 1)]
        );
        // u64::MAX is never sent: no seq follows it.
        for _ in 0..3 {
            assert!(!matches!(
                s.poll(retry, u64::MAX, u64::MAX),
                Some(Action::SendBatch(_))
            ));
        }
        assert!(s.ack(u64::MAX - 1, retry + MS).is_empty());
        assert!(retry > t0);
    }

    #[test]
    fn an_ack_beyond_every_batch_sent_is_rejected_and_counted() {
        let (mut s, actions, t0) = welcome_fresh(0, 0);
        assert_eq!(actions, vec![Action::AckSpool(0)]);
        let sent = pump(&mut s, t0, 3, 10);
        assert_eq!(sent.len(), 3);
        // Batch 4 is spooled but was never sent: the daemon cannot have it.
        let actions = s.ack(4, t0);
        let [Action::Reject { reason }] = &actions[..] else {
            panic!("{actions:?}");
        };
        assert!(reason.starts_with("Ack of batch 4"), "{reason}");
        assert_eq!(s.invalid_acks(), 1);
        assert_eq!(s.acked_through(), 0);
        assert!(!s.is_streaming());
        let actions = s.ack(u64::MAX, t0);
        assert!(
            matches!(actions[..], [Action::Close { .. }]),
            "not streaming"
        );
        assert_eq!(s.invalid_acks(), 1);
    }

    #[test]
    fn an_ack_of_a_batch_sent_before_a_reconnect_is_accepted() {
        // Sent 1..=5, reconnected, the Welcome said 2, batch 3 resent: the
        // daemon may still ack 5 (it had it from the first connection).
        let (mut s, _, t0) = welcome_fresh(0, 0);
        pump(&mut s, t0, 5, 10);
        s.connection_lost(t0 + MS);
        let retry = s.deadline().unwrap();
        s.poll(retry, 1, 5);
        s.connected(retry);
        assert_eq!(s.welcome(2, 2, 0, &[], 1, retry), vec![Action::AckSpool(2)]);
        assert_eq!(s.poll(retry, 3, 5), Some(Action::SendBatch(3)));
        s.sent(3, 10, retry);
        assert_eq!(s.ack(5, retry), vec![Action::AckSpool(5)]);
        assert_eq!(s.invalid_acks(), 0);
    }

    #[test]
    fn handshake_times_out() {
        let t0 = Instant::now();
        let mut s = Session::new(SessionConfig::default(), t0, 1, 0);
        s.poll(t0, 1, 0);
        s.connected(t0);
        assert_eq!(s.poll(t0 + Duration::from_secs(9), 1, 0), None);
        assert!(matches!(
            s.poll(t0 + Duration::from_secs(10), 1, 0),
            Some(Action::Close { .. })
        ));
    }
}
