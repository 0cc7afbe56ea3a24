//! The snapshot check: every machine's synthetic events of the window
//! [T - before, T + after] are in the file, each once, none missing between
//! the window's ends, each at its true host time within the error bound
//! the file gives that packet; the file loads alone in the trace processor.
//!
//! A packet's bound is its machine's error-bound track value in force at
//! it (the track's last sample before it in the file): at least the bound
//! the daemon placed the packet with. Judging by the status's bound at the
//! end (a later, mature estimate) would hold early packets to a promise
//! they were never given; 100% of timestamps inside their own bound is
//! the promise.

use std::collections::HashMap;
use std::path::Path;

use tracesync_core::sync_quality::{QualityTrack, bound_us_to_ns, read_sample};
use tracesync_protocol::reader::TraceReader;
use tracesync_protocol::scan::scan_packet;
use tracesync_relay::source::synthetic::read_identity;

use crate::{live, tp};

/// Packets are placed by the latest sync point written, which may lag the
/// estimate by the daemon's sync-point threshold (1 us by default).
pub const SYNC_POINT_THRESHOLD_NS: u64 = 1_000;
/// A relay killed with -9 loses the packets it had not cut into a batch
/// yet (its source's linger): its window ends up to this much before the
/// kill.
pub const KILL_SLACK_NS: i64 = 200_000_000;
/// The generator's ticks (its events come in bursts) at each end of the
/// window.
const EDGE_SLACK_NS: i64 = 20_000_000;

/// A trigger's window on the host's clock: [t - before, t + after].
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub t: i64,
    pub before: i64,
    pub after: i64,
}

impl Window {
    /// `--before 2s --after 1s` at `t`, as most ring tests fire.
    pub fn two_one(t: i64) -> Window {
        Window {
            t,
            before: 2_000_000_000,
            after: 1_000_000_000,
        }
    }
}

/// What the check measured of one machine.
#[derive(Debug, Clone, Copy)]
pub struct MachineFigures {
    pub events: usize,
    /// The largest |ts - truth| (ns).
    pub worst_error_ns: u64,
    /// The smallest and largest bound its events were given (ns, with the
    /// sync point's threshold).
    pub min_bound_ns: u64,
    pub max_bound_ns: u64,
    /// The largest |ts - truth| / bound over its events (≤ 1 passes).
    pub worst_ratio: f64,
}

/// Checks the snapshot at `path` for `names` (see the module docs);
/// `killed` are (relay, host time of its kill -9): their events end then.
/// `label` names the test in the trace processor's skip notice. Prints and
/// returns each machine's figures, in `names`' order.
pub fn check_snapshot(
    label: &str,
    path: &Path,
    names: &[&str],
    window: Window,
    killed: &[(&str, i64)],
) -> Vec<MachineFigures> {
    let scan = live::output::scan_file(path, None);
    assert!(scan.error.is_none(), "{:?}", scan.error);
    let bounds = bounds_of(path);
    let (from, to) = (window.t - window.before, window.t + window.after);
    let mut figures = Vec::new();
    for &name in names {
        let machine = scan
            .machine_names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&m, _)| m)
            .unwrap_or_else(|| panic!("no SystemInfo names {name} in {:?}", scan.machine_names));
        let mut ns = Vec::new();
        let mut f = MachineFigures {
            events: 0,
            worst_error_ns: 0,
            min_bound_ns: u64::MAX,
            max_bound_ns: 0,
            worst_ratio: 0.0,
        };
        let mut unbounded = 0usize;
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for e in scan.events.iter().filter(|e| e.machine == machine) {
            assert!(!e.unsynced, "{name}: an event before any sync point");
            ns.push(e.id.n);
            let truth = e.id.truth_ns as i64;
            (lo, hi) = (lo.min(truth), hi.max(truth));
            let error = e.ts_host.abs_diff(truth);
            f.worst_error_ns = f.worst_error_ns.max(error);
            match bounds.get(&(machine, e.id.n)) {
                Some(&bound) if bound > 0 => {
                    let allowed = bound + SYNC_POINT_THRESHOLD_NS;
                    assert!(
                        error <= allowed,
                        "{name}: event n={} {error} ns off, over its bound {allowed} ns",
                        e.id.n
                    );
                    f.min_bound_ns = f.min_bound_ns.min(allowed);
                    f.max_bound_ns = f.max_bound_ns.max(allowed);
                    f.worst_ratio = f.worst_ratio.max(error as f64 / allowed as f64);
                }
                _ => unbounded += 1,
            }
        }
        assert_eq!(unbounded, 0, "{name}: events without an error bound");
        ns.sort_unstable();
        let count = ns.len();
        ns.dedup();
        assert_eq!(ns.len(), count, "{name}: duplicated events");
        assert!(count > 0, "{name}: no events in the snapshot");
        let (first, last) = (ns[0], ns[count - 1]);
        assert_eq!(
            (last - first + 1) as usize,
            count,
            "{name}: events missing between n={first} and n={last}"
        );
        // A relay killed inside the window made no events after it died.
        let end = killed
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(to, |&(_, at)| (at - KILL_SLACK_NS).min(to));
        let slack = EDGE_SLACK_NS;
        assert!(
            lo >= from - slack && lo <= from + slack && hi <= to + slack && hi >= end - slack,
            "{name}: events' true times [{lo}, {hi}] do not span the window [{from}, {end}]"
        );
        f.events = count;
        eprintln!(
            "snapshot: {name}: {count} events, n {first}..={last}, max |ts - truth| {} ns, \
             bounds given {}..={} ns, worst error/bound {:.3}",
            f.worst_error_ns, f.min_bound_ns, f.max_bound_ns, f.worst_ratio
        );
        figures.push(f);
    }
    if tp::require_or_skip(label) {
        let stats = tp::error_stats(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            stats.is_empty(),
            "{}: error stats {stats:?}",
            path.display()
        );
    }
    figures
}

/// Each synthetic event's error bound, by (machine raw id, identity n):
/// the machine's error-bound track value in force at the packet (its last
/// sample before it in the file), 0 when none came before it.
fn bounds_of(path: &Path) -> HashMap<(u32, u64), u64> {
    let mut reader = TraceReader::new();
    reader.push(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    let mut in_force: HashMap<u32, u64> = HashMap::new();
    let mut bounds = HashMap::new();
    while let Some(p) = reader
        .next_packet()
        .unwrap_or_else(|e| panic!("{}: frames: {e}", path.display()))
    {
        let Ok(fields) = scan_packet(p.bytes) else {
            continue;
        };
        if let Some(s) = read_sample(&fields, p.bytes) {
            if s.track == QualityTrack::ErrorBound {
                in_force.insert(s.raw_id, bound_us_to_ns(s.value.unwrap_or(0.0)));
            }
            continue;
        }
        if let Some(id) = read_identity(p.bytes) {
            let machine = fields.machine_id.unwrap_or(0);
            let bound = in_force.get(&machine).copied().unwrap_or(0);
            bounds.insert((machine, id.n), bound);
        }
    }
    bounds
}
