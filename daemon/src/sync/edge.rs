//! The prober's tokio edge: one task owns the daemon's UDP sync socket,
//! stamps t1 right before each send and t4 right after each receive, and
//! hands updates to the ingest loop without ever waiting on it.

use std::collections::HashMap;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::MAX_PROBE_DATAGRAM_BYTES;

use super::{ProbeDue, ProbeSessions, ProberConfig, ProberCore, SyncUpdate};
use crate::hostclock::boottime_ns;

/// Receive buffer asked for: bursts from many relays must not be dropped
/// while the task is busy.
const RECV_BUFFER_BYTES: usize = 1 << 20;

/// Longest sleep between registry checks (a newly registered session waits
/// at most this for its first ProbeRegister to be answered).
const IDLE_TICK: Duration = Duration::from_millis(50);

/// Retry interval for updates the ingest loop had no room for.
const RETRY_TICK: Duration = Duration::from_millis(10);

/// Samples held per session while the update channel is full.
const MAX_HELD_SAMPLES: usize = 1024;

/// Starts the prober on `socket` (bound by the server) with the default
/// schedule. It stops on `shutdown` or when `updates` is closed.
pub fn spawn_prober(
    socket: UdpSocket,
    sessions: ProbeSessions,
    updates: mpsc::Sender<SyncUpdate>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    spawn_prober_with(socket, sessions, updates, shutdown, ProberConfig::default())
}

/// As [`spawn_prober`] with an explicit schedule and estimator tuning.
pub fn spawn_prober_with(
    socket: UdpSocket,
    sessions: ProbeSessions,
    updates: mpsc::Sender<SyncUpdate>,
    shutdown: CancellationToken,
    config: ProberConfig,
) -> JoinHandle<()> {
    tokio::spawn(run(socket, sessions, updates, shutdown, config))
}

async fn run(
    socket: UdpSocket,
    sessions: ProbeSessions,
    updates: mpsc::Sender<SyncUpdate>,
    shutdown: CancellationToken,
    config: ProberConfig,
) {
    if let Err(error) = socket2::SockRef::from(&socket).set_recv_buffer_size(RECV_BUFFER_BYTES) {
        tracing::debug!(%error, "sync socket: could not raise the receive buffer; keeping the default");
    }
    let mut core = ProberCore::new(config);
    let mut held = HeldUpdates::default();
    let mut seen_generation = 0;
    let mut due: Vec<ProbeDue> = Vec::new();
    // One byte more than the limit: a truncated read shows as oversized.
    let mut buffer = [0u8; MAX_PROBE_DATAGRAM_BYTES + 1];
    loop {
        if let Some((generation, registered)) = sessions.changed_since(seen_generation) {
            seen_generation = generation;
            held.retain_sessions(|id| registered.contains_key(&id));
            core.set_registered(registered);
        }
        send_due_probes(&socket, &mut core, &mut due);
        if held.flush(&updates).is_err() {
            tracing::debug!("sync: update channel closed; prober stops");
            break;
        }
        core.stats_mut().samples_dropped = held.samples_dropped;
        sessions.publish_stats(core.stats());

        let now = boottime_ns();
        let mut sleep = core
            .next_wakeup_ns()
            .map_or(IDLE_TICK, |at| Duration::from_nanos(at.saturating_sub(now)))
            .min(IDLE_TICK);
        if !held.is_empty() {
            sleep = sleep.min(RETRY_TICK);
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            received = socket.recv_from(&mut buffer) => {
                let t4 = boottime_ns();
                match received {
                    Ok((length, from)) => {
                        let bytes = buffer.get(..length).unwrap_or_default();
                        if let Some(update) = core.on_datagram(bytes, from, t4) {
                            held.push(update);
                        }
                    }
                    Err(error) => {
                        let errors = &mut core.stats_mut().recv_errors;
                        *errors += 1;
                        if errors.is_power_of_two() {
                            tracing::warn!(%error, count = *errors, "sync socket: receive failed; probes continue");
                        }
                    }
                }
            }
            () = tokio::time::sleep(sleep) => {}
        }
    }
    sessions.publish_stats(core.stats());
}

