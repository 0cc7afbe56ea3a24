//! The probe exchanges of a closed capture, read from its `.sync.jsonl`
//! sidecars (docs/format.md, "Sync sidecar"), and each remote machine's
//! two-sided mapping made from them (`tracesync_core::sync::smoother`).
//!
//! Samples are taken in the order the daemon accepted them (file order,
//! then line order), as the live estimator was fed. A line that does not
//! parse, or whose times cannot be an exchange, is skipped and counted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};

use tracesync_capture::sidecar;
use tracesync_core::refine::Placement;
use tracesync_core::sync::EstimatorConfig;
use tracesync_core::sync::smoother::{Exchange, Sides, Smoother};

use crate::merge::capture::{Capture, CaptureError};

/// Exchanges held at most for a whole capture (a day of probing 64
/// machines at 4 Hz); past it the capture is refused, not cut.
pub const MAX_EXCHANGES: usize = 64 * 4 * 86_400;

/// What reading the sidecars found.
#[derive(Debug, Default)]
pub struct SidecarCounts {
    pub files: u64,
    pub samples: u64,
    pub lines_skipped: u64,
    /// Sidecars not read: a link, or not a regular file.
    pub skipped: u64,
}

/// One remote machine's mapping.
pub struct MachineMapping {
    pub smoother: Smoother,
    pub samples: usize,
    /// (relay time, BOOTTIME-MONOTONIC) where the latter changed, by
    /// relay time: a packet takes the value of the last sample before it.
    epochs: Vec<(u64, i64)>,
}

impl MachineMapping {
    /// Host placement of relay BOOTTIME `relay_ns`, and from which sides.
    pub fn place(&self, relay_ns: u64) -> Option<(Placement, Sides)> {
        let k = self.epochs.partition_point(|(at, _)| *at <= relay_ns);
        let bmm = self.epochs[k.saturating_sub(1)].1;
        let m = self.smoother.map(relay_ns, bmm)?;
        Some((
            Placement {
                host_ns: m.host_ns,
                bound_ns: m.bound_ns,
            },
            m.sides,
        ))
    }
}

/// Every remote machine's exchanges in `capture`'s sidecars.
pub fn read_exchanges(
    capture: &Capture,
) -> Result<(BTreeMap<u32, Vec<Exchange>>, SidecarCounts), CaptureError> {
    let mut out: BTreeMap<u32, Vec<Exchange>> = BTreeMap::new();
    let mut counts = SidecarCounts::default();
    let mut total = 0usize;
    for f in &capture.files {
        let path = &sidecar::sidecar_path(&f.path);
        // A sidecar is the capture's own file: a link planted at its name
        // is not followed (refine may run as root), only said.
        let file = match tracesync_common::files::open_regular(path) {
            Ok(Some(file)) => file,
            Ok(None) => continue,
            Err(e) => {
                eprintln!(
                    "tracesync: warning: {}: not read: {e}; its file is refined without it",
                    path.display()
                );
                counts.skipped += 1;
                continue;
            }
        };
        counts.files += 1;
        for line in BufReader::new(file).split(b'\n') {
            let line = line.map_err(|e| CaptureError {
                line: format!("{}: cannot read: {e}", path.display()),
                code: tracesync_common::exit::IOERR,
            })?;
            let Some((raw_id, x)) = parse_line(&line) else {
                counts.lines_skipped += 1;
                continue;
            };
            total += 1;
            if total > MAX_EXCHANGES {
                return Err(CaptureError {
                    line: format!(
                        "{}: more than {MAX_EXCHANGES} probe samples in the capture's sidecars; \
                         refine a part of it (copy some of its files and their .sync.jsonl into a directory)",
                        path.display()
                    ),
                    code: tracesync_common::exit::DATAERR,
                });
            }
            counts.samples += 1;
            out.entry(raw_id).or_default().push(x);
        }
    }
    Ok((out, counts))
}

