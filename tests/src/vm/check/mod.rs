//! The VM run's verdict (see [`super`]): loss and duplication of the
//! guest's events, the causality check of the ping events, the guest's
//! drift and jitter, and the trace processor's view of the output.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::Ping;
use super::stats::{Line, p50_p99_us, quantile};
use crate::live::{OutputCheck, check_output, judge};
use crate::tp;

/// BOOTTIME's builtin clock id: the guest's pings are stamped in it.
const BOOTTIME: u64 = 6;

/// What the check reads.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The daemon's rolling output directory.
    pub dir: PathBuf,
    /// `tracesync merge DIR --format jsonl` of it.
    pub merged: PathBuf,
    /// `tracesync tail --format jsonl` of the guest during the capture:
    /// the bound the live path gave each packet (`err_ns`).
    pub live: Option<PathBuf>,
    /// The pings sent (ping log).
    pub pings: Vec<Ping>,
    /// `tracesync status --json` taken while the guest was connected.
    pub status: Option<serde_json::Value>,
    /// The guest's machine name (its host name, sent in its SystemInfo).
    pub machine: String,
    /// The guest's architecture (`uname -m`: x86_64, aarch64); its
    /// SystemInfo must say the same.
    pub arch: String,
    /// Load every rolled file in the trace processor.
    pub trace_processor: bool,
}

/// One ping event found in the merged output.
#[derive(Clone, Copy, Debug)]
struct Found {
    ts: u64,
    err_ns: Option<u64>,
    copies: u64,
}

/// A ping event as the live tail saw it: resolved time and bound.
#[derive(Clone, Copy, Debug)]
struct Live {
    ts: u64,
    err_ns: Option<u64>,
}

/// The figures of one run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The architecture the run was asked for (the last line names it).
    pub arch: String,
    pub guest_raw_id: Option<u32>,
    /// Guest packets in the merged output (every kind).
    pub guest_packets: u64,
    pub synthetic_events: u64,
    pub synthetic_missing: u64,
    pub synthetic_duplicates: u64,
    pub pings_sent: u64,
    pub pings_found: u64,
    pub pings_duplicated: u64,
    pub inside: u64,
    /// Ping events inside the bare window [send, receive] (no err_ns).
    pub inside_bare: u64,
    /// (n, ts - send, recv - ts, err) of the first pings outside.
    pub outside: Vec<(u64, i64, i64, u64)>,
    pub window_ns: Vec<u64>,
    pub err_ns: Vec<u64>,
    /// Ping events whose bound came from the live tail (the merged file
    /// gave none, or 0), and those with no live record either.
    pub err_from_live: u64,
    pub no_live_record: u64,
    /// |merged ts - live ts| of the ping events seen by both.
    pub merged_vs_live_ns: Vec<u64>,
    /// Drift (ppm): the estimator's (status), a fit of the probe samples,
    /// a fit of the ping channel.
    pub drift_status_ppm: Option<f64>,
    pub drift_probes_ppm: Option<f64>,
    pub drift_pings_ppm: Option<f64>,
    pub sigma_ns: Option<u64>,
    pub freq_bound_ppm: Option<f64>,
    pub probe_samples: usize,
    pub probe_rtt_ns: Vec<u64>,
    pub probe_residual_ns: Vec<u64>,
    pub ping_residual_ns: Vec<u64>,
    /// What the trace processor said (a summary line), None when not asked.
    pub tp: Option<Result<String, String>>,
    pub problems: Vec<String>,
}

