//! What the prober knows and reports of its sessions: a registered
//! session ([`Registration`]), the sessions it follows ([`Registered`]), its
//! counters ([`ProberStats`], [`SessionCounters`]) and each session's sync
//! state as status and metrics show it ([`SessionSync`], [`MachineSync`]).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tracesync_protocol::probe::PROBE_KEY_BYTES;

use super::SyncEstimate;
use super::config::ProberConfig;

/// What the prober needs to know about a registered session.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Registration {
    /// The live core's slot of the relay.
    pub slot: u32,
    /// Perfetto machine id of the relay (0 when the server did not say).
    pub machine_raw_id: u32,
    /// The session's probe key (sent in Welcome.probe_key).
    pub probe_key: [u8; PROBE_KEY_BYTES],
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("slot", &self.slot)
            .field("machine_raw_id", &self.machine_raw_id)
            .finish_non_exhaustive()
    }
}

/// Counters of the prober, readable from the registry (and in the status
/// report's `sync` object).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProberStats {
    pub probes_sent: u64,
    pub registers_accepted: u64,
    pub replies_accepted: u64,
    /// Replies whose timestamps the estimator rejected (reversed, absurd).
    pub replies_rejected: u64,
    /// Datagrams naming a session that is not registered (and that do not
    /// verify as one that ended within the probe timeout).
    pub unknown_session: u64,
    /// Authenticated datagrams of a session that ended within the probe
    /// timeout: replies in flight when its relay left. Not a rejection.
    pub after_end: u64,
    /// Datagrams whose MAC does not check with their session's key
    /// (forged, corrupted, or signed for another session).
    pub bad_mac: u64,
    /// Authenticated replies whose nonce is no outstanding probe of their
    /// session (never sent, or forgotten to keep the table bounded).
    pub nonce_mismatch: u64,
    /// Authenticated replies to a probe already answered.
    pub replayed: u64,
    /// Authenticated registers whose nonce is not above the last accepted.
    pub registers_replayed: u64,
    /// Datagrams that do not decode, or that a daemon never receives (Probe).
    pub malformed: u64,
    /// Outstanding probes forgotten to keep the table bounded.
    pub outstanding_evicted: u64,
    /// Probes not answered within `[sync] probe-timeout-ms` (forgotten).
    pub probe_timeouts: u64,
    /// Clock epochs started after the first (relay suspends).
    pub new_epochs: u64,
    /// Bursts started (first register, new route, new epoch, suspected step).
    pub bursts: u64,
    /// Low-delay samples far outside the estimate (each starts a burst).
    pub suspected_steps: u64,
    /// TCP probe connections accepted / closed for a bad first frame.
    pub tcp_connections: u64,
    pub tcp_refused: u64,
    pub send_errors: u64,
    pub recv_errors: u64,
    /// Samples dropped because the update channel stayed full.
    pub samples_dropped: u64,
}

/// Counters of one probe session (a relay connection), in the status
/// report's per-machine `sync` object and the per-machine metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionCounters {
    /// Probes sent (t1 taken).
    pub probes_sent: u64,
    /// Replies accepted (a sample went to the estimator).
    pub replies: u64,
    /// Replies whose timestamps the estimator rejected.
    pub replies_rejected: u64,
    /// Probes not answered within `[sync] probe-timeout-ms` (forgotten).
    pub timeouts: u64,
    /// Datagrams naming this session whose MAC does not check.
    pub bad_mac: u64,
    /// Authenticated replies to a probe already answered.
    pub replayed: u64,
    /// Authenticated replies to no outstanding probe (never sent, timed
    /// out, or forgotten to keep the table bounded).
    pub nonce_mismatch: u64,
    /// Bursts started (first register, new route, new epoch, suspected step).
    pub bursts: u64,
}

/// Where a session's estimator stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncState {
    /// No estimate yet (the first burst is running, or no reply came).
    #[default]
    Unsynced,
    /// Re-acquiring: a burst is running (new route, new epoch, suspected step).
    Bursting,
    /// Steady probing at the adaptive rate.
    Steady,
}

