//! `tracesync demo`, offline edition: simulated machines with their own
//! clocks (seconds apart, one drifting) record traces, `merge` puts them on
//! one timeline, and every slice is checked against the ground truth.
//!
//! Until live capture lands, this is the main job end to end: real trace
//! files, the real merge engine, a merged trace that opens in Perfetto UI.

use super::error::DemoError;
use std::path::{Path, PathBuf};

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::track_event::{NameField, Type};
use tracesync_protocol::perfetto::{
    ClockSnapshot, SystemInfo, TracePacket, TrackDescriptor, TrackEvent, Utsname,
};
use tracesync_protocol::wire;

use crate::merge::output::Format;
use crate::merge::{MergeOptions, merge};

/// Wall clock at the demo's start (all machines' REALTIME agree: NTP).
const EPOCH_NS: u64 = 1_763_700_000_000_000_000;
const SNAPSHOT_EVERY_NS: u64 = 100_000_000;
const SLICE_EVERY_NS: u64 = 2_000_000;

/// One simulated machine's clocks as functions of true time `t` (ns).
#[derive(Clone, Copy, Debug)]
struct SimClock {
    boot_offset_ns: u64,
    ppm: f64,
    mono_behind_boot_ns: u64,
}

impl SimClock {
    fn boottime(&self, t: u64) -> u64 {
        self.boot_offset_ns + (t as f64 * (1.0 + self.ppm * 1e-6)).round() as u64
    }
    fn monotonic(&self, t: u64) -> u64 {
        self.boottime(t) - self.mono_behind_boot_ns
    }
    /// Inverse of `monotonic`: the true time of a MONOTONIC reading.
    fn true_time_of_monotonic(&self, mono: u64) -> f64 {
        (mono + self.mono_behind_boot_ns - self.boot_offset_ns) as f64 / (1.0 + self.ppm * 1e-6)
    }
}

#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub machines: usize,
    pub seconds: u64,
    pub out: PathBuf,
}

/// Per-machine result: name, clock model, slices, error vs truth.
#[derive(Clone, Debug)]
pub struct MachineReport {
    pub name: String,
    pub boot_offset_s: f64,
    pub ppm: f64,
    pub events: usize,
    pub p50_error_ns: u64,
    pub max_error_ns: u64,
}

fn sim_clock(k: usize) -> SimClock {
    // The host (k = 0) is the reference; the others booted seconds apart,
    // and the last one's oscillator runs 50 ppm fast.
    let ppm = if k == 0 {
        0.0
    } else {
        [8.0, 50.0, -12.0][(k - 1) % 3]
    };
    SimClock {
        boot_offset_ns: 1_000_000_000 + k as u64 * 3_700_000_000,
        ppm,
        mono_behind_boot_ns: 250_000_000 * k as u64,
    }
}

fn machine_name(k: usize) -> String {
    if k == 0 {
        "host".into()
    } else {
        format!("vm{k}")
    }
}

fn seq(p: TracePacket, seq: u32) -> TracePacket {
    TracePacket {
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        ..p
    }
}

