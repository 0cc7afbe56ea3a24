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

use super::write_path::write_from;
use super::*;
use tracesync_core::live::{Origin, OutPacket, Role};

const T0: u64 = 1_700_000_000;

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
        let (_, seq) = naming::parse_file_name(name).expect("rolled name");
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
    assert!(index[1].preamble_packets >= 5);
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
    w.write_sync_samples(&[serde_json::json!({"t1": 1})])
        .expect("samples");
    let first = naming::sidecar_name(&rolled_files(dir.path())[0]);
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
    let (_, oldest_kept) = naming::parse_file_name(&files[0]).expect("name");
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
    #[derive(serde::Serialize)]
    struct Sample {
        t1: u64,
    }
    w.write_sync_samples(&[Sample { t1: 1 }, Sample { t1: 2 }])
        .expect("samples");
    let first = w.current_path().to_path_buf();
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.write(&event(5, 2, 1, 2), at(2)).expect("write");
    w.write_sync_samples(&[Sample { t1: 3 }]).expect("samples");
    let sidecar = |p: &Path| {
        std::fs::read_to_string(format!("{}{SYNC_SIDECAR_SUFFIX}", p.display())).expect("read")
    };
    assert_eq!(sidecar(&first), "{\"t1\":1}\n{\"t1\":2}\n");
    assert_eq!(sidecar(w.current_path()), "{\"t1\":3}\n");
}

#[test]
fn crash_recovery_keeps_exactly_the_committed_packets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    write_mixed(&mut w, 30, |_| at(1));
    w.commit().expect("commit");
    let committed_len = w.index().last().expect("entry").bytes;
    let committed_streams: Vec<RecoveredStream> = w.streams.values().copied().collect();
    let name = w.current_path().to_path_buf();
    // More packets, flushed to the file but never committed; then a torn one.
    for i in 30..40 {
        w.write(&event(5, 2, i * 3, 2), at(1)).expect("write");
    }
    w.flush().expect("flush");
    drop(w);
    let mut bytes = std::fs::read(&name).expect("read");
    assert!(bytes.len() as u64 > committed_len);
    bytes.extend_from_slice(&[0x0a, 0x40, 1, 2, 3]);
    std::fs::write(&name, &bytes).expect("write");

    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(5)).expect("reopen");
    assert_eq!(std::fs::metadata(&name).expect("stat").len(), committed_len);
    assert_eq!(recovered.streams, committed_streams);
    assert_eq!(
        recovered
            .streams
            .iter()
            .find(|s| (s.relay_instance, s.relay_sequence) == (500, 2))
            .map(|s| s.written_through),
        Some(27)
    );
    assert_eq!(recovered.next_out_seq, 5);
    let stats = w.stats();
    assert_eq!(
        stats.recovered_truncated_bytes,
        bytes.len() as u64 - committed_len
    );
    let files = rolled_files(dir.path());
    assert_eq!(files.len(), 2);
    assert_eq!(w.current_path(), dir.path().join(&files[1]));
    // The new file starts with the rebuilt preamble.
    let preamble = read_packets(w.current_path());
    let roles: Vec<Role> = preamble.iter().map(role).collect();
    assert_eq!(roles[..2], [Role::SystemInfo, Role::SystemInfo]);
    assert!(roles.contains(&Role::SyncPoint));
    let cleared: Vec<u32> = preamble
        .iter()
        .filter(|p| role(p) == Role::IncrementalStateCleared)
        .map(seq_of)
        .collect();
    assert_eq!(cleared, [2, 3, 4]);
    let index = w.index();
    assert!(index[0].complete && !index[1].complete);
    assert_eq!(index[0].bytes, committed_len);
    assert_eq!(index[1].preamble_packets, preamble.len() as u64);
}

