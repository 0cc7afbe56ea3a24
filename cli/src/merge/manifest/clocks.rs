//! A file's `clocks` override: relating its clock to a reference file's
//! (RELATE) or pinning its private timeline (PIN), at an offset. Its
//! parsing, and its checks against the inputs.

use serde_json::Value;

use super::input_checks::FileFacts;
use super::json::{Int, as_object, clock_name, integer, non_empty_str, opt_name, present};
use super::{FileEntry, Manifest, ManifestError, err, join};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockOverride {
    /// The file's own clock (RELATE); `None` pins the file's private timeline (PIN).
    pub clock: Option<u32>,
    pub machine: Option<String>,
    pub sync_to: SyncTo,
    /// The source clock reads T when the reference reads T + offset_ns.
    pub offset_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncTo {
    pub file: String,
    pub machine: Option<String>,
    /// `None`: the reference file's private per-file timeline.
    pub clock: Option<u32>,
}

pub(super) fn parse_clocks(v: &Value, key: &str) -> Result<ClockOverride, ManifestError> {
    let o = as_object(v, key)?;
    let clock = match present(o, "clock") {
        None => None,
        Some(c) => Some(clock_name(c, &join(key, "clock"))?),
    };
    let machine = opt_name(o, "machine", key)?;
    let skey = join(key, "sync_to");
    let Some(sv) = present(o, "sync_to") else {
        return Err(err(key, "clocks: a sync_to block is required"));
    };
    let so = as_object(sv, &skey)?;
    let file = match present(so, "file") {
        Some(f) => non_empty_str(
            f,
            &join(&skey, "file"),
            "clocks: sync_to.file must be a non-empty string",
        )?,
        None if present(so, "machine").is_some() => {
            return Err(err(
                join(&skey, "machine"),
                "clocks: sync_to.file is required: a machine name alone is ambiguous; name its file with sync_to.file",
            ));
        }
        None => return Err(err(&skey, "clocks: sync_to.file is required")),
    };
    let sync_machine = opt_name(so, "machine", &skey)?;
    let sync_clock = match present(so, "clock") {
        None => None,
        Some(c) => Some(clock_name(c, &join(&skey, "clock"))?),
    };
    let okey = join(key, "offset_ns");
    let offset_ns = match present(o, "offset_ns") {
        None => 0,
        Some(ov) => match integer(ov) {
            Int::Yes(n) if n > i128::from(i64::MIN) && n <= i128::from(i64::MAX) => n as i64,
            Int::Yes(_) | Int::Big(_) => {
                return Err(err(
                    okey,
                    "offset_ns is out of range: it must be within ±9223372036854775807",
                ));
            }
            Int::No => {
                return Err(err(okey, "offset_ns must be an integer (nanoseconds)"));
            }
        },
    };
    Ok(ClockOverride {
        clock,
        machine,
        sync_to: SyncTo {
            file,
            machine: sync_machine,
            clock: sync_clock,
        },
        offset_ns,
    })
}

impl Manifest {
    /// The checks of entry `e`'s override `c` that need the inputs: `key`
    /// is the entry's key path, `ff` its input's facts, `facts` as for
    /// [`Manifest::check_against_inputs`].
    pub(super) fn check_clocks(
        &self,
        e: &FileEntry,
        c: &ClockOverride,
        ff: &FileFacts,
        key: &str,
        facts: &dyn Fn(&str) -> Option<FileFacts>,
    ) -> Result<(), ManifestError> {
        let ckey = join(key, "clocks");
        if c.clock.is_none() {
            if let Some(others) = ff.other_machines() {
                return Err(err(
                    ckey,
                    format!(
                        "a `clocks` override applies only to a single-machine file when it names no source `clock`, but '{}' has {others}; name the clock with clocks.clock and the machine with clocks.machine",
                        e.path
                    ),
                ));
            }
            if ff.has_clock_snapshots {
                return Err(err(
                    ckey,
                    format!(
                        "clock overrides require the trace to use a single clock when they name no source `clock`, but '{}' emits clock snapshots; name which of its clocks to relate with clocks.clock",
                        e.path
                    ),
                ));
            }
        }
        match &c.machine {
            None if ff.is_multi_machine() => {
                return Err(err(
                    ckey,
                    format!(
                        "clocks: file '{}' is a multi-machine trace; name which machine the clock is on with clocks: machine",
                        e.path
                    ),
                ));
            }
            Some(g) if !self.declares(&e.path, g) => {
                return Err(err(
                    join(&ckey, "machine"),
                    format!(
                        "clocks: machine '{g}' is not a machine declared by file '{}'",
                        e.path
                    ),
                ));
            }
            _ => {}
        }
        let r = &c.sync_to.file;
        let skey = join(&ckey, "sync_to");
        let Some(rf) = facts(r) else {
            return Err(err(
                join(&skey, "file"),
                format!("clocks: sync_to.file names '{r}', which is not among the inputs"),
            ));
        };
        if rf.is_archive_or_manifest {
            return Err(err(
                join(&skey, "file"),
                "overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
            ));
        }
        match &c.sync_to.machine {
            None if rf.is_multi_machine() => {
                return Err(err(
                    skey,
                    format!(
                        "clocks: sync_to.file '{r}' is a multi-machine trace; also name the machine with clocks: sync_to.machine"
                    ),
                ));
            }
            Some(g) if !self.declares(r, g) => {
                return Err(err(
                    join(&skey, "machine"),
                    format!(
                        "clocks: sync_to.machine '{g}' is not a machine declared by file '{r}'"
                    ),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}