fn send_due_probes(socket: &UdpSocket, core: &mut ProberCore, due: &mut Vec<ProbeDue>) {
    due.clear();
    core.poll(boottime_ns(), due);
    for probe in due.iter() {
        let t1 = boottime_ns();
        let Some(datagram) = core.probe_datagram(probe.session_id, t1) else {
            continue;
        };
        // try_send_to: a UDP socket is writable nearly always, and waiting
        // here would put the wait between t1 and the wire.
        if let Err(error) = socket.try_send_to(&datagram, probe.addr) {
            let errors = &mut core.stats_mut().send_errors;
            *errors += 1;
            if errors.is_power_of_two() {
                tracing::warn!(%error, peer = %probe.addr, count = *errors, "sync socket: probe send failed; check the relay's reachability");
            }
        }
    }
}

/// Updates waiting for room in the channel, merged per session: the latest
/// estimate and every sample since the last delivered update (bounded).
#[derive(Debug, Default)]
struct HeldUpdates {
    by_session: HashMap<u64, SyncUpdate>,
    samples_dropped: u64,
}

struct ChannelClosed;

impl HeldUpdates {
    fn is_empty(&self) -> bool {
        self.by_session.is_empty()
    }

    fn push(&mut self, update: SyncUpdate) {
        match self.by_session.get_mut(&update.session_id) {
            Some(held) => {
                held.slot = update.slot;
                held.estimate = update.estimate;
                held.samples.extend(update.samples);
                let excess = held.samples.len().saturating_sub(MAX_HELD_SAMPLES);
                if excess > 0 {
                    held.samples.drain(..excess);
                    self.samples_dropped += excess as u64;
                }
            }
            None => {
                self.by_session.insert(update.session_id, update);
            }
        }
    }

    fn retain_sessions(&mut self, keep: impl Fn(u64) -> bool) {
        self.by_session.retain(|id, _| keep(*id));
    }

    fn flush(&mut self, updates: &mpsc::Sender<SyncUpdate>) -> Result<(), ChannelClosed> {
        let sessions: Vec<u64> = self.by_session.keys().copied().collect();
        for session_id in sessions {
            let Some(update) = self.by_session.remove(&session_id) else {
                continue;
            };
            match updates.try_send(update) {
                Ok(()) => {}
                Err(TrySendError::Full(update)) => {
                    self.by_session.insert(session_id, update);
                }
                Err(TrySendError::Closed(_)) => return Err(ChannelClosed),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{ProbeSample, SyncEstimate};

    fn update(session_id: u64, offset_ns: i64, samples: usize) -> SyncUpdate {
        SyncUpdate {
            slot: 1,
            session_id,
            estimate: SyncEstimate {
                offset_ns,
                ..SyncEstimate::default()
            },
            samples: vec![ProbeSample::default(); samples],
        }
    }

    #[tokio::test]
    async fn held_updates_merge_while_the_channel_is_full() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut held = HeldUpdates::default();
        held.push(update(5, 1, 1));
        assert!(held.flush(&tx).is_ok());
        held.push(update(5, 2, 1000));
        held.push(update(5, 3, 100));
        assert!(held.flush(&tx).is_ok(), "full is not an error");
        assert_eq!(held.samples_dropped, 76);
        assert_eq!(rx.recv().await.map(|u| u.estimate.offset_ns), Some(1));
        assert!(held.flush(&tx).is_ok());
        let merged = rx.recv().await.expect("merged update");
        assert_eq!(merged.estimate.offset_ns, 3);
        assert_eq!(merged.samples.len(), MAX_HELD_SAMPLES);
        assert!(held.is_empty());
        drop(rx);
        held.push(update(5, 4, 1));
        assert!(held.flush(&tx).is_err());
    }
}
