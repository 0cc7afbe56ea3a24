//! Building output packets: stamping relayed packets and making the
//! daemon's own (host ClockSnapshot and SystemInfo, sync points).

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{ClockSnapshot, SystemInfo, TracePacket};
use tracesync_protocol::scan::{
    Fields, PacketFields, ScanError, Stamp, field, stamp_scanned, stamp_split_moved,
};
use tracesync_protocol::wire;

/// Output sequence id of the packets the daemon makes itself (host
/// snapshots and SystemInfo, sync points); relay streams get ids from 2.
pub const OWN_SEQUENCE_ID: u32 = 1;

/// SystemInfo.machine_name.
const MACHINE_NAME: u32 = 17;

/// Stamps a relayed packet: machine id, output sequence id, and the clock
/// it was resolved with where it names none (docs/format.md). A SystemInfo
/// also gets the machine's name, so Perfetto names the machine whichever
/// SystemInfo it reads last.
pub fn stamp_relayed(
    packet: &[u8],
    fields: &PacketFields<'_>,
    machine_id: u32,
    out_seq: u32,
    clock: Option<u32>,
    machine_name: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), ScanError> {
    let stamp = relayed_stamp(machine_id, out_seq, clock);
    match (fields.system_info, machine_name) {
        (Some(_), Some(name)) => {
            let mut stamped = Vec::with_capacity(packet.len() + 16);
            stamp_scanned(packet, fields, &stamp, &mut stamped)?;
            append_with_machine_name(&stamped, name, out)
        }
        _ => stamp_scanned(packet, fields, &stamp, out),
    }
}

/// The stamp of a relayed packet of machine `machine_id` on output
/// sequence `out_seq`, naming `clock` where the packet names none.
pub fn relayed_stamp(machine_id: u32, out_seq: u32, clock: Option<u32>) -> Stamp {
    Stamp {
        machine_id: Some(machine_id),
        trusted_packet_sequence_id: Some(out_seq),
        default_timestamp_clock_id: clock,
        strip_trusted: false,
    }
}

/// Where [`stamp_relayed`] needs no copy of `packet`: the length of the
/// prefix the stamped packet keeps and the bytes moved after it (see
/// [`tracesync_protocol::scan::stamp_split_moved`]; the fields `stamp`
/// appends come last). None for a SystemInfo (its name is rewritten) or a
/// packet that does not split. The caller writes the tail where it keeps
/// the packet (`Stamped::set_split`, with the suffix its stream keeps:
/// built per packet it was 3% of the daemon's CPU with small packets).
pub fn relayed_split<'p>(
    packet: &'p [u8],
    fields: &PacketFields<'_>,
    stamp: &Stamp,
) -> Option<(usize, [&'p [u8]; 2])> {
    if fields.system_info.is_some() {
        return None;
    }
    stamp_split_moved(packet, &fields.stamp_layout, stamp)
}

/// Re-writes the SystemInfo field (45) with `machine_name` appended: a
/// later string field wins in protobuf, so the name overrides any the
/// producer set while every other byte stays. Perfetto reads only the last
/// field 45 of a packet, so the name cannot go in a second one.
fn append_with_machine_name(packet: &[u8], name: &str, out: &mut Vec<u8>) -> Result<(), ScanError> {
    let mut copied_from = 0;
    for f in Fields::new(packet) {
        let f = f?;
        if let (field::SYSTEM_INFO, tracesync_protocol::scan::FieldValue::Len(info)) =
            (f.number, f.value)
        {
            out.extend_from_slice(&packet[copied_from..f.start]);
            let mut body = Vec::with_capacity(info.len() + name.len() + 4);
            body.extend_from_slice(info);
            wire::put_len_field(&mut body, MACHINE_NAME, name.as_bytes());
            wire::put_len_field(out, field::SYSTEM_INFO, &body);
            copied_from = f.end;
        }
    }
    out.extend_from_slice(&packet[copied_from..]);
    Ok(())
}

/// The host's ClockSnapshot (machine 0, trace time BOOTTIME).
pub fn host_clock_snapshot(clocks: &[(u32, u64)]) -> Bytes {
    let timestamp = clocks.iter().find(|(id, _)| *id == BOOTTIME).map(|c| c.1);
    let packet = TracePacket {
        timestamp,
        data: Some(Data::ClockSnapshot(ClockSnapshot {
            clocks: clocks
                .iter()
                .map(|&(clock_id, ts)| Clock {
                    clock_id: Some(clock_id),
                    timestamp: Some(ts),
                    ..Default::default()
                })
                .collect(),
            primary_trace_clock: Some(BOOTTIME as i32),
        })),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(OWN_SEQUENCE_ID),
        ),
        ..Default::default()
    };
    Bytes::from(packet.encode_to_vec())
}

/// The host's SystemInfo, naming machine 0.
pub fn host_system_info(machine_name: Option<&str>, boottime: u64) -> Bytes {
    let packet = TracePacket {
        timestamp: Some(boottime),
        data: Some(Data::SystemInfo(SystemInfo {
            machine_name: machine_name.map(str::to_owned),
            ..Default::default()
        })),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(OWN_SEQUENCE_ID),
        ),
        ..Default::default()
    };
    Bytes::from(packet.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::perfetto::Utsname;
    use tracesync_protocol::scan::scan_packet;

    #[test]
    fn system_info_gets_the_machine_name_and_keeps_the_rest() {
        let packet = TracePacket {
            data: Some(Data::SystemInfo(SystemInfo {
                utsname: Some(Utsname {
                    sysname: Some("Linux".into()),
                    ..Default::default()
                }),
                machine_name: Some("producer-said".into()),
                ..Default::default()
            })),
            ..Default::default()
        };
        let bytes = packet.encode_to_vec();
        let fields = scan_packet(&bytes).unwrap();
        let mut out = Vec::new();
        stamp_relayed(&bytes, &fields, 7, 3, None, Some("phone"), &mut out).unwrap();
        let decoded = TracePacket::decode(&out[..]).unwrap();
        let Some(Data::SystemInfo(info)) = decoded.data else {
            panic!("not a SystemInfo: {decoded:?}");
        };
        assert_eq!(info.machine_name.as_deref(), Some("phone"));
        assert_eq!(info.utsname.unwrap().sysname.as_deref(), Some("Linux"));
        assert_eq!(decoded.machine_id, Some(7));
        assert_eq!(decoded.timestamp_clock_id, None);
    }

    #[test]
    fn clock_is_stamped_only_where_missing() {
        let packet = TracePacket {
            timestamp: Some(5),
            timestamp_clock_id: Some(3),
            ..Default::default()
        };
        let bytes = packet.encode_to_vec();
        let fields = scan_packet(&bytes).unwrap();
        let mut out = vec![0xAA];
        stamp_relayed(&bytes, &fields, 7, 3, Some(BOOTTIME), None, &mut out).unwrap();
        let out = out.split_off(1);
        assert_eq!(
            TracePacket::decode(&out[..]).unwrap().timestamp_clock_id,
            Some(3)
        );
    }
}
