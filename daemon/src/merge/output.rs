//! Writers of the merged stream: a multi-machine Perfetto trace, or one
//! jsonl record per resolved packet (DESIGN.md §5).

use std::fmt::Write as _;
use std::io::{self, Write};

use prost::Message;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::remote_clock_sync::SyncedClocks;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync, TracePacket};
use tracesync_protocol::scan::{Kind, field};
use tracesync_protocol::wire;

use super::machines::{MachineIdx, MachineTable};
use super::plan::offset_pair;
use super::second_pass::{Head, OWN_SEQUENCE_ID};
use super::stats::MergeStats;

/// One jsonl record (DESIGN.md §5), shared by `merge --format jsonl` and
/// `tail --format jsonl`. Strings arrive already JSON-encoded (quotes
/// included, or `null`) so callers can encode each name once, not per packet.
#[derive(Clone, Copy, Debug)]
pub struct JsonlRecord<'a> {
    /// Trace time (ns); negative values print as 0.
    pub ts: i64,
    pub machine_json: &'a str,
    pub raw_id: u64,
    /// Clock id and raw value the timestamp was read in; None: no timestamp.
    pub clock: Option<(u32, u64)>,
    pub seq: u32,
    pub src_json: &'a str,
    pub kind: Kind,
    pub size: usize,
    /// Error bound of `ts`; None where it is not known (printed as null).
    pub err_ns: Option<u64>,
}

/// Appends `record` as one JSON line (newline included) to `line`.
pub fn write_jsonl_record(line: &mut String, record: &JsonlRecord<'_>) {
    // Writing to a String cannot fail.
    let _ = write!(
        line,
        "{{\"ts\":{},\"machine\":{},\"raw_id\":{},",
        record.ts.max(0),
        record.machine_json,
        record.raw_id,
    );
    let _ = match record.clock {
        Some((c, v)) => write!(line, "\"clock\":{c},\"clock_ts\":{v},"),
        None => write!(line, "\"clock\":null,\"clock_ts\":null,"),
    };
    let _ = write!(
        line,
        "\"seq\":{},\"src\":{},\"kind\":\"{}\",\"size\":{},",
        record.seq, record.src_json, record.kind, record.size,
    );
    let _ = match record.err_ns {
        Some(e) => writeln!(line, "\"err_ns\":{e}}}"),
        None => writeln!(line, "\"err_ns\":null}}"),
    };
}

/// JSON encoding of an optional name: a quoted, escaped string or `null`.
pub fn json_name(name: Option<&str>) -> String {
    serde_json::to_string(&name).unwrap_or_else(|_| "null".into())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A Perfetto trace (protobuf).
    Perfetto,
    /// One JSON record per resolved packet.
    Jsonl,
}

/// The sync point last written for a machine.
#[derive(Clone, Copy, Debug)]
struct SyncState {
    client: u64,
    offset: i64,
}

