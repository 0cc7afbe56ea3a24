//! The writer against real files in a temporary directory.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{
    ClockSnapshot, EventName, InternedData, RemoteClockSync, SystemInfo, TracePacket, TrackEvent,
    clock_snapshot,
};
use tracesync_protocol::reader::TraceFile;
use tracesync_protocol::scan;

use super::current::write_from;
use super::*;
use tracesync_capture::sidecar::{ProbeSample, SIDECAR_SUFFIX, parse_line};
use tracesync_core::live::{Origin, OutPacket, Role};

mod disk_failures;
mod links;
mod modes;
mod output_dir;
mod recovery;

const T0: u64 = 1_700_000_000;

/// What a file that is not the writer's holds (it must stay so).
const PRECIOUS: &[u8] = b"not the daemon's\n";

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

fn config(dir: &Path) -> RollingConfig {
    RollingConfig {
        retain_age: Duration::ZERO,
        ..RollingConfig::new(dir)
    }
}

fn on(machine: u32, seq: u32, mut p: TracePacket) -> TracePacket {
    p.machine_id = (machine != 0).then_some(machine);
    p.optional_trusted_packet_sequence_id = Some(
        OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
    );
    p
}

/// An OutPacket as the live core makes it, role by the shared rule.
fn out(ts: i64, machine: u32, seq: u32, p: TracePacket, origin: Option<Origin>) -> OutPacket {
    let bytes = Bytes::from(on(machine, seq, p).encode_to_vec());
    let role = role_of(&scan::scan_packet(&bytes).expect("valid packet"));
    OutPacket {
        ts,
        machine_raw_id: machine,
        machine_name: (machine != 0).then(|| Arc::from(format!("m{machine}"))),
        seq,
        clock: 6,
        clock_ts: ts as u64,
        err_ns: 0,
        data_field: None,
        src: Arc::from("test"),
        role,
        origin,
        bytes: bytes.into(),
    }
}

fn system_info(machine: u32) -> OutPacket {
    let info = SystemInfo {
        machine_name: Some(format!("m{machine}")),
        ..Default::default()
    };
    out(0, machine, 1, data(Data::SystemInfo(info)), None)
}

fn snapshot(machine: u32, ts: u64) -> OutPacket {
    let clock = |id, t| clock_snapshot::Clock {
        clock_id: Some(id),
        timestamp: Some(t),
        ..Default::default()
    };
    let snap = ClockSnapshot {
        clocks: vec![clock(6, ts), clock(3, ts / 2)],
        primary_trace_clock: None,
    };
    out(ts as i64, machine, 1, data(Data::ClockSnapshot(snap)), None)
}

fn sync_point(machine: u32) -> OutPacket {
    let p = data(Data::RemoteClockSync(RemoteClockSync::default()));
    out(0, machine, 1, p, None)
}

fn data(d: Data) -> TracePacket {
    TracePacket {
        data: Some(d),
        ..Default::default()
    }
}

/// A track event on `seq` of relay instance `machine`, `index` its Origin
/// index; `flags` 1 clears the state and interns a name, 2 needs it.
fn event(machine: u32, seq: u32, index: u64, flags: u32) -> OutPacket {
    let p = TracePacket {
        timestamp: Some(1000 + index),
        sequence_flags: Some(flags),
        interned_data: (flags & 1 != 0).then(|| InternedData {
            event_names: vec![EventName {
                iid: Some(1),
                name: Some(format!("name-{seq}")),
            }],
        }),
        data: Some(Data::TrackEvent(TrackEvent {
            track_uuid: Some(u64::from(seq)),
            ..Default::default()
        })),
        ..Default::default()
    };
    let origin = Origin {
        relay_instance: u64::from(machine) * 100,
        relay_sequence: seq,
        index,
    };
    out(1000 + index as i64, machine, seq, p, Some(origin))
}

fn read_packets(path: &Path) -> Vec<TracePacket> {
    let mut f = TraceFile::new(std::fs::File::open(path).expect("open")).expect("trace");
    let mut out = Vec::new();
    while let Some(p) = f.next_packet().expect("file decodes") {
        out.push(TracePacket::decode(p.bytes).expect("packet decodes"));
    }
    out
}

fn role(p: &TracePacket) -> Role {
    role_of(&scan::scan_packet(&p.encode_to_vec()).expect("scans"))
}

fn seq_of(p: &TracePacket) -> u32 {
    match p.optional_trusted_packet_sequence_id {
        Some(OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(s)) => s,
        _ => 0,
    }
}

fn rolled_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pftrace"))
        .collect();
    v.sort();
    v
}

