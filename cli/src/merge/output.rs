//! Writers of the merged stream: a multi-machine Perfetto trace, or one
//! jsonl record per resolved packet (docs/format.md).

use std::io::{self, Write};

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC_RAW};
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::remote_clock_sync::SyncedClocks;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync, TracePacket};
use tracesync_protocol::scan::field;
use tracesync_protocol::wire;

use super::machines::{MachineIdx, MachineTable};
use super::second_pass::{Body, Head, OWN_SEQUENCE_ID};
use super::stats::MergeStats;
use super::write_thread::{BUFFER_SIZE, ThreadWriter};
use tracesync_core::jsonl::{JsonlRecord, json_name, write_jsonl_record};
use tracesync_core::sync_point::{offset_pair, sync_point_packet};

/// Longest `Trace.packet` record header: a 1-byte tag and a 10-byte length.
const MAX_RECORD_HEADER: usize = 11;

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
    /// Offset on the clock of trace time's domain, when that is not BOOTTIME.
    domain: Option<(u64, i64)>,
}

pub struct Writer {
    out: ThreadWriter,
    format: Format,
    trace_machine: MachineIdx,
    /// Clock id of trace time.
    trace_clock: u32,
    /// Declare the trace-time machine's BOOTTIME equal to trace time: set
    /// when converted ftrace events (read on BOOTTIME) are written on a
    /// trace time of another clock that BOOTTIME has no path to.
    boottime_is_trace_time: bool,
    /// `Trace.packet` record header of the packet being written.
    header: Vec<u8>,
    /// By machine index.
    sync: Vec<Option<SyncState>>,
    /// JSON-escaped machine names, by machine.
    json_names: Vec<String>,
    /// The jsonl record being formatted (reused: no allocation per packet).
    line: String,
}

impl Writer {
    /// See `boottime_is_trace_time`.
    pub fn equate_boottime_with_trace_time(&mut self) {
        self.boottime_is_trace_time = true;
    }

