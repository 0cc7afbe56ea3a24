//! How converted packets are framed: each one a `packet` field of a Trace,
//! on the file's one sequence.

use prost::Message;
use tracesync_protocol::perfetto::TracePacket;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};

/// The one packet sequence of a converted file.
pub const SEQUENCE: u32 = 1;

/// A packet framed as one `packet` field of a Trace.
pub fn framed(packet: &TracePacket) -> Vec<u8> {
    let mut out = Vec::with_capacity(packet.encoded_len() + 6);
    out.push(0x0a);
    // Writing into a Vec cannot run out of room.
    let _ = packet.encode_length_delimited(&mut out);
    out
}

/// A packet of the file's sequence.
pub fn packet(ts: Option<i64>, data: Data) -> TracePacket {
    TracePacket {
        timestamp: ts.map(|t| t as u64),
        data: Some(data),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(SEQUENCE),
        ),
        ..Default::default()
    }
}