impl Report {
    pub fn packets(&self) -> u64 {
        self.synthetic_events + self.pings_found
    }
    pub fn lost(&self) -> u64 {
        self.synthetic_missing + (self.pings_sent - self.pings_found)
    }
    pub fn duplicated(&self) -> u64 {
        self.synthetic_duplicates + self.pings_duplicated
    }
    /// The drift the last line reports: the estimator's, else the fit of
    /// its probe samples.
    pub fn drift_ppm(&self) -> Option<f64> {
        self.drift_status_ppm.or(self.drift_probes_ppm)
    }
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
            && self.lost() == 0
            && self.duplicated() == 0
            && self.pings_sent > 0
            && self.inside == self.pings_sent
            && self.synthetic_events > 0
            && matches!(self.tp, None | Some(Ok(_)))
    }

    /// The report's lines; the last is the one docs/operations-machines.md shows.
    pub fn lines(&self, machine: &str) -> Vec<String> {
        let opt = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:+.3} ppm"));
        let mut out = vec![
            format!(
                "vm-relay: guest machine {machine:?} (raw id {}): {} packets merged; synthetic \
                 events {} (missing {}, duplicated {}); ping events {} of {} (duplicated {})",
                self.guest_raw_id.map_or("none".into(), |r| r.to_string()),
                self.guest_packets,
                self.synthetic_events,
                self.synthetic_missing,
                self.synthetic_duplicates,
                self.pings_found,
                self.pings_sent,
                self.pings_duplicated,
            ),
            format!(
                "vm-relay: causality: {}/{} ping events inside [send - err_ns, receive + err_ns] \
                 ({} inside the bare window); window {}; err_ns {} ({} from the live tail, {} \
                 without a live record); |merged - live ts| {}",
                self.inside,
                self.pings_sent,
                self.inside_bare,
                p50_p99_us(&self.window_ns),
                p50_p99_us(&self.err_ns),
                self.err_from_live,
                self.no_live_record,
                p50_p99_us(&self.merged_vs_live_ns),
            ),
            format!(
                "vm-relay: guest drift: estimator {} (freq bound {}, sigma {}), probe-sample fit \
                 {} over {} samples, ping-channel fit {}",
                opt(self.drift_status_ppm),
                self.freq_bound_ppm
                    .map_or("n/a".into(), |v| format!("±{v:.3} ppm")),
                self.sigma_ns
                    .map_or("n/a".into(), |v| format!("{:.1} µs", v as f64 / 1e3)),
                opt(self.drift_probes_ppm),
                self.probe_samples,
                opt(self.drift_pings_ppm),
            ),
            format!(
                "vm-relay: guest jitter: probe round trip {}; probe offset |residual| {}; \
                 ping offset |residual| {}",
                p50_p99_us(&self.probe_rtt_ns),
                p50_p99_us(&self.probe_residual_ns),
                p50_p99_us(&self.ping_residual_ns),
            ),
        ];
        out.push(match &self.tp {
            None => "vm-relay: trace processor: not run".into(),
            Some(Ok(summary)) => format!("vm-relay: trace processor: {summary}"),
            Some(Err(e)) => format!("vm-relay: trace processor: FAILED: {e}"),
        });
        for (n, early, late, err) in &self.outside {
            out.push(format!(
                "vm-relay: ping {n} outside: ts - send {early} ns, receive - ts {late} ns, \
                 err_ns {err}"
            ));
        }
        for p in &self.problems {
            out.push(format!("vm-relay: problem: {p}"));
        }
        out.push(format!(
            "vm-relay: arch {}; packets {} lost {} dup {}; causality {}/{} inside; drift {} ppm",
            self.arch,
            self.packets(),
            self.lost(),
            self.duplicated(),
            self.inside,
            self.pings_sent,
            self.drift_ppm().map_or("nan".into(), |d| format!("{d:.3}")),
        ));
        out
    }
}

/// Checks a finished run.
pub fn check(inputs: &Inputs) -> Report {
    let mut r = Report {
        arch: inputs.arch.clone(),
        pings_sent: inputs.pings.len() as u64,
        ..Report::default()
    };
    let output = check_output(&inputs.dir);
    r.problems.extend(output.errors.iter().cloned());
    r.guest_raw_id = output.machine_named(&inputs.machine);
    let Some(guest) = r.guest_raw_id else {
        r.problems.push(format!(
            "no SystemInfo names a machine {:?} in {} (machines: {:?})",
            inputs.machine,
            inputs.dir.display(),
            output.machine_names
        ));
        return r;
    };
    synthetic(&output, guest, &mut r);
    match read_merged(&inputs.merged, guest, &inputs.pings) {
        Ok((packets, found)) => {
            r.guest_packets = packets;
            let live = match &inputs.live {
                None => Ok(BTreeMap::new()),
                Some(path) => read_live(path, guest, &inputs.pings),
            };
            match live {
                Ok(live) => causality(&inputs.pings, &found, &live, &mut r),
                Err(e) => r.problems.push(e),
            }
        }
        Err(e) => r.problems.push(e),
    }
    drift_and_jitter(inputs, guest, &mut r);
    if inputs.trace_processor {
        r.tp = Some(trace_processor(
            &output,
            guest,
            r.pings_found,
            &inputs.machine,
            &inputs.arch,
        ));
    }
    r
}

fn synthetic(output: &OutputCheck, guest: u32, r: &mut Report) {
    for s in output.sources.values().filter(|s| s.machine == guest) {
        r.synthetic_events += s.events;
        r.synthetic_missing += s.missing;
        r.synthetic_duplicates += s.duplicates;
    }
    if output.unsynced_events + output.other_clock_events + output.events_in_preamble > 0 {
        r.problems.push(format!(
            "synthetic events unsynced {}, on another clock {}, in a preamble {}",
            output.unsynced_events, output.other_clock_events, output.events_in_preamble
        ));
    }
}

