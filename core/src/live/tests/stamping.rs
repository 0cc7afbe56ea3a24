//! Stamping without a copy: the queued bytes are those the copying path
//! makes, byte for byte, and a frame is pinned only when it is nearly all
//! queued.

use tracesync_protocol::relay::v1;
use tracesync_protocol::scan::scan_packet;
use tracesync_protocol::wire;

use super::*;
use crate::live::stamp::stamp_relayed;

const RAW_ID: u32 = 300; // a 2-byte varint, as hashed ids are longer

/// A packet as a relay sends it: the producer's fields, then the relay's
/// own trusted_packet_sequence_id appended last.
fn relayed_form(p: &TracePacket, relay_seq: u32) -> Vec<u8> {
    let mut b = p.encode_to_vec();
    wire::put_varint_field(&mut b, 10, u64::from(relay_seq));
    b
}

/// A packet as the synthetic source writes it: sequence id, then flags.
fn synthetic_form(p: &TracePacket, relay_seq: u32) -> Vec<u8> {
    let mut b = relayed_form(p, relay_seq);
    wire::put_varint_field(&mut b, 13, 2);
    b
}

/// `packets` as slices of one frame buffer, as the session decodes them.
fn frame(packets: &[Vec<u8>]) -> (Bytes, Vec<Bytes>) {
    let mut buf = Vec::new();
    let mut ranges = Vec::new();
    for p in packets {
        buf.extend_from_slice(&[0x1a, 0]); // stands for the field's tag and length
        ranges.push(buf.len()..buf.len() + p.len());
        buf.extend_from_slice(p);
    }
    let buf = Bytes::from(buf);
    let slices = ranges.into_iter().map(|r| buf.slice(r)).collect();
    (buf, slices)
}

fn within(frame: &Bytes, head: &Bytes) -> bool {
    let (start, end) = (
        frame.as_ptr() as usize,
        frame.as_ptr() as usize + frame.len(),
    );
    let p = head.as_ptr() as usize;
    !head.is_empty() && p >= start && p < end
}

/// What the copying path (the daemon before slices) made of `input`.
fn copied(input: &[u8], out: &OutPacket, stamp_clock: bool) -> Vec<u8> {
    let fields = scan_packet(input).expect("valid");
    let clock = (stamp_clock && fields.timestamp.is_some()).then_some(BOOTTIME);
    let mut v = Vec::new();
    let name = out.machine_name.as_deref();
    stamp_relayed(input, &fields, RAW_ID, out.seq, clock, name, &mut v).expect("stamps");
    v
}

/// Runs one batch through a synced relay; the relayed output in order.
fn run(packets: &[Vec<u8>]) -> (Bytes, Vec<OutPacket>) {
    let mut core = core();
    let slot = synced_relay(&mut core, 10, RAW_ID, 0);
    let (buf, slices) = frame(packets);
    core.batch(slot, 1, 0, slices, clocks(1_000_000), 0)
        .expect("batch");
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let out = out.into_iter().filter(|p| p.origin.is_some()).collect();
    (buf, out)
}

/// Each output packet against its input (by its index in the batch).
fn check_identical(inputs: &[Vec<u8>], out: &[OutPacket], stamp_clock: &[bool]) {
    for p in out {
        let i = p.origin.expect("relayed").index as usize;
        let expected = copied(&inputs[i], p, stamp_clock[i]);
        assert_eq!(p.bytes.to_vec(), expected, "{p:?}");
        assert_eq!(p.bytes.len(), expected.len());
        let mut framed = Vec::new();
        p.bytes.write_framed(&mut framed);
        let mut want = Vec::new();
        wire::put_trace_packet(&mut want, &expected);
        assert_eq!(framed, want);
    }
}

#[test]
fn data_packets_are_frame_slices_with_the_copied_bytes() {
    let no_ts = on_seq(
        TracePacket {
            data: Some(Data::TrackEvent(TrackEvent::default())),
            ..Default::default()
        },
        0,
    );
    let mut no_ts = no_ts;
    no_ts.optional_trusted_packet_sequence_id = None;
    let mut with_ts = event(0, 5_000);
    with_ts.optional_trusted_packet_sequence_id = None;
    let mut own_clock = event_on_clock(0, BOOTTIME, 6_000);
    own_clock.optional_trusted_packet_sequence_id = None;
    let inputs = vec![
        relayed_form(&with_ts, 2), // clock stamped
        relayed_form(&no_ts, 2),   // no timestamp: no clock
        relayed_form(&own_clock, 2),
        relayed_form(&with_ts, 300), // a 2-byte sequence id cut
        synthetic_form(&with_ts, 2),
    ];
    let (buf, out) = run(&inputs);
    assert_eq!(out.len(), inputs.len());
    check_identical(&inputs, &out, &[true, false, false, true, true]);
    for p in &out {
        assert_eq!(p.role, Role::Data);
        assert!(within(&buf, p.bytes.head()), "not a slice: {p:?}");
        assert!(!p.bytes.tail().is_empty());
    }
    // The clock is stamped where the packet names none.
    assert_eq!(decode(&out[0]).timestamp_clock_id, Some(BOOTTIME));
    assert_eq!(decode(&out[1]).timestamp_clock_id, None);
    assert_eq!(decode(&out[0]).machine_id, Some(RAW_ID));
}

