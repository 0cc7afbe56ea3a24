//! The feeder's loop: the relay's sans-IO [`Session`] driven against an
//! in-memory window of batches instead of a spool, on the relay's
//! [`Connection`].

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::v1::{self, frame::Body};
use tracesync_protocol::relay::{PROTOCOL_VERSION, RefusalCode};
use tracesync_protocol::wire::{self, WireType};
use tracesync_relay::clocks::{SharedClock, SystemClock};
use tracesync_relay::identity::MachineIdentity;
use tracesync_relay::own_packets::{self, HostInfo, Schedule};
use tracesync_relay::probe::{ProbeTarget, SyncConfig, run_probe_responder};
use tracesync_relay::sequences::FIRST_SOURCE_SEQUENCE_ID;
use tracesync_relay::session::{Action, Session, SessionConfig};
use tracesync_relay::tls::ClientTls;
use tracesync_relay::uplink::{Connection, ConnectionEvent, OutFrame, link_drained, next_event};

use super::batch::Template;

/// What one feeder does.
#[derive(Clone, Debug)]
pub struct FeederConfig {
    /// Daemon address, HOST:PORT.
    pub host: String,
    /// Machine name (with mutual TLS, the certificate's name).
    pub name: String,
    pub token: String,
    /// Mutual TLS (None: plaintext).
    pub tls: Option<ClientTls>,
    /// TrackEvents per batch.
    pub batch_packets: usize,
    /// Relay sequences the TrackEvents are spread over.
    pub sequences: u32,
    /// How long to send (None: until stopped).
    pub run_for: Option<Duration>,
    /// After sending stops, how long to wait for the last acks.
    pub drain_timeout: Duration,
}

/// What a run did, printed as one `key=value` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The identity source of the TrackEvents (`<name>/1`).
    pub src: String,
    pub batches: u64,
    /// Packets made, the relay's own ones included.
    pub packets: u64,
    /// TrackEvents made: counters 0 .. this were sent.
    pub identities: u64,
    /// TrackEvents acknowledged: counters 0 .. this are durable in the
    /// daemon's output.
    pub acked_identities: u64,
    pub reconnects: u64,
    /// Everything made was acknowledged before the drain timeout.
    pub drained: bool,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "feeder src={} batches={} packets={} identities={} acked_identities={} reconnects={} \
             drained={}",
            self.src,
            self.batches,
            self.packets,
            self.identities,
            self.acked_identities,
            self.reconnects,
            self.drained
        )
    }
}

/// A batch sent and not yet acknowledged.
struct Kept {
    seq: u64,
    first_index: u64,
    wire: Bytes,
    /// Counters of its TrackEvents end before this.
    n_end: u64,
}

