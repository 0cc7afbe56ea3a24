//! `tracesync tail DIR`: the rolling files of a directory, read back and
//! followed.
//!
//! It first catches up: from the start of one file (the newest, or the
//! first that may hold `--since`, or, for `-n N`, as far back as N records
//! need) to the end of what is written, showing the records at or after
//! `--since`, only the last N of them with `-n`. Then it names any
//! `--machine` the capture does not know, and follows: woken by inotify
//! (`follow::watch`) when a file changes, reading what is new. Snapshots
//! are not part of the stream (their packets were in it already, or are
//! ring relays' windows): a new one is said on stderr with the command
//! that prints it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use tracesync_capture::names::{SnapshotName, is_capture_file};
use tracesync_common::exit;
use tracesync_core::control::wall_minus_boot_of;
use tracesync_core::control::{MachineFilter, PacketFormatter};
use tracesync_core::live::OutPacket;
use tracesync_protocol::reader::TraceReader;
use tracesync_protocol::scan::scan_packet;

use crate::follow::watch::DirWatch;
use crate::follow::{DirFollower, list};
use crate::merge::capture::{self, Capture};
use crate::merge::window::{self, TimeSpec};

use super::options::{MAX_LINES, TailOptions, known_list, unknown_machines, write_all};

/// Formatted bytes collected before they are written out.
const FLUSH_AT: usize = 256 << 10;
/// Bytes of a file read for its first host ClockSnapshot at most.
const RELATION_SCAN: usize = 4 << 20;

/// Follows the rolling files in `dir` until interrupted.
pub fn run_dir(dir: &Path, opts: &TailOptions) -> u8 {
    if !dir.is_dir() {
        eprintln!(
            "tracesync: {}: not a directory; give the daemon's output directory, or --connect SOCKET",
            dir.display()
        );
        return exit::NOINPUT;
    }
    let capture = capture::from_dir(dir).ok();
    if capture.is_none()
        && let Some(other) = first_foreign_file(dir)
    {
        // A mistyped directory would be waited on forever: refused, as
        // `merge DIR` refuses it. An empty one (a daemon about to write
        // there) is waited on, and the wait is said.
        eprintln!(
            "tracesync: error: {}: not a capture directory (it holds {other:?} and no rolled \
             file tracesync-*.pftrace); give tracesyncd's [output] dir, or --connect SOCKET",
            dir.display()
        );
        return exit::NOINPUT;
    }
    let since = match (opts.since, &capture) {
        (None, _) => None,
        (Some(TimeSpec::Trace(ns)), _) => Some(ns),
        (Some(spec), Some(capture)) => match window::resolve(capture, Some(spec), None) {
            Ok(w) => Some(w.since),
            Err(e) => {
                eprintln!("tracesync: error: --since: {e}");
                return e.code;
            }
        },
        (Some(_), None) => {
            eprintln!(
                "tracesync: error: --since: {} has no rolled file yet to place an RFC 3339 or \
                 -DURATION TIME in; give trace-time ns, or wait for the daemon's first file",
                dir.display()
            );
            return exit::NOINPUT;
        }
    };
    let mut tail = match catch_up(dir, opts, since, capture.as_ref()) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return exit::OK,
        Err(e) => {
            eprintln!("tracesync: cannot read {}: {e}", dir.display());
            return exit::IOERR;
        }
    };
    for unknown in unknown_machines(&opts.machines, &tail.known) {
        eprintln!(
            "tracesync: warning: {} has no machine {unknown:?} (known: {}); showing its packets \
             if it appears",
            dir.display(),
            known_list(&tail.known)
        );
    }
    follow(dir, &mut tail)
}

/// A tail that has caught up with what was written.
struct Tail {
    follower: DirFollower,
    formatter: PacketFormatter,
    /// Machines seen (raw id, latest name) and named by index.jsonl.
    known: BTreeMap<u32, Option<String>>,
    out: io::Stdout,
}

/// Reads from the right start to the end of what is written and prints
/// what `opts` asks for.
fn catch_up(
    dir: &Path,
    opts: &TailOptions,
    since: Option<i64>,
    capture: Option<&Capture>,
) -> io::Result<Tail> {
    let files = list(dir)?.files;
    let newest = files.len().saturating_sub(1);
    let mut start = match (since, capture) {
        // The first file whose last packet may be at or after `since`.
        (Some(since), Some(c)) => c
            .files
            .iter()
            .position(|f| f.last_ts.is_none_or(|last| last >= since))
            .and_then(|i| files.iter().position(|n| *n == c.files[i].name))
            .unwrap_or(newest),
        _ => newest,
    };
    let mut step = 1;
    loop {
        let mut formatter = PacketFormatter::new(opts.format, MachineFilter::new(&opts.machines));
        let relation = files
            .get(start)
            .and_then(|name| first_host_relation(&dir.join(name)));
        formatter = formatter.with_time(opts.time, relation);
        let mut follower = match files.get(start) {
            Some(name) => {
                let show_preamble = opts.lines.is_none() && since.is_none();
                DirFollower::starting_at(dir, name, show_preamble)?
            }
            None => DirFollower::new(dir),
        };
        if let Some(c) = capture {
            follower.name_machines(&c.names);
        }
        let mut tail = Tail {
            follower,
            formatter,
            known: BTreeMap::new(),
            out: io::stdout(),
        };
        if let Some(c) = capture {
            for (raw_id, name) in &c.names {
                tail.known.insert(*raw_id, Some(name.clone()));
            }
        }
        let held = read_to_end(dir, &mut tail, opts.lines, since.unwrap_or(i64::MIN))?;
        let short = opts.lines.is_some_and(|n| (held.len() as u64) < n);
        if short && start > 0 {
            // Not enough records from here: start further back.
            start = start.saturating_sub(step);
            step *= 2;
            continue;
        }
        let mut lock = tail.out.lock();
        for record in held {
            lock.write_all(&record)?;
        }
        lock.flush()?;
        drop(lock);
        return Ok(tail);
    }
}

