//! Sync-quality tracks: how a rolled file carries each remote machine's
//! clock-sync quality, for the eye (Perfetto UI plots them as counter
//! tracks in the machine's track group) and for readers (`tracesync merge`,
//! `tail DIR`, `report` take every packet's error bound from them).
//!
//! Per remote machine the daemon writes, on an output sequence of its own
//! (ids from [`QUALITY_SEQ_BASE`], never given to a relay stream) and with
//! the machine's `machine_id`:
//! - one TrackDescriptor per track (the first with
//!   SEQ_INCREMENTAL_STATE_CLEARED, so every file's preamble replays them);
//! - counter values (TrackEvent TYPE_COUNTER, `double_counter_value`),
//!   timestamped in the machine's BOOTTIME with `timestamp_clock_id` 6
//!   like its other packets, so Perfetto places them through the sync
//!   points;
//! - an instant (TrackEvent TYPE_INSTANT, named `step`, `suspend` or
//!   `reconnect`) on the epochs track at each epoch change.
//!
//! The error-bound track's rule, which readers rely on: the value in force
//! at a packet (the machine's last bound sample before it in stream order)
//! is at least the error bound the daemon gave that packet. Track names
//! and uuids are in docs/format.md.

use prost::Message;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::track_event::{CounterValueField, NameField, Type};
use tracesync_protocol::perfetto::{CounterDescriptor, TracePacket, TrackDescriptor, TrackEvent};
use tracesync_protocol::scan::{PacketFields, SEQ_INCREMENTAL_STATE_CLEARED};

/// First output sequence id of the sync-quality sequences (one per remote
/// machine, in order of first use); [`QUALITY_SEQ_COUNT`] ids are reserved.
pub const QUALITY_SEQ_BASE: u32 = 0x7F00_0000;
pub const QUALITY_SEQ_COUNT: u32 = 1 << 20;

/// TracePacket.track_event.
const TRACK_EVENT: u32 = 11;

/// Whether output sequence `seq` is a sync-quality sequence.
pub fn is_quality_seq(seq: u32) -> bool {
    seq.wrapping_sub(QUALITY_SEQ_BASE) < QUALITY_SEQ_COUNT
}

/// The tracks of one remote machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QualityTrack {
    /// Machine BOOTTIME minus host BOOTTIME as the sync points say (µs).
    Offset = 1,
    /// Relay clock rate minus host clock rate (ppm).
    FreqError = 2,
    /// Error bound of the machine's packets (µs): see the module docs.
    ErrorBound = 3,
    /// Smallest round trip of the sync estimate (µs).
    RoundTrip = 4,
    /// Instants at epoch changes.
    Epochs = 5,
}

impl QualityTrack {
    pub const ALL: [QualityTrack; 5] = [
        QualityTrack::Offset,
        QualityTrack::FreqError,
        QualityTrack::ErrorBound,
        QualityTrack::RoundTrip,
        QualityTrack::Epochs,
    ];

    /// The track's name in Perfetto.
    pub fn name(self) -> &'static str {
        match self {
            QualityTrack::Offset => "sync offset (µs)",
            QualityTrack::FreqError => "sync frequency error (ppm)",
            QualityTrack::ErrorBound => "sync error bound (µs)",
            QualityTrack::RoundTrip => "sync round trip (µs)",
            QualityTrack::Epochs => "sync epochs",
        }
    }

    fn unit(self) -> Option<&'static str> {
        match self {
            QualityTrack::Offset | QualityTrack::ErrorBound | QualityTrack::RoundTrip => Some("µs"),
            QualityTrack::FreqError => Some("ppm"),
            QualityTrack::Epochs => None,
        }
    }

    fn from_code(code: u64) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u64 == code)
    }
}

/// uuid of `track` of machine `raw_id`: "ts" in the top bytes, the raw id,
/// the track number.
pub fn track_uuid(raw_id: u32, track: QualityTrack) -> u64 {
    (0x7473_u64 << 48) | (u64::from(raw_id) << 8) | track as u64
}

/// The machine and track of a sync-quality uuid.
pub fn parse_uuid(uuid: u64) -> Option<(u32, QualityTrack)> {
    if uuid >> 48 != 0x7473 || (uuid >> 40) & 0xFF != 0 {
        return None;
    }
    let raw_id = u32::try_from((uuid >> 8) & 0xFFFF_FFFF).ok()?;
    Some((raw_id, QualityTrack::from_code(uuid & 0xFF)?))
}

fn packet(raw_id: u32, seq: u32) -> TracePacket {
    TracePacket {
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        machine_id: Some(raw_id),
        ..Default::default()
    }
}

/// The TrackDescriptors of machine `raw_id`'s tracks on sequence `seq`,
/// the first clearing the sequence's state.
pub fn descriptor_packets(raw_id: u32, seq: u32) -> Vec<Vec<u8>> {
    QualityTrack::ALL
        .iter()
        .enumerate()
        .map(|(i, &track)| {
            let mut p = packet(raw_id, seq);
            if i == 0 {
                p.sequence_flags = Some(SEQ_INCREMENTAL_STATE_CLEARED);
            }
            p.data = Some(Data::TrackDescriptor(TrackDescriptor {
                uuid: Some(track_uuid(raw_id, track)),
                name: Some(track.name().to_owned()),
                parent_uuid: None,
                process: None,
                thread: None,
                counter: track.unit().map(|u| CounterDescriptor {
                    unit_name: Some(u.to_owned()),
                    ..Default::default()
                }),
            }));
            p.encode_to_vec()
        })
        .collect()
}

