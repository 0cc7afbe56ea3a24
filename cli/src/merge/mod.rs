//! `tracesync merge`: recorded traces of several machines onto one timeline.
//!
//! Two passes, so memory does not grow with input size: the first
//! ([`first_pass`]) reads only clock facts and machine ids, [`plan`] turns
//! them into machines, trace time and a complete clock graph, and the second
//! ([`second_pass`]) streams every input again, resolving each packet and
//! interleaving the inputs by resolved time into the [`output`]. A
//! converted input (JSON, systrace) is converted once ([`convert_once`]):
//! held from the first pass to the second, or spilled.

pub mod capture;
pub mod capture_out;
pub mod chrome_json;
pub mod command;
pub mod conversion_stats;
pub mod convert_once;
#[cfg(test)]
mod convert_once_tests;
pub mod feed;
pub mod first_pass;
pub mod first_pass_threads;
pub mod inputs;
mod interrupted;
pub mod machines;
pub mod manifest;
pub mod output;
pub mod packets;
pub mod plan;
pub mod remote;
pub mod second_pass;
pub mod stats;
pub mod systrace;
#[cfg(test)]
mod test_traces;
pub mod window;
pub mod write_thread;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use feed::OpenError;
use first_pass::InputFault;
use inputs::{Content, InputError, InputSource, expand_inputs};
use manifest::{Manifest, ManifestError, parse_manifest};
use output::{Format, Writer};
use plan::{Plan, build_plan};
use second_pass::{Context, InputStream, SequenceIds};
use stats::MergeStats;
use tracesync_common::exit;
use tracesync_core::clock::ClockNode;
use tracesync_core::clock::timeline::Timeline;
use tracesync_protocol::clock_ids::BOOTTIME;
use write_thread::ThreadWriter;

#[derive(Clone, Debug)]
pub struct MergeOptions {
    pub inputs: Vec<PathBuf>,
    pub manifest: Option<PathBuf>,
    /// None or "-" = standard output.
    pub output: Option<PathBuf>,
    pub format: Format,
    pub stats: Option<PathBuf>,
    pub strict: bool,
    pub machine_per_file: bool,
}

/// What a merge produced besides its output.
#[derive(Debug, Default)]
pub struct MergeOutcome {
    pub stats: MergeStats,
    pub faults: Vec<InputFault>,
}

impl MergeOutcome {
    /// 0, or 65 when an input was bad (the others were still merged).
    pub fn exit_code(&self) -> u8 {
        if self.faults.is_empty() {
            exit::OK
        } else {
            exit::DATAERR
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{source_name}: {error}")]
    Manifest {
        source_name: String,
        error: ManifestError,
    },
    #[error("{0}")]
    BadInput(InputFault),
    #[error(
        "--strict: {0} packets have no place on the timeline (see --stats); relate the clocks with snapshots or a manifest"
    )]
    Unplaced(u64),
    #[error("{path}: cannot create: {error}; check that its directory exists and is writable")]
    Create { path: String, error: io::Error },
    #[error("cannot write the output: {0}")]
    Write(io::Error),
    #[error("cannot start a thread to read an input: {0}")]
    Thread(io::Error),
    #[error("{display}: cannot open it again for the second pass: {error}{}", reopen_hint(.error))]
    Reopen { display: String, error: io::Error },
    #[error(
        "no input holds a Perfetto trace ({}: each said above); nothing was written",
        .0.join(", ")
    )]
    NothingToMerge(Vec<String>),
}