fn parse_line(line: &[u8]) -> Option<(u32, Exchange)> {
    let s = sidecar::parse_line(line)?;
    let t = [s.t1, s.t2, s.t3, s.t4];
    // An exchange: the reply after the probe on both clocks.
    if s.t1 > s.t4 || s.t2 > s.t3 || s.machine_raw_id == 0 {
        return None;
    }
    Some((
        s.machine_raw_id,
        Exchange {
            t,
            boottime_minus_monotonic_ns: s.boottime_minus_monotonic_ns,
        },
    ))
}

/// The mapping of one machine from its exchanges.
pub fn mapping(exchanges: &[Exchange]) -> MachineMapping {
    let smoother = Smoother::new(EstimatorConfig::default(), exchanges);
    let mut by_time: Vec<(u64, i64)> = exchanges
        .iter()
        .map(|x| {
            (
                x.t[1] + (x.t[2] - x.t[1]) / 2,
                x.boottime_minus_monotonic_ns,
            )
        })
        .collect();
    by_time.sort_by_key(|(at, _)| *at);
    let mut epochs: Vec<(u64, i64)> = Vec::new();
    for (at, bmm) in by_time {
        if epochs.last().is_none_or(|(_, b)| *b != bmm) {
            epochs.push((at, bmm));
        }
    }
    if let Some(first) = epochs.first_mut() {
        first.0 = 0;
    } else {
        epochs.push((0, 0));
    }
    MachineMapping {
        smoother,
        samples: exchanges.len(),
        epochs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_and_without_the_epoch_and_bad_ones_are_skipped() {
        let (id, x) =
            parse_line(br#"{"machine_raw_id":9,"session_id":1,"t1":10,"t2":20,"t3":21,"t4":30}"#)
                .unwrap();
        assert_eq!(
            (id, x.t, x.boottime_minus_monotonic_ns),
            (9, [10, 20, 21, 30], 0)
        );
        let (_, x) = parse_line(
            br#"{"machine_raw_id":9,"session_id":1,"t1":10,"t2":20,"t3":21,"t4":30,"boottime_minus_monotonic_ns":-7}"#,
        )
        .unwrap();
        assert_eq!(x.boottime_minus_monotonic_ns, -7);
        // The reply before the probe; the host; a torn line.
        assert!(
            parse_line(br#"{"machine_raw_id":9,"session_id":1,"t1":40,"t2":20,"t3":21,"t4":30}"#)
                .is_none()
        );
        assert!(
            parse_line(br#"{"machine_raw_id":0,"session_id":1,"t1":10,"t2":20,"t3":21,"t4":30}"#)
                .is_none()
        );
        assert!(parse_line(br#"{"machine_raw_id":9,"session_id":1,"t1":1"#).is_none());
    }

    #[test]
    fn a_packet_takes_the_epoch_of_the_samples_before_it() {
        // A relay 1 s ahead, probed every 250 ms, suspended for 5 s at 10 s
        // (BOOTTIME-MONOTONIC jumps; BOOTTIME keeps counting).
        let xs: Vec<Exchange> = (0..80u64)
            .map(|i| {
                let host =
                    1_000_000_000 + i * 250_000_000 + if i >= 40 { 5_000_000_000 } else { 0 };
                let relay = host + 1_000_000_000;
                Exchange {
                    t: [host, relay + 20_000, relay + 21_000, host + 41_000],
                    boottime_minus_monotonic_ns: if i >= 40 { 5_000_000_000 } else { 0 },
                }
            })
            .collect();
        let m = mapping(&xs);
        for relay in [3_000_000_000u64, 20_000_000_000] {
            let (p, _) = m.place(relay).expect("placed");
            assert!(
                (p.host_ns - (relay as i64 - 1_000_000_000)).unsigned_abs() <= p.bound_ns,
                "{relay}: {p:?}"
            );
        }
    }
}
