//! Checks a rolling output dir by the synthetic identities: every packet's
//! host time resolved as Perfetto's trace processor does, and per source
//! the counters missing, seen twice, and the worst distance to truth.
//!
//! Resolution (what trace processor v52 does with our files): a packet of
//! the host (machine 0) is in trace time already; a packet of a remote
//! machine is in that machine's BOOTTIME and lands at `ts - offset`, where
//! `offset` (client minus host) comes from the latest RemoteClockSync of
//! that machine earlier in the same file (pairs of entries averaged as in
//! `CalculateClockOffsets`). Each file is judged alone, as it must open.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::Message;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::perfetto::{RemoteClockSync, SystemInfo};
use tracesync_protocol::reader::TraceFile;
use tracesync_protocol::scan::{self, FieldValue, RawField};

/// TrackEvent types (TrackEvent.type = 9).
pub const SLICE_BEGIN: u64 = 1;
pub const SLICE_END: u64 = 2;
pub const COUNTER: u64 = 4;

/// Counters beyond this are reported, not tracked (bounded memory).
const MAX_COUNTER: u64 = 1 << 28;
/// Pairs of sync entries further apart are not one round (Perfetto).
const SYNC_ROUND_NS: i64 = 30_000_000_000;

/// The identity annotations of one synthetic TrackEvent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub src: Arc<str>,
    pub n: u64,
    pub truth_ns: u64,
}

/// One synthetic event as found in a file.
#[derive(Clone, Debug)]
pub struct Event {
    pub id: Identity,
    pub machine: u32,
    /// TrackEvent.type (1 begin, 2 end, 4 counter).
    pub kind: u64,
    /// The packet's own timestamp (the relay's BOOTTIME for remote ones).
    pub ts: u64,
    /// Trace time as Perfetto resolves it.
    pub ts_host: i64,
    /// Remote event with no sync point before it in its file.
    pub unsynced: bool,
    /// Clock id other than BOOTTIME (not resolvable by this checker).
    pub other_clock: bool,
    /// Among the file's preamble packets (index.jsonl `preamble_packets`).
    pub in_preamble: bool,
}

/// One file, read alone.
#[derive(Clone, Debug, Default)]
pub struct FileScan {
    pub path: PathBuf,
    pub packets: u64,
    pub events: Vec<Event>,
    /// SystemInfo.machine_name by machine id (latest).
    pub machine_names: BTreeMap<u32, String>,
    /// Machine ids of all packets.
    pub machines: BTreeMap<u32, u64>,
    pub sync_points: u64,
    /// A read error (torn or corrupt file), if any.
    pub error: Option<String>,
}

/// Reads one rolled file; `preamble_packets` from its index line.
pub fn scan_file(path: &Path, preamble_packets: Option<u64>) -> FileScan {
    let mut out = FileScan {
        path: path.to_path_buf(),
        ..FileScan::default()
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            out.error = Some(format!("{}: {e}", path.display()));
            return out;
        }
    };
    let mut reader = match TraceFile::new(file) {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(format!("{}: {e}", path.display()));
            return out;
        }
    };
    let mut offsets: HashMap<u32, i64> = HashMap::new();
    let mut srcs: HashMap<Vec<u8>, Arc<str>> = HashMap::new();
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                out.error = Some(format!("{}: {e}", path.display()));
                break;
            }
        };
        let index = out.packets;
        out.packets += 1;
        let bytes = packet.bytes;
        let Ok(fields) = scan::scan_packet(bytes) else {
            out.error = Some(format!("{}: packet {index} does not scan", path.display()));
            continue;
        };
        let machine = fields.machine_id.unwrap_or(0);
        *out.machines.entry(machine).or_default() += 1;
        if let Some(info) = fields.system_info
            && let Ok(info) = SystemInfo::decode(info)
            && let Some(name) = info.machine_name
        {
            out.machine_names.insert(machine, name);
        }
        if let Some(sync) = fields.remote_clock_sync {
            out.sync_points += 1;
            if let Some(offset) = RemoteClockSync::decode(sync)
                .ok()
                .and_then(|s| sync_offset(&s))
            {
                offsets.insert(machine, offset);
            }
        }
        let Some((kind, id)) = read_identity(bytes, &mut srcs) else {
            continue;
        };
        let ts = fields.timestamp.unwrap_or(0);
        let other_clock = fields.timestamp_clock_id.is_some_and(|c| c != BOOTTIME);
        let (ts_host, unsynced) = if machine == 0 {
            (ts as i64, false)
        } else {
            match offsets.get(&machine) {
                Some(off) => (ts as i64 - off, false),
                None => (ts as i64, true),
            }
        };
        out.events.push(Event {
            id,
            machine,
            kind,
            ts,
            ts_host,
            unsynced,
            other_clock,
            in_preamble: preamble_packets.is_some_and(|p| index < p),
        });
    }
    out
}