/// The guest's packets in the merged jsonl, and the ping events among them
/// (matched by their BOOTTIME stamp).
fn read_merged(
    path: &Path,
    guest: u32,
    pings: &[Ping],
) -> Result<(u64, BTreeMap<u64, Found>), String> {
    let by_stamp: BTreeMap<u64, u64> = pings.iter().map(|p| (p.guest_ns, p.n)).collect();
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut packets, mut found) = (0u64, BTreeMap::<u64, Found>::new());
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: not JSON: {e}", path.display(), i + 1))?;
        if v["raw_id"].as_u64() != Some(u64::from(guest)) {
            continue;
        }
        packets += 1;
        // The daemon's sync-quality samples for the guest carry the
        // timestamp of the packet they precede: not ping events.
        if v["clock"].as_u64() != Some(BOOTTIME) || daemon_quality(&v) {
            continue;
        }
        let Some(n) = v["clock_ts"].as_u64().and_then(|s| by_stamp.get(&s)) else {
            continue;
        };
        let ts = v["ts"]
            .as_u64()
            .ok_or_else(|| format!("{} line {}: no ts", path.display(), i + 1))?;
        found
            .entry(*n)
            .and_modify(|f| f.copies += 1)
            .or_insert(Found {
                ts,
                err_ns: v["err_ns"].as_u64(),
                copies: 1,
            });
    }
    Ok((packets, found))
}

/// The ping events of the live tail's jsonl (a line cut short when the
/// daemon stopped is skipped).
fn read_live(path: &Path, guest: u32, pings: &[Ping]) -> Result<BTreeMap<u64, Live>, String> {
    let by_stamp: BTreeMap<u64, u64> = pings.iter().map(|p| (p.guest_ns, p.n)).collect();
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["raw_id"].as_u64() != Some(u64::from(guest))
            || v["clock"].as_u64() != Some(BOOTTIME)
            || daemon_quality(&v)
        {
            continue;
        }
        let (Some(n), Some(ts)) = (
            v["clock_ts"].as_u64().and_then(|s| by_stamp.get(&s)),
            v["ts"].as_u64(),
        ) else {
            continue;
        };
        out.insert(
            *n,
            Live {
                ts,
                err_ns: v["err_ns"].as_u64(),
            },
        );
    }
    Ok(out)
}

/// A record of a sync-quality sequence the daemon writes per remote
/// machine (docs/format.md, "Sync-quality tracks").
fn daemon_quality(v: &serde_json::Value) -> bool {
    v["seq"]
        .as_u64()
        .and_then(|s| u32::try_from(s).ok())
        .is_some_and(tracesync_core::sync_quality::is_quality_seq)
}

fn causality(
    pings: &[Ping],
    found: &BTreeMap<u64, Found>,
    live: &BTreeMap<u64, Live>,
    r: &mut Report,
) {
    for p in pings {
        r.window_ns.push(p.recv_ns.saturating_sub(p.send_ns));
        let Some(f) = found.get(&p.n) else { continue };
        r.pings_found += 1;
        r.pings_duplicated += f.copies - 1;
        let l = live.get(&p.n);
        if let Some(l) = l {
            r.merged_vs_live_ns.push(f.ts.abs_diff(l.ts));
        } else {
            r.no_live_record += 1;
        }
        // The merged file's bound; where it gives none (or 0, which a
        // remote machine's bound never is), the live path's.
        let err = match (f.err_ns.filter(|e| *e > 0), l.and_then(|l| l.err_ns)) {
            (Some(e), _) => Some(e),
            (None, Some(e)) => {
                r.err_from_live += 1;
                Some(e)
            }
            (None, None) => f.err_ns,
        };
        let Some(err) = err else {
            r.problems
                .push(format!("ping {}: no err_ns (merged or live)", p.n));
            continue;
        };
        r.err_ns.push(err);
        let lo = p.send_ns.saturating_sub(err);
        let hi = p.recv_ns.saturating_add(err);
        r.inside_bare += u64::from((p.send_ns..=p.recv_ns).contains(&f.ts));
        if (lo..=hi).contains(&f.ts) {
            r.inside += 1;
        } else if r.outside.len() < 10 {
            r.outside.push((
                p.n,
                f.ts as i64 - p.send_ns as i64,
                p.recv_ns as i64 - f.ts as i64,
                err,
            ));
        }
    }
    // The ping channel's own view of the guest clock: guest stamp minus the
    // window's midpoint, against host time.
    // Like the probe fit, the faster half only: a slow answer is queueing.
    let median = quantile(&r.window_ns, 0.5).unwrap_or(0);
    let points: Vec<(f64, f64)> = pings
        .iter()
        .filter(|p| p.recv_ns.saturating_sub(p.send_ns) <= median)
        .map(|p| {
            let mid = p.send_ns as f64 / 2.0 + p.recv_ns as f64 / 2.0;
            (mid, p.guest_ns as f64 - mid)
        })
        .collect();
    if let Some(line) = Line::fit(&points) {
        r.drift_pings_ppm = Some(line.ppm());
        r.ping_residual_ns = line.abs_residuals(&points);
    }
}

