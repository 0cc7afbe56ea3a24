//! First pass over one input: reads every packet's top-level fields but
//! keeps only clock facts (snapshots, remote syncs), the machine ids seen,
//! and the first SystemInfo per machine. Memory grows with the number of
//! clock snapshots, never with the number of packets.

use super::remote::{SyncRound, rounds_of};
use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync};
use tracesync_protocol::reader::FileReadError;
use tracesync_protocol::scan::{FieldSink, ScanError, field, note_payload, walk_fields_into};

use super::chrome_json::{JsonStats, StatsSlot, json_error_of};
use super::inputs::{Held, InputSource};
use super::packets::{InputReader, bundle_of, reader_of};
use std::sync::Arc;

/// One clock of a snapshot as written in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapClock {
    pub clock: u32,
    pub value: u64,
    pub unit: u64,
    pub incremental: bool,
}

/// A clock fact, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClockEvent {
    Snapshot {
        embedded: u32,
        seq: u32,
        clocks: Vec<SnapClock>,
        primary: Option<u32>,
    },
    RemoteSync {
        embedded: u32,
        rounds: Vec<SyncRound>,
    },
}

/// A problem with an input, reported as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputFault {
    pub display: String,
    pub offset: Option<u64>,
    pub message: String,
    /// The rest of the file was skipped (framing broken), as opposed to one packet.
    pub fatal: bool,
}

impl std::fmt::Display for InputFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.display)?;
        if let Some(offset) = self.offset {
            write!(f, "byte offset {offset}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// What the first pass keeps of one input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileScan {
    /// Embedded machine ids of its packets; 0 for packets without one.
    pub ids: BTreeSet<u32>,
    /// Embedded id of the first packet (synchronization markers aside):
    /// Perfetto adopts an embedded machine onto the host only when it comes
    /// before any packet of the host.
    pub first_id: Option<u32>,
    pub events: Vec<ClockEvent>,
    /// First SystemInfo (raw bytes) per embedded id.
    pub system_infos: BTreeMap<u32, Vec<u8>>,
    pub has_clock_snapshots: bool,
    /// The first primary_trace_clock a snapshot of this file declares.
    pub primary_clock: Option<u32>,
    pub faults: Vec<InputFault>,
    pub packets: u64,
    pub invalid_snapshot_packets: u64,
    /// What the conversion of a JSON input counted.
    pub json: JsonStats,
}

/// TracePacket field number of `synchronization_marker`.
const SYNCHRONIZATION_MARKER: u32 = 36;

/// What the first pass reads of a packet: the scan's walk over its
/// top-level fields ([`walk_fields_into`]: the same packets malformed, at
/// the same offsets), keeping only these, each as
/// [`tracesync_protocol::scan::PacketFields`] has it (the last of a
/// repeated field; the payload, the first field that is no metadata).
#[derive(Default)]
struct KeptFields<'a> {
    /// Whether the payload is wanted: only until the input's first packet
    /// that is no synchronization marker (`FileScan::first_id`).
    payload_wanted: bool,
    machine_id: Option<u32>,
    sequence_id: Option<u32>,
    data_field: Option<u32>,
    clock_snapshot: Option<&'a [u8]>,
    remote_clock_sync: Option<&'a [u8]>,
    system_info: Option<&'a [u8]>,
    compressed_packets: Option<&'a [u8]>,
}

impl<'a> KeptFields<'a> {
    fn scan(&mut self, packet: &'a [u8]) -> Result<(), ScanError> {
        walk_fields_into(packet, self)
    }
}

impl KeptFields<'_> {
    #[inline(always)]
    fn note_payload(&mut self, number: u32) {
        if self.payload_wanted {
            note_payload(&mut self.data_field, number);
        }
    }
}

impl<'a> FieldSink<'a> for KeptFields<'a> {
    #[inline(always)]
    fn varint(&mut self, number: u32, value: u64) {
        match number {
            field::TRUSTED_PACKET_SEQUENCE_ID => self.sequence_id = Some(value as u32),
            field::MACHINE_ID => self.machine_id = Some(value as u32),
            _ => self.note_payload(number),
        }
    }

    /// Only the ids' values are kept (a timestamp's bytes are skipped).
    #[inline(always)]
    fn wants_value(&self, number: u32) -> bool {
        matches!(
            number,
            field::TRUSTED_PACKET_SEQUENCE_ID | field::MACHINE_ID
        )
    }

    #[inline(always)]
    fn len(&mut self, number: u32, bytes: &'a [u8]) {
        match number {
            field::CLOCK_SNAPSHOT => self.clock_snapshot = Some(bytes),
            field::SYSTEM_INFO => self.system_info = Some(bytes),
            field::REMOTE_CLOCK_SYNC => self.remote_clock_sync = Some(bytes),
            field::COMPRESSED_PACKETS => self.compressed_packets = Some(bytes),
            _ => {}
        }
        self.note_payload(number);
    }

    #[inline(always)]
    fn fixed(&mut self, number: u32) {
        self.note_payload(number);
    }
}