#[test]
fn journal_corruption_stops_at_the_last_good_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let first_len = w.index().last().expect("entry").bytes;
    w.write(&event(5, 2, 1, 2), at(0)).expect("write");
    w.write(&event(5, 3, 2, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let name = w.current_path().to_path_buf();
    drop(w);
    let journal = dir.path().join(JOURNAL_NAME);
    let mut bytes = std::fs::read(&journal).expect("read");
    let last = bytes.len() - 2;
    bytes[last] ^= 0xff;
    std::fs::write(&journal, &bytes).expect("write");

    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(1)).expect("reopen");
    assert_eq!(std::fs::metadata(&name).expect("stat").len(), first_len);
    assert_eq!(
        recovered.streams,
        [RecoveredStream {
            out_seq: 2,
            relay_instance: 500,
            relay_sequence: 2,
            machine_raw_id: 5,
            written_through: 0,
        }]
    );
    assert!(w.stats().journal_ignored_bytes > 0);
}

#[test]
fn files_without_a_journal_are_kept_and_numbering_continues() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.close().expect("close");
    std::fs::remove_file(dir.path().join(JOURNAL_NAME)).expect("rm");
    std::fs::remove_file(dir.path().join(INDEX_NAME)).expect("rm");
    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(1)).expect("reopen");
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
    let files = rolled_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(files[1].ends_with("-000002.pftrace"));
    let index = w.index();
    assert!(index[0].complete);
    assert_eq!(index[0].first_ts, None);
    assert_eq!(read_packets(w.current_path()), []);
}

#[test]
fn unfinished_rotation_leaves_no_orphan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    drop(w);
    // A rotation that crashed after creating its file, before the journal.
    let orphan = naming::file_name(at(3), 2);
    std::fs::write(dir.path().join(&orphan), b"").expect("write");
    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(4)).expect("reopen");
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(w.stats().recovered_orphans_removed, 1);
    let files = rolled_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(!files.contains(&orphan));
}

/// A writer that takes `room` bytes, then fails like a full disk.
struct FullDisk {
    written: Vec<u8>,
    room: usize,
}

impl io::Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.room == 0 {
            return Err(io::ErrorKind::StorageFull.into());
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        self.written.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_disk_loses_and_tears_nothing() {
    let data: Vec<u8> = (0..=255).collect();
    let mut done = 0;
    let mut disk = FullDisk {
        written: Vec::new(),
        room: 100,
    };
    let e = write_from(&mut disk, &data, &mut done).expect_err("disk is full");
    assert_eq!(e.kind(), io::ErrorKind::StorageFull);
    assert_eq!(done, 100);
    disk.room = usize::MAX;
    write_from(&mut disk, &data, &mut done).expect("space again");
    assert_eq!(done, data.len());
    assert_eq!(disk.written, data);
}

#[test]
fn after_a_failure_the_uncommitted_tail_is_written_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let committed = w.index().last().expect("entry").bytes;
    w.write(&event(5, 2, 1, 2), at(0)).expect("write");
    w.flush().expect("flush");
    // What a failed fsync may leave: the tail on disk is not what was
    // written (pages dropped, or garbage past it).
    let path = w.current_path().to_path_buf();
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.truncate(committed as usize + 3);
    bytes.extend_from_slice(b"garbage past the tail");
    std::fs::write(&path, &bytes).expect("write");
    w.current.suspect = true;
    w.write(&event(5, 2, 2, 3), at(0)).expect("write");
    w.commit().expect("commit");
    assert_eq!(w.stats().rewrites, 1);
    let expected = w.index().last().expect("entry").bytes;
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), expected);
    w.close().expect("close");
    let ts: Vec<u64> = read_packets(&path)
        .iter()
        .filter(|p| p.data.is_some())
        .filter_map(|p| p.timestamp)
        .collect();
    assert_eq!(ts, [1000, 1001, 1002]);
}

