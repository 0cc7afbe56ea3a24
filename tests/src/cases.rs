//! Harness of `tests/tests/perfetto_cases.rs`: Perfetto's own test cases
//! (trace processor diff tests, clock tracker and proto reader unit tests)
//! rebuilt as input traces, merged by the real `tracesync merge` (Perfetto
//! and jsonl outputs), and read back three ways: the jsonl records, the
//! merged Perfetto trace's own packets (which machine id each slice was
//! stamped with), and a real trace processor (v52) reading that trace.
//!
//! Packets are built as in Perfetto's textprotos: a packet without
//! `timestamp_clock_id` is written without one (the file's default clock
//! applies), so the builders here take the clock as an `Option`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost::Message;
use tracesync_protocol::perfetto::remote_clock_sync::SyncedClocks;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{
    ClockSnapshot, RemoteClockSync, Trace, TracePacket, TrackDescriptor, TrackEvent,
    clock_snapshot, track_event,
};

use crate::archive;
use crate::run::{Record, tracesync};
use crate::tp;

/// Sequence id of the packets tracesync writes itself.
pub const OWN_SEQ: u32 = 1;

/// One packet as raw bytes (extra fields can be appended: a later field
/// of a message is still part of it).
pub type Raw = Vec<u8>;

pub fn raw(p: &TracePacket) -> Raw {
    p.encode_to_vec()
}

/// A ClockSnapshot with no sequence id (as the tracing service writes it).
pub fn snap(clocks: &[(u32, u64)]) -> TracePacket {
    snap_primary(clocks, None)
}

pub fn snap_primary(clocks: &[(u32, u64)], primary: Option<u32>) -> TracePacket {
    TracePacket {
        data: Some(Data::ClockSnapshot(ClockSnapshot {
            clocks: clocks
                .iter()
                .map(|&(id, ts)| clock_snapshot::Clock {
                    clock_id: Some(id),
                    timestamp: Some(ts),
                    ..Default::default()
                })
                .collect(),
            primary_trace_clock: primary.map(|p| p as i32),
        })),
        ..Default::default()
    }
}

pub fn seq(mut p: TracePacket, seq: u32) -> TracePacket {
    p.optional_trusted_packet_sequence_id = Some(
        OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
    );
    p
}

pub fn on(machine: u32, mut p: TracePacket) -> TracePacket {
    p.machine_id = Some(machine);
    p
}

pub fn track(sequence: u32, uuid: u64) -> TracePacket {
    seq(
        TracePacket {
            data: Some(Data::TrackDescriptor(TrackDescriptor {
                uuid: Some(uuid),
                ..Default::default()
            })),
            ..Default::default()
        },
        sequence,
    )
}

fn event(
    sequence: u32,
    ts: u64,
    clock: Option<u32>,
    kind: track_event::Type,
    uuid: u64,
    name: Option<&str>,
) -> TracePacket {
    seq(
        TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: clock,
            data: Some(Data::TrackEvent(TrackEvent {
                r#type: Some(kind as i32),
                track_uuid: Some(uuid),
                name_field: name.map(|n| track_event::NameField::Name(n.into())),
                ..Default::default()
            })),
            ..Default::default()
        },
        sequence,
    )
}

/// A track and a slice `name` on it from `begin` to `end`.
pub fn slice(
    sequence: u32,
    uuid: u64,
    clock: Option<u32>,
    begin: u64,
    end: u64,
    name: &str,
) -> Vec<TracePacket> {
    vec![
        track(sequence, uuid),
        event(
            sequence,
            begin,
            clock,
            track_event::Type::SliceBegin,
            uuid,
            Some(name),
        ),
        event(
            sequence,
            end,
            clock,
            track_event::Type::SliceEnd,
            uuid,
            None,
        ),
    ]
}

/// An instant event `name` (a zero-length slice) on an existing track.
pub fn instant(sequence: u32, uuid: u64, clock: Option<u32>, ts: u64, name: &str) -> TracePacket {
    event(
        sequence,
        ts,
        clock,
        track_event::Type::Instant,
        uuid,
        Some(name),
    )
}