/// Reads until nothing more is written; with `lines`, returns the last
/// `lines` records at or after `since` (nothing is printed), else prints
/// them as they come.
fn read_to_end(
    dir: &Path,
    tail: &mut Tail,
    lines: Option<u64>,
    since: i64,
) -> io::Result<VecDeque<Vec<u8>>> {
    let keep = lines.map(|n| n.min(MAX_LINES) as usize);
    let mut held: VecDeque<Vec<u8>> = VecDeque::new();
    let mut pending = Vec::with_capacity(FLUSH_AT);
    let mut idle_polls = 0;
    let Tail {
        follower,
        formatter,
        known,
        out,
    } = tail;
    loop {
        let mut lock = out.lock();
        let progress = follower.poll(&mut |packet: &OutPacket| {
            known.insert(
                packet.machine_raw_id,
                packet.machine_name.as_deref().map(str::to_owned),
            );
            formatter.observe(packet);
            if packet.ts < since {
                return Ok(());
            }
            match keep {
                Some(0) => {}
                Some(n) => {
                    let mut record = Vec::new();
                    if formatter.write(packet, &mut record) {
                        if held.len() == n {
                            held.pop_front();
                        }
                        held.push_back(record);
                    }
                }
                None => {
                    formatter.write(packet, &mut pending);
                    if pending.len() >= FLUSH_AT {
                        lock.write_all(&pending)?;
                        pending.clear();
                    }
                }
            }
            Ok(())
        })?;
        lock.write_all(&pending)?;
        lock.flush()?;
        drop(lock);
        pending.clear();
        for warning in follower.warnings.drain(..) {
            eprintln!("tracesync: warning: {warning}");
        }
        if progress.bytes > 0 {
            idle_polls = 0;
            continue;
        }
        // An older file that is not marked complete settles at the next
        // poll; the newest one is where catching up ends.
        idle_polls += 1;
        let at_newest = list(dir)?.files.last().map(String::as_str) == follower.current_file();
        if at_newest || follower.current_file().is_none() || idle_polls >= 3 {
            return Ok(held);
        }
    }
}

/// Follows what is written after catching up.
fn follow(dir: &Path, tail: &mut Tail) -> u8 {
    let watch = DirWatch::new(dir);
    let mut pending = Vec::with_capacity(FLUSH_AT);
    let mut waiting_said = tail.follower.current_file().is_some();
    let mut snapshots = snapshot_names(dir);
    loop {
        // Snapshots are files of their own, not part of the stream: each
        // new one is said on stderr (the stream on stdout stays a stream).
        let now = snapshot_names(dir);
        for name in now.difference(&snapshots) {
            eprintln!(
                "tracesync: snapshot {name} written; print it with tracesync tail {}",
                dir.join(name).display()
            );
        }
        snapshots = now;
        let mut out = tail.out.lock();
        let formatter = &mut tail.formatter;
        let polled = tail.follower.poll(&mut |packet| {
            formatter.write(packet, &mut pending);
            if pending.len() >= FLUSH_AT {
                out.write_all(&pending)?;
                pending.clear();
            }
            Ok(())
        });
        for warning in tail.follower.warnings.drain(..) {
            eprintln!("tracesync: warning: {warning}");
        }
        let progress = match polled {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return exit::OK,
            Err(e) => {
                eprintln!(
                    "tracesync: cannot follow {} (at {}): {e}",
                    dir.display(),
                    tail.follower.current_file().unwrap_or("its listing")
                );
                return exit::IOERR;
            }
        };
        if let Err(code) = write_all(&mut out, &pending) {
            return code;
        }
        pending.clear();
        drop(out);
        if tail.follower.current_file().is_none() && !waiting_said {
            eprintln!("tracesync: waiting for a trace file in {}", dir.display());
            waiting_said = true;
        }
        if progress.bytes == 0 {
            watch.wait();
        }
    }
}

/// The snapshots in `dir` now (none if it cannot be listed).
fn snapshot_names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| SnapshotName::parse(n).is_some())
                .collect()
        })
        .unwrap_or_default()
}

/// A file of `dir` that is none of a capture directory's own, if any.
fn first_foreign_file(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| !is_capture_file(name))
        .collect();
    names.sort();
    names.into_iter().next()
}

/// Host REALTIME minus BOOTTIME from the first host ClockSnapshot of the
/// file at `path` (in its preamble), so wall-clock lines start right.
pub(super) fn first_host_relation(path: &Path) -> Option<i64> {
    let mut file = File::open(path).ok()?;
    let mut reader = TraceReader::new();
    let mut read = 0;
    while read < RELATION_SCAN {
        let n = reader.fill_from(&mut file, 256 << 10).ok()?;
        if n == 0 {
            return None;
        }
        read += n;
        while let Ok(Some(packet)) = reader.next_packet() {
            let host = scan_packet(packet.bytes).is_ok_and(|f| f.machine_id.unwrap_or(0) == 0);
            if host && let Some(delta) = wall_minus_boot_of(packet.bytes) {
                return Some(delta);
            }
        }
    }
    None
}
