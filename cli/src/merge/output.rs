//! Writers of the merged stream: a multi-machine Perfetto trace, or one
//! jsonl record per resolved packet (DESIGN.md §5).

use std::io::{self, Write};

use tracesync_protocol::scan::field;
use tracesync_protocol::wire;

use super::machines::{MachineIdx, MachineTable};
use super::second_pass::{Head, OWN_SEQUENCE_ID};
use super::stats::MergeStats;
use tracesync_core::jsonl::{JsonlRecord, json_name, write_jsonl_record};
use tracesync_core::sync_point::{offset_pair, sync_point_packet};

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