/// (clock id, value) pairs of one side of a sync round.
pub type Clocks<'a> = &'a [(u32, u64)];

/// One `synced_clocks` entry: (client clocks, host clocks).
pub type Round<'a> = (Clocks<'a>, Clocks<'a>);

/// A RemoteClockSync with one entry per round.
pub fn remote_sync(rounds: &[Round<'_>]) -> TracePacket {
    let snapshot = |clocks: &[(u32, u64)]| ClockSnapshot {
        clocks: clocks
            .iter()
            .map(|&(id, ts)| clock_snapshot::Clock {
                clock_id: Some(id),
                timestamp: Some(ts),
                ..Default::default()
            })
            .collect(),
        primary_trace_clock: None,
    };
    TracePacket {
        data: Some(Data::RemoteClockSync(RemoteClockSync {
            synced_clocks: rounds
                .iter()
                .map(|(c, h)| SyncedClocks {
                    client_clocks: Some(snapshot(c)),
                    host_clocks: Some(snapshot(h)),
                })
                .collect(),
        })),
        ..Default::default()
    }
}

/// A `TracingServiceEvent` packet (field 69, `all_data_sources_started`) at
/// `ts` with no clock id, on the service's sequence 1.
pub fn service_event(ts: u64) -> Raw {
    let mut bytes = raw(&seq(
        TracePacket {
            timestamp: Some(ts),
            ..Default::default()
        },
        1,
    ));
    // Tag of field 69, wire type 2; the message {all_data_sources_started: true}.
    bytes.extend_from_slice(&[0xaa, 0x04, 0x02, 0x08, 0x01]);
    bytes
}

/// A trace file of raw packets.
pub fn trace_bytes(packets: &[Raw]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        out.push(0x0a);
        let mut len = p.len() as u64;
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(p);
    }
    out
}

/// A trace of prost packets.
pub fn trace_of(packets: &[TracePacket]) -> Vec<u8> {
    Trace {
        packet: packets.to_vec(),
    }
    .encode_to_vec()
}

/// How the inputs are handed to `tracesync merge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One file per input, in order (a manifest first, as an input).
    Files,
    /// One .zip with the manifest and every input (as Perfetto's tests).
    Zip,
    /// One .tar.
    Tar,
}

/// One case: its input files, manifest and flags.
pub struct Case {
    /// The Perfetto test it comes from (for messages).
    pub origin: &'static str,
    files: Vec<(String, Vec<u8>)>,
    manifest: Option<String>,
    flags: Vec<String>,
    layout: Layout,
}

/// One slice begin or instant of the merged output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub name: String,
    pub ts: i64,
    /// jsonl `raw_id`.
    pub raw_id: u64,
    pub machine: Option<String>,
    /// `machine_id` stamped into the output packet (0: the output's host).
    pub stamped: u32,
}

/// What one merge gave.
pub struct Merged {
    pub origin: &'static str,
    /// Holds the inputs and outputs until dropped.
    pub dir: tempfile::TempDir,
    pub code: i32,
    pub stderr: String,
    pub records: Vec<Record>,
    pub stats: serde_json::Value,
    /// The merged Perfetto trace.
    pub out: PathBuf,
    /// Its input packets (not tracesync's own), one per jsonl record.
    pub copied: Vec<TracePacket>,
    /// tracesync's own packets (SystemInfo, trace clock, sync points).
    pub own: Vec<TracePacket>,
    pub slices: Vec<Slice>,
}

impl Case {
    pub fn new(origin: &'static str) -> Self {
        Self {
            origin,
            files: Vec::new(),
            manifest: None,
            flags: Vec::new(),
            layout: Layout::Files,
        }
    }

    /// An input of prost packets.
    pub fn file(mut self, name: &str, packets: &[TracePacket]) -> Self {
        self.files.push((name.into(), trace_of(packets)));
        self
    }

    /// An input of raw packets.
    pub fn raw_file(mut self, name: &str, packets: &[Raw]) -> Self {
        self.files.push((name.into(), trace_bytes(packets)));
        self
    }