#[test]
fn a_failed_rotation_takes_nothing_and_is_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    // Something already has the next file's name: the rotation cannot start.
    let blocker = dir.path().join(naming::file_name(at(20), 2));
    std::fs::write(&blocker, b"x").expect("write");
    let e = w
        .write(&event(5, 2, 1, 2), at(20))
        .expect_err("rotation blocked");
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert!(e.to_string().contains("tracesync-"), "{e}");
    w.commit().expect("commit");
    assert_eq!(w.index().len(), 1);
    std::fs::remove_file(&blocker).expect("rm");
    w.write(&event(5, 2, 1, 2), at(20)).expect("write");
    w.close().expect("close");
    let files = rolled_files(dir.path());
    let indexes: Vec<Vec<u64>> = files
        .iter()
        .map(|f| {
            read_packets(&dir.path().join(f))
                .iter()
                .filter(|p| p.data.is_some())
                .filter_map(|p| p.timestamp)
                .collect()
        })
        .collect();
    assert_eq!(indexes, [vec![1000], vec![1001]]);
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

#[test]
fn reopen_recovers_each_sequences_default_clock_and_sequence_clock() {
    use tracesync_protocol::perfetto::TracePacketDefaults;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    let origin = |index| {
        Some(Origin {
            relay_instance: 300,
            relay_sequence: 7,
            index,
        })
    };
    let clock = |id, t| clock_snapshot::Clock {
        clock_id: Some(id),
        timestamp: Some(t),
        ..Default::default()
    };
    // A producer's sequence clock, and the relay's builtin one (not kept:
    // the relay sends it again).
    let sequence_clock = ClockSnapshot {
        clocks: vec![clock(6, 10), clock(64, 110)],
        primary_trace_clock: None,
    };
    let snap = |s: &ClockSnapshot| data(Data::ClockSnapshot(s.clone()));
    w.write(&out(10, 3, 7, snap(&sequence_clock), origin(0)), at(0))
        .expect("write");
    w.write(&snapshot(3, 20), at(0)).expect("write");
    let clear = TracePacket {
        sequence_flags: Some(1),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(64),
        }),
        ..Default::default()
    };
    w.write(&out(11, 3, 7, clear, origin(1)), at(0))
        .expect("write");
    w.write(&event(3, 7, 2, 2), at(0)).expect("write");
    w.commit().expect("commit");
    drop(w); // a crash: no close
    let (_, recovered) = RollingWriter::open_at(config(dir.path()), at(1)).expect("reopen");
    assert_eq!(
        recovered.sequences,
        [tracesync_core::live::RecoveredSequence {
            out_seq: 7,
            default_clock: Some(64),
            clock_snapshots: vec![sequence_clock.encode_to_vec()],
        }]
    );
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(recovered.streams[0].out_seq, 7);
}

/// A file outside the output directory, and what it holds.
struct Target {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

const PRECIOUS: &[u8] = b"not the daemon's\n";

impl Target {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("target");
        std::fs::write(&path, PRECIOUS).expect("write");
        Self { _dir: dir, path }
    }

    /// Plants a symbolic link to the target at `at`.
    fn link_at(&self, at: &Path) {
        std::os::unix::fs::symlink(&self.path, at).expect("symlink");
    }

    fn assert_untouched(&self) {
        assert_eq!(std::fs::read(&self.path).expect("read"), PRECIOUS);
    }
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[test]
fn a_link_at_the_index_tmp_is_removed_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let tmp = dir.path().join("index.jsonl.tmp");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    target.link_at(&tmp);
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    target.assert_untouched();
    // The daemon's own directory: the link at its temporary name was
    // removed (not its target), the index written.
    assert!(!tmp.exists() && !is_link(&tmp));
    let (index, bad) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("load");
    assert_eq!((index.len(), bad), (1, 0));
    assert_eq!(index[0].packets, 1);
    assert_eq!(w.stats().symlinks_refused, 1);
    assert_eq!(w.stats().index_write_errors, 0);
}

#[test]
fn a_link_at_the_index_tmp_of_a_directory_not_ours_is_left_and_counted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let tmp = dir.path().join("index.jsonl.tmp");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    // As if the directory belonged to another user.
    w.links.set_may_remove(false);
    target.link_at(&tmp);
    for i in 0..3 {
        w.write(&event(5, 2, i, if i == 0 { 1 } else { 2 }), at(0))
            .expect("write");
        // The index is a convenience: the commit itself succeeds.
        w.commit().expect("commit");
    }
    target.assert_untouched();
    assert!(is_link(&tmp));
    let stats = w.stats();
    assert_eq!(stats.symlinks_refused, 1);
    assert_eq!(stats.index_write_errors, 3);
    assert_eq!(stats.commits, 3);
}

