//! The real-socket run's capture refined afterwards (`tracesync refine`,
//! issue 21): the same events placed by the two-sided mapping, judged
//! against the same ground truth as the live output, and each against the
//! refined error bound (the machine's error-bound track, as Perfetto and
//! `tracesync_cli::check` read it).

use std::path::Path;
use std::process::Command;

use tracesync_cli::check::check_dir;

use super::realsock::{ErrStats, RelayResult};
use crate::live::output::check_output;

/// Refines `out_dir` into `refined_dir` and fills each relay's refined
/// figures: errors of the events after `warm` (host BOOTTIME ns), and
/// inside-bound counts over all its events. With `series` (a directory
/// and the run's start, host BOOTTIME ns), each relay's refined error per
/// event over time goes to `refined-errors-RELAY.tsv` there.
pub fn measure(
    cli: &Path,
    out_dir: &Path,
    refined_dir: &Path,
    warm: u64,
    series: Option<(&Path, u64)>,
    relays: &mut [RelayResult],
) -> Result<(), String> {
    let run = Command::new(cli)
        .arg("refine")
        .arg(out_dir)
        .arg("-o")
        .arg(refined_dir)
        .output()
        .map_err(|e| format!("{}: {e}", cli.display()))?;
    if !run.status.success() {
        return Err(format!(
            "tracesync refine: {}: {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let check = check_output(refined_dir);
    if !check.errors.is_empty() {
        return Err(format!("refined output: {}", check.summary()));
    }
    let bounds = check_dir(refined_dir).map_err(|e| format!("refined output: {e}"))?;
    for r in relays {
        let machine = check.machine_named(&r.name);
        let signed: Vec<(u64, i64)> = check
            .files
            .iter()
            .flat_map(|f| f.events.iter())
            .filter(|e| Some(e.machine) == machine && !e.in_preamble && e.id.truth_ns >= warm)
            .map(|e| (e.id.truth_ns, e.ts_host - e.id.truth_ns as i64))
            .collect();
        if let Some((dir, start)) = series {
            let mut tsv = String::from("seconds\trefined_err_ns\n");
            for &(truth, err) in &signed {
                let since_start = truth.saturating_sub(start) as f64 * 1e-9;
                tsv.push_str(&format!("{since_start:.3}\t{err}\n"));
            }
            let path = dir.join(format!("refined-errors-{}.tsv", r.name));
            std::fs::write(&path, tsv).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let errors: Vec<u64> = signed.iter().map(|&(_, err)| err.unsigned_abs()).collect();
        r.refined = (!errors.is_empty()).then(|| ErrStats::of(errors));
        if let Some(s) = bounds.sources.get(&format!("{}/1", r.name)) {
            r.refined_inside = (s.inside, s.packets);
        }
    }
    Ok(())
}
