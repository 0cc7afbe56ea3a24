//! Writes synthetic but realistic Perfetto traces, one file per machine, for
//! benchmarking `tracesync merge` (see scripts/bench-merge.sh).
//!
//! ```text
//! cargo run --release -p tracesync-tests --example gen_trace -- \
//!     --out DIR --machines 4 --megabytes 1024 [--machine-ids] [--seed N] \
//!     [--big-percent 20] [--small]
//! ```
//!
//! Each file `machine-<i>.pftrace` (plain, not gzip) holds about
//! `megabytes / machines` MiB:
//!
//! - a SystemInfo, then a ClockSnapshot {BOOTTIME, MONOTONIC, REALTIME}
//!   every 10 000 packets on sequence 1; each machine has its own uptime,
//!   suspend offset (BOOTTIME - MONOTONIC) and a REALTIME that agrees with
//!   the other machines' to within a few milliseconds, with a small drift;
//! - four track-event sequences (2..=5): a first packet that clears the
//!   incremental state, sets `trace_packet_defaults.timestamp_clock_id =
//!   MONOTONIC` and describes the sequence's tracks, then slice begin/end
//!   events of about 64 bytes: 60% on the sequence default clock, 30% with
//!   an explicit MONOTONIC clock id, 10% on BOOTTIME;
//! - `--big-percent` (20) percent of packets are ~4 KiB `ftrace_events`
//!   bundles (field 1, print events) on sequence 6, on the default clock
//!   (BOOTTIME). At 20% they hold about 95% of the bytes; `--big-percent 0`
//!   gives small packets only, the worst case per byte.
//!
//! `--small` writes the small-packet trace of issue 18 instead: ~50-byte
//! TrackEvent packets only (no bundles) on eight sequences (2..=9) with no
//! sequence default clock, three quarters on the trace's default clock
//! (BOOTTIME) and a quarter with an explicit MONOTONIC clock id, so a merge
//! must convert them; `--machines 1` gives the one-file trace of the issue.
//!
//! Timestamps increase through each file. With `--machine-ids`, files after
//! the first carry `machine_id = <i>` on every packet; otherwise merge them
//! with `--machine-per-file`. Written streaming: memory does not depend on
//! the size.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};
use tracesync_protocol::perfetto::{
    ClockSnapshot, SystemInfo, TracePacket, TracePacketDefaults, TrackDescriptor, Utsname,
    clock_snapshot, trace_packet,
};
use tracesync_protocol::scan::{SEQ_INCREMENTAL_STATE_CLEARED, field};
use tracesync_protocol::wire;

const SNAPSHOT_EVERY: u64 = 10_000;
const CLOCK_SEQ: u32 = 1;
const EVENT_SEQS: std::ops::RangeInclusive<u32> = 2..=5;
/// The event sequences of `--small`.
const SMALL_SEQS: std::ops::RangeInclusive<u32> = 2..=9;
const TRACKS_PER_SEQ: u64 = 4;
const FTRACE_SEQ: u32 = 6;
const BIG_PAYLOAD: usize = 4096;
/// REALTIME of every machine's first packet (2024-01-01), give or take a few ms.
const WALL_START_NS: u64 = 1_704_067_200_000_000_000;

struct Args {
    out: PathBuf,
    machines: u32,
    megabytes: u64,
    machine_ids: bool,
    seed: u64,
    big_percent: u64,
    small: bool,
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: gen_trace --out DIR [--machines N (4)] [--megabytes MiB total (1024)] [--machine-ids] [--seed N] [--big-percent P (20)] [--small]"
    );
    ExitCode::from(64)
}