/// Writes one machine's recording (a Perfetto trace) to `path`.
fn record(path: &Path, k: usize, clock: SimClock, seconds: u64) -> std::io::Result<()> {
    let mut out = Vec::new();
    let mut put = |p: TracePacket| wire::put_trace_packet(&mut out, &p.encode_to_vec());
    let info = SystemInfo {
        utsname: Some(Utsname {
            sysname: Some("Linux".into()),
            release: Some("6.1.0-demo".into()),
            machine: Some("x86_64".into()),
            version: None,
        }),
        machine_name: Some(machine_name(k)),
        num_cpus: Some(2),
        ..Default::default()
    };
    put(seq(
        TracePacket {
            data: Some(Data::SystemInfo(info)),
            ..Default::default()
        },
        1,
    ));
    let track = 1000 + k as u64;
    let descriptor = TrackDescriptor {
        uuid: Some(track),
        name: Some(format!("{} worker", machine_name(k))),
        parent_uuid: None,
        ..Default::default()
    };
    put(seq(
        TracePacket {
            data: Some(Data::TrackDescriptor(descriptor)),
            ..Default::default()
        },
        2,
    ));
    let end = seconds * 1_000_000_000;
    let mut next_snapshot = 0;
    let mut t = 0;
    while t < end {
        if t >= next_snapshot {
            let clocks = [
                (BOOTTIME, clock.boottime(t)),
                (MONOTONIC, clock.monotonic(t)),
                (REALTIME, EPOCH_NS + t),
            ]
            .map(|(id, ts)| Clock {
                clock_id: Some(id),
                timestamp: Some(ts),
                ..Default::default()
            })
            .to_vec();
            let snapshot = ClockSnapshot {
                clocks,
                primary_trace_clock: None,
            };
            put(seq(
                TracePacket {
                    timestamp: Some(clock.boottime(t)),
                    data: Some(Data::ClockSnapshot(snapshot)),
                    ..Default::default()
                },
                1,
            ));
            next_snapshot += SNAPSHOT_EVERY_NS;
        }
        for (kind, at, name) in [
            (Type::SliceBegin, t, Some(format!("tick {}", t / 1000))),
            (Type::SliceEnd, t + SLICE_EVERY_NS / 2, None),
        ] {
            let event = TrackEvent {
                r#type: Some(kind as i32),
                track_uuid: Some(track),
                name_field: name.map(NameField::Name),
                ..Default::default()
            };
            put(seq(
                TracePacket {
                    timestamp: Some(clock.monotonic(at)),
                    timestamp_clock_id: Some(MONOTONIC),
                    data: Some(Data::TrackEvent(event)),
                    ..Default::default()
                },
                2,
            ));
        }
        t += SLICE_EVERY_NS;
    }
    std::fs::write(path, out)
}

/// Records, merges, and checks the merge against the ground truth.
pub fn run(opts: &DemoOptions) -> Result<Vec<MachineReport>, DemoError> {
    let inputs_dir = opts.out.join("inputs");
    std::fs::create_dir_all(&inputs_dir).map_err(DemoError::io("create", &inputs_dir))?;
    let machines = opts.machines + 1;
    let mut inputs = Vec::new();
    for k in 0..machines {
        let path = inputs_dir.join(format!("{}.pftrace", machine_name(k)));
        record(&path, k, sim_clock(k), opts.seconds).map_err(DemoError::io("write", &path))?;
        inputs.push(path);
    }
    let merged = opts.out.join("merged.pftrace");
    let jsonl = opts.out.join("merged.jsonl");
    for (format, output) in [(Format::Perfetto, &merged), (Format::Jsonl, &jsonl)] {
        let options = MergeOptions {
            inputs: inputs.clone(),
            manifest: None,
            output: Some(output.clone()),
            format,
            stats: None,
            strict: true,
            machine_per_file: true,
        };
        merge(&options, &mut |fault| eprintln!("tracesync: {fault}"))?;
    }
    let text = std::fs::read_to_string(&jsonl).map_err(DemoError::io("read", &jsonl))?;
    let host = sim_clock(0);
    let mut errors: Vec<Vec<u64>> = vec![Vec::new(); machines];
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).map_err(DemoError::Jsonl)?;
        if record["kind"] != "track_event" {
            continue;
        }
        let name = record["machine"].as_str().unwrap_or_default();
        let Some(k) = (0..machines).find(|&k| machine_name(k) == name) else {
            continue;
        };
        let (Some(raw), Some(ts)) = (record["clock_ts"].as_u64(), record["ts"].as_i64()) else {
            continue;
        };
        // The truth: the host's BOOTTIME at the true time of this event.
        let truth = host.boottime(sim_clock(k).true_time_of_monotonic(raw).round() as u64);
        errors[k].push(ts.abs_diff(truth as i64));
    }
    Ok(errors
        .into_iter()
        .enumerate()
        .map(|(k, mut e)| {
            e.sort_unstable();
            let c = sim_clock(k);
            MachineReport {
                name: machine_name(k),
                boot_offset_s: (c.boot_offset_ns as f64 - host.boot_offset_ns as f64) / 1e9,
                ppm: c.ppm,
                events: e.len(),
                p50_error_ns: e.get(e.len() / 2).copied().unwrap_or(0),
                max_error_ns: e.last().copied().unwrap_or(0),
            }
        })
        .collect())
}
