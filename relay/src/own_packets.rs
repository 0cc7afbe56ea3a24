//! The relay's own packets, on relay sequence 1 (source 0): SystemInfo
//! (uname, machine name, CPUs) at start and every 10 s, and ClockSnapshots
//! of BOOTTIME, MONOTONIC, REALTIME and MONOTONIC_RAW at start, every
//! second, and at once after a suspend (BOOTTIME - MONOTONIC moved by more
//! than 1 ms), so the daemon can convert this machine's clocks from the
//! stream alone.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::clock_ids;
use tracesync_protocol::perfetto::{
    BuiltinClock, ClockSnapshot, SystemInfo, TracePacket, Utsname, clock_snapshot, trace_packet,
};

use crate::clocks::{ClockReading, SharedClock};
use crate::identity::MachineIdentity;
use crate::sequences::RELAY_SEQUENCE_ID;
use crate::source::{Cursor, SourceBatch};

/// Source index of the relay's own packets.
pub const OWN_SOURCE: u16 = 0;

pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(1);
pub const SYSTEM_INFO_INTERVAL: Duration = Duration::from_secs(10);
/// A change of BOOTTIME - MONOTONIC beyond this is a suspend.
pub const SUSPEND_THRESHOLD_NS: i64 = 1_000_000;
/// How often the clocks are looked at (bounds the suspend detection delay).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Which packets are due (sans-IO).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due {
    pub system_info: bool,
    pub clock_snapshot: bool,
}

/// When the next packets are due, on the MONOTONIC clock (which stands
/// still during a suspend: the suspend test catches that case).
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    next_snapshot: Option<u64>,
    next_system_info: Option<u64>,
    snapshot_suspend_offset: i64,
}

impl Schedule {
    pub fn poll(&mut self, now: &ClockReading) -> Due {
        let at = now.monotonic;
        let suspended = self.next_snapshot.is_some()
            && (now.suspend_offset() - self.snapshot_suspend_offset).abs() > SUSPEND_THRESHOLD_NS;
        let due = Due {
            system_info: self.next_system_info.is_none_or(|t| at >= t),
            clock_snapshot: suspended || self.next_snapshot.is_none_or(|t| at >= t),
        };
        if due.system_info {
            self.next_system_info = Some(at + SYSTEM_INFO_INTERVAL.as_nanos() as u64);
        }
        if due.clock_snapshot {
            self.next_snapshot = Some(at + SNAPSHOT_INTERVAL.as_nanos() as u64);
            self.snapshot_suspend_offset = now.suspend_offset();
        }
        due
    }
}

/// What SystemInfo says about this machine (read once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostInfo {
    pub sysname: String,
    pub release: String,
    pub version: String,
    pub machine: String,
    pub num_cpus: u32,
}

impl HostInfo {
    pub fn detect() -> Self {
        let uts = nix::sys::utsname::uname().ok();
        let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uts.as_ref()
                .map(|u| f(u).to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        Self {
            sysname: field(nix::sys::utsname::UtsName::sysname),
            release: field(nix::sys::utsname::UtsName::release),
            version: field(nix::sys::utsname::UtsName::version),
            machine: field(nix::sys::utsname::UtsName::machine),
            num_cpus: num_cpus(),
        }
    }
}

/// CPUs configured (not just this process's affinity), like Perfetto.
fn num_cpus() -> u32 {
    let configured = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
        .ok()
        .flatten()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0);
    configured.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}

fn on_relay_sequence(timestamp: u64, data: trace_packet::Data) -> Bytes {
    let packet = TracePacket {
        timestamp: Some(timestamp),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                RELAY_SEQUENCE_ID,
            ),
        ),
        data: Some(data),
        ..Default::default()
    };
    Bytes::from(packet.encode_to_vec())
}

/// The SystemInfo packet.
pub fn system_info_packet(
    identity: &MachineIdentity,
    host: &HostInfo,
    now: &ClockReading,
) -> Bytes {
    let info = SystemInfo {
        utsname: Some(Utsname {
            sysname: Some(host.sysname.clone()),
            version: Some(host.version.clone()),
            release: Some(host.release.clone()),
            machine: Some(host.machine.clone()),
        }),
        num_cpus: Some(host.num_cpus),
        machine_name: Some(identity.machine_name.clone()),
        ..Default::default()
    };
    on_relay_sequence(now.boottime, trace_packet::Data::SystemInfo(info))
}

/// The ClockSnapshot packet of one reading (primary trace clock BOOTTIME).
pub fn clock_snapshot_packet(now: &ClockReading) -> Bytes {
    let clock = |clock_id, timestamp| clock_snapshot::Clock {
        clock_id: Some(clock_id),
        timestamp: Some(timestamp),
        ..Default::default()
    };
    let snapshot = ClockSnapshot {
        clocks: vec![
            clock(clock_ids::BOOTTIME, now.boottime),
            clock(clock_ids::MONOTONIC, now.monotonic),
            clock(clock_ids::REALTIME, now.realtime),
            clock(clock_ids::MONOTONIC_RAW, now.monotonic_raw),
        ],
        primary_trace_clock: Some(BuiltinClock::Boottime as i32),
    };
    on_relay_sequence(now.boottime, trace_packet::Data::ClockSnapshot(snapshot))
}