fn parse_args() -> Option<Args> {
    let mut args = Args {
        out: PathBuf::new(),
        machines: 4,
        megabytes: 1024,
        machine_ids: false,
        seed: 1,
        big_percent: 20,
        small: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => args.out = it.next()?.into(),
            "--machines" => args.machines = it.next()?.parse().ok()?,
            "--megabytes" => args.megabytes = it.next()?.parse().ok()?,
            "--seed" => args.seed = it.next()?.parse().ok()?,
            "--big-percent" => args.big_percent = it.next()?.parse().ok().filter(|&p| p <= 100)?,
            "--machine-ids" => args.machine_ids = true,
            "--small" => args.small = true,
            _ => return None,
        }
    }
    (!args.out.as_os_str().is_empty() && args.machines > 0).then_some(args)
}

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One machine's clocks, all derived from its MONOTONIC.
struct Clocks {
    mono: u64,
    mono_start: u64,
    /// BOOTTIME - MONOTONIC (time spent suspended).
    suspend: u64,
    /// REALTIME at `mono_start`.
    wall_start: u64,
    /// REALTIME drift against MONOTONIC, parts per million (NTP slewing).
    drift_ppm: u64,
}

impl Clocks {
    fn boottime(&self) -> u64 {
        self.mono + self.suspend
    }

    fn realtime(&self) -> u64 {
        let elapsed = self.mono - self.mono_start;
        self.wall_start + elapsed + elapsed / 1_000_000 * self.drift_ppm
    }
}

struct Gen {
    out: BufWriter<File>,
    body: Vec<u8>,
    frame: Vec<u8>,
    scratch: Vec<u8>,
    rng: Rng,
    clocks: Clocks,
    machine_id: Option<u32>,
    written: u64,
    packets: u64,
    /// Per event sequence and track: whether a slice is open.
    open: Vec<bool>,
    /// The event sequences.
    seqs: std::ops::RangeInclusive<u32>,
    /// `--small`: ~50-byte events, a quarter on MONOTONIC, no default clock.
    small: bool,
}

impl Gen {
    fn emit(&mut self) -> std::io::Result<()> {
        if let Some(m) = self.machine_id {
            wire::put_varint_field(&mut self.body, field::MACHINE_ID, u64::from(m));
        }
        self.frame.clear();
        wire::put_trace_packet(&mut self.frame, &self.body);
        self.body.clear();
        self.written += self.frame.len() as u64;
        self.packets += 1;
        self.out.write_all(&self.frame)
    }