impl MergeError {
    /// The reader of standard output went away (`| head`): the merge ends
    /// quietly, as `head`'s user asked.
    pub fn is_closed_output(&self) -> bool {
        matches!(self, Self::Write(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Input(e) => e.exit_code(),
            Self::Manifest { .. }
            | Self::BadInput(_)
            | Self::Unplaced(_)
            | Self::NothingToMerge(_) => exit::DATAERR,
            Self::Create { .. } => exit::CANTCREAT,
            Self::Write(_) => exit::IOERR,
            Self::Thread(_) => exit::SOFTWARE,
            Self::Reopen { .. } => exit::NOINPUT,
        }
    }
}

/// Everything the first pass and the plan produce.
pub struct Prepared {
    pub inputs: Vec<InputSource>,
    pub plan: Plan,
    pub faults: Vec<InputFault>,
    /// ClockSnapshot packets too malformed to decode (not seen by the graph).
    pub undecodable_snapshots: u64,
    /// Inputs with at least one packet.
    pub readable_inputs: usize,
    /// Packets of each input (the first pass's count).
    pub packets: Vec<u64>,
    /// What a merge of these inputs leaves behind (manifest attributes),
    /// for `merge` to say; not faults.
    pub notices: Vec<InputFault>,
    /// What the conversion of JSON inputs counted.
    pub json: chrome_json::JsonStats,
}

/// Expands inputs, reads the manifest, runs the first pass and plans.
/// `report` is called with each input fault as it is found. With
/// `convert_once`, a converted input is converted once
/// ([`convert_once::convert_once`]).
pub fn prepare(
    input_paths: &[PathBuf],
    manifest_path: Option<&Path>,
    (machine_per_file, strict, once): (bool, bool, bool),
    report: &mut dyn FnMut(&InputFault),
) -> Result<Prepared, MergeError> {
    let mut expanded = expand_inputs(input_paths, manifest_path)?;
    let manifest: Option<Manifest> = match &expanded.manifest {
        Some((name, text)) => Some(parse_manifest(text).map_err(|error| MergeError::Manifest {
            source_name: name.clone(),
            error,
        })?),
        None => None,
    };
    let manifest_error = |error| MergeError::Manifest {
        source_name: expanded
            .manifest
            .as_ref()
            .map_or_else(|| "manifest".into(), |(n, _)| n.clone()),
        error,
    };
    if let Some(m) = &manifest {
        m.check_containers(&expanded.containers)
            .map_err(manifest_error)?;
    }
    if let Some(e) = expanded.multiple_manifests() {
        return Err(e.into());
    }
    if once {
        convert_once::convert_once(&mut expanded.traces, strict);
    }
    let mut faults = Vec::new();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let scans = first_pass_threads::scan_inputs(&expanded.traces, threads);
    for scan in &scans {
        for fault in &scan.faults {
            // Under --strict the error is the report (printed once).
            if strict {
                return Err(MergeError::BadInput(fault.clone()));
            }
            report(fault);
        }
        faults.extend(scan.faults.iter().cloned());
    }
    let plan = build_plan(
        &expanded.traces,
        &scans,
        manifest.as_ref(),
        machine_per_file,
    )
    .map_err(manifest_error)?;
    let undecodable_snapshots = scans.iter().map(|s| s.invalid_snapshot_packets).sum();
    let readable_inputs = scans.iter().filter(|s| s.packets > 0).count();
    let mut json = chrome_json::JsonStats::default();
    for scan in &scans {
        json.add(&scan.json);
    }
    let notices = manifest
        .as_ref()
        .and_then(|m| attributes_not_carried(m, &expanded.manifest))
        .into_iter()
        .collect();
    Ok(Prepared {
        notices,
        inputs: expanded.traces,
        plan,
        faults,
        undecodable_snapshots,
        readable_inputs,
        packets: scans.iter().map(|s| s.packets).collect(),
        json,
    })
}

/// The manifest's `attributes` annotate an archive; the trace processor
/// shows them as `manifest_attribute.*` metadata only when it reads the
/// manifest itself, and a protobuf trace has no field it reads as such:
/// a merge says they stay behind (a notice, not a fault: nothing of the
/// traces is lost, and `--strict` does not refuse the merge).
fn attributes_not_carried(m: &Manifest, source: &Option<(String, String)>) -> Option<InputFault> {
    if m.attributes.is_empty() {
        return None;
    }
    let names: Vec<&str> = m.attributes.iter().map(|(k, _)| k.as_str()).collect();
    Some(InputFault {
        display: source
            .as_ref()
            .map_or_else(|| "manifest".into(), |(n, _)| n.clone()),
        offset: None,
        message: format!(
            "attributes ({}) are not carried into the merged trace (a protobuf trace has no field for them); keep the manifest beside it",
            names.join(", ")
        ),
        fatal: false,
    })
}

/// Runs a whole merge.
pub fn merge(
    opts: &MergeOptions,
    report: &mut dyn FnMut(&InputFault),
) -> Result<MergeOutcome, MergeError> {
    merge_with_scan_threads(opts, report, feed::MAX_SCAN_THREADS)
}

/// [`merge`] with at most `scan_threads` inputs read on threads of their
/// own (the output does not depend on it).
pub(crate) fn merge_with_scan_threads(
    opts: &MergeOptions,
    report: &mut dyn FnMut(&InputFault),
    scan_threads: usize,
) -> Result<MergeOutcome, MergeError> {
    let Prepared {
        inputs,
        mut plan,
        mut faults,
        undecodable_snapshots,
        readable_inputs,
        packets,
        notices,
        json,
    } = prepare(
        &opts.inputs,
        opts.manifest.as_deref(),
        (opts.machine_per_file, opts.strict, true),
        report,
    )?;
    for notice in &notices {
        report(notice);
    }
    if readable_inputs == 0 && !faults.is_empty() {
        // Each input failed (and was reported): nothing to merge, no output.
        let mut bad: Vec<String> = faults.iter().map(|f| f.display.clone()).collect();
        bad.dedup();
        return Err(MergeError::NothingToMerge(bad));
    }
    let mut stats = MergeStats {
        inputs: inputs.len() as u64,
        // Completed by the second pass with the graph's rejected snapshots.
        invalid_clock_snapshots: undecodable_snapshots,
        inputs_with_errors: inputs
            .iter()
            .filter(|i| faults.iter().any(|f| f.display == i.display))
            .count() as u64,
        machines: plan.machines.iter().filter(|(_, m)| m.used).count() as u64,
        json,
        ..MergeStats::default()
    };
    let target = opts.output.as_deref().filter(|p| p.as_os_str() != "-");
    let temp = target.and_then(temp_path);
    let sink: Box<dyn Write + Send> = match (&temp, target) {
        // Name the path the user gave, not the temporary file next to it.
        (Some(t), Some(target)) => {
            Box::new(create_temp(t).map_err(|error| MergeError::Create {
                path: target.display().to_string(),
                error,
            })?)
        }
        (None, Some(target)) => {
            Box::new(open_special(target).map_err(|error| MergeError::Create {
                path: target.display().to_string(),
                error,
            })?)
        }
        _ => Box::new(io::stdout()),
    };
    let result = ThreadWriter::spawn(sink)
        .map_err(MergeError::Write)
        .and_then(|out| {
            // A held input is converted as it is fed: it goes first.
            let work: Vec<u64> = inputs
                .iter()
                .zip(&packets)
                .map(|(i, &p)| {
                    if i.held.is_some() && p > 0 {
                        u64::MAX
                    } else {
                        p
                    }
                })
                .collect();
            let threaded = feed::threaded_inputs(&work, scan_threads);
            let feeds = (&packets[..], &threaded[..]);
            write_merged(&inputs, feeds, &mut plan, opts.format, out, &mut stats)
        });
    convert_once::note_held_inputs(&inputs, &mut faults, &mut stats, report);
    let finished = result.and_then(|()| {
        if opts.strict && stats.strict_failures() > 0 {
            return Err(MergeError::Unplaced(stats.strict_failures()));
        }
        Ok(())
    });
    if let Err(e) = finished {
        if let Some(t) = &temp {
            let _ = std::fs::remove_file(t);
        }
        return Err(e);
    }
    if let (Some(t), Some(target)) = (&temp, target) {
        std::fs::rename(t, target).map_err(|error| MergeError::Create {
            path: target.display().to_string(),
            error,
        })?;
    }
    if let Some(path) = &opts.stats {
        let written = serde_json::to_string_pretty(&stats)
            .map_err(io::Error::other)
            .and_then(|json| tracesync_capture::modes::write_file(path, (json + "\n").as_bytes()));
        written.map_err(|error| MergeError::Create {
            path: path.display().to_string(),
            error,
        })?;
    }
    Ok(MergeOutcome { stats, faults })
}

/// Whether converted ftrace events (read on BOOTTIME) are written on a
/// trace time of another clock that the trace-time machine's BOOTTIME has
/// no path to: nothing else on that machine is then on its BOOTTIME, so
/// the output may declare the two equal.
fn ftrace_needs_boottime(inputs: &[InputSource], timeline: &mut Timeline) -> bool {
    let trace = timeline.trace_clock();
    let boottime = ClockNode {
        clock: BOOTTIME,
        seq: 0,
        ..trace
    };
    inputs
        .iter()
        .any(|i| matches!(i.content, Content::Systrace { .. }))
        && trace.clock != BOOTTIME
        && !timeline.graph().has_path(boottime, trace)
}

/// The second pass; `feeds`: each input's packet count from the first
/// pass, and whether it is read on a thread of its own.
fn write_merged(
    inputs: &[InputSource],
    (packets, threaded): (&[u64], &[bool]),
    plan: &mut Plan,
    format: Format,
    out: ThreadWriter,
    stats: &mut MergeStats,
) -> Result<(), MergeError> {
    let trace_machine = plan.timeline.trace_clock().machine;
    let trace_clock = plan.timeline.trace_clock().clock;
    let mut writer = Writer::new(out, format, &plan.machines, trace_machine, trace_clock);
    if ftrace_needs_boottime(inputs, &mut plan.timeline) {
        writer.equate_boottime_with_trace_time();
    }
    writer
        .preamble(&plan.machines, stats)
        .map_err(MergeError::Write)?;
    let src_json: Vec<String> = inputs
        .iter()
        .map(|i| serde_json::Value::String(i.display.clone()).to_string())
        .collect();
    let mut sequences = SequenceIds::new();
    let Plan {
        machines,
        files,
        timeline,
        ..
    } = plan;
    allow_open_files(inputs.len());
    let mut streams: Vec<InputStream<'_>> = inputs
        .iter()
        .zip(files.iter())
        .zip(packets.iter().zip(threaded))
        .map(|((source, file), (&packets, &threaded))| {
            InputStream::open(source, file, packets, threaded).map_err(|e| match e {
                OpenError::Reopen(error) => MergeError::Reopen {
                    display: source.display.clone(),
                    error,
                },
                OpenError::Thread(error) => MergeError::Thread(error),
            })
        })
        .collect::<Result<_, _>>()?;
    let mut live = tracesync_core::clock::ClockGraph::new();
    live.set_trace_time_clock(timeline.trace_clock());
    let mut ctx = Context {
        timeline,
        live: &mut live,
        machines,
        stats,
        sequences: &mut sequences,
        synced: Default::default(),
    };
    // Interleave the inputs by resolved time; ties keep input order, and a
    // stream's own order is never changed.
    let mut heap = BinaryHeap::new();
    for (i, stream) in streams.iter_mut().enumerate() {
        stream.advance(&mut ctx);
        if let Some(h) = stream.head {
            heap.push(Reverse((h.ts, i)));
        }
    }
    // The stream just written replaces the top in place (one sift-down)
    // instead of a pop and a push; the heap holds the same keys either way.
    while let Some(mut top) = heap.peek_mut() {
        let Reverse((_, i)) = *top;
        let stream = &mut streams[i];
        // Borrowed, not copied out of the stream: the head was stored
        // field by field just before.
        let head = stream.head.as_ref().expect("queued streams have a head");
        writer
            .packet(head, stream.body(), &src_json[i], ctx.machines, ctx.stats)
            .map_err(MergeError::Write)?;
        stream.advance(&mut ctx);
        match stream.head {
            Some(h) => *top = Reverse((h.ts, i)),
            None => {
                PeekMut::pop(top);
            }
        }
    }
    writer
        .finish()
        .and_then(ThreadWriter::finish)
        .map_err(MergeError::Write)?;
    let t = ctx.timeline.stats();
    let g = ctx.timeline.graph().stats();
    let stats = ctx.stats;
    stats.clock_sync_failure_unknown_source_clock = t.clock_sync_failure_unknown_source_clock;
    stats.clock_sync_failure_no_path = t.clock_sync_failure_no_path;
    stats.clock_sync_unrelatable_clock_domains = t.clock_sync_unrelatable_clock_domains;
    stats.trace_sorter_negative_timestamp_dropped = t.trace_sorter_negative_timestamp_dropped;
    stats.invalid_clock_snapshots += g.invalid_clock_snapshots;
    stats.clock_sync_cache_miss = g.clock_sync_cache_miss;
    Ok(())
}

/// Every input stays open until the second pass ends: lifts the soft
/// open-file limit (often 1024, a guard against leaks) towards the hard one
/// when the inputs need more.
fn allow_open_files(inputs: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    // Besides the inputs: stdio, the output and a margin.
    let want = inputs as u64 + 64;
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < want
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, want.min(hard).max(soft), hard);
    }
}

