use std::io::Write;

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC};
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::remote_clock_sync::SyncedClocks;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{
    ClockSnapshot, InternedData, RemoteClockSync, SystemInfo, TracePacket, TrackEvent,
};
use tracesync_protocol::wire;

use super::*;

fn seq(id: u32) -> Option<OptionalTrustedPacketSequenceId> {
    Some(OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(id))
}

fn system_info(machine: u32, name: &str) -> Vec<u8> {
    TracePacket {
        data: Some(Data::SystemInfo(SystemInfo {
            machine_name: Some(name.into()),
            ..Default::default()
        })),
        machine_id: (machine != 0).then_some(machine),
        optional_trusted_packet_sequence_id: seq(1),
        ..Default::default()
    }
    .encode_to_vec()
}

fn snapshot(machine: u32, boottime: u64, monotonic: u64) -> Vec<u8> {
    let clock = |id, ts| Clock {
        clock_id: Some(id),
        timestamp: Some(ts),
        ..Default::default()
    };
    TracePacket {
        timestamp: Some(boottime),
        data: Some(Data::ClockSnapshot(ClockSnapshot {
            clocks: vec![clock(BOOTTIME, boottime), clock(MONOTONIC, monotonic)],
            primary_trace_clock: None,
        })),
        machine_id: Some(machine),
        optional_trusted_packet_sequence_id: seq(2),
        ..Default::default()
    }
    .encode_to_vec()
}

fn sync_point(machine: u32, client: u64, host: u64) -> Vec<u8> {
    let snap = |v| ClockSnapshot {
        clocks: vec![Clock {
            clock_id: Some(BOOTTIME),
            timestamp: Some(v),
            ..Default::default()
        }],
        primary_trace_clock: None,
    };
    let entry = SyncedClocks {
        client_clocks: Some(snap(client)),
        host_clocks: Some(snap(host)),
    };
    TracePacket {
        data: Some(Data::RemoteClockSync(RemoteClockSync {
            synced_clocks: vec![entry.clone(), entry],
        })),
        machine_id: Some(machine),
        optional_trusted_packet_sequence_id: seq(1),
        ..Default::default()
    }
    .encode_to_vec()
}

fn event(machine: u32, sequence: u32, clock: u32, ts: u64, flags: u32, interned: bool) -> Vec<u8> {
    TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: Some(clock),
        data: Some(Data::TrackEvent(TrackEvent::default())),
        machine_id: Some(machine),
        optional_trusted_packet_sequence_id: seq(sequence),
        sequence_flags: (flags != 0).then_some(flags),
        interned_data: interned.then(InternedData::default),
        ..Default::default()
    }
    .encode_to_vec()
}

fn framed(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        wire::put_trace_packet(&mut out, p);
    }
    out
}

fn collect(f: &mut DirFollower, into: &mut Vec<OutPacket>) -> Progress {
    f.poll(&mut |p| {
        into.push(p.clone());
        Ok(())
    })
    .expect("poll")
}

const A: &str = "tracesync-20250101T000000Z-000001.pftrace";
const B: &str = "tracesync-20250101T000100Z-000002.pftrace";

#[test]
fn follows_a_rotation_showing_every_packet_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let preamble = vec![
        system_info(0, "host"),
        system_info(7, "phone"),
        snapshot(7, 5_000_000_000, 4_000_000_000),
        sync_point(7, 5_000_000_000, 2_000_000_000),
        event(7, 9, BOOTTIME, 5_000_000_100, 1, true),
    ];
    let first_data: Vec<Vec<u8>> = (0..10)
        .map(|i| event(7, 9, BOOTTIME, 5_000_001_000 + i, 2, false))
        .collect();
    let mut file_a = std::fs::File::create(dir.path().join(A)).expect("create");
    let bytes = framed(&[preamble.clone(), first_data.clone()].concat());
    // Half a record first: the follower waits for the rest.
    let cut = bytes.len() - 3;
    file_a.write_all(&bytes[..cut]).expect("write");
    let mut f = DirFollower::new(dir.path());
    let mut shown = Vec::new();
    collect(&mut f, &mut shown);
    assert_eq!(shown.len(), 14);
    file_a.write_all(&bytes[cut..]).expect("write");
    collect(&mut f, &mut shown);
    assert_eq!(shown.len(), 15);

    // Rotation: B replays the preamble (the latest snapshot and sync point
    // moved on in A's tail), then goes on.
    let tail_a = vec![
        sync_point(7, 6_000_000_000, 3_000_000_010),
        event(7, 9, MONOTONIC, 5_000_000_000, 2, false),
    ];
    file_a.write_all(&framed(&tail_a)).expect("write");
    drop(file_a);
    let replay = vec![
        system_info(0, "host"),
        system_info(7, "phone"),
        snapshot(7, 5_000_000_000, 4_000_000_000),
        sync_point(7, 6_000_000_000, 3_000_000_010),
        event(7, 9, BOOTTIME, 5_000_000_100, 1, true),
    ];
    let second_data: Vec<Vec<u8>> = (0..5)
        .map(|i| event(7, 9, BOOTTIME, 7_000_000_000 + i, 2, false))
        .collect();
    std::fs::write(
        dir.path().join(B),
        framed(&[replay, second_data.clone()].concat()),
    )
    .expect("write");
    std::fs::write(
        dir.path().join("index.jsonl"),
        format!(
            "{{\"name\":\"{A}\",\"complete\":true}}\n{{\"name\":\"{B}\",\"complete\":false}}\n"
        ),
    )
    .expect("index");
    collect(&mut f, &mut shown);
    assert_eq!(f.current_file(), Some(B));
    collect(&mut f, &mut shown);

    let want: Vec<Vec<u8>> = [preamble, first_data, tail_a, second_data].concat();
    let got: Vec<Vec<u8>> = shown.iter().map(|p| p.bytes.to_vec()).collect();
    assert_eq!(got, want, "every packet once, in order");
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);

    // Trace time: BOOTTIME minus the latest sync offset (3 s, then 2.99999999 s).
    assert_eq!(shown[5].ts, 2_000_001_000);
    assert_eq!(shown[5].machine_name.as_deref(), Some("phone"));
    assert_eq!(&*shown[5].src, A);
    // MONOTONIC goes through the snapshot (+1 s) to BOOTTIME first.
    assert_eq!(shown[16].ts, 6_000_000_000 - 2_999_999_990);
    assert_eq!(
        (shown[16].clock, shown[16].clock_ts),
        (MONOTONIC, 5_000_000_000)
    );
    assert_eq!(shown[17].ts, 7_000_000_000 - 2_999_999_990);
    assert_eq!(&*shown[17].src, B);
}