/// Client-minus-host BOOTTIME offset of a RemoteClockSync, as trace
/// processor computes it: for each adjacent pair of entries less than 30 s
/// apart, (t1c + t2c)/2 - t1h and t2c - (t1h + t2h)/2; the mean of all.
pub fn sync_offset(sync: &RemoteClockSync) -> Option<i64> {
    let boottime = |s: &Option<tracesync_protocol::perfetto::ClockSnapshot>| {
        s.as_ref()?
            .clocks
            .iter()
            .find(|c| c.clock_id == Some(BOOTTIME))
            .and_then(|c| c.timestamp)
            .map(|t| t as i64)
    };
    let entries: Vec<(i64, i64)> = sync
        .synced_clocks
        .iter()
        .filter_map(|e| Some((boottime(&e.client_clocks)?, boottime(&e.host_clocks)?)))
        .collect();
    let mut values = Vec::new();
    for w in entries.windows(2) {
        let ((t1c, t1h), (t2c, t2h)) = (w[0], w[1]);
        if t2c - t1c >= SYNC_ROUND_NS || [t1c, t1h, t2c, t2h].contains(&0) {
            continue;
        }
        values.push((t1c + t2c) / 2 - t1h);
        values.push(t2c - (t1h + t2h) / 2);
    }
    if values.is_empty() {
        return None;
    }
    Some(values.iter().sum::<i64>() / values.len() as i64)
}