/// Runs until `stop` is cancelled or `run_for` passed, then waits for the
/// acks; Err with the daemon's reason if it refused the feeder for good.
pub async fn run(config: FeederConfig, stop: CancellationToken) -> Result<Summary, String> {
    let clock: SharedClock = Arc::new(SystemClock::new());
    let identity = MachineIdentity::detect(Some(&config.name));
    let sequences: Vec<u32> = (0..config.sequences.max(1))
        .map(|k| FIRST_SOURCE_SEQUENCE_ID + k)
        .collect();
    let src = format!("{}/1", config.name);
    let template = Template::new(&src, config.batch_packets.max(1), &sequences);
    let instance_id = random_instance_id(clock.boottime());
    let start = now();
    let mut feeder = Feeder {
        session: Session::new(SessionConfig::default(), start, instance_id, 0),
        instance_id,
        last_ts: clock.boottime(),
        clock,
        identity,
        host: HostInfo::detect(),
        schedule: Schedule::default(),
        template,
        connection: None,
        peer: None,
        kept: VecDeque::new(),
        made: 0,
        next_index: 0,
        next_n: 0,
        acked_n: 0,
        packets: 0,
        sending: true,
        refusal: None,
        config,
    };
    let stop_at = feeder.config.run_for.map(|d| start + d);
    let mut drain_until: Option<Instant> = None;
    loop {
        let now = now();
        if drain_until.is_none() && (stop.is_cancelled() || stop_at.is_some_and(|t| now >= t)) {
            feeder.sending = false;
            drain_until = Some(now + feeder.config.drain_timeout);
        }
        feeder.drive(now);
        if let Some(reason) = feeder.refusal.take() {
            return Err(reason);
        }
        let drained = feeder.session.acked_through() >= feeder.made;
        if let Some(until) = drain_until
            && (drained || now >= until)
        {
            return Ok(feeder.summary(drained));
        }
        let deadline = [feeder.session.deadline(), stop_at, drain_until]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(1))
            .max(now + Duration::from_millis(1));
        let written = feeder
            .connection
            .as_ref()
            .filter(|c| c.is_full())
            .map(Connection::written);
        tokio::select! {
            () = stop.cancelled(), if drain_until.is_none() => {}
            event = next_event(&mut feeder.connection) => feeder.on_event(event, now),
            () = link_drained(written.as_ref()) => {}
            () = tokio::time::sleep_until(deadline.into()) => {}
        }
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A fresh relay instance id per run (from the OS, else the clock).
fn random_instance_id(fallback: u64) -> u64 {
    let mut bytes = [0u8; 8];
    let from_os = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    match from_os {
        Ok(()) => u64::from_le_bytes(bytes) | 1,
        Err(_) => fallback ^ (u64::from(std::process::id()) << 32) | 1,
    }
}

struct Feeder {
    config: FeederConfig,
    clock: SharedClock,
    identity: MachineIdentity,
    host: HostInfo,
    schedule: Schedule,
    template: Template,
    instance_id: u64,
    session: Session,
    connection: Option<Connection>,
    peer: Option<SocketAddr>,
    /// Batches sent and not acknowledged, oldest first.
    kept: VecDeque<Kept>,
    /// The last batch made.
    made: u64,
    next_index: u64,
    next_n: u64,
    acked_n: u64,
    packets: u64,
    /// The last TrackEvent's timestamp.
    last_ts: u64,
    /// New batches are made (false once stopping).
    sending: bool,
    refusal: Option<String>,
}

impl Feeder {
    fn summary(&self, drained: bool) -> Summary {
        Summary {
            src: format!("{}/1", self.config.name),
            batches: self.made,
            packets: self.packets,
            identities: self.next_n,
            acked_identities: self.acked_n,
            reconnects: self.session.reconnects(),
            drained,
        }
    }

    /// Executes what the session wants until it wants nothing more now.
    /// One batch beyond the last made is offered while sending: the session
    /// asks for it exactly when its window and the link have room.
    fn drive(&mut self, now: Instant) {
        loop {
            let full = self.connection.as_ref().is_some_and(Connection::is_full);
            self.session.set_link_full(full);
            let oldest = self.kept.front().map_or(self.made + 1, |k| k.seq);
            // A closed connection takes no frame until its Lost event is
            // read: offering a new batch then would make one per turn of
            // this loop, forever (the session moves past a batch it asked
            // for whether or not it went out).
            let closed = self.connection.as_ref().is_some_and(Connection::is_closed);
            let last = self.made + u64::from(self.sending && !closed);
            let Some(action) = self.session.poll(now, oldest, last) else {
                break;
            };
            self.execute(action, now);
        }
    }

    fn execute(&mut self, action: Action, now: Instant) {
        match action {
            Action::Connect => {
                let queue = SessionConfig::default().window_batches + 8;
                self.connection = Some(Connection::open(
                    self.config.host.clone(),
                    Duration::from_secs(5),
                    self.config.tls.clone(),
                    queue,
                ));
                self.peer = None;
            }
            Action::SendHello => {
                let oldest = self.kept.front().map_or(self.made + 1, |k| k.seq);
                let hello = Body::Hello(v1::Hello {
                    protocol_version: PROTOCOL_VERSION,
                    token: self.config.token.clone(),
                    relay_instance_id: self.instance_id,
                    boot_id: self.identity.boot_id.clone(),
                    machine_name: self.identity.machine_name.clone(),
                    machine_raw_id: self.identity.raw_id,
                    oldest_unacked_batch: oldest,
                    clocks: Some(self.clocks()),
                    mode: "stream".into(),
                });
                self.send(OutFrame::encode(&frame(hello)), now);
            }
            Action::SendBatch(seq) => self.send_batch(seq, now),
            Action::SendHeartbeat { last_batch_sent } => {
                let heartbeat = Body::Heartbeat(v1::Heartbeat {
                    clocks: Some(self.clocks()),
                    last_batch_sent,
                    sources: vec![v1::SourceState {
                        spec: "feeder".into(),
                        state: "reading".into(),
                        detail: String::new(),
                    }],
                    ring: None,
                });
                // A full queue says the link is busy, as a heartbeat would.
                if let (Some(connection), Ok(out)) =
                    (&self.connection, OutFrame::encode(&frame(heartbeat)))
                {
                    connection.send(out);
                }
            }
            Action::AckSpool(through) => {
                while let Some(kept) = self.kept.front().filter(|k| k.seq <= through) {
                    self.acked_n = self.acked_n.max(kept.n_end);
                    self.kept.pop_front();
                }
            }
            Action::StartProbe {
                session_id,
                sync_udp_port,
                probe_key,
            } => {
                if let (Some(connection), Some(peer)) = (&self.connection, self.peer) {
                    let target = ProbeTarget {
                        daemon: SocketAddr::new(peer.ip(), sync_udp_port),
                        session_id,
                        probe_key,
                    };
                    tokio::spawn(run_probe_responder(
                        self.clock.clone(),
                        target,
                        SyncConfig::default(),
                        connection.token.child_token(),
                    ));
                }
            }
            Action::Close { reason } | Action::Reject { reason } => {
                if !reason.is_empty() {
                    eprintln!("daemon {}: {reason}; reconnecting", self.config.host);
                }
                self.connection = None;
            }
            Action::Exit { reason } => {
                self.connection = None;
                self.refusal = Some(reason);
            }
        }
    }

    /// Sends batch `seq`: the one after the last made is made now, an
    /// older one is resent from memory (gone if acknowledged meanwhile).
    fn send_batch(&mut self, seq: u64, now: Instant) {
        if seq > self.made {
            let Some(kept) = self.make(seq) else {
                // Counters exhausted: nothing more to send.
                self.sending = false;
                self.session.sent(seq, 0, now);
                return;
            };
            self.kept.push_back(kept);
        }
        let Some(kept) = self.kept.iter().find(|k| k.seq == seq) else {
            self.session.sent(seq, 0, now);
            return;
        };
        let bytes = kept.wire.len();
        let out = OutFrame::batch(seq, kept.first_index, kept.wire.clone(), &self.clocks());
        if self.send(out, now) {
            self.session.sent(seq, bytes, now);
        }
    }

    /// Batch `seq` (the next): the relay's own packets when due, else a
    /// batch of the template with timestamps up to now.
    fn make(&mut self, seq: u64) -> Option<Kept> {
        let reading = self.clock.now();
        let due = self.schedule.poll(&reading);
        let mut own = Vec::new();
        if due.system_info {
            own.push(own_packets::system_info_packet(
                &self.identity,
                &self.host,
                &reading,
            ));
        }
        if due.clock_snapshot {
            own.push(own_packets::clock_snapshot_packet(&reading));
        }
        let (wire, count) = if own.is_empty() {
            let made = self
                .template
                .make(self.next_n, self.last_ts, reading.boottime)?;
            self.last_ts = made.last_ts;
            self.next_n += made.packets;
            (made.wire, made.packets)
        } else {
            let mut wire = Vec::new();
            for packet in &own {
                wire::put_tag(&mut wire, 3, WireType::Len);
                wire::put_varint(&mut wire, packet.len() as u64);
                wire.extend_from_slice(packet);
            }
            (Bytes::from(wire), own.len() as u64)
        };
        let kept = Kept {
            seq,
            first_index: self.next_index,
            wire,
            n_end: self.next_n,
        };
        self.made = seq;
        self.next_index += count;
        self.packets += count;
        Some(kept)
    }

    /// Queues a frame; a frame that cannot be queued loses the connection
    /// (a closed one reports why itself).
    fn send(&mut self, out: std::io::Result<OutFrame>, now: Instant) -> bool {
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                eprintln!("daemon {}: cannot send: {e}", self.config.host);
                self.connection = None;
                self.session.connection_lost(now);
                return false;
            }
        };
        let sent = self.connection.as_ref().is_some_and(|c| c.send(out));
        if !sent && !self.connection.as_ref().is_some_and(Connection::is_closed) {
            self.connection = None;
            self.session.connection_lost(now);
        }
        sent
    }

    fn on_event(&mut self, event: ConnectionEvent, now: Instant) {
        let actions = match event {
            ConnectionEvent::Connected { peer } => {
                self.peer = Some(peer);
                self.session.connected(now)
            }
            ConnectionEvent::Unreachable { reason } | ConnectionEvent::Lost { reason, .. } => {
                eprintln!("{reason}; reconnecting");
                self.connection = None;
                self.session.connection_lost(now);
                Vec::new()
            }
            ConnectionEvent::Frame(frame) => match frame.body {
                Some(Body::Welcome(welcome)) => {
                    let oldest = self.kept.front().map_or(self.made + 1, |k| k.seq);
                    self.session.welcome(
                        welcome.acked_through_batch,
                        welcome.session_id,
                        welcome.sync_udp_port,
                        &welcome.probe_key,
                        oldest,
                        now,
                    )
                }
                Some(Body::Refused(refused)) => {
                    self.session
                        .refused(RefusalCode::parse(&refused.code), &refused.reason, now)
                }
                Some(Body::Ack(ack)) => self.session.ack(ack.through_batch, now),
                _ => {
                    eprintln!(
                        "daemon {} sent a frame only relays send; reconnecting",
                        self.config.host
                    );
                    self.connection = None;
                    self.session.connection_lost(now);
                    Vec::new()
                }
            },
        };
        for action in actions {
            self.execute(action, now);
        }
    }

    fn clocks(&self) -> v1::RelayClocks {
        let now = self.clock.now();
        v1::RelayClocks {
            boottime_ns: now.boottime,
            monotonic_ns: now.monotonic,
            realtime_ns: now.realtime,
            monotonic_raw_ns: now.monotonic_raw,
        }
    }
}

fn frame(body: Body) -> v1::Frame {
    v1::Frame { body: Some(body) }
}