/// Emits the relay's own packets on source 0 until `shutdown` or until the
/// spool's receiver is gone.
pub fn spawn(
    clock: SharedClock,
    identity: MachineIdentity,
    tx: mpsc::Sender<SourceBatch>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let host = HostInfo::detect();
        let mut schedule = Schedule::default();
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let now = clock.now();
            let due = schedule.poll(&now);
            let mut packets = Vec::with_capacity(2);
            if due.system_info {
                packets.push(system_info_packet(&identity, &host, &now));
            }
            if due.clock_snapshot {
                packets.push(clock_snapshot_packet(&now));
            }
            if packets.is_empty() {
                continue;
            }
            let batch = SourceBatch {
                source: OWN_SOURCE,
                packets,
                cursor: Cursor::None,
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                sent = tx.send(batch) => if sent.is_err() { return },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::clocks::Clock;

    const SEC: u64 = 1_000_000_000;

    fn reading(monotonic: u64, suspended: u64) -> ClockReading {
        ClockReading {
            boottime: monotonic + suspended,
            monotonic,
            realtime: monotonic + 1_700_000_000 * SEC,
            monotonic_raw: monotonic - 5,
        }
    }

    #[test]
    fn schedule_periods_and_suspend() {
        let mut s = Schedule::default();
        let both = Due {
            system_info: true,
            clock_snapshot: true,
        };
        let snapshot = Due {
            system_info: false,
            clock_snapshot: true,
        };
        assert_eq!(s.poll(&reading(100 * SEC, 0)), both);
        assert_eq!(s.poll(&reading(100 * SEC + SEC / 2, 0)), Due::default());
        assert_eq!(s.poll(&reading(101 * SEC, 0)), snapshot);
        // Jitter under 1 ms is not a suspend.
        assert_eq!(s.poll(&reading(101 * SEC + 100, 900_000)), Due::default());
        // A 5 s suspend: MONOTONIC barely moved, BOOTTIME jumped.
        assert_eq!(s.poll(&reading(101 * SEC + 200, 5 * SEC)), snapshot);
        assert_eq!(s.poll(&reading(101 * SEC + 300, 5 * SEC)), Due::default());
        assert_eq!(s.poll(&reading(110 * SEC, 5 * SEC)), both);
    }

    fn identity() -> MachineIdentity {
        MachineIdentity::from_parts("b00t".into(), "host", Some("phone"))
    }

    #[test]
    fn packets_decode_to_what_perfetto_expects() {
        let now = reading(50 * SEC, 2 * SEC);
        let host = HostInfo {
            sysname: "Linux".into(),
            release: "6.1.0".into(),
            version: "#1 SMP".into(),
            machine: "x86_64".into(),
            num_cpus: 8,
        };
        let p = TracePacket::decode(system_info_packet(&identity(), &host, &now)).unwrap();
        assert_eq!(p.timestamp, Some(now.boottime));
        assert_eq!(
            p.optional_trusted_packet_sequence_id,
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(1))
        );
        let Some(trace_packet::Data::SystemInfo(info)) = p.data else {
            panic!("not a SystemInfo");
        };
        assert_eq!(info.machine_name.as_deref(), Some("phone"));
        assert_eq!(info.num_cpus, Some(8));
        let uts = info.utsname.unwrap();
        assert_eq!(uts.sysname.as_deref(), Some("Linux"));
        assert_eq!(uts.release.as_deref(), Some("6.1.0"));
        assert_eq!(uts.machine.as_deref(), Some("x86_64"));

        let p = TracePacket::decode(clock_snapshot_packet(&now)).unwrap();
        let Some(trace_packet::Data::ClockSnapshot(s)) = p.data else {
            panic!("not a ClockSnapshot");
        };
        assert_eq!(s.primary_trace_clock, Some(BuiltinClock::Boottime as i32));
        let clocks: Vec<_> = s
            .clocks
            .iter()
            .map(|c| (c.clock_id.unwrap(), c.timestamp.unwrap()))
            .collect();
        assert_eq!(
            clocks,
            [
                (clock_ids::BOOTTIME, now.boottime),
                (clock_ids::MONOTONIC, now.monotonic),
                (clock_ids::REALTIME, now.realtime),
                (clock_ids::MONOTONIC_RAW, now.monotonic_raw),
            ]
        );
    }

    #[test]
    fn detects_this_host() {
        let host = HostInfo::detect();
        assert!(!host.sysname.is_empty() && !host.machine.is_empty());
        assert!(host.num_cpus >= 1);
    }

    /// A clock the test moves by hand.
    struct HandClock(Mutex<ClockReading>);

    impl Clock for HandClock {
        fn now(&self) -> ClockReading {
            *self.0.lock().unwrap()
        }
        fn truth_host_boottime(&self, boottime: u64) -> u64 {
            boottime
        }
    }

    fn kinds(batch: &SourceBatch) -> Vec<&'static str> {
        batch
            .packets
            .iter()
            .map(|p| match TracePacket::decode(p.clone()).unwrap().data {
                Some(trace_packet::Data::SystemInfo(_)) => "system_info",
                Some(trace_packet::Data::ClockSnapshot(_)) => "clock_snapshot",
                _ => "other",
            })
            .collect()
    }

    #[tokio::test]
    async fn task_snapshots_at_start_and_at_once_after_a_suspend() {
        let clock = Arc::new(HandClock(Mutex::new(reading(10 * SEC, 0))));
        let (tx, mut rx) = mpsc::channel(8);
        let shutdown = CancellationToken::new();
        let task = spawn(clock.clone(), identity(), tx, shutdown.clone());
        let first = rx.recv().await.unwrap();
        assert_eq!(first.source, OWN_SOURCE);
        assert_eq!(first.cursor, Cursor::None);
        assert_eq!(kinds(&first), ["system_info", "clock_snapshot"]);
        // The hand clock stands still: nothing until it is moved.
        *clock.0.lock().unwrap() = reading(10 * SEC + 1000, 3 * SEC);
        let started = std::time::Instant::now();
        let next = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kinds(&next), ["clock_snapshot"]);
        assert!(started.elapsed() < Duration::from_millis(600));
        shutdown.cancel();
        task.await.unwrap();
    }
}