    /// An input of any bytes (a gzipped manifest, a second manifest).
    pub fn bytes(mut self, name: &str, bytes: Vec<u8>) -> Self {
        self.files.push((name.into(), bytes));
        self
    }

    /// `{"perfetto_manifest": <body>}`; the inputs then go in a .zip.
    pub fn manifest(mut self, body: serde_json::Value) -> Self {
        self.manifest = Some(serde_json::json!({ "perfetto_manifest": body }).to_string());
        if self.layout == Layout::Files {
            self.layout = Layout::Zip;
        }
        self
    }

    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    pub fn flag(mut self, flag: &str) -> Self {
        self.flags.push(flag.into());
        self
    }

    fn inputs(&self, dir: &Path) -> Vec<PathBuf> {
        let mut members: Vec<(&str, &[u8])> = Vec::new();
        if let Some(m) = &self.manifest {
            members.push(("perfetto_manifest.json", m.as_bytes()));
        }
        for (name, bytes) in &self.files {
            members.push((name, bytes));
        }
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).expect("write input");
            p
        };
        match self.layout {
            Layout::Files => members.iter().map(|(n, b)| write(n, b)).collect(),
            Layout::Zip => vec![write("case.zip", &archive::zip(&members))],
            Layout::Tar => vec![write("case.tar", &archive::tar(&members))],
        }
    }

    /// Runs `tracesync merge` to a Perfetto trace (with `--stats`) and to
    /// jsonl.
    pub fn merge(&self) -> Merged {
        let dir = tempfile::tempdir().expect("tempdir");
        let inputs: Vec<String> = self
            .inputs(dir.path())
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let out = dir.path().join("merged.pftrace");
        let stats = dir.path().join("stats.json");
        let mut args: Vec<String> = vec![
            "merge".into(),
            "-o".into(),
            out.display().to_string(),
            "--stats".into(),
            stats.display().to_string(),
        ];
        args.extend(self.flags.iter().cloned());
        args.extend(inputs.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = tracesync(&argv);
        let code = run.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        let mut merged = Merged {
            origin: self.origin,
            dir,
            code,
            stderr,
            records: Vec::new(),
            stats: serde_json::Value::Null,
            out,
            copied: Vec::new(),
            own: Vec::new(),
            slices: Vec::new(),
        };
        if code != 0 {
            return merged;
        }
        merged.stats = serde_json::from_slice(&std::fs::read(&stats).expect("stats file"))
            .expect("stats JSON");
        let mut args: Vec<&str> = vec!["merge", "--format", "jsonl"];
        args.extend(self.flags.iter().map(String::as_str));
        args.extend(inputs.iter().map(String::as_str));
        let jsonl = tracesync(&args);
        assert_eq!(
            jsonl.status.code(),
            Some(0),
            "{}: jsonl merge failed: {}",
            self.origin,
            String::from_utf8_lossy(&jsonl.stderr)
        );
        merged.records = String::from_utf8(jsonl.stdout)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("jsonl line"))
            .collect();
        let trace = Trace::decode(std::fs::read(&merged.out).expect("merged trace").as_slice())
            .expect("merged trace decodes");
        let (own, copied): (Vec<_>, Vec<_>) = trace.packet.into_iter().partition(|p| {
            p.optional_trusted_packet_sequence_id
                == Some(OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                    OWN_SEQ,
                ))
        });
        assert_eq!(
            copied.len(),
            merged.records.len(),
            "{}: every jsonl record is a packet of the trace: {:?} vs {:?}",
            self.origin,
            copied
                .iter()
                .map(|p| (p.timestamp, p.timestamp_clock_id))
                .collect::<Vec<_>>(),
            merged
                .records
                .iter()
                .map(|r| (r["kind"].clone(), r["clock_ts"].clone()))
                .collect::<Vec<_>>()
        );
        for (p, r) in copied.iter().zip(&merged.records) {
            if let Some(Data::TrackEvent(e)) = &p.data
                && let Some(track_event::NameField::Name(name)) = &e.name_field
            {
                merged.slices.push(Slice {
                    name: name.clone(),
                    ts: r["ts"].as_i64().expect("ts"),
                    raw_id: r["raw_id"].as_u64().expect("raw_id"),
                    machine: r["machine"].as_str().map(str::to_owned),
                    stamped: p.machine_id.unwrap_or(0),
                });
            }
        }
        merged.copied = copied;
        merged.own = own;
        merged
    }
}