fn event_packet(raw_id: u32, seq: u32, client_boottime: u64, event: TrackEvent) -> Vec<u8> {
    let mut p = packet(raw_id, seq);
    p.timestamp = Some(client_boottime);
    p.timestamp_clock_id = Some(BOOTTIME);
    p.data = Some(Data::TrackEvent(event));
    p.encode_to_vec()
}

/// A value of counter `track` at the machine's BOOTTIME `client_boottime`.
pub fn counter_packet(
    raw_id: u32,
    seq: u32,
    client_boottime: u64,
    track: QualityTrack,
    value: f64,
) -> Vec<u8> {
    event_packet(
        raw_id,
        seq,
        client_boottime,
        TrackEvent {
            r#type: Some(Type::Counter as i32),
            track_uuid: Some(track_uuid(raw_id, track)),
            counter_value_field: Some(CounterValueField::DoubleCounterValue(value)),
            ..Default::default()
        },
    )
}

/// An epoch change named `what` (`step`, `suspend`, `reconnect`).
pub fn epoch_packet(raw_id: u32, seq: u32, client_boottime: u64, what: &str) -> Vec<u8> {
    event_packet(
        raw_id,
        seq,
        client_boottime,
        TrackEvent {
            r#type: Some(Type::Instant as i32),
            track_uuid: Some(track_uuid(raw_id, QualityTrack::Epochs)),
            name_field: Some(NameField::Name(what.to_owned())),
            ..Default::default()
        },
    )
}

/// One value read back from a sync-quality packet.
#[derive(Clone, Debug, PartialEq)]
pub struct QualitySample {
    pub raw_id: u32,
    pub track: QualityTrack,
    /// The packet's BOOTTIME of its machine.
    pub client_boottime: u64,
    /// The counter's value; None for an epoch instant.
    pub value: Option<f64>,
    /// The instant's name.
    pub name: Option<String>,
}

/// Whether a scanned packet (of a rolled file: sequence ids are output
/// ids) is a sync-quality sample (counter value or epoch instant).
pub fn is_quality_sample(fields: &PacketFields<'_>) -> bool {
    fields.data_field == Some(TRACK_EVENT)
        && fields
            .trusted_packet_sequence_id
            .is_some_and(is_quality_seq)
}

/// The sample a sync-quality packet carries; None for any other packet.
pub fn read_sample(fields: &PacketFields<'_>, bytes: &[u8]) -> Option<QualitySample> {
    if !is_quality_sample(fields) {
        return None;
    }
    let p = TracePacket::decode(bytes).ok()?;
    let Some(Data::TrackEvent(event)) = p.data else {
        return None;
    };
    let (raw_id, track) = parse_uuid(event.track_uuid?)?;
    Some(QualitySample {
        raw_id,
        track,
        client_boottime: p.timestamp?,
        value: match event.counter_value_field {
            Some(CounterValueField::DoubleCounterValue(v)) => Some(v),
            Some(CounterValueField::CounterValue(v)) => Some(v as f64),
            None => None,
        },
        name: match event.name_field {
            Some(NameField::Name(n)) => Some(n),
            _ => None,
        },
    })
}

/// ns as the µs value of a counter.
pub fn ns_to_us(ns: f64) -> f64 {
    ns / 1000.0
}

/// A bound sample's µs value as ns, rounded up: never below the ns value
/// it was written from.
pub fn bound_us_to_ns(us: f64) -> u64 {
    if us.is_finite() && us > 0.0 {
        (us * 1000.0).ceil() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::scan::scan_packet;

    #[test]
    fn samples_read_back_as_written() {
        let seq = QUALITY_SEQ_BASE + 3;
        let bytes = counter_packet(77, seq, 5_000, QualityTrack::ErrorBound, 12.345);
        let fields = scan_packet(&bytes).unwrap();
        let s = read_sample(&fields, &bytes).unwrap();
        assert_eq!(
            (s.raw_id, s.track, s.client_boottime, s.value),
            (77, QualityTrack::ErrorBound, 5_000, Some(12.345))
        );
        let bytes = epoch_packet(u32::MAX, seq, 9, "suspend");
        let fields = scan_packet(&bytes).unwrap();
        let s = read_sample(&fields, &bytes).unwrap();
        assert_eq!((s.raw_id, s.name.as_deref()), (u32::MAX, Some("suspend")));
        // Descriptors are state, not samples; other sequences are not ours.
        let d = &descriptor_packets(77, seq)[0];
        assert!(read_sample(&scan_packet(d).unwrap(), d).is_none());
        let other = counter_packet(77, 5, 1, QualityTrack::Offset, 1.0);
        assert!(read_sample(&scan_packet(&other).unwrap(), &other).is_none());
        assert!(scan_packet(d).unwrap().clears_incremental_state());
    }

    #[test]
    fn bound_never_reads_back_smaller() {
        for ns in [1u64, 999, 1_001, 123_456_789, 4_000_000_000_123] {
            assert!(bound_us_to_ns(ns_to_us(ns as f64)) >= ns, "{ns}");
            assert!(bound_us_to_ns(ns_to_us(ns as f64)) <= ns + 1, "{ns}");
        }
        for track in QualityTrack::ALL {
            assert_eq!(
                parse_uuid(track_uuid(0xDEAD_BEEF, track)),
                Some((0xDEAD_BEEF, track))
            );
        }
        assert_eq!(parse_uuid(42), None);
        assert!(is_quality_seq(QUALITY_SEQ_BASE) && !is_quality_seq(QUALITY_SEQ_BASE - 1));
    }
}