#[test]
fn links_at_the_next_data_file_and_sidecar_names_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    // The next rotation (at 20 s) would take number 2, else 3.
    let second = dir.path().join(naming::file_name(at(20), 2));
    let third = naming::file_name(at(20), 3);
    target.link_at(&second);
    target.link_at(&dir.path().join(naming::sidecar_name(&third)));
    w.write(&event(5, 2, 1, 2), at(20)).expect("write rotates");
    assert!(
        w.current_path().ends_with(naming::file_name(at(20), 4)),
        "{}",
        w.current_path().display()
    );
    w.write_sync_samples(&[serde_json::json!({"t1": 1})])
        .expect("samples");
    w.close().expect("close");
    target.assert_untouched();
    assert!(is_link(&second));
    let (index, _) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("load");
    let names: Vec<&str> = index.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [naming::file_name(at(0), 1), naming::file_name(at(20), 4)]
    );
    // Restarted: the links are not taken for files, numbering goes on.
    let (w, _) = RollingWriter::open_at(config(dir.path()), at(30)).expect("reopen");
    assert!(w.current_path().ends_with(naming::file_name(at(30), 5)));
    assert_eq!(w.index().len(), 3);
    target.assert_untouched();
}

#[test]
fn a_link_at_the_sidecar_is_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    let sidecar = format!("{}{SYNC_SIDECAR_SUFFIX}", w.current_path().display());
    target.link_at(Path::new(&sidecar));
    for _ in 0..2 {
        let e = w
            .write_sync_samples(&[serde_json::json!({"t1": 1})])
            .expect_err("the sidecar name is a link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }
    // The trace goes on.
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    target.assert_untouched();
    assert!(is_link(Path::new(&sidecar)));
    assert_eq!(w.stats().symlinks_refused, 1);
}

#[test]
fn links_at_the_journal_names_are_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg.clone(), at(0)).expect("open");
    let journal = dir.path().join(JOURNAL_NAME);
    // The temporary name of a compaction (every rotation).
    target.link_at(&dir.path().join("journal.tmp"));
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.write(&event(5, 2, 1, 2), at(20)).expect("write rotates");
    target.assert_untouched();
    assert_eq!(w.stats().symlinks_refused, 1);
    // The journal itself replaced by a link while running: that commit
    // fails (the open journal is no longer the one at its path), the next
    // writes a new journal (the rename replaces the link, not its target).
    std::fs::remove_file(&journal).expect("rm");
    target.link_at(&journal);
    w.write(&event(5, 2, 2, 2), at(20)).expect("write");
    let e = w.commit().expect_err("the journal vanished");
    assert!(is_vanished(&e), "{e}");
    target.assert_untouched();
    w.write(&event(5, 2, 3, 2), at(20)).expect("write");
    w.commit().expect("commit in a new journal");
    assert!(!is_link(&journal) && journal.is_file());
    assert_eq!(w.stats().vanished, 1);
    assert_eq!(rolled_files(dir.path()).len(), 2, "the data file went on");
    drop(w);
    let (_, recovered) = RollingWriter::open_at(cfg.clone(), at(30)).expect("reopen");
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(recovered.streams[0].written_through, 3);
    target.assert_untouched();
    // A link at the journal's name at start: not read, the daemon does not
    // start.
    std::fs::remove_file(&journal).expect("rm");
    target.link_at(&journal);
    let e = RollingWriter::open_at(cfg, at(40)).expect_err("a linked journal");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    target.assert_untouched();
}