impl Merged {
    /// Asserts the merge succeeded.
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "{}: merge failed: {}",
            self.origin, self.stderr
        );
        self
    }

    /// Asserts the merge failed with exit code 65 and a message containing
    /// `needle` on one line.
    pub fn fails_with(&self, needle: &str) {
        assert_eq!(
            self.code, 65,
            "{}: expected a data error, got {}: {}",
            self.origin, self.code, self.stderr
        );
        assert!(
            self.stderr.lines().any(|l| l.contains(needle)),
            "{}: stderr lacks {needle:?}: {}",
            self.origin,
            self.stderr
        );
    }

    pub fn slice(&self, name: &str) -> &Slice {
        let found: Vec<&Slice> = self.slices.iter().filter(|s| s.name == name).collect();
        assert_eq!(
            found.len(),
            1,
            "{}: slice {name}: {:?}",
            self.origin,
            self.slices
        );
        found[0]
    }

    pub fn has_slice(&self, name: &str) -> bool {
        self.slices.iter().any(|s| s.name == name)
    }

    /// (ts, machine name) of a slice: Perfetto's `_ALIGN_QUERY` columns.
    pub fn at(&self, name: &str) -> (i64, String) {
        let s = self.slice(name);
        (s.ts, s.machine.clone().unwrap_or_default())
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: no stat {name} in {}", self.origin, self.stats))
    }

    /// Distinct jsonl machines (name, raw_id) of the slices.
    pub fn slice_machines(&self) -> Vec<(Option<String>, u64)> {
        let mut v: Vec<_> = self
            .slices
            .iter()
            .map(|s| (s.machine.clone(), s.raw_id))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The jsonl records of a kind.
    pub fn records_of(&self, kind: &str) -> Vec<&Record> {
        self.records.iter().filter(|r| r["kind"] == kind).collect()
    }

    /// Judges the merged trace with the trace processor (v52): every slice
    /// it shows has the ts the jsonl promised and sits on the machine row
    /// of the machine id its packet was stamped with, and it shows as many
    /// slices as tracesync wrote. Returns the machine table's raw ids. None
    /// when the trace processor is not installed (outside CI).
    pub fn judge(&self) -> Option<Vec<i64>> {
        if !tp::require_or_skip(self.origin) {
            return None;
        }
        let res = tp::query(
            &self.out,
            &[
                "SELECT raw_id FROM machine ORDER BY raw_id",
                "SELECT s.name, s.ts, COALESCE(m.raw_id, 0) FROM slice s \
                 JOIN track t ON s.track_id = t.id LEFT JOIN machine m ON t.machine_id = m.id",
            ],
        )
        .unwrap_or_else(|e| panic!("{}: {e}", self.origin));
        let int = |v: &serde_json::Value| tp::as_i64(v).expect("int cell");
        let machines: Vec<i64> = res[0].rows.iter().map(|r| int(&r[0])).collect();
        let mut seen: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for r in &res[1].rows {
            let name = r[0].as_str().unwrap_or_default().to_owned();
            seen.insert(name, (int(&r[1]), int(&r[2])));
        }
        assert_eq!(
            seen.len(),
            self.slices.len(),
            "{}: trace processor slices {seen:?} vs ours {:?}",
            self.origin,
            self.slices
        );
        for s in &self.slices {
            let got = seen.get(&s.name).copied();
            assert_eq!(
                got,
                Some((s.ts, i64::from(s.stamped))),
                "{}: slice {} in the trace processor (ts, machine raw_id) vs jsonl ts and stamped machine",
                self.origin,
                s.name
            );
            assert!(
                machines.contains(&i64::from(s.stamped)),
                "{}: no machine row {} in {machines:?}",
                self.origin,
                s.stamped
            );
        }
        Some(machines)
    }
}