    pub fn new(
        out: ThreadWriter,
        format: Format,
        machines: &MachineTable,
        trace_machine: MachineIdx,
        trace_clock: u32,
    ) -> Self {
        let json_names = machines
            .iter()
            .map(|(_, m)| json_name(m.name.as_deref()))
            .collect();
        Self {
            out,
            format,
            trace_machine,
            trace_clock,
            boottime_is_trace_time: false,
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
        // Trace time other than BOOTTIME: declared by a snapshot of the
        // output's host before any other, as Perfetto takes the first
        // primary_trace_clock (v52 and the merging reader alike).
        if self.trace_clock != BOOTTIME && (1..=MONOTONIC_RAW).contains(&self.trace_clock) {
            let output_id = machines.get(self.trace_machine).output_id;
            let packet =
                trace_clock_packet(self.trace_clock, output_id, self.boottime_is_trace_time);
            self.write_framed(&packet, stats)?;
        }
        Ok(())
    }

    /// Writes one resolved packet, preceded by a sync point when its
    /// machine's mapping to trace time differs from the last one written.
    pub fn packet(
        &mut self,
        head: &Head,
        body: Body<'_>,
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
                    let domain = head.domain.map(|d| (d, d - head.ts));
                    self.sync_point(head.machine, (c, c - head.ts), domain, machines, stats)?;
                }
                match body {
                    Body::Whole(b) => self.write_framed(b, stats),
                    Body::Split(prefix, tail) => self.write_framed_split(prefix, tail, stats),
                }
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
    ///
    /// With trace time on another clock (REALTIME, MONOTONIC) each entry
    /// also relates that clock, `domain` = (client value, offset): v52
    /// subtracts the BOOTTIME offset from the machine's BOOTTIME, while the
    /// qualified-edge graph (v58+) converts the packet to the machine's
    /// clock of trace time's domain and crosses on that edge.
    fn sync_point(
        &mut self,
        machine: MachineIdx,
        (c, offset): (i64, i64),
        domain: Option<(i64, i64)>,
        machines: &MachineTable,
        stats: &mut MergeStats,
    ) -> io::Result<()> {
        let last = self.sync[machine as usize];
        if last.is_some_and(|s| s.offset == offset && s.domain.map(|d| d.1) == domain.map(|d| d.1))
        {
            return Ok(());
        }
        let floor = last.map_or(0, |s| s.client);
        let (client, host) = offset_pair((c.max(0) as u64).max(floor), offset);
        let domain = domain.map(|(d, off)| {
            let floor = last.and_then(|s| s.domain).map_or(0, |s| s.0);
            let (client, host) = offset_pair((d.max(0) as u64).max(floor), off);
            (client, off, host)
        });
        self.sync[machine as usize] = Some(SyncState {
            client,
            offset,
            domain: domain.map(|(c, off, _)| (c, off)),
        });
        let output_id = machines.get(machine).output_id;
        let body = match domain {
            None => sync_point_packet(output_id, OWN_SEQUENCE_ID, client, host),
            Some((dc, _, dh)) => sync_point_packet_clocks(
                output_id,
                &[(BOOTTIME, client, host), (self.trace_clock, dc, dh)],
            ),
        };
        stats.sync_points_written += 1;
        self.write_framed(&body, stats)
    }

    /// Writes `body` as one `Trace.packet` record: the header, then the body
    /// straight from the caller's buffer (no copy into a frame buffer).
    fn write_framed(&mut self, body: &[u8], stats: &mut MergeStats) -> io::Result<()> {
        self.write_framed_split(body, &[], stats)
    }

    /// Writes `prefix` then `tail` as one `Trace.packet` record.
    fn write_framed_split(
        &mut self,
        prefix: &[u8],
        tail: &[u8],
        stats: &mut MergeStats,
    ) -> io::Result<()> {
        let len = prefix.len() + tail.len();
        if len + MAX_RECORD_HEADER > BUFFER_SIZE {
            self.header.clear();
            wire::put_tag(&mut self.header, 1, wire::WireType::Len);
            wire::put_varint(&mut self.header, len as u64);
            stats.bytes_written += (self.header.len() + len) as u64;
            self.out.write_all(&self.header)?;
            self.out.write_all(prefix)?;
            return self.out.write_all(tail);
        }
        // Header, prefix and tail appended to the output buffer at once.
        let out = self.out.room(len + MAX_RECORD_HEADER)?;
        let before = out.len();
        wire::put_tag(out, 1, wire::WireType::Len);
        wire::put_varint(out, len as u64);
        out.extend_from_slice(prefix);
        out.extend_from_slice(tail);
        stats.bytes_written += (out.len() - before) as u64;
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<ThreadWriter> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A ClockSnapshot on tracesync's own sequence declaring `clock` the
/// primary trace clock (one clock, at 0: it adds no edge; with BOOTTIME
/// beside it at 0 when `with_boottime`).
fn trace_clock_packet(clock: u32, machine_id: u32, with_boottime: bool) -> Vec<u8> {
    let at_zero = |clock_id: u32| Clock {
        clock_id: Some(clock_id),
        timestamp: Some(0),
        ..Default::default()
    };
    let mut clocks = vec![at_zero(clock)];
    if with_boottime {
        clocks.push(at_zero(BOOTTIME));
    }
    let packet = TracePacket {
        data: Some(Data::ClockSnapshot(ClockSnapshot {
            clocks,
            primary_trace_clock: Some(clock as i32),
        })),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(OWN_SEQUENCE_ID),
        ),
        machine_id: (machine_id != 0).then_some(machine_id),
        ..Default::default()
    };
    packet.encode_to_vec()
}

/// A sync point relating several clocks: for each (clock, client, host),
/// two identical entries of that clock alone. Perfetto pairs adjacent
/// entries per clock, so each clock yields exactly its offset, and each
/// entry's client clocks (which it also takes as a snapshot of the machine)
/// hold one clock: no edge between the machine's own clocks is added.
fn sync_point_packet_clocks(machine_id: u32, clocks: &[(u32, u64, u64)]) -> Vec<u8> {
    let snapshot = |clock: u32, value: u64| ClockSnapshot {
        clocks: vec![Clock {
            clock_id: Some(clock),
            timestamp: Some(value),
            ..Default::default()
        }],
        primary_trace_clock: None,
    };
    let synced_clocks = clocks
        .iter()
        .flat_map(|&(clock, client, host)| {
            let entry = SyncedClocks {
                client_clocks: Some(snapshot(clock, client)),
                host_clocks: Some(snapshot(clock, host)),
            };
            [entry.clone(), entry]
        })
        .collect();
    let packet = TracePacket {
        data: Some(Data::RemoteClockSync(RemoteClockSync { synced_clocks })),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(OWN_SEQUENCE_ID),
        ),
        machine_id: Some(machine_id),
        ..Default::default()
    };
    packet.encode_to_vec()
}
