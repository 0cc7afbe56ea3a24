//! The live output checker on hand-built rolled files (no daemon needed):
//! it resolves remote events through the sync point in effect exactly as
//! the real trace processor places them, and counts missing and duplicated
//! synthetic identities.

use std::path::Path;

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC};
use tracesync_protocol::perfetto::{
    EventName, InternedData, SystemInfo, TracePacket, trace_packet,
};
use tracesync_protocol::wire::{WireType, put_len_field, put_tag, put_varint, put_varint_field};
use tracesync_tests::build;
use tracesync_tests::live::{check_output, judge};
use tracesync_tests::tp;

const S: u64 = 1_000_000_000;
const PHONE: u32 = 9;
const SEQ: u32 = 4;
const HOST_SEQ: u32 = 5;
const TRACK: u64 = 77;

fn annotation(out: &mut Vec<u8>, name: &str, uint: Option<u64>, string: Option<&str>) {
    let mut a = Vec::new();
    put_len_field(&mut a, 10, name.as_bytes());
    if let Some(v) = uint {
        put_varint_field(&mut a, 3, v);
    }
    if let Some(s) = string {
        put_len_field(&mut a, 6, s.as_bytes());
    }
    put_len_field(out, 4, &a);
}

/// A synthetic TrackEvent as the relay writes it, stamped by the daemon.
fn event(machine: u32, ts: u64, kind: u64, src: &str, n: u64, truth: u64) -> Vec<u8> {
    let seq = if machine == 0 { HOST_SEQ } else { SEQ };
    let head = TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: Some(BOOTTIME),
        sequence_flags: Some(2),
        machine_id: (machine != 0).then_some(machine),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        ..Default::default()
    };
    let mut te = Vec::new();
    put_varint_field(&mut te, 9, kind);
    put_varint_field(&mut te, 11, TRACK);
    if kind == 1 {
        put_varint_field(&mut te, 10, n % 2 + 1);
    }
    if kind == 4 {
        put_varint_field(&mut te, 30, n);
    }
    annotation(&mut te, "tracesync_src", None, Some(src));
    annotation(&mut te, "tracesync_n", Some(n), None);
    annotation(&mut te, "tracesync_truth_ns", Some(truth), None);
    let mut p = head.encode_to_vec();
    put_len_field(&mut p, 11, &te);
    p
}

fn framed(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        put_tag(&mut out, 1, WireType::Len);
        put_varint(&mut out, p.len() as u64);
        out.extend_from_slice(p);
    }
    out
}

fn enc(p: TracePacket) -> Vec<u8> {
    p.encode_to_vec()
}

fn named(machine: u32, name: &str) -> Vec<u8> {
    let p = TracePacket {
        data: Some(trace_packet::Data::SystemInfo(SystemInfo {
            machine_name: Some(name.into()),
            ..Default::default()
        })),
        ..build::on_sequence(build::packet(), 1)
    };
    enc(if machine == 0 {
        p
    } else {
        build::on_machine(p, machine)
    })
}

/// The packet that starts a sequence's state: track and interned names.
fn clear(seq: u32) -> TracePacket {
    let mut clear = build::on_sequence(build::track_descriptor(TRACK, "t", None), seq);
    clear.sequence_flags = Some(1);
    clear.interned_data = Some(InternedData {
        event_names: ["alpha", "beta"]
            .iter()
            .zip(1..)
            .map(|(n, iid)| EventName {
                iid: Some(iid),
                name: Some((*n).into()),
            })
            .collect(),
    });
    clear
}

/// A phone whose BOOTTIME is host + 1000 s + 40 us, then + 1000 s + 52 us
/// (a second sync point); events every 1 ms; `skip`/`twice` remove or
/// repeat one counter.
fn write_capture(dir: &Path, skip: Option<u64>, twice: Option<u64>) {
    let host0 = 50 * S;
    let offsets = [1000 * S as i64 + 40_000, 1000 * S as i64 + 52_000];
    let mut packets = vec![named(0, "host"), named(PHONE, "phone")];
    let snap = build::clock_snapshot(&[(BOOTTIME, host0), (MONOTONIC, host0 - S)]);
    packets.push(enc(build::on_sequence(snap, 1)));
    let phone0 = (host0 as i64 + offsets[0]) as u64;
    let snap = build::clock_snapshot(&[(BOOTTIME, phone0), (MONOTONIC, phone0 - 2 * S)]);
    packets.push(enc(build::on_machine(build::on_sequence(snap, 2), PHONE)));
    packets.push(enc(build::on_machine(clear(SEQ), PHONE)));
    packets.push(enc(clear(HOST_SEQ)));
    for (k, offset) in offsets.iter().enumerate() {
        let host = host0 + k as u64 * S;
        let c = (host as i64 + offset) as u64;
        let sync = build::remote_clock_sync(1, &[(c, host), (c, host)]);
        packets.push(enc(build::on_machine(sync, PHONE)));
        for i in 0..30u64 {
            let n = k as u64 * 30 + i;
            let truth = host + (i + 1) * 1_000_000;
            // The phone's timestamp is off by 3 us of "estimator error".
            let ts = (truth as i64 + offset + 3_000) as u64;
            let kind = [1, 4, 2][(i % 3) as usize];
            if skip != Some(n) {
                packets.push(event(PHONE, ts, kind, "phone/1", n, truth));
            }
            if twice == Some(n) {
                packets.push(event(PHONE, ts, kind, "phone/1", n, truth));
            }
            let host_kind = [1, 2][(i % 2) as usize];
            packets.push(event(0, truth + 500, host_kind, "host/1", n, truth + 500));
        }
    }
    let name = "tracesync-20250101T000000Z-000001.pftrace";
    std::fs::write(dir.join(name), framed(&packets)).expect("write trace");
    let index = serde_json::json!({"name": name, "preamble_packets": 0, "complete": true});
    std::fs::write(dir.join("index.jsonl"), format!("{index}\n")).expect("write index");
}

#[test]
fn checker_resolves_through_sync_points_and_counts_identities() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_capture(dir.path(), None, None);
    let check = check_output(dir.path());
    check.assert_complete();
    let phone = check.source_of("phone", 1).expect("phone source");
    assert_eq!((phone.events, phone.max_n), (60, 59), "{}", check.summary());
    assert_eq!(phone.max_abs_err_ns, 3_000, "{}", check.summary());
    assert_eq!(check.source_of("host", 1).expect("host").max_abs_err_ns, 0);
    assert_eq!(check.machine_named("phone"), Some(PHONE));
    assert_eq!(check.machine_named("host"), Some(0));

    if !tp::require_or_skip("checker_resolves_through_sync_points_and_counts_identities") {
        return;
    }
    let j = judge::judge_file(&check.files[0]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(j.machine_raw_ids, vec![0, i64::from(PHONE)]);
    // Begins: every third phone event, every other host event.
    assert_eq!(j.slices, 20 + 30);
}

#[test]
fn checker_counts_missing_and_duplicated_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_capture(dir.path(), Some(17), Some(41));
    let check = check_output(dir.path());
    let phone = check.source_of("phone", 1).expect("phone source");
    assert_eq!(phone.missing, 1, "{}", check.summary());
    assert_eq!(phone.missing_sample, vec![17]);
    assert_eq!(phone.duplicates, 1);
    assert_eq!(phone.duplicate_sample, vec![41]);
    let result = std::panic::catch_unwind(|| check.assert_complete());
    assert!(result.is_err(), "a gap and a duplicate must fail the check");
}