/// A clearing event on sequence 2 of machine 5 that interns `name`.
fn clear_named(index: u64, name: &str) -> OutPacket {
    let mut p = event(5, 2, index, 1);
    let mut packet = TracePacket::decode(&p.bytes.to_bytes()[..]).expect("decodes");
    packet.interned_data = Some(InternedData {
        event_names: vec![EventName {
            iid: Some(1),
            name: Some(name.to_owned()),
        }],
    });
    p.bytes = Bytes::from(packet.encode_to_vec()).into();
    p
}

fn event_indexes(path: &Path) -> Vec<u64> {
    read_packets(path)
        .iter()
        .filter(|p| matches!(p.data, Some(Data::TrackEvent(_))))
        .filter_map(|p| p.timestamp)
        .map(|ts| ts - 1000)
        .collect()
}

#[test]
fn an_output_directory_renamed_away_fails_the_commit_and_goes_on_in_a_new_one() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("out");
    let (mut w, _) = RollingWriter::open_at(config(&dir), at(0)).expect("open");
    for p in [
        system_info(0),
        system_info(5),
        snapshot(5, 20),
        sync_point(5),
    ] {
        w.write(&p, at(0)).expect("write");
    }
    w.write(&clear_named(0, "committed"), at(0)).expect("write");
    for i in 1..5 {
        w.write(&event(5, 2, i, 2), at(0)).expect("write");
    }
    w.commit().expect("commit");
    let committed = w.durable_commit();
    // Not yet durable: events 5..10, a new clear among them.
    for i in 5..7 {
        w.write(&event(5, 2, i, 2), at(0)).expect("write");
    }
    w.write(&clear_named(7, "pending"), at(0)).expect("write");
    for i in 8..10 {
        w.write(&event(5, 2, i, 2), at(0)).expect("write");
    }
    let moved = root.path().join("moved");
    std::fs::rename(&dir, &moved).expect("rename the directory away");
    let n = w.request_commit().expect("request").expect("in flight");
    let e = w.wait_commits().expect_err("the output vanished");
    assert!(is_vanished(&e), "{e}");
    assert!(
        e.to_string().contains("no longer in the output directory"),
        "{e}"
    );
    // Nothing it covered is acknowledged.
    assert_eq!(w.durable_commit(), committed);
    assert!(n > committed);
    assert_eq!(w.stats().vanished, 1);
    // The next commit: the directory again, a new file with a preamble and
    // what was not durable.
    let m = w.request_commit().expect("request").expect("in flight");
    assert_eq!(w.wait_commits().expect("durable"), Some(m));
    assert!(m >= n && w.durable_commit() >= n);
    let files = rolled_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].ends_with("-000002.pftrace"), "{files:?}");
    let path = dir.join(&files[0]);
    assert_eq!(w.current_path(), path);
    assert_eq!(event_indexes(&path), (5..10).collect::<Vec<_>>());
    assert_self_contained(&path, false);
    // The preamble is the state as of the last commit (the clear that was
    // committed), not of the last packet written.
    let packets = read_packets(&path);
    let preamble = w.index()[0].preamble_packets as usize;
    let replayed_names: Vec<String> = packets[..preamble]
        .iter()
        .filter_map(|p| p.interned_data.as_ref())
        .flat_map(|d| d.event_names.iter().filter_map(|n| n.name.clone()))
        .collect();
    assert_eq!(replayed_names, ["committed"]);
    // The index holds the new file only, its data as written.
    let index = w.index();
    assert_eq!(index.len(), 1);
    assert_eq!(index[0].packets, packets.len() as u64);
    assert_eq!(
        index[0].bytes,
        std::fs::metadata(&path).expect("stat").len()
    );
    assert_eq!(
        (index[0].first_ts, index[0].last_ts),
        (Some(1005), Some(1009))
    );
    assert_eq!(index[0].machines.len(), 1);
    // The old directory keeps what was committed there.
    assert_eq!(
        event_indexes(&moved.join(naming::file_name(at(0), 1)))[..5],
        [0, 1, 2, 3, 4]
    );
    // Restarted on the new directory: it resumes after event 9.
    w.write(&event(5, 2, 10, 2), at(0)).expect("write");
    w.commit().expect("commit");
    drop(w);
    let (w, recovered) = RollingWriter::open_at(config(&dir), at(5)).expect("reopen");
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(recovered.streams[0].written_through, 10);
    assert_eq!(event_indexes(&path), (5..11).collect::<Vec<_>>());
    assert_eq!(w.index().len(), 2);
}