/// The estimator's figures (status) and the probe samples' (sidecars).
fn drift_and_jitter(inputs: &Inputs, guest: u32, r: &mut Report) {
    if let Some(m) = inputs.status.as_ref().and_then(|s| {
        s["machines"]
            .as_array()?
            .iter()
            .find(|m| m["raw_id"].as_u64() == Some(u64::from(guest)))
    }) {
        r.drift_status_ppm = m["drift_ppm"].as_f64();
        r.sigma_ns = m["sync"]["sigma_ns"].as_u64();
        r.freq_bound_ppm = m["sync"]["freq_bound_ppm"].as_f64();
    }
    let samples = match probe_samples(&inputs.dir, guest) {
        Ok(s) => s,
        Err(e) => {
            r.problems.push(e);
            return;
        }
    };
    r.probe_samples = samples.len();
    r.probe_rtt_ns = samples.iter().map(|s| s.1).collect();
    // The fit keeps the faster half (queueing only ever adds delay).
    let Some(median) = quantile(&r.probe_rtt_ns, 0.5) else {
        return;
    };
    let points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.1 <= median)
        .map(|s| (s.0, s.2))
        .collect();
    if let Some(line) = Line::fit(&points) {
        r.drift_probes_ppm = Some(line.ppm());
        r.probe_residual_ns = line.abs_residuals(&points);
    }
}

/// (host t1, round trip, guest - host offset) of each probe sample of
/// `guest` in the sidecars of `dir`.
fn probe_samples(dir: &Path, guest: u32) -> Result<Vec<(f64, u64, f64)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut sidecars: Vec<PathBuf> = entries
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.to_string_lossy().ends_with(".sync.jsonl"))
        .collect();
    sidecars.sort();
    let mut out = Vec::new();
    for path in sidecars {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines() {
            // A line cut short by a full disk is skipped (docs/format.md).
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["machine_raw_id"].as_u64() != Some(u64::from(guest)) {
                continue;
            }
            let t = |k: &str| v[k].as_u64();
            let (Some(t1), Some(t2), Some(t3), Some(t4)) = (t("t1"), t("t2"), t("t3"), t("t4"))
            else {
                continue;
            };
            let rtt = (t4.saturating_sub(t1)).saturating_sub(t3.saturating_sub(t2));
            let offset = ((t2 as f64 - t1 as f64) + (t3 as f64 - t4 as f64)) / 2.0;
            out.push((t1 as f64, rtt, offset));
        }
    }
    Ok(out)
}

/// Every rolled file through the real trace processor (no error stats,
/// synthetic slices where the checker placed them); the guest must be a
/// machine of its own with its kernel's SystemInfo, named by it (the
/// checker reads `machine_name`; v52's machine table has no name column),
/// of the architecture the run asked for (its `arch`, from the guest
/// kernel's `uname -m`), and every ping event a `vm-ping` slice.
fn trace_processor(
    output: &OutputCheck,
    guest: u32,
    pings: u64,
    name: &str,
    arch: &str,
) -> Result<String, String> {
    let judged = judge::judge_all(output)?;
    let machine =
        format!("SELECT sysname, release, num_cpus, arch FROM machine WHERE raw_id = {guest}");
    let slices = "SELECT COUNT(*) FROM slice WHERE name = 'vm-ping'";
    let (mut uname, mut guest_arch, mut ping_slices) = (None, None, 0);
    for scan in &output.files {
        let res = tp::query(&scan.path, &[&machine, slices])?;
        if let Some(row) = res[0].rows.first() {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or("null").to_owned();
            uname.get_or_insert(format!(
                "{} {}, {} CPU",
                text(&row[0]),
                text(&row[1]),
                tp::as_i64(&row[2]).unwrap_or(0)
            ));
            guest_arch.get_or_insert(text(&row[3]));
        }
        ping_slices += res[1]
            .rows
            .first()
            .and_then(|r| tp::as_i64(&r[0]))
            .unwrap_or(0);
    }
    let Some(uname) = uname else {
        return Err(format!("no machine row with the guest's raw id {guest}"));
    };
    if guest_arch.as_deref() != Some(arch) {
        return Err(format!(
            "the guest's machine row says arch {}, the run asked for {arch}",
            guest_arch.as_deref().unwrap_or("null")
        ));
    }
    if u64::try_from(ping_slices).ok() != Some(pings) {
        return Err(format!(
            "{ping_slices} vm-ping slices for {pings} ping events"
        ));
    }
    Ok(format!(
        "{} rolled files load with no error stats; the guest {name:?} is machine raw id {guest} \
         ({uname}, {arch}); {ping_slices} vm-ping slices",
        judged.len()
    ))
}

#[cfg(test)]
mod tests;