/// Writes the machine-level packets, then `n` events over sequences 2 and 3
/// of machine 5 and sequence 4 of the host, clearing every 50 packets.
fn write_mixed(w: &mut RollingWriter, n: u64, now: impl Fn(u64) -> SystemTime) {
    for p in [
        system_info(0),
        system_info(5),
        snapshot(0, 10),
        snapshot(5, 20),
    ] {
        w.write(&p, now(0)).expect("write");
    }
    w.write(&sync_point(5), now(0)).expect("write");
    for i in 0..n {
        let (machine, seq) = [(5, 2), (5, 3), (0, 4)][(i % 3) as usize];
        let flags = if i / 3 % 50 == 0 { 1 } else { 2 };
        w.write(&event(machine, seq, i, flags), now(i))
            .expect("write");
        if i % 40 == 0 {
            w.write(&snapshot(5, 20 + i), now(i)).expect("write");
        }
    }
}

/// Every file opens alone: machine packets first, and the state of every
/// sequence before any of its packets.
fn assert_self_contained(path: &Path, first_file: bool) {
    let packets = read_packets(path);
    assert!(!packets.is_empty(), "{}", path.display());
    let roles: Vec<Role> = packets.iter().map(role).collect();
    if !first_file {
        let want_head = [Role::SystemInfo, Role::SystemInfo, Role::ClockSnapshot];
        assert_eq!(roles[..3], want_head, "{}", path.display());
        let preamble_end = roles
            .iter()
            .position(|r| *r == Role::Data)
            .expect("data after the preamble");
        let rank = |r: &Role| match r {
            Role::SystemInfo => 0,
            Role::ClockSnapshot => 1,
            Role::SyncPoint => 2,
            _ => 3,
        };
        assert!(
            roles[..preamble_end].is_sorted_by_key(rank),
            "{}: {roles:?}",
            path.display()
        );
        assert!(roles[..preamble_end].contains(&Role::SyncPoint));
    }
    let mut cleared = std::collections::HashSet::new();
    for (p, r) in packets.iter().zip(&roles) {
        let seq = seq_of(p);
        if *r == Role::IncrementalStateCleared {
            cleared.insert(seq);
        }
        if p.sequence_flags == Some(2) {
            assert!(
                cleared.contains(&seq),
                "{}: sequence {seq} used before its state",
                path.display()
            );
        }
    }
}

#[test]
fn rotation_by_size_makes_self_contained_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_bytes: 2000,
        ..config(dir.path())
    };
    let (mut w, recovered) = RollingWriter::open_at(cfg, at(0)).expect("open");
    assert_eq!(
        recovered,
        Recovered {
            streams: vec![],
            next_out_seq: 1,
            sync_floors: vec![],
            sequences: vec![],
            names: vec![],
        }
    );
    write_mixed(&mut w, 600, |_| at(1));
    w.commit().expect("commit");
    let files = rolled_files(dir.path());
    assert!(files.len() > 5, "{files:?}");
    assert_eq!(w.stats().rotations, files.len() as u64 - 1);
    for (i, name) in files.iter().enumerate() {
        assert_self_contained(&dir.path().join(name), i == 0);
        let seq = RolledName::parse(name).expect("rolled name").seq;
        assert_eq!(seq, i as u64 + 1);
    }
    // The replayed state is the state, not a second copy of the event.
    let second = read_packets(&dir.path().join(&files[1]));
    let replayed = second
        .iter()
        .find(|p| role(p) == Role::IncrementalStateCleared)
        .expect("replayed clear");
    assert!(replayed.data.is_none() && replayed.interned_data.is_some());
    let events: usize = files
        .iter()
        .map(|f| {
            read_packets(&dir.path().join(f))
                .iter()
                .filter(|p| matches!(p.data, Some(Data::TrackEvent(_))))
                .count()
        })
        .sum();
    assert_eq!(events, 600);
}

#[test]
fn rotation_by_time_and_index_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    // One second per event: files of 10 s.
    write_mixed(&mut w, 25, at);
    w.commit().expect("commit");
    let files = rolled_files(dir.path());
    assert_eq!(
        files,
        [
            "tracesync-20231114T221320Z-000001.pftrace",
            "tracesync-20231114T221330Z-000002.pftrace",
            "tracesync-20231114T221340Z-000003.pftrace",
        ]
    );
    let current = w.current_path().to_path_buf();
    assert_eq!(current, dir.path().join(&files[2]));

    let (index, bad) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("index");
    assert_eq!(bad, 0);
    assert_eq!(index, w.index());
    assert_eq!(index.len(), 3);
    for (e, name) in index.iter().zip(&files) {
        let path = dir.path().join(name);
        assert_eq!(&e.name, name);
        assert_eq!(e.bytes, std::fs::metadata(&path).expect("stat").len());
        assert_eq!(e.packets, read_packets(&path).len() as u64);
        assert_eq!(e.complete, *name != files[2]);
        let raw: Vec<u32> = e.machines.iter().map(|m| m.raw_id).collect();
        assert_eq!(raw, [0, 5]);
        assert_eq!(e.machines[1].name.as_deref(), Some("m5"));
    }
    assert_eq!(index[0].preamble_bytes, 0);
    assert!(index[1].preamble_packets >= Some(5));
    // Events 0..=9 (ts 1000..) in the first file, the machine packets at 0..20.
    assert_eq!((index[0].first_ts, index[0].last_ts), (Some(0), Some(1009)));
    assert_eq!(
        (index[1].first_ts, index[1].last_ts),
        (Some(1010), Some(1019))
    );

    w.close().expect("close");
    let (index, _) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("index");
    assert!(index.iter().all(|e| e.complete));
    assert_eq!(
        index[2].bytes,
        std::fs::metadata(&current).expect("stat").len()
    );
}