#[test]
fn a_removed_output_directory_is_made_again_with_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let outer = tempfile::tempdir().expect("tempdir");
    let root = outer.path().join("root");
    let dir = root.join("out");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o751)).expect("chmod");
    // Without fsync: commits run in place, checked all the same.
    let cfg = RollingConfig {
        fsync: false,
        max_file_age: Duration::from_secs(10),
        ..config(&dir)
    };
    let (mut w, _) = RollingWriter::open_at(cfg.clone(), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    w.write(&event(5, 2, 1, 2), at(1)).expect("write");
    std::fs::remove_dir_all(&dir).expect("rm -r");
    let e = w.commit().expect_err("the output vanished");
    assert!(is_vanished(&e), "{e}");
    // Retried while the directory cannot be made (its parent gone too).
    let away = outer.path().join("away");
    std::fs::rename(&root, &away).expect("rename");
    let parentless = w.commit().expect_err("no parent");
    assert!(!is_vanished(&parentless), "{parentless}");
    assert!(!root.exists());
    std::fs::rename(&away, &root).expect("rename");
    w.commit().expect("commit in the directory made again");
    let mode = std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o751);
    let files = rolled_files(&dir);
    assert_eq!(files.len(), 1);
    assert_eq!(event_indexes(&dir.join(&files[0])), [1]);
    // Found by a rotation (no commit in between): the write fails, takes
    // nothing, and the next one goes on in a new file. (The file made
    // again started now, not at the test's times: rotate by size.)
    w.write(&event(5, 2, 2, 2), at(5)).expect("write");
    w.set_limits(1, Duration::MAX, u64::MAX, Duration::ZERO);
    std::fs::remove_dir_all(&dir).expect("rm -r");
    let e = w
        .write(&event(5, 2, 3, 2), at(30))
        .expect_err("the rotation finds it");
    assert!(is_vanished(&e), "{e}");
    w.write(&event(5, 2, 3, 2), at(30)).expect("write");
    w.close().expect("close");
    // Event 2 in the file made again, 3 in the one it rotated to.
    let mut files = rolled_files(&dir);
    files.sort_by_key(|f| naming::parse_file_name(f).map(|(_, seq)| seq));
    let events: Vec<Vec<u64>> = files.iter().map(|f| event_indexes(&dir.join(f))).collect();
    assert_eq!(events, [vec![2], vec![3]], "{files:?}");
    for f in &files {
        assert_self_contained(&dir.join(f), true);
    }
    assert_eq!(
        std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o7777,
        0o751
    );
    let (w, recovered) = RollingWriter::open_at(cfg, at(40)).expect("reopen");
    assert_eq!(recovered.streams[0].written_through, 3);
    assert_eq!(w.index().len(), 3);
}

#[test]
fn a_replaced_data_file_fails_the_commit_and_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    w.write(&event(5, 2, 1, 2), at(0)).expect("write");
    let path = w.current_path().to_path_buf();
    let other = dir.path().join("other");
    std::fs::write(&other, PRECIOUS).expect("write");
    std::fs::rename(&other, &path).expect("replace the file");
    let e = w.commit().expect_err("the file was replaced");
    assert!(is_vanished(&e), "{e}");
    w.commit().expect("commit in a new file");
    assert_eq!(std::fs::read(&path).expect("read"), PRECIOUS);
    assert_ne!(w.current_path(), path);
    assert_eq!(event_indexes(w.current_path()), [1]);
    // Not indexed as the daemon's.
    let index = w.index();
    assert_eq!(index.len(), 1);
    assert_eq!(dir.path().join(&index[0].name), w.current_path());
    assert_eq!(w.stats().vanished, 1);
}