/// (TrackEvent.type, identity) of a packet whose TrackEvent (field 11)
/// carries the annotations tracesync_src / tracesync_n / tracesync_truth_ns
/// (TrackEvent.debug_annotations = 4; DebugAnnotation name = 10,
/// uint_value = 3, string_value = 6).
fn read_identity(packet: &[u8], srcs: &mut HashMap<Vec<u8>, Arc<str>>) -> Option<(u64, Identity)> {
    let event = scan::Fields::new(packet).find_map(|f| match f {
        Ok(RawField {
            number: 11,
            value: FieldValue::Len(b),
            ..
        }) => Some(b),
        _ => None,
    })?;
    let (mut kind, mut src, mut n, mut truth) = (0, None, None, None);
    for f in scan::Fields::new(event) {
        let f = f.ok()?;
        match (f.number, f.value) {
            (9, FieldValue::Varint(v)) => kind = v,
            (4, FieldValue::Len(annotation)) => {
                let (mut name, mut uint, mut string) = (None, None, None);
                for g in scan::Fields::new(annotation) {
                    let g = g.ok()?;
                    match (g.number, g.value) {
                        (10, FieldValue::Len(b)) => name = Some(b),
                        (3, FieldValue::Varint(v)) => uint = Some(v),
                        (6, FieldValue::Len(b)) => string = Some(b),
                        _ => {}
                    }
                }
                match name {
                    Some(b"tracesync_src") => src = string,
                    Some(b"tracesync_n") => n = uint,
                    Some(b"tracesync_truth_ns") => truth = uint,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let src = src?;
    let src = match srcs.get(src) {
        Some(s) => s.clone(),
        None => {
            let s: Arc<str> = Arc::from(String::from_utf8_lossy(src).as_ref());
            srcs.insert(src.to_vec(), s.clone());
            s
        }
    };
    Some((
        kind,
        Identity {
            src,
            n: n?,
            truth_ns: truth?,
        },
    ))
}

/// Per source (`tracesync_src`) results over all files.
#[derive(Clone, Debug, Default)]
pub struct SourceCheck {
    pub machine: u32,
    pub events: u64,
    pub max_n: u64,
    /// Counters in 0..=max_n never seen, and the first few of them.
    pub missing: u64,
    pub missing_sample: Vec<u64>,
    /// Counters seen more than once (each extra sighting counts).
    pub duplicates: u64,
    pub duplicate_sample: Vec<u64>,
    /// Largest |resolved host time - truth| and the counter it was at.
    pub max_abs_err_ns: u64,
    pub worst_n: u64,
    seen: Vec<u8>,
}

impl SourceCheck {
    fn add(&mut self, e: &Event) {
        self.machine = e.machine;
        self.events += 1;
        let err = (e.ts_host - e.id.truth_ns as i64).unsigned_abs();
        if err > self.max_abs_err_ns || self.events == 1 {
            self.max_abs_err_ns = err;
            self.worst_n = e.id.n;
        }
        if e.id.n >= MAX_COUNTER {
            self.duplicates += 1; // not tracked: report rather than ignore
            return;
        }
        let n = e.id.n as usize;
        if self.seen.len() <= n {
            self.seen.resize(n + 1, 0);
        }
        self.seen[n] = self.seen[n].saturating_add(1);
        if self.seen[n] > 1 {
            self.duplicates += 1;
            if self.duplicate_sample.len() < 10 {
                self.duplicate_sample.push(e.id.n);
            }
        }
    }

    fn finish(&mut self) {
        self.max_n = self.seen.len().saturating_sub(1) as u64;
        self.missing = self.seen.iter().filter(|&&c| c == 0).count() as u64;
        self.missing_sample = (0..self.seen.len())
            .filter(|&i| self.seen[i] == 0)
            .take(10)
            .map(|i| i as u64)
            .collect();
        self.seen = Vec::new();
    }
}

/// The whole output dir, checked.
#[derive(Clone, Debug, Default)]
pub struct OutputCheck {
    pub files: Vec<FileScan>,
    pub sources: BTreeMap<String, SourceCheck>,
    /// Lines of index.jsonl.
    pub index: Vec<serde_json::Value>,
    /// SystemInfo machine names over all files, by machine id.
    pub machine_names: BTreeMap<u32, String>,
    pub events: u64,
    pub events_in_preamble: u64,
    pub unsynced_events: u64,
    pub other_clock_events: u64,
    pub errors: Vec<String>,
}

impl OutputCheck {
    pub fn missing(&self) -> u64 {
        self.sources.values().map(|s| s.missing).sum()
    }

    pub fn duplicates(&self) -> u64 {
        self.sources.values().map(|s| s.duplicates).sum()
    }

    /// Worst |resolved - truth| over the sources of `machine`.
    pub fn max_err_of_machine(&self, machine: u32) -> u64 {
        self.sources
            .values()
            .filter(|s| s.machine == machine)
            .map(|s| s.max_abs_err_ns)
            .max()
            .unwrap_or(0)
    }

    /// The machine id named `name` by a SystemInfo.
    pub fn machine_named(&self, name: &str) -> Option<u32> {
        self.machine_names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| *id)
    }

    /// The source of relay `name` (synthetic sources are `<name>/<index>`).
    pub fn source_of(&self, name: &str, index: u32) -> Option<&SourceCheck> {
        self.sources.get(&format!("{name}/{index}"))
    }

    /// A multi-line summary for failure messages and test output.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} files, {} synthetic events ({} in preambles, {} unsynced, {} other clock), \
             machines {:?}, errors {:?}\n",
            self.files.len(),
            self.events,
            self.events_in_preamble,
            self.unsynced_events,
            self.other_clock_events,
            self.machine_names,
            self.errors
        );
        for (src, c) in &self.sources {
            s.push_str(&format!(
                "  {src} (machine {}): {} events, max n {}, missing {} {:?}, duplicates {} {:?}, \
                 max |err| {} ns at n={}\n",
                c.machine,
                c.events,
                c.max_n,
                c.missing,
                c.missing_sample,
                c.duplicates,
                c.duplicate_sample,
                c.max_abs_err_ns,
                c.worst_n
            ));
        }
        s
    }

    /// Panics (with the summary) unless every file reads cleanly and every
    /// source is complete: no counter missing or twice, no event in a
    /// preamble, none unsynced or on another clock.
    pub fn assert_complete(&self) {
        assert!(
            self.errors.is_empty()
                && self.missing() == 0
                && self.duplicates() == 0
                && self.events_in_preamble == 0
                && self.unsynced_events == 0
                && self.other_clock_events == 0
                && self.events > 0,
            "output incomplete:\n{}",
            self.summary()
        );
    }
}

/// The rolled trace files of `dir`, in order.
pub fn rolled_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "pftrace"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The lines of `dir/index.jsonl` (empty if none).
pub fn read_index(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("index.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Reads every rolled file of `dir` and checks the synthetic identities.
pub fn check_output(dir: &Path) -> OutputCheck {
    let mut check = OutputCheck {
        index: read_index(dir),
        ..OutputCheck::default()
    };
    for path in rolled_files(dir) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let preamble = check
            .index
            .iter()
            .find(|l| l["name"].as_str() == Some(name))
            .and_then(|l| l["preamble_packets"].as_u64());
        let scan = scan_file(&path, preamble);
        if let Some(e) = &scan.error {
            check.errors.push(e.clone());
        }
        check
            .machine_names
            .extend(scan.machine_names.iter().map(|(k, v)| (*k, v.clone())));
        for e in &scan.events {
            check.events += 1;
            check.events_in_preamble += u64::from(e.in_preamble);
            check.unsynced_events += u64::from(e.unsynced);
            check.other_clock_events += u64::from(e.other_clock);
            check
                .sources
                .entry(e.id.src.to_string())
                .or_default()
                .add(e);
        }
        check.files.push(scan);
    }
    for s in check.sources.values_mut() {
        s.finish();
    }
    check
}