    fn emit_prost(&mut self, mut p: TracePacket, seq: u32) -> std::io::Result<()> {
        p.optional_trusted_packet_sequence_id =
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq));
        p.machine_id = self.machine_id;
        self.frame.clear();
        wire::put_trace_packet(&mut self.frame, &p.encode_to_vec());
        self.written += self.frame.len() as u64;
        self.packets += 1;
        self.out.write_all(&self.frame)
    }

    fn system_info(&mut self, index: u32) -> std::io::Result<()> {
        let info = SystemInfo {
            utsname: Some(Utsname {
                sysname: Some("Linux".into()),
                version: Some("#1 SMP PREEMPT_DYNAMIC".into()),
                release: Some("6.8.0-bench".into()),
                machine: Some("x86_64".into()),
            }),
            tracing_service_version: Some("Perfetto v49.0".into()),
            page_size: Some(4096),
            num_cpus: Some(8),
            system_ram_bytes: Some(16 << 30),
            machine_name: Some(format!("bench-{index}")),
            ..Default::default()
        };
        let p = TracePacket {
            data: Some(trace_packet::Data::SystemInfo(info)),
            ..Default::default()
        };
        self.emit_prost(p, CLOCK_SEQ)
    }

    fn clock_snapshot(&mut self) -> std::io::Result<()> {
        let clock = |id, ts| clock_snapshot::Clock {
            clock_id: Some(id),
            timestamp: Some(ts),
            ..Default::default()
        };
        let c = &self.clocks;
        let snap = ClockSnapshot {
            clocks: vec![
                clock(BOOTTIME, c.boottime()),
                clock(MONOTONIC, c.mono),
                clock(REALTIME, c.realtime()),
            ],
            primary_trace_clock: None,
        };
        let p = TracePacket {
            timestamp: Some(c.boottime()),
            data: Some(trace_packet::Data::ClockSnapshot(snap)),
            ..Default::default()
        };
        self.emit_prost(p, CLOCK_SEQ)
    }

    /// First packets of an event sequence: clear state, default clock, tracks.
    fn sequence_start(&mut self, seq: u32) -> std::io::Result<()> {
        for t in 0..TRACKS_PER_SEQ {
            let uuid = track_uuid(seq, t);
            let mut p = TracePacket {
                data: Some(trace_packet::Data::TrackDescriptor(TrackDescriptor {
                    uuid: Some(uuid),
                    name: Some(format!("worker-{seq}-{t}")),
                    parent_uuid: None,
                    ..Default::default()
                })),
                ..Default::default()
            };
            if t == 0 {
                p.sequence_flags = Some(SEQ_INCREMENTAL_STATE_CLEARED);
                p.incremental_state_cleared = Some(true);
                if !self.small {
                    p.trace_packet_defaults = Some(TracePacketDefaults {
                        timestamp_clock_id: Some(MONOTONIC),
                    });
                }
            }
            self.emit_prost(p, seq)?;
        }
        Ok(())
    }

    /// A slice begin or end of about 64 bytes (about 50 with `--small`).
    fn track_event(&mut self) -> std::io::Result<()> {
        let seqs = u64::from(*self.seqs.end() - *self.seqs.start() + 1);
        let slot = self.rng.below(seqs * TRACKS_PER_SEQ);
        let seq = *self.seqs.start() + (slot / TRACKS_PER_SEQ) as u32;
        let uuid = track_uuid(seq, slot % TRACKS_PER_SEQ);
        let begin = !self.open[slot as usize];
        self.open[slot as usize] = begin;
        let (ts, clock) = if self.small {
            match self.rng.below(4) {
                0 => (self.clocks.mono, Some(MONOTONIC)),
                _ => (self.clocks.boottime(), None),
            }
        } else {
            match self.rng.below(10) {
                0..=5 => (self.clocks.mono, None),
                6..=8 => (self.clocks.mono, Some(MONOTONIC)),
                _ => (self.clocks.boottime(), Some(BOOTTIME)),
            }
        };
        let (category, name_min): (&[u8], usize) = if self.small {
            (b"io", 18)
        } else {
            (b"bench,io", 20)
        };
        let e = &mut self.scratch;
        e.clear();
        wire::put_len_field(e, 22, category);
        wire::put_varint_field(e, 9, if begin { 1 } else { 2 });
        wire::put_varint_field(e, 11, uuid);
        if begin {
            let n = name_min + self.rng.below(16) as usize;
            let name = &b"compositor::draw_frame_and_submit_to_display"[..n];
            wire::put_len_field(e, 23, name);
        } else {
            // Slice ends carry a flow id, as real ones often do.
            wire::put_varint_field(e, 36, self.rng.next() >> 8);
        }
        let b = &mut self.body;
        wire::put_varint_field(b, field::TIMESTAMP, ts);
        if let Some(c) = clock {
            wire::put_varint_field(b, field::TIMESTAMP_CLOCK_ID, u64::from(c));
        }
        wire::put_len_field(b, 11, e);
        wire::put_varint_field(b, field::TRUSTED_PACKET_SEQUENCE_ID, u64::from(seq));
        self.emit()
    }

    /// An `ftrace_events` bundle of about 4 KiB of print events.
    fn ftrace_bundle(&mut self) -> std::io::Result<()> {
        let ts = self.clocks.boottime();
        let bundle = &mut self.scratch;
        bundle.clear();
        wire::put_varint_field(bundle, 1, self.rng.below(8)); // cpu
        let mut event = Vec::with_capacity(128);
        let mut print = Vec::with_capacity(96);
        let mut t = ts.saturating_sub(50_000);
        while bundle.len() < BIG_PAYLOAD - 100 {
            t += 1 + self.rng.below(500);
            print.clear();
            wire::put_varint_field(
                &mut print,
                1,
                0xffff_ffff_8100_0000 | self.rng.below(1 << 20),
            );
            wire::put_len_field(
                &mut print,
                2,
                b"B|1234|binder_transaction_async:queue_work_on_cpu\n",
            );
            event.clear();
            wire::put_varint_field(&mut event, 1, t);
            wire::put_varint_field(&mut event, 2, 1000 + self.rng.below(30_000));
            wire::put_len_field(&mut event, 3, &print);
            wire::put_len_field(bundle, 2, &event);
        }
        let b = &mut self.body;
        wire::put_varint_field(b, field::TIMESTAMP, ts);
        wire::put_len_field(b, 1, bundle);
        wire::put_varint_field(b, field::TRUSTED_PACKET_SEQUENCE_ID, u64::from(FTRACE_SEQ));
        self.emit()
    }
}

