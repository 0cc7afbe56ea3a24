//! Loss and duplication of a feeder run: the rolled output's identities
//! (read by the capture checker) against what each feeder says the daemon
//! acknowledged.
//!
//! A TrackEvent acknowledged (counter below `acked_identities`) that is
//! not in the output is lost; one in the output twice is duplicated.
//! Counters sent after the last ack may be written or not (the daemon
//! wrote them, or the feeder stopped before it could): neither counts.

use std::path::Path;

use tracesync_cli::check::{CheckError, check_dir};

use super::drive::Summary;

/// Packets of the run by identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// TrackEvents with a feeder's identity in the output (duplicates
    /// included).
    pub written: u64,
    /// Acknowledged TrackEvents absent from the output.
    pub lost: u64,
    pub duplicated: u64,
}

/// Reads `output` (a rolling output directory) and tallies the feeders'
/// TrackEvents.
pub fn tally(output: &Path, feeders: &[Summary]) -> Result<Tally, CheckError> {
    let report = check_dir(output)?;
    let mut tally = Tally::default();
    for feeder in feeders {
        let Some(source) = report.sources.get(&feeder.src) else {
            tally.lost += feeder.acked_identities;
            continue;
        };
        tally.written += source.packets;
        tally.duplicated += source.duplicates;
        // Missing counts gaps below the highest written; acked counters
        // above it are missing too.
        let seen_through = source.highest.map_or(0, |h| h + 1);
        tally.lost += source.missing + feeder.acked_identities.saturating_sub(seen_through);
    }
    Ok(tally)
}

/// Parses a [`Summary`] line as the feeder prints it (None for any other
/// line).
pub fn parse_summary(line: &str) -> Option<Summary> {
    let rest = line.strip_prefix("feeder ")?;
    let mut summary = Summary::default();
    for pair in rest.split_whitespace() {
        let (key, value) = pair.split_once('=')?;
        let number = || value.parse::<u64>().ok();
        match key {
            "src" => summary.src = value.to_owned(),
            "batches" => summary.batches = number()?,
            "packets" => summary.packets = number()?,
            "identities" => summary.identities = number()?,
            "acked_identities" => summary.acked_identities = number()?,
            "reconnects" => summary.reconnects = number()?,
            "drained" => summary.drained = value == "true",
            _ => {}
        }
    }
    Some(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_line_round_trips() {
        let summary = Summary {
            src: "feeder-2/1".into(),
            batches: 12,
            packets: 40_000,
            identities: 39_990,
            acked_identities: 30_000,
            reconnects: 1,
            drained: true,
        };
        assert_eq!(parse_summary(&summary.to_string()), Some(summary));
        assert_eq!(parse_summary("something else"), None);
    }
}
