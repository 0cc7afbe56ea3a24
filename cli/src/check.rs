//! Checks a live capture's rolling output against the synthetic sources'
//! ground truth: every packet's identity (source, counter) exactly once, and
//! its time, as Perfetto would place it, next to the true host time.
//!
//! Used by `tracesync demo` and by the integration tests. Reads the files
//! the way the trace processor does: per file, in stream order, a remote
//! machine's BOOTTIME shifted by the latest sync point (RemoteClockSync)
//! seen for that machine in that file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tracesync_capture::names::writing_order;

use hdrhistogram::Histogram;
use prost::Message;
use tracesync_core::sync_quality::{QualityTrack, bound_us_to_ns, read_sample};
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::perfetto::RemoteClockSync;
use tracesync_protocol::reader::{FileReadError, TraceFile};
use tracesync_protocol::scan::{FieldValue, Fields, scan_packet};

/// TracePacket.track_event, TrackEvent.debug_annotations, and the
/// DebugAnnotation fields the synthetic source writes.
const TRACK_EVENT: u32 = 11;
const DEBUG_ANNOTATIONS: u32 = 4;
const ANNOTATION_NAME: u32 = 10;
const ANNOTATION_UINT: u32 = 3;
const ANNOTATION_STRING: u32 = 6;

/// Identities and errors of one synthetic source.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceCheck {
    /// Packets carrying this source's identity.
    pub packets: u64,
    /// Counters absent between 0 and the highest seen.
    pub missing: u64,
    /// Packets whose counter was already seen.
    pub duplicates: u64,
    pub highest: Option<u64>,
    /// |placed ts - truth| over the packets (ns).
    pub max_error_ns: u64,
    /// Percentiles from an hdrhistogram (3 significant digits: within 0.1%).
    pub p50_error_ns: u64,
    pub p99_error_ns: u64,
    /// The error bound each packet had, read from its machine's error-bound
    /// track (0 on the host): its median and 99th percentile (ns).
    pub p50_bound_ns: u64,
    pub p99_bound_ns: u64,
    /// Packets whose error was within their bound.
    pub inside: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    pub files: Vec<PathBuf>,
    /// By `"<machine>/<source index>"`.
    pub sources: BTreeMap<String, SourceCheck>,
    /// Packets that could not be read (torn tail of a file being written).
    pub unreadable: Vec<String>,
}

impl CheckReport {
    pub fn total_missing(&self) -> u64 {
        self.sources.values().map(|s| s.missing).sum()
    }
    pub fn total_duplicates(&self) -> u64 {
        self.sources.values().map(|s| s.duplicates).sum()
    }
    pub fn total_packets(&self) -> u64 {
        self.sources.values().map(|s| s.packets).sum()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CheckError {
    pub path: PathBuf,
    pub message: String,
}

/// The identity annotations of a synthetic TrackEvent packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub src: String,
    pub n: u64,
    pub truth_ns: u64,
}

/// Reads tracesync_src / tracesync_n / tracesync_truth_ns from a packet.
pub fn identity(packet: &[u8]) -> Option<Identity> {
    let event = Fields::new(packet).find_map(|f| match f.ok()? {
        f if f.number == TRACK_EVENT => match f.value {
            FieldValue::Len(b) => Some(b),
            _ => None,
        },
        _ => None,
    })?;
    let mut id = Identity::default();
    let (mut has_src, mut has_n, mut has_truth) = (false, false, false);
    for f in Fields::new(event) {
        let f = f.ok()?;
        let (DEBUG_ANNOTATIONS, FieldValue::Len(annotation)) = (f.number, f.value) else {
            continue;
        };
        let (mut name, mut uint, mut string) = (None, None, None);
        for a in Fields::new(annotation) {
            let a = a.ok()?;
            match (a.number, a.value) {
                (ANNOTATION_NAME, FieldValue::Len(b)) => name = Some(b),
                (ANNOTATION_UINT, FieldValue::Varint(v)) => uint = Some(v),
                (ANNOTATION_STRING, FieldValue::Len(b)) => string = Some(b),
                _ => {}
            }
        }
        match (name, uint, string) {
            (Some(b"tracesync_src"), _, Some(s)) => {
                id.src = String::from_utf8_lossy(s).into_owned();
                has_src = true;
            }
            (Some(b"tracesync_n"), Some(v), _) => (id.n, has_n) = (v, true),
            (Some(b"tracesync_truth_ns"), Some(v), _) => (id.truth_ns, has_truth) = (v, true),
            _ => {}
        }
    }
    (has_src && has_n && has_truth).then_some(id)
}

/// Rolled files of `dir`, oldest first (names sort by start time and seq).
pub fn trace_files(dir: &Path) -> Result<Vec<PathBuf>, CheckError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CheckError {
        path: dir.to_owned(),
        message: format!("cannot list: {e}"),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pftrace"))
        .collect();
    let name = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned()
    };
    files.sort_by_cached_key(|p| {
        let name = name(p);
        (writing_order(&name).0, name)
    });
    Ok(files)
}