fn track_uuid(seq: u32, t: u64) -> u64 {
    0x1000_0000 + (u64::from(seq) << 8) + t
}

fn generate(args: &Args, index: u32, bytes: u64) -> std::io::Result<(u64, u64)> {
    let path = args.out.join(format!("machine-{index}.pftrace"));
    let file = File::create(&path)?;
    let mut rng = Rng(args.seed ^ (u64::from(index) + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mono_start = 3_600_000_000_000 * (1 + u64::from(index)) + rng.below(1_000_000_000);
    let clocks = Clocks {
        mono: mono_start,
        mono_start,
        suspend: 60_000_000_000 * u64::from(index) + rng.below(10_000_000_000),
        wall_start: WALL_START_NS + rng.below(5_000_000),
        drift_ppm: rng.below(20),
    };
    let event_seqs = if args.small { SMALL_SEQS } else { EVENT_SEQS };
    let seqs = (*event_seqs.end() - *event_seqs.start() + 1) as usize;
    let mut g = Gen {
        out: BufWriter::with_capacity(1 << 20, file),
        body: Vec::with_capacity(8192),
        frame: Vec::with_capacity(8192),
        scratch: Vec::with_capacity(8192),
        rng,
        clocks,
        machine_id: (args.machine_ids && index > 0).then_some(index),
        written: 0,
        packets: 0,
        open: vec![false; seqs * TRACKS_PER_SEQ as usize],
        seqs: event_seqs.clone(),
        small: args.small,
    };
    g.system_info(index)?;
    g.clock_snapshot()?;
    for seq in event_seqs {
        g.sequence_start(seq)?;
    }
    let mut since_snapshot = 0;
    while g.written < bytes {
        g.clocks.mono += 200 + g.rng.below(1000);
        if since_snapshot >= SNAPSHOT_EVERY {
            g.clock_snapshot()?;
            since_snapshot = 0;
        }
        if !args.small && g.rng.below(100) < args.big_percent {
            g.ftrace_bundle()?;
        } else {
            g.track_event()?;
        }
        since_snapshot += 1;
    }
    g.out.flush()?;
    Ok((g.written, g.packets))
}

fn main() -> ExitCode {
    let Some(args) = parse_args() else {
        return usage();
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("gen_trace: cannot create {}: {e}", args.out.display());
        return ExitCode::from(73);
    }
    let per_machine = (args.megabytes << 20) / u64::from(args.machines);
    for index in 0..args.machines {
        match generate(&args, index, per_machine) {
            Ok((bytes, packets)) => {
                eprintln!("machine-{index}.pftrace: {bytes} bytes, {packets} packets");
            }
            Err(e) => {
                eprintln!("gen_trace: machine {index}: {e}");
                return ExitCode::from(74);
            }
        }
    }
    ExitCode::SUCCESS
}