#[test]
fn waits_two_polls_without_the_complete_mark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = vec![system_info(0, "host"), event(0, 3, BOOTTIME, 10, 0, false)];
    std::fs::write(dir.path().join(A), framed(&a)).expect("write");
    let b = vec![system_info(0, "host"), event(0, 3, BOOTTIME, 20, 0, false)];
    let mut f = DirFollower::new(dir.path());
    let mut shown = Vec::new();
    collect(&mut f, &mut shown);
    // A grows and B appears between two polls: A is read to its new end
    // and must stay there for a poll before B is taken.
    let a_more = event(0, 3, BOOTTIME, 15, 0, false);
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(A))
        .and_then(|mut file| file.write_all(&framed(std::slice::from_ref(&a_more))))
        .expect("append");
    std::fs::write(dir.path().join(B), framed(&b)).expect("write");
    collect(&mut f, &mut shown);
    assert_eq!(f.current_file(), Some(A), "settles one poll first");
    collect(&mut f, &mut shown);
    assert_eq!(f.current_file(), Some(B));
    let got: Vec<Vec<u8>> = shown.iter().map(|p| p.bytes.to_vec()).collect();
    assert_eq!(got, vec![a[0].clone(), a[1].clone(), a_more, b[1].clone()]);
    assert_eq!(shown[3].ts, 20);
    assert_eq!(shown[3].machine_name.as_deref(), Some("host"));
}

#[test]
fn starts_at_the_newest_file_and_orders_by_sequence() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Names whose start stamps disagree with their sequence numbers.
    let old = "tracesync-20250101T000500Z-000009.pftrace";
    let new = "tracesync-20250101T000000Z-000010.pftrace";
    std::fs::write(
        dir.path().join(old),
        framed(&[event(0, 3, BOOTTIME, 1, 0, false)]),
    )
    .expect("write");
    std::fs::write(
        dir.path().join(new),
        framed(&[event(0, 3, BOOTTIME, 2, 0, false)]),
    )
    .expect("write");
    // A snapshot beside them, listed in the index too, is not followed.
    let snapshot = "snapshot-20250101T000600Z-crash.pftrace";
    std::fs::write(
        dir.path().join(snapshot),
        framed(&[event(0, 3, BOOTTIME, 9, 0, false)]),
    )
    .expect("write");
    std::fs::write(
        dir.path().join("index.jsonl"),
        format!("{{\"name\":\"{snapshot}\",\"bytes\":1,\"packets\":1,\"complete\":true}}\n"),
    )
    .expect("write");
    let listing = list(dir.path()).expect("list");
    assert_eq!(listing.files, vec![old.to_owned(), new.to_owned()]);
    let mut f = DirFollower::new(dir.path());
    let mut shown = Vec::new();
    collect(&mut f, &mut shown);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].ts, 2);
}

#[test]
fn a_torn_file_is_reported_and_left_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = framed(&[event(0, 3, BOOTTIME, 1, 0, false)]);
    a.extend_from_slice(&[0x0a, 0x20, 0x01]);
    std::fs::write(dir.path().join(A), &a).expect("write");
    let mut f = DirFollower::new(dir.path());
    let mut shown = Vec::new();
    collect(&mut f, &mut shown);
    std::fs::write(
        dir.path().join(B),
        framed(&[event(0, 3, BOOTTIME, 2, 0, false)]),
    )
    .expect("write");
    collect(&mut f, &mut shown);
    collect(&mut f, &mut shown);
    assert_eq!(shown.iter().map(|p| p.ts).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(f.warnings.len(), 1);
    assert!(f.warnings[0].contains(A), "{}", f.warnings[0]);
}