/// What to do when an input cannot be opened again: with many inputs, each
/// open until the merge ends, the open-file limit.
fn reopen_hint(error: &io::Error) -> &'static str {
    if error.raw_os_error() == Some(nix::errno::Errno::EMFILE as i32) {
        "; every input stays open until the merge ends: raise the open-file limit (ulimit -n) or merge fewer inputs"
    } else {
        "; check that it is still readable"
    }
}

/// The temporary file an output is written to before it is renamed over
/// `target` (a failed merge leaves no output); None when `target` exists
/// and is not a regular file (`/dev/null`, a FIFO, a terminal): renaming
/// over it would replace the device, so it is written in place.
pub(crate) fn temp_path(target: &Path) -> Option<PathBuf> {
    match std::fs::metadata(target) {
        Ok(meta) if !meta.is_file() => None,
        _ => {
            let mut name = target.as_os_str().to_owned();
            name.push(".tmp");
            Some(PathBuf::from(name))
        }
    }
}

/// Creates (or truncates) the temporary a merged trace is written to
/// before it is renamed into place: mode 0640 whatever the umask
/// (`tracesync_capture::modes`).
pub(crate) fn create_temp(path: &Path) -> io::Result<File> {
    tracesync_capture::modes::open_new_file(
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true),
        path,
    )
}

/// Opens an output that is not a regular file for writing, in place.
pub(crate) fn open_special(target: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(target)
}

#[cfg(test)]
mod output_path_tests {
    use super::*;

    #[test]
    fn devices_and_fifos_are_written_in_place_never_renamed_over() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(temp_path(&fifo), None);
        assert_eq!(temp_path(Path::new("/dev/null")), None);
        let file = dir.path().join("out.pftrace");
        assert_eq!(
            temp_path(&file),
            Some(dir.path().join("out.pftrace.tmp")),
            "a new file"
        );
        std::fs::write(&file, b"old").unwrap();
        assert_eq!(temp_path(&file), Some(dir.path().join("out.pftrace.tmp")));
    }
}