/// Reads one input from its start; never fails: problems become faults.
/// A converted input with a spill that is not filled yet fills it; a held
/// one is read to its first packet only (`scan_held`).
pub fn scan_input(source: &InputSource) -> FileScan {
    if let Some(held) = &source.held {
        return scan_held(source, held);
    }
    let slot = source.content.is_converted().then(StatsSlot::default);
    let opened = source.open_counted(slot.clone()).and_then(|raw| {
        reader_of(match &source.spill {
            Some(spill) => Box::new(spill.tee(raw)),
            None => raw,
        })
    });
    let mut scan = match opened {
        // The reader is dropped by the scan: its counts are in the slot.
        Ok(reader) => scan_packets(source, reader),
        Err(e) => return FileScan::cannot_read(source, &e),
    };
    if let Some(counted) = slot.and_then(|s| s.lock().ok().map(|s| *s)) {
        scan.json = counted;
    }
    scan.note_if_empty(source);
    scan
}

/// A held converted input: read to its first packet, where the conversion
/// waits for the second pass. A converted input has no clock facts, so
/// the first packet says all the plan needs; if the input converts to
/// nothing, or its first packet already meets a fault, it is not held
/// but read to its end here, as any other.
fn scan_held(source: &InputSource, held: &Arc<Held>) -> FileScan {
    let opened = source
        .open_counted(Some(held.slot()))
        .and_then(|conversion| reader_of(Box::new(held.record(conversion))));
    let mut reader = match opened {
        Ok(reader) => reader,
        Err(e) => {
            held.abandon();
            return FileScan::cannot_read(source, &e);
        }
    };
    let mut scan = FileScan::default();
    let stopped = scan_packets_into(source, &mut reader, &mut scan, 1);
    if stopped && scan.faults.is_empty() {
        return scan;
    }
    held.abandon();
    if stopped {
        scan_packets_into(source, &mut reader, &mut scan, u64::MAX);
    }
    drop(reader);
    scan.json = held.counts();
    scan.note_if_empty(source);
    scan
}

/// What the first pass keeps of the packets `reader` yields (the whole
/// input, or a piece of it read from a record boundary on).
pub fn scan_packets(source: &InputSource, mut reader: InputReader) -> FileScan {
    let mut scan = FileScan::default();
    scan_packets_into(source, &mut reader, &mut scan, u64::MAX);
    scan
}

/// [`scan_packets`] into `scan`, stopping before a packet beyond the
/// `limit`th; true if it stopped there (more may follow), false at the
/// end of the input or at a fault that ends it.
fn scan_packets_into(
    source: &InputSource,
    reader: &mut InputReader,
    scan: &mut FileScan,
    limit: u64,
) -> bool {
    let fault = |offset, message: String, fatal| InputFault {
        display: source.display.clone(),
        offset,
        message,
        fatal,
    };
    // Most packets repeat the previous one's machine id: skip the set insert.
    let mut last_embedded = None;
    loop {
        if scan.packets >= limit {
            return true;
        }
        let packet = match reader.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => return false,
            Err(e) => {
                scan.faults.push(read_fault(source, scan, e));
                return false;
            }
        };
        let mut fields = KeptFields {
            payload_wanted: scan.first_id.is_none(),
            ..KeptFields::default()
        };
        let scanned = fields.scan(packet.bytes);
        let bundle = scanned.is_ok().then_some(fields.compressed_packets);
        if let Some(range) = bundle_of(&packet, bundle) {
            // Its inner packets come next, as the expanding reader yields
            // them; the bundle itself is not a packet.
            if let Err(e) = reader.expand_last(range) {
                scan.faults.push(read_fault(source, scan, e));
                return false;
            }
            continue;
        }
        let offset = packet.offset;
        scan.packets += 1;
        if let Err(e) = scanned {
            scan.faults.push(fault(
                Some(offset),
                format!("malformed packet ({e}); packet skipped"),
                false,
            ));
            continue;
        }
        let embedded = fields.machine_id.unwrap_or(0);
        if scan.first_id.is_none() && fields.data_field != Some(SYNCHRONIZATION_MARKER) {
            scan.first_id = Some(embedded);
        }
        if last_embedded != Some(embedded) {
            scan.ids.insert(embedded);
            last_embedded = Some(embedded);
        }
        let malformed = |message| fault(Some(offset), message, false);
        note_clock_facts(scan, &fields, embedded, malformed);
        if let Some(bytes) = fields.system_info {
            scan.system_infos
                .entry(embedded)
                .or_insert_with(|| bytes.to_vec());
        }
    }
}