impl SyncState {
    pub const ALL: [SyncState; 3] = [Self::Unsynced, Self::Bursting, Self::Steady];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsynced => "unsynced",
            Self::Bursting => "bursting",
            Self::Steady => "steady",
        }
    }
}

/// The transport a session's probes take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteKind {
    Udp,
    Tcp,
}

impl RouteKind {
    pub const ALL: [RouteKind; 2] = [Self::Udp, Self::Tcp];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

/// One session as the prober last published it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SessionSync {
    pub session_id: u64,
    pub machine_raw_id: u32,
    pub state: SyncState,
    /// None: the relay has not registered, or its TCP probe connection closed.
    pub route: Option<RouteKind>,
    /// Probes per second now (a burst's rate, or the steady rate with its
    /// follow-ups).
    pub probe_rate_hz: f64,
    pub estimate: Option<SyncEstimate>,
    /// Host BOOTTIME of the last accepted sample (its t4).
    pub last_sample_host_ns: Option<u64>,
    pub counters: SessionCounters,
}

/// A machine's clock sync as `tracesync status` shows it (the `sync`
/// object of a machine); what the live core already reports (offset,
/// drift, bound and RTT at the estimate's reference) is not repeated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MachineSync {
    pub session_id: u64,
    pub state: SyncState,
    /// `udp`, `tcp`, or null while the relay has no probe route.
    pub route: Option<RouteKind>,
    pub probe_rate_hz: f64,
    /// Clock epoch of the estimate (a suspend starts a new one).
    pub epoch: Option<u64>,
    /// Hard bound on the frequency error (ppm).
    pub freq_bound_ppm: Option<f64>,
    /// One standard deviation of the mapping now (ns).
    pub sigma_ns: Option<u64>,
    /// Hard error bound of the mapping now (ns): the bound at the
    /// estimate's reference grown by the frequency bound and wander since.
    pub bound_now_ns: Option<u64>,
    /// Samples the fit used.
    pub samples: Option<u32>,
    /// Time since the last accepted sample (ns).
    pub last_sample_age_ns: Option<u64>,
    pub probes: SessionCounters,
}

impl MachineSync {
    /// The status view of `session` at host BOOTTIME `host_now_ns`.
    pub fn at(session: &SessionSync, host_now_ns: u64) -> Self {
        let estimate = session.estimate;
        // Relay BOOTTIME now: host now plus the offset (an error of the
        // offset's size moves the bound by ppm of it: nothing).
        let relay_now = estimate.map(|e| host_now_ns.saturating_add_signed(e.offset_ns));
        Self {
            session_id: session.session_id,
            state: session.state,
            route: session.route,
            probe_rate_hz: session.probe_rate_hz,
            epoch: estimate.map(|e| e.epoch),
            freq_bound_ppm: estimate.map(|e| e.freq_bound_ppm),
            sigma_ns: estimate.zip(relay_now).map(|(e, r)| e.sigma_at(r)),
            bound_now_ns: estimate.zip(relay_now).map(|(e, r)| e.bound_at(r)),
            samples: estimate.map(|e| e.samples),
            last_sample_age_ns: session
                .last_sample_host_ns
                .map(|t| host_now_ns.saturating_sub(t)),
            probes: session.counters,
        }
    }
}

/// What the prober follows: the registered sessions, and the schedule
/// (`[sync]`, replaced on SIGHUP).
#[derive(Clone, Debug, Default)]
pub struct Registered {
    pub sessions: HashMap<u64, Registration>,
    pub config: Option<ProberConfig>,
}

impl Registered {
    pub fn contains_key(&self, session_id: &u64) -> bool {
        self.sessions.contains_key(session_id)
    }
}

impl FromIterator<(u64, Registration)> for Registered {
    fn from_iter<I: IntoIterator<Item = (u64, Registration)>>(sessions: I) -> Self {
        HashMap::from_iter(sessions).into()
    }
}

impl From<HashMap<u64, Registration>> for Registered {
    fn from(sessions: HashMap<u64, Registration>) -> Self {
        Self {
            sessions,
            config: None,
        }
    }
}