#[derive(Default)]
struct Tally {
    seen: Vec<u64>,
    packets: u64,
    duplicates: u64,
    /// Errors and bounds (ns) at 3 significant digits, and the largest
    /// error exactly.
    errors: Option<Histogram<u64>>,
    bounds: Option<Histogram<u64>>,
    max_error_ns: u64,
    inside: u64,
}

impl Tally {
    fn add(&mut self, n: u64, error_ns: u64, bound_ns: u64) {
        self.packets += 1;
        crate::quantiles::record(&mut self.errors, error_ns);
        crate::quantiles::record(&mut self.bounds, bound_ns);
        self.max_error_ns = self.max_error_ns.max(error_ns);
        if error_ns <= bound_ns {
            self.inside += 1;
        }
        // One bit per counter; counters are dense from 0.
        let (word, bit) = ((n / 64) as usize, n % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            self.duplicates += 1;
        }
        self.seen[word] |= 1 << bit;
    }

    fn finish(self) -> SourceCheck {
        let distinct: u64 = self.seen.iter().map(|w| u64::from(w.count_ones())).sum();
        let highest = self
            .seen
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i as u64 * 64 + 63 - u64::from(w.leading_zeros()));
        let at = |h: &Option<Histogram<u64>>, q: f64| crate::quantiles::at(h.as_ref(), q);
        let pick = |q: f64| at(&self.errors, q);
        SourceCheck {
            packets: self.packets,
            missing: highest.map_or(0, |h| h + 1 - distinct),
            duplicates: self.duplicates,
            highest,
            max_error_ns: self.max_error_ns,
            p50_error_ns: pick(0.5),
            p99_error_ns: pick(0.99),
            p50_bound_ns: at(&self.bounds, 0.5),
            p99_bound_ns: at(&self.bounds, 0.99),
            inside: self.inside,
        }
    }
}

/// client - host of a sync point's first BOOTTIME pair.
fn sync_offset(bytes: &[u8]) -> Option<i64> {
    let sync = RemoteClockSync::decode(bytes).ok()?;
    let entry = sync.synced_clocks.first()?;
    let value = |s: &Option<tracesync_protocol::perfetto::ClockSnapshot>| {
        s.as_ref()?
            .clocks
            .iter()
            .find(|c| c.clock_id == Some(BOOTTIME))?
            .timestamp
    };
    Some(value(&entry.client_clocks)? as i64 - value(&entry.host_clocks)? as i64)
}

/// Checks every rolled file in `dir`.
pub fn check_dir(dir: &Path) -> Result<CheckReport, CheckError> {
    let files = trace_files(dir)?;
    let mut tallies: HashMap<String, Tally> = HashMap::new();
    let mut unreadable = Vec::new();
    for path in &files {
        let err = |message: String| CheckError {
            path: path.clone(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let mut trace = TraceFile::new(std::io::BufReader::new(file))
            .map_err(|e| err(format!("cannot read: {e}")))?;
        // Sync offsets and error bounds in effect per machine, in this
        // file's stream order (its preamble replays both).
        let mut offsets: HashMap<u32, i64> = HashMap::new();
        let mut bounds: HashMap<u32, u64> = HashMap::new();
        loop {
            let packet = match trace.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(FileReadError::Format(e)) => {
                    unreadable.push(format!("{}: {e}", path.display()));
                    break;
                }
                Err(e) => return Err(err(e.to_string())),
            };
            let Ok(fields) = scan_packet(packet.bytes) else {
                continue;
            };
            let machine = fields.machine_id.unwrap_or(0);
            if let Some(sample) = read_sample(&fields, packet.bytes) {
                if let (QualityTrack::ErrorBound, Some(v)) = (sample.track, sample.value) {
                    bounds.insert(sample.raw_id, bound_us_to_ns(v));
                }
                continue;
            }
            if let Some(sync) = fields.remote_clock_sync {
                if let Some(offset) = sync_offset(sync) {
                    offsets.insert(machine, offset);
                }
                continue;
            }
            let (Some(ts), Some(id)) = (fields.timestamp, identity(packet.bytes)) else {
                continue;
            };
            if fields.timestamp_clock_id.is_some_and(|c| c != BOOTTIME) {
                continue;
            }
            let offset = if machine == 0 {
                0
            } else {
                offsets.get(&machine).copied().unwrap_or(0)
            };
            let placed = ts as i64 - offset;
            let error = (placed - id.truth_ns as i64).unsigned_abs();
            let bound = bounds.get(&machine).copied().unwrap_or(0);
            tallies.entry(id.src).or_default().add(id.n, error, bound);
        }
    }
    Ok(CheckReport {
        files,
        sources: tallies.into_iter().map(|(k, t)| (k, t.finish())).collect(),
        unreadable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_missing_and_duplicates() {
        let mut t = Tally::default();
        for n in [0, 1, 2, 2, 5, 64, 65] {
            t.add(n, n * 10, 600);
        }
        let s = t.finish();
        assert_eq!(s.packets, 7);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.highest, Some(65));
        // 0..=65 is 66 counters, 6 distinct seen.
        assert_eq!(s.missing, 60);
        assert_eq!(s.max_error_ns, 650);
        assert_eq!(
            (s.p99_bound_ns, s.inside),
            (600, 5),
            "640 and 650 are outside"
        );
    }
}