/// The clock facts of one packet of machine `embedded`: its ClockSnapshot
/// and RemoteClockSync, if any; an undecodable one is a fault `malformed`
/// words, and is ignored.
fn note_clock_facts(
    scan: &mut FileScan,
    fields: &KeptFields<'_>,
    embedded: u32,
    malformed: impl Fn(String) -> InputFault,
) {
    let seq = fields.sequence_id.unwrap_or(0);
    if let Some(bytes) = fields.clock_snapshot {
        match ClockSnapshot::decode(bytes) {
            Ok(snapshot) => {
                scan.has_clock_snapshots = true;
                let primary = snapshot
                    .primary_trace_clock
                    .filter(|&c| c != 0)
                    .map(|c| c as u32);
                if scan.primary_clock.is_none() {
                    scan.primary_clock = primary;
                }
                let clocks = snapshot
                    .clocks
                    .iter()
                    .map(|c| SnapClock {
                        clock: c.clock_id.unwrap_or(0),
                        value: c.timestamp.unwrap_or(0),
                        unit: c.unit_multiplier_ns.filter(|&u| u != 0).unwrap_or(1),
                        incremental: c.is_incremental.unwrap_or(false),
                    })
                    .collect();
                scan.events.push(ClockEvent::Snapshot {
                    embedded,
                    seq,
                    clocks,
                    primary,
                });
            }
            Err(e) => {
                scan.invalid_snapshot_packets += 1;
                scan.faults.push(malformed(format!(
                    "undecodable ClockSnapshot ({e}); ignored"
                )));
            }
        }
    }
    if let Some(bytes) = fields.remote_clock_sync {
        match RemoteClockSync::decode(bytes) {
            Ok(sync) => {
                let rounds = rounds_of(&sync);
                scan.events
                    .push(ClockEvent::RemoteSync { embedded, rounds });
            }
            Err(e) => {
                scan.faults.push(malformed(format!(
                    "undecodable RemoteClockSync ({e}); ignored"
                )));
            }
        }
    }
}

/// The fault that ends a held input's read in the second pass, after its
/// first packet.
pub fn later_fault(source: &InputSource, e: FileReadError) -> InputFault {
    let after_first = FileScan {
        packets: 1,
        ..FileScan::default()
    };
    read_fault(source, &after_first, e)
}

/// The fault that ends the read of an input: an I/O error, or framing
/// that cannot be followed (at its byte offset).
fn read_fault(source: &InputSource, scan: &FileScan, e: FileReadError) -> InputFault {
    let fault = |offset, message: String| InputFault {
        display: source.display.clone(),
        offset,
        message,
        fatal: true,
    };
    match e {
        // A JSON input's own error, at its offset in the JSON text.
        FileReadError::Io(ref e) if let Some(j) = json_error_of(e) => fault(
            j.offset(),
            format!("{j}; the events before it are merged, the rest of this input is skipped"),
        ),
        FileReadError::Io(e) => fault(
            None,
            format!("read error: {e}; the rest of this input is skipped"),
        ),
        // `e` displays as "byte offset N: ..."; the fault prints the
        // offset itself, so only the kind goes into the message (else the
        // line says "byte offset N: byte offset N: ...").
        FileReadError::Format(e) if scan.packets == 0 && e.offset == 0 => fault(
            // Nothing readable from its first byte on.
            None,
            format!(
                "not a Perfetto trace (byte offset 0: {}); give a trace file \
                 (plain, gzip, .zip or .tar), or remove the input",
                e.kind
            ),
        ),
        FileReadError::Format(e) => fault(
            Some(e.offset),
            format!("{}; the rest of this input is skipped", e.kind),
        ),
    }
}

impl FileScan {
    /// An input that cannot be opened or read from its start: one fatal
    /// fault saying so, nothing else. A JSON input whose first event is
    /// already broken says where, as a later broken event does.
    pub fn cannot_read(source: &InputSource, e: &std::io::Error) -> Self {
        let (offset, message) = match json_error_of(e) {
            Some(j) => (
                j.offset(),
                format!("{j}; nothing of this input is merged, fix the JSON or remove the input"),
            ),
            None => (
                None,
                format!("cannot read: {e}; check that it is readable, or remove the input"),
            ),
        };
        Self {
            faults: vec![InputFault {
                display: source.display.clone(),
                offset,
                message,
                fatal: true,
            }],
            ..Self::default()
        }
    }

