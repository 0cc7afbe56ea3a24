//! The real Perfetto trace processor (v52) judges `tracesync merge` output.
//!
//! Every scenario merges the same inputs twice, to a Perfetto trace and to
//! jsonl, and checks that the trace processor loads the trace with no clock
//! errors, sees exactly the machines of the jsonl, and puts every track-event
//! slice, instant and counter exactly at the jsonl `ts` of its packet. The
//! output packets are decoded too: every packet tracesync copied is paired
//! with its jsonl record (same order), and every machine has one SystemInfo
//! with `machine_name` (trace processor v52 has no `machine.name`).
//!
//! Scenarios also pin a few expected values (Perfetto's vectors TV-21 and
//! TV-23, as tests/tests/merge_vectors.rs builds them), so a merge that is wrong in both
//! outputs the same way still fails.

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::track_event::{NameField, Type};
use tracesync_protocol::perfetto::{Trace, TracePacket, TracePacketDefaults};
use tracesync_tests::build;
use tracesync_tests::run::{Record, merge_jsonl, tracesync};
use tracesync_tests::tp;

const BT: u32 = BOOTTIME;
const MONO: u32 = MONOTONIC;
const RT: u32 = REALTIME;
/// The sequence of the packets tracesync writes itself (docs/format.md).
const OWN_SEQ: u32 = 1;
const S: u64 = 1_000_000_000;

mod chrome_json;
mod found_bugs;
mod inputs;
mod one_file;
mod placement;
mod systrace;

// ---------------------------------------------------------------------------
// Building inputs

fn write(dir: &Path, name: &str, packets: &[TracePacket]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, build::encode_trace(packets)).expect("write trace");
    path
}

fn fixture(name: &str) -> PathBuf {
    tp::repo_root().join("tests").join("fixtures").join(name)
}

fn snap(seq: u32, clocks: &[(u32, u64)]) -> TracePacket {
    build::on_sequence(build::clock_snapshot(clocks), seq)
}

fn on(machine: u32, p: TracePacket) -> TracePacket {
    build::on_machine(p, machine)
}

/// A packet without `timestamp_clock_id` (the file's or sequence's default).
fn no_clock(mut p: TracePacket) -> TracePacket {
    p.timestamp_clock_id = None;
    p
}

/// A slice `name` from `begin` to `end` on `clock`, on track `track` of `seq`.
fn slice(seq: u32, track: u64, clock: u32, begin: u64, end: u64, name: &str) -> [TracePacket; 2] {
    [
        build::slice_begin(begin, clock, seq, track, name),
        build::slice_end(end, clock, seq, track),
    ]
}

/// The track descriptor every scenario puts on a sequence before its events.
fn track(seq: u32, uuid: u64, name: &str) -> TracePacket {
    build::on_sequence(build::track_descriptor(uuid, name, None), seq)
}

fn system_info(release: &str) -> TracePacket {
    build::system_info("Linux", release, "x86_64")
}

// ---------------------------------------------------------------------------
// Running both merges and judging

/// A slice as the trace processor sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TpSlice {
    /// `machine.raw_id`: 0 for the output's host, else the stamped machine id.
    machine: u32,
    name: String,
    ts: i64,
    dur: i64,
}

#[derive(Debug)]
struct Judged {
    out: PathBuf,
    records: Vec<Record>,
    /// jsonl machine (`raw_id`, `machine`) -> machine id stamped in the
    /// output (0 = host). Two inputs may embed one id (ids are scoped per
    /// file); the name tells their machines apart.
    machine_ids: BTreeMap<(u64, String), u32>,
    /// SystemInfo.machine_name by stamped machine id.
    names: BTreeMap<u32, String>,
    slices: Vec<TpSlice>,
    /// `(raw_id, release)` of the trace processor's machine table.
    releases: Vec<(u32, Option<String>)>,
}

impl Judged {
    /// jsonl raw_id -> stamped id, for outputs whose raw ids are unique.
    fn by_raw_id(&self) -> BTreeMap<u64, u32> {
        let map: BTreeMap<u64, u32> = self
            .machine_ids
            .iter()
            .map(|((raw, _), &id)| (*raw, id))
            .collect();
        assert_eq!(map.len(), self.machine_ids.len(), "{:?}", self.machine_ids);
        map
    }