#[test]
fn cut_fields_system_info_and_state_take_the_copy_with_the_same_bytes() {
    // Producer-written sequence and machine ids inside the packet (not as
    // a relay appends them): cut from the middle.
    let mut inside = event(9, 5_000);
    inside.machine_id = Some(4);
    let info = TracePacket {
        data: Some(Data::SystemInfo(SystemInfo {
            machine_name: Some("producer-said".into()),
            ..Default::default()
        })),
        ..Default::default()
    };
    let defaults = TracePacket {
        sequence_flags: Some(1),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(BOOTTIME),
        }),
        ..Default::default()
    };
    let mut after_defaults = event(0, 7_000);
    after_defaults.optional_trusted_packet_sequence_id = None;
    let inputs = vec![
        inside.encode_to_vec(),
        relayed_form(&info, 3),
        relayed_form(&defaults, 4),
        relayed_form(&after_defaults, 4), // the sequence's default clock: none stamped
    ];
    let (buf, out) = run(&inputs);
    assert_eq!(out.len(), inputs.len());
    check_identical(&inputs, &out, &[true, false, false, false]);
    let info = out
        .iter()
        .find(|p| p.role == Role::SystemInfo)
        .expect("SystemInfo out");
    assert_eq!(
        decode(info).data,
        Some(Data::SystemInfo(SystemInfo {
            machine_name: Some(format!("m{RAW_ID}")),
            ..Default::default()
        }))
    );
    // Nothing of this frame is pinned: the only data packet that could be
    // a slice is too small a part of it.
    for p in &out {
        assert!(!within(&buf, p.bytes.head()), "pins the frame: {p:?}");
    }
}

#[test]
fn a_frame_mostly_not_queued_is_not_pinned() {
    let mut data = event(0, 5_000);
    data.optional_trusted_packet_sequence_id = None;
    let mut inputs = vec![relayed_form(&data, 2)];
    // Duplicates of nothing, but unresolvable: a clock without a path.
    let mut unresolvable = event_on_clock(0, 99, 5_000);
    unresolvable.optional_trusted_packet_sequence_id = None;
    for _ in 0..8 {
        inputs.push(relayed_form(&unresolvable, 5));
    }
    let (buf, out) = run(&inputs);
    assert_eq!(out.len(), 1);
    check_identical(&inputs[..1], &out, &[true]);
    assert!(!within(&buf, out[0].bytes.head()));
    assert!(!out[0].bytes.tail().is_empty());
}

#[test]
fn retried_pending_packets_are_slices_of_their_own_copy() {
    let mut core = core();
    let c = core
        .connect(hello(10, RAW_ID, &format!("m{RAW_ID}")), 0)
        .expect("connects");
    let mut data = event(0, 5_000);
    data.optional_trusted_packet_sequence_id = None;
    let inputs = vec![relayed_form(&data, 2), relayed_form(&data, 2)];
    let (buf, slices) = frame(&inputs);
    core.batch(c.slot, 1, 0, slices, clocks(1_000_000), 0)
        .expect("batch");
    // No estimate yet: pending (copied out of the frame); then resolved.
    core.sync(c.slot, estimate(0)).expect("known");
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let out: Vec<OutPacket> = out.into_iter().filter(|p| p.origin.is_some()).collect();
    check_identical(&inputs, &out, &[true, true]);
    for p in &out {
        assert!(!within(&buf, p.bytes.head()));
        assert!(!p.bytes.tail().is_empty());
    }
}

#[test]
fn batches_decode_their_packets_as_slices_of_the_frame() {
    let frame = v1::Frame {
        body: Some(v1::frame::Body::Batch(v1::Batch {
            packets: vec![Bytes::from(vec![8u8; 100]), Bytes::from(vec![9u8; 50])],
            ..Default::default()
        })),
    };
    let buf = Bytes::from(frame.encode_to_vec());
    let Ok(v1::Frame {
        body: Some(v1::frame::Body::Batch(batch)),
    }) = v1::Frame::decode(buf.clone())
    else {
        panic!("decodes");
    };
    assert!(batch.packets.iter().all(|p| within(&buf, p)));
}