    /// An empty file (or a gzip of nothing) is well-formed but almost
    /// always a recording that never finished or a wrong path: says so
    /// instead of silently merging nothing from it.
    pub fn note_if_empty(&mut self, source: &InputSource) {
        if self.packets == 0 && self.faults.is_empty() {
            // A converted input (JSON, systrace) with text but no event
            // that converts: its events were dropped and counted.
            let message = if source.content.is_converted() {
                "holds no trace packets: no event of it converts (each dropped one is counted \
                 in --stats, json_* or systrace_*); check the file, or remove the input"
            } else {
                "holds no trace packets (empty input); check that the recording finished, \
                 or remove the input"
            };
            self.faults.push(InputFault {
                display: source.display.clone(),
                offset: None,
                message: message.into(),
                fatal: true,
            });
        }
    }

    /// This scan followed by `later`'s, the scan of the bytes after it:
    /// what one scan of both would keep. Nothing of `later` is kept after
    /// a fault that skipped the rest of the input.
    pub fn then(mut self, later: FileScan) -> FileScan {
        if self.faults.iter().any(|f| f.fatal) {
            return self;
        }
        self.ids.extend(later.ids);
        self.first_id = self.first_id.or(later.first_id);
        self.events.extend(later.events);
        for (id, info) in later.system_infos {
            self.system_infos.entry(id).or_insert(info);
        }
        self.has_clock_snapshots |= later.has_clock_snapshots;
        self.primary_clock = self.primary_clock.or(later.primary_clock);
        self.faults.extend(later.faults);
        self.packets += later.packets;
        self.invalid_snapshot_packets += later.invalid_snapshot_packets;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::test_traces::arbitrary_packet;
    use proptest::prelude::*;
    use tracesync_protocol::scan::{PacketFields, scan_packet_into};

    /// A JSON input's first pass fills its spill, and reopening the input
    /// then reads the spill: the bytes a second conversion would give.
    #[test]
    fn a_json_input_is_read_back_from_its_spill() {
        use crate::merge::inputs::Spill;
        use crate::merge::test_traces::source_of;
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let json = br#"{"traceEvents":[{"ph":"X","pid":1,"tid":2,"ts":3,"dur":1,"name":"a","args":{"k":[1,null,"v"]}},{"ph":"i","pid":1,"tid":2,"ts":2,"name":"b"},{"ph":"C","pid":1,"ts":4,"name":"c","args":{"v":1}}]}"#;
        let mut source = source_of(dir.path(), "t.json", json);
        let mut converted = Vec::new();
        source.open().unwrap().read_to_end(&mut converted).unwrap();
        let spill = Spill::create().unwrap();
        source.spill = Some(spill.clone());
        assert!(spill.reader().is_none());
        let scan = scan_input(&source);
        assert!(scan.faults.is_empty(), "{:?}", scan.faults);
        assert_eq!(scan.json.json_tokenizer_failure, 0);
        assert!(spill.reader().is_some(), "the first pass fills the spill");
        // Not converted again: the JSON itself is no longer needed.
        std::fs::remove_file(dir.path().join("t.json")).unwrap();
        let mut again = Vec::new();
        source.open().unwrap().read_to_end(&mut again).unwrap();
        assert_eq!(again, converted);
        // A second first pass (it reads the spill) counts nothing new.
        assert_eq!(scan_input(&source).packets, scan.packets);
    }

    proptest! {
        /// The first pass's fields are the scan's: same errors, and the
        /// same values of what it keeps (the payload while it is wanted).
        #[test]
        fn kept_fields_are_the_scans(p in arbitrary_packet()) {
            let mut kept = KeptFields {
                payload_wanted: true,
                ..KeptFields::default()
            };
            let mut all = PacketFields::default();
            let got = kept.scan(&p);
            prop_assert_eq!(&got, &scan_packet_into(&p, &mut all));
            if got.is_ok() {
                prop_assert_eq!(kept.machine_id, all.machine_id);
                prop_assert_eq!(kept.sequence_id, all.trusted_packet_sequence_id);
                prop_assert_eq!(kept.data_field, all.data_field);
                prop_assert_eq!(kept.clock_snapshot, all.clock_snapshot);
                prop_assert_eq!(kept.remote_clock_sync, all.remote_clock_sync);
                prop_assert_eq!(kept.system_info, all.system_info);
                prop_assert_eq!(kept.compressed_packets, all.compressed_packets);
            }
        }
    }
}