#[test]
fn retention_deletes_oldest_files_and_sidecars() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_bytes: 1500,
        retain_bytes: 5000,
        fsync: false,
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    w.write_sync_samples(&[sample(1)]).expect("samples");
    let first = sidecar_name(&rolled_files(dir.path())[0]);
    assert!(dir.path().join(&first).exists());
    write_mixed(&mut w, 800, |_| at(1));
    w.commit().expect("commit");
    let files = rolled_files(dir.path());
    let stats = w.stats();
    assert!(stats.files_deleted > 0);
    assert_eq!(
        stats.files_deleted + files.len() as u64,
        stats.files_started
    );
    // The survivors are the newest files, and they fit the limit but for the
    // file being written.
    let oldest_kept = RolledName::parse(&files[0]).expect("name").seq;
    assert_eq!(oldest_kept, stats.files_deleted + 1);
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(dir.path().join(f)).expect("stat").len())
        .collect();
    let but_current: u64 = sizes[..sizes.len() - 1].iter().sum();
    assert!(but_current <= 5000, "{sizes:?}");
    assert!(!dir.path().join(first).exists());
    let index = w.index();
    assert_eq!(
        index.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
        files
    );
}

#[test]
fn retention_by_age() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(60),
        retain_age: Duration::from_secs(150),
        fsync: false,
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    for minute in 0..6 {
        w.write(&event(5, 2, minute, 1), at(minute * 60))
            .expect("write");
    }
    // Files of minutes 0..=5; at minute 5 those started before 2.5 min ago go.
    let names: Vec<String> = rolled_files(dir.path());
    assert_eq!(names.len(), 3);
    assert!(names[0].contains("T221620Z"), "{names:?}"); // minute 3
}

#[test]
fn sync_samples_go_to_the_current_files_sidecar() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(1),
        fsync: false,
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    w.write_sync_samples(&[sample(1), sample(2)])
        .expect("samples");
    let first = w.current_path().to_path_buf();
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.write(&event(5, 2, 1, 2), at(2)).expect("write");
    w.write_sync_samples(&[sample(3)]).expect("samples");
    let sidecar = |p: &Path| {
        std::fs::read_to_string(format!("{}{SIDECAR_SUFFIX}", p.display())).expect("read")
    };
    let t1s = |text: String| -> Vec<u64> {
        text.lines()
            .map(|l| parse_line(l.as_bytes()).expect("a sample line").t1)
            .collect()
    };
    assert_eq!(t1s(sidecar(&first)), [1, 2]);
    assert_eq!(t1s(sidecar(w.current_path())), [3]);
}

/// A probe sample told apart by its send time.
pub(super) fn sample(t1: u64) -> ProbeSample {
    ProbeSample {
        t1,
        ..ProbeSample::default()
    }
}

#[test]
fn new_limits_apply_to_the_running_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No size rotation at first.
    let cfg = RollingConfig {
        max_file_bytes: u64::MAX,
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    write_mixed(&mut w, 200, |_| at(1));
    w.commit().expect("commit");
    assert_eq!(rolled_files(dir.path()).len(), 1);
    // A reload: rotate at 2000 bytes from the next write on.
    w.set_limits(2000, Duration::MAX, u64::MAX, Duration::ZERO);
    write_mixed(&mut w, 200, |_| at(2));
    w.commit().expect("commit");
    assert!(w.stats().rotations > 0, "no rotation after the new limit");
    assert!(rolled_files(dir.path()).len() > 2);
    // A reload of the age limit: the open file is as old as the new limit
    // allows, so the next write starts another.
    w.set_limits(u64::MAX, Duration::from_secs(600), u64::MAX, Duration::ZERO);
    w.write(&event(5, 2, 1, 1), at(3)).expect("write");
    let rotations = w.stats().rotations;
    w.write(&event(5, 2, 2, 1), at(300)).expect("write");
    assert_eq!(w.stats().rotations, rotations, "younger than 600 s");
    w.set_limits(u64::MAX, Duration::from_secs(60), u64::MAX, Duration::ZERO);
    w.write(&event(5, 2, 3, 1), at(300)).expect("write");
    assert_eq!(
        w.stats().rotations,
        rotations + 1,
        "older than the new 60 s"
    );
}