pub struct Writer<W: Write> {
    out: W,
    format: Format,
    trace_machine: MachineIdx,
    /// `Trace.packet` record header of the packet being written.
    header: Vec<u8>,
    /// By machine index.
    sync: Vec<Option<SyncState>>,
    /// JSON-escaped machine names, by machine.
    json_names: Vec<String>,
    /// The jsonl record being formatted (reused: no allocation per packet).
    line: String,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W, format: Format, machines: &MachineTable, trace_machine: MachineIdx) -> Self {
        let json_names = machines
            .iter()
            .map(|(_, m)| json_name(m.name.as_deref()))
            .collect();
        Self {
            out,
            format,
            trace_machine,
            header: Vec::with_capacity(16),
            sync: vec![None; machines.len()],
            json_names,
            line: String::new(),
        }
    }

    /// One SystemInfo per machine with machine_name set, before any packet.
    pub fn preamble(&mut self, machines: &MachineTable, stats: &mut MergeStats) -> io::Result<()> {
        if self.format != Format::Perfetto {
            return Ok(());
        }
        // The output's host first, so Perfetto sees it as machine 0.
        let mut order: Vec<_> = machines.iter().filter(|(_, m)| m.used).collect();
        order.sort_by_key(|(idx, _)| *idx != self.trace_machine);
        for (_, m) in order {
            let mut info = m.system_info.clone().unwrap_or_default();
            if let Some(name) = &m.name {
                // A later field overrides an earlier one in protobuf, so
                // appending machine_name keeps every other field as it was.
                wire::put_len_field(&mut info, 17, name.as_bytes());
            }
            let mut packet = Vec::with_capacity(info.len() + 16);
            wire::put_len_field(&mut packet, field::SYSTEM_INFO, &info);
            wire::put_varint_field(
                &mut packet,
                field::TRUSTED_PACKET_SEQUENCE_ID,
                u64::from(OWN_SEQUENCE_ID),
            );
            if m.output_id != 0 {
                wire::put_varint_field(&mut packet, field::MACHINE_ID, u64::from(m.output_id));
            }
            self.write_framed(&packet, stats)?;
        }
        Ok(())
    }

    /// Writes one resolved packet, preceded by a sync point when its
    /// machine's mapping to trace time differs from the last one written.
    pub fn packet(
        &mut self,
        head: &Head,
        body: &[u8],
        src_json: &str,
        machines: &MachineTable,
        stats: &mut MergeStats,
    ) -> io::Result<()> {
        stats.packets_written += 1;
        match self.format {
            Format::Perfetto => {
                if head.machine != self.trace_machine
                    && let Some(c) = head.boottime
                {
                    self.sync_point(head.machine, c, c - head.ts, machines, stats)?;
                }
                self.write_framed(body, stats)
            }
            Format::Jsonl => {
                let m = machines.get(head.machine);
                let line = &mut self.line;
                line.clear();
                write_jsonl_record(
                    line,
                    &JsonlRecord {
                        ts: head.ts,
                        machine_json: &self.json_names[head.machine as usize],
                        raw_id: m.raw_id,
                        clock: head.clock,
                        seq: head.out_seq,
                        src_json,
                        kind: head.kind,
                        size: head.size,
                        err_ns: Some(0),
                    },
                );
                stats.bytes_written += line.len() as u64;
                self.out.write_all(line.as_bytes())
            }
        }
    }

    /// A RemoteClockSync with two identical entries {client BOOTTIME c, host
    /// c - offset}: Perfetto derives exactly `offset` from it and applies it
    /// to the machine's later packets. Client values never go backwards.
    fn sync_point(
        &mut self,
        machine: MachineIdx,
        c: i64,
        offset: i64,
        machines: &MachineTable,
        stats: &mut MergeStats,
    ) -> io::Result<()> {
        let last = self.sync[machine as usize];
        if last.is_some_and(|s| s.offset == offset) {
            return Ok(());
        }
        let floor = last.map_or(0, |s| s.client);
        let (client, host) = offset_pair((c.max(0) as u64).max(floor), offset);
        self.sync[machine as usize] = Some(SyncState { client, offset });
        let body = sync_point_packet(
            machines.get(machine).output_id,
            OWN_SEQUENCE_ID,
            client,
            host,
        );
        stats.sync_points_written += 1;
        self.write_framed(&body, stats)
    }

    /// Writes `body` as one `Trace.packet` record: the header, then the body
    /// straight from the caller's buffer (no copy into a frame buffer).
    fn write_framed(&mut self, body: &[u8], stats: &mut MergeStats) -> io::Result<()> {
        self.header.clear();
        wire::put_tag(&mut self.header, 1, wire::WireType::Len);
        wire::put_varint(&mut self.header, body.len() as u64);
        stats.bytes_written += (self.header.len() + body.len()) as u64;
        self.out.write_all(&self.header)?;
        self.out.write_all(body)
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A RemoteClockSync packet for `machine_id` with two identical entries
/// {client BOOTTIME `client`, host BOOTTIME `host`} (Perfetto takes the
/// offset `client - host` from it), on sequence `sequence_id`. Shared by the
/// offline merger and the live core.
pub fn sync_point_packet(machine_id: u32, sequence_id: u32, client: u64, host: u64) -> Vec<u8> {
    let snapshot = |value| ClockSnapshot {
        clocks: vec![Clock {
            clock_id: Some(BOOTTIME),
            timestamp: Some(value),
            ..Default::default()
        }],
        primary_trace_clock: None,
    };
    let entry = SyncedClocks {
        client_clocks: Some(snapshot(client)),
        host_clocks: Some(snapshot(host)),
    };
    let packet = TracePacket {
        data: Some(Data::RemoteClockSync(RemoteClockSync {
            synced_clocks: vec![entry.clone(), entry],
        })),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(sequence_id),
        ),
        machine_id: Some(machine_id),
        ..Default::default()
    };
    packet.encode_to_vec()
}