    /// The one slice named `name`.
    fn slice(&self, name: &str) -> &TpSlice {
        let found: Vec<_> = self.slices.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "slices named {name}: {:?}", self.slices);
        found[0]
    }

    /// The output machine id of the jsonl machine named `name`.
    fn machine_named(&self, name: &str) -> u32 {
        let found: Vec<u32> = self
            .names
            .iter()
            .filter(|(_, n)| n.as_str() == name)
            .map(|(&id, _)| id)
            .collect();
        assert_eq!(found.len(), 1, "machines named {name}: {:?}", self.names);
        found[0]
    }
}

fn path_args(inputs: &[&Path]) -> Vec<String> {
    inputs.iter().map(|p| p.display().to_string()).collect()
}

/// `tracesync merge -o OUT` with `extra` flags; panics unless it exits 0.
fn merge_to(out: &Path, inputs: &[&Path], extra: &[&str]) {
    let out_arg = out.display().to_string();
    let mut args = vec!["merge", "-o", out_arg.as_str()];
    args.extend_from_slice(extra);
    let paths = path_args(inputs);
    args.extend(paths.iter().map(String::as_str));
    let o = tracesync(&args);
    assert!(
        o.status.success(),
        "tracesync {args:?} failed ({}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn decode(path: &Path) -> Vec<TracePacket> {
    let bytes = std::fs::read(path).expect("read merged trace");
    Trace::decode(bytes.as_slice())
        .expect("merged trace decodes")
        .packet
}

fn seq_of(p: &TracePacket) -> Option<u32> {
    p.optional_trusted_packet_sequence_id
        .map(|OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(s)| s)
}

fn event_type(p: &TracePacket) -> Option<Type> {
    match &p.data {
        Some(Data::TrackEvent(e)) => Some(e.r#type.and_then(|t| Type::try_from(t).ok())?),
        _ => None,
    }
}

fn inline_name(p: &TracePacket) -> Option<&str> {
    match &p.data {
        Some(Data::TrackEvent(e)) => match &e.name_field {
            Some(NameField::Name(n)) => Some(n),
            _ => None,
        },
        _ => None,
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Merges `inputs` to `merged-<label>.pftrace` and to jsonl.
fn merge_both(dir: &Path, label: &str, inputs: &[&Path], extra: &[&str]) -> (PathBuf, Vec<Record>) {
    let out = dir.join(format!("merged-{label}.pftrace"));
    assert!(
        !inputs.contains(&out.as_path()),
        "{label}: output would overwrite an input"
    );
    merge_to(&out, inputs, extra);
    let (records, code, stderr) = merge_jsonl(inputs, extra);
    assert_eq!(code, 0, "{label}: jsonl merge failed: {stderr}");
    (out, records)
}

/// Per-machine timestamps the jsonl promises for slices and counters.
#[derive(Debug, Default)]
struct Promised {
    /// ts of slice begins and instants: the trace processor's `slice.ts`.
    starts: BTreeMap<u32, Vec<i64>>,
    /// ts of slice ends and instants: `slice.ts + slice.dur`.
    ends: BTreeMap<u32, Vec<i64>>,
    counters: BTreeMap<u32, Vec<i64>>,
    /// Inline-named begins and instants: (machine, name) -> ts.
    named: BTreeMap<(u32, String), Vec<i64>>,
}

/// Merges `inputs` both ways (`extra` flags for both) and checks the trace
/// processor's view of the merged trace against the jsonl.
fn judge(dir: &Path, label: &str, inputs: &[&Path], extra: &[&str]) -> Judged {
    let (out, records) = merge_both(dir, label, inputs, extra);

    // The output's packets: tracesync's own (preamble SystemInfo, sync
    // points), then the inputs' packets one for one with the jsonl records.
    let packets = decode(&out);
    let (own, copied): (Vec<&TracePacket>, Vec<&TracePacket>) =
        packets.iter().partition(|p| seq_of(p) == Some(OWN_SEQ));
    assert_eq!(
        copied.len(),
        records.len(),
        "{label}: every jsonl record is a packet of the trace and vice versa"
    );
    let mut machine_ids: BTreeMap<(u64, String), u32> = BTreeMap::new();
    let mut promised = Promised::default();
    for (i, (p, r)) in copied.iter().zip(&records).enumerate() {
        let raw_id = r["raw_id"].as_u64().expect("raw_id");
        let name = r["machine"].as_str().expect("machine name").to_owned();
        let stamped = p.machine_id.unwrap_or(0);
        let prev = machine_ids.insert((raw_id, name.clone()), stamped);
        assert!(
            prev.is_none_or(|m| m == stamped),
            "{label}: jsonl machine {raw_id} {name:?} is stamped as both {prev:?} and {stamped} (record {i})"
        );
        assert!(
            !matches!(p.data, Some(Data::SystemInfo(_))),
            "{label}: an input SystemInfo was copied (record {i})"
        );
        if let Some(clock) = r["clock"].as_u64() {
            assert_eq!(
                p.timestamp,
                r["clock_ts"].as_u64(),
                "{label}: record {i}: {r}"
            );
            assert_eq!(
                p.timestamp_clock_id.map(u64::from),
                Some(clock),
                "{label}: record {i}: the resolved clock is stamped: {r}"
            );
        }
        let ts = r["ts"].as_i64().expect("ts");
        match event_type(p) {
            Some(Type::SliceBegin) => promised.starts.entry(stamped).or_default().push(ts),
            Some(Type::SliceEnd) => promised.ends.entry(stamped).or_default().push(ts),
            Some(Type::Instant) => {
                promised.starts.entry(stamped).or_default().push(ts);
                promised.ends.entry(stamped).or_default().push(ts);
            }
            Some(Type::Counter) => promised.counters.entry(stamped).or_default().push(ts),
            _ => {}
        }
        if let (Some(Type::SliceBegin | Type::Instant), Some(name)) =
            (event_type(p), inline_name(p))
        {
            promised
                .named
                .entry((stamped, name.to_owned()))
                .or_default()
                .push(ts);
        }
    }
    let mut stamped_ids: Vec<u32> = machine_ids.values().copied().collect();
    stamped_ids.sort_unstable();
    let before = stamped_ids.len();
    stamped_ids.dedup();
    assert_eq!(
        before,
        stamped_ids.len(),
        "{label}: two jsonl machines share a stamped id: {machine_ids:?}"
    );
    // The output's host: packets without machine_id, or a trace-time
    // machine that keeps its embedded id (adopted by Perfetto v58+ onto its
    // host row; v52 shows an empty host row beside it).
    let adopted_host = !stamped_ids.contains(&0)
        && machine_ids
            .iter()
            .any(|((raw, _), stamped)| *raw != 0 && *raw == u64::from(*stamped));
    assert!(
        stamped_ids.contains(&0) || adopted_host,
        "{label}: the output has a host: {machine_ids:?}"
    );

    // One SystemInfo per machine, with machine_name, before any input packet.
    let mut names = BTreeMap::new();
    for p in &own {
        if let Some(Data::SystemInfo(info)) = &p.data {
            let id = p.machine_id.unwrap_or(0);
            let name = info.machine_name.clone().unwrap_or_default();
            assert!(
                !name.is_empty(),
                "{label}: SystemInfo of machine {id} has no machine_name"
            );
            assert!(
                names.insert(id, name).is_none(),
                "{label}: two SystemInfo packets for machine {id}"
            );
        }
    }
    assert_eq!(
        names.keys().copied().collect::<Vec<_>>(),
        stamped_ids,
        "{label}: SystemInfo machines vs jsonl machines"
    );
    for ((raw_id, name), stamped) in &machine_ids {
        assert_eq!(
            &names[stamped], name,
            "{label}: jsonl machine {raw_id} is named as its SystemInfo"
        );
    }
    let first_copied = packets
        .iter()
        .position(|p| seq_of(p) != Some(OWN_SEQ))
        .unwrap_or(packets.len());
    assert!(
        packets[first_copied..]
            .iter()
            .all(|p| !matches!(p.data, Some(Data::SystemInfo(_)))),
        "{label}: SystemInfo packets come first"
    );

    // The trace processor's view.
    let (errors, res) = tp::query_with_error_stats(
        &out,
        &[
            "SELECT raw_id, release FROM machine ORDER BY raw_id",
            "SELECT COALESCE(m.raw_id, 0), s.name, s.ts, s.dur FROM slice s \
             JOIN track t ON s.track_id = t.id LEFT JOIN machine m ON t.machine_id = m.id \
             ORDER BY s.ts, s.id",
            "SELECT COALESCE(m.raw_id, 0), c.ts FROM counter c \
             JOIN track t ON c.track_id = t.id LEFT JOIN machine m ON t.machine_id = m.id",
        ],
    )
    .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(
        errors.is_empty(),
        "{label}: error/data_loss stats: {errors:?}"
    );
    let int = |v: &serde_json::Value| tp::as_i64(v).unwrap_or_else(|| panic!("int: {v}"));
    let id32 = |v: &serde_json::Value| u32::try_from(int(v)).expect("32-bit machine id");
    let releases: Vec<(u32, Option<String>)> = res[0]
        .rows
        .iter()
        .map(|r| (id32(&r[0]), r[1].as_str().map(str::to_owned)))
        .filter(|(id, release)| !(adopted_host && *id == 0 && release.is_none()))
        .collect();
    assert_eq!(
        releases.iter().map(|r| r.0).collect::<Vec<_>>(),
        stamped_ids,
        "{label}: trace processor machines vs jsonl machines {machine_ids:?}"
    );
    let slices: Vec<TpSlice> = res[1]
        .rows
        .iter()
        .map(|r| TpSlice {
            machine: id32(&r[0]),
            name: r[1].as_str().unwrap_or_default().to_owned(),
            ts: int(&r[2]),
            dur: int(&r[3]),
        })
        .collect();
    let mut tp_starts: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    let mut tp_ends: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    let mut tp_named: BTreeMap<(u32, String), Vec<i64>> = BTreeMap::new();
    for s in &slices {
        tp_starts.entry(s.machine).or_default().push(s.ts);
        tp_ends.entry(s.machine).or_default().push(s.ts + s.dur);
        tp_named
            .entry((s.machine, s.name.clone()))
            .or_default()
            .push(s.ts);
    }
    let mut tp_counters: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    for r in &res[2].rows {
        tp_counters.entry(id32(&r[0])).or_default().push(int(&r[1]));
    }
    let norm = |m: BTreeMap<u32, Vec<i64>>| -> BTreeMap<u32, Vec<i64>> {
        m.into_iter().map(|(k, v)| (k, sorted(v))).collect()
    };
    assert!(!slices.is_empty(), "{label}: no slices at all");
    assert_eq!(
        norm(tp_starts),
        norm(promised.starts),
        "{label}: slice.ts per machine vs jsonl ts of begins and instants"
    );
    assert_eq!(
        norm(tp_ends),
        norm(promised.ends),
        "{label}: slice.ts + dur per machine vs jsonl ts of ends and instants"
    );
    assert_eq!(
        norm(tp_counters),
        norm(promised.counters),
        "{label}: counter.ts per machine vs jsonl ts of counter events"
    );
    for (key, want) in promised.named {
        let got = tp_named.get(&key).cloned().unwrap_or_default();
        assert_eq!(
            sorted(got),
            sorted(want),
            "{label}: slices named {} on machine {}",
            key.1,
            key.0
        );
    }
    Judged {
        out,
        records,
        machine_ids,
        names,
        slices,
        releases,
    }
}

/// (name, ts, dur) of every slice of `trace` as the trace processor sees it.
fn tp_slices(trace: &Path) -> Vec<(String, i64, i64)> {
    let res = tp::query(trace, &["SELECT name, ts, dur FROM slice"])
        .unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    sorted(
        res[0]
            .rows
            .iter()
            .map(|r| {
                (
                    r[0].as_str().unwrap_or_default().to_owned(),
                    tp::as_i64(&r[1]).unwrap(),
                    tp::as_i64(&r[2]).unwrap(),
                )
            })
            .collect(),
    )
}

/// Where Perfetto places the input's slices itself, tracesync's output must
/// place them too (but for the slices named in `except`).
fn assert_same_as_input(input: &Path, j: &Judged, except: &[&str]) {
    let keep = |name: &str| !except.contains(&name);
    let merged: Vec<_> = j
        .slices
        .iter()
        .filter(|s| keep(&s.name))
        .map(|s| (s.name.clone(), s.ts, s.dur))
        .collect();
    let mut original = tp_slices(input);
    original.retain(|s| keep(&s.0));
    assert_eq!(
        sorted(merged),
        original,
        "{}: the trace processor places the input's slices elsewhere",
        input.display()
    );
}

fn stats_of(dir: &Path, inputs: &[&Path], extra: &[&str]) -> serde_json::Value {
    let stats = dir.join("stats.json");
    let out = dir.join("stats-out.pftrace");
    let mut flags = vec!["--stats", stats.to_str().unwrap()];
    flags.extend_from_slice(extra);
    merge_to(&out, inputs, &flags);
    serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap()
}
