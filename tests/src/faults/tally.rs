//! What a fault run did and what survived it: faults by kind, and the
//! synthetic packets produced, written, lost and duplicated, counted by
//! their identities (`tracesync_src` / `tracesync_n`) in the rolled output.

use std::collections::BTreeMap;

use crate::live::OutputCheck;

/// Faults injected, by kind.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub faults: BTreeMap<String, u64>,
}

impl Tally {
    pub fn add(&mut self, kind: &str) {
        *self.faults.entry(kind.to_owned()).or_default() += 1;
    }

    pub fn total(&self) -> u64 {
        self.faults.values().sum()
    }

    /// `kind=count` pairs, comma-separated.
    pub fn list(&self) -> String {
        self.faults
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Synthetic packets by identity over all sources of a run.
///
/// A source's counters run from 0 without gaps, and a relay resumes its
/// counter from its spool after a restart: `produced` is the sum of
/// (highest counter + 1), every counter below it must be written once.
/// Counters a relay generated but never spooled (in memory when it was
/// killed) are generated again with the same numbers, so they count once.
/// That nothing spooled was left unsent at the end is checked apart: every
/// relay must stop with everything acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub sources: u64,
    pub produced: u64,
    /// Every sighting, duplicates included.
    pub written: u64,
    pub lost: u64,
    pub duplicated: u64,
}

impl Counts {
    pub fn of(check: &OutputCheck) -> Counts {
        let mut c = Counts::default();
        for s in check.sources.values() {
            c.sources += 1;
            if s.events > 0 {
                c.produced += s.max_n + 1;
            }
            c.written += s.events;
            c.lost += s.missing;
            c.duplicated += s.duplicates;
        }
        c
    }
}

/// One line of the summary table.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub scenario: String,
    pub seed: u64,
    pub relays: usize,
    /// Synthetic events/s all relays generate together (nominal).
    pub offered_per_s: u64,
    /// Written synthetic events per second of the run.
    pub held_per_s: u64,
    pub secs: f64,
    pub tally: Tally,
    pub counts: Counts,
    /// Rolled files, and how many the trace processor loaded cleanly
    /// (None: not judged).
    pub files: usize,
    pub files_judged: Option<usize>,
}

impl Row {
    /// Prints the row, human-readable and as one JSON line
    /// (`fault-suite row: {...}`) for scripts/fault-suite.sh.
    pub fn print(&self) {
        let c = &self.counts;
        eprintln!(
            "fault-suite: {}: {} relays, {} events/s offered, {} held over {:.1} s; faults {} ({}); \
             produced {}, written {}, lost {}, duplicated {}; {} files, judged {:?} (seed {})",
            self.scenario,
            self.relays,
            self.offered_per_s,
            self.held_per_s,
            self.secs,
            self.tally.total(),
            self.tally.list(),
            c.produced,
            c.written,
            c.lost,
            c.duplicated,
            self.files,
            self.files_judged,
            self.seed
        );
        let json = serde_json::json!({
            "scenario": self.scenario,
            "seed": self.seed,
            "relays": self.relays,
            "offered_per_s": self.offered_per_s,
            "held_per_s": self.held_per_s,
            "secs": (self.secs * 10.0).round() / 10.0,
            "faults": self.tally.faults,
            "produced": c.produced,
            "written": c.written,
            "lost": c.lost,
            "duplicated": c.duplicated,
            "files": self.files,
            "files_judged": self.files_judged,
        });
        eprintln!("fault-suite row: {json}");
    }

    /// Panics unless nothing was lost or duplicated and something was
    /// written.
    pub fn assert_clean(&self) {
        let c = &self.counts;
        assert!(
            c.produced > 0 && c.lost == 0 && c.duplicated == 0 && c.written == c.produced,
            "{}: produced {}, written {}, lost {}, duplicated {} (seed {}; replay with \
             TRACESYNC_FAULT_SEED={})",
            self.scenario,
            c.produced,
            c.written,
            c.lost,
            c.duplicated,
            self.seed,
            self.seed
        );
    }
}
