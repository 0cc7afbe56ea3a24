//! The manifest's checks that need facts about the input files, gathered by
//! a first read pass, and the lookup of an input's entry.

use std::collections::BTreeSet;

use super::{FileEntry, Manifest, ManifestError, err, join};

/// Facts about each input file known after a first read pass, for the checks
/// that need them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileFacts {
    /// Distinct `TracePacket.machine_id` values seen, 0 for packets without one.
    pub embedded_machine_ids: BTreeSet<u32>,
    pub has_clock_snapshots: bool,
    /// Whether a packet carries a RemoteClockSync (a host's record of
    /// another machine's clocks).
    pub has_remote_clock_sync: bool,
    pub is_archive_or_manifest: bool,
}

impl FileFacts {
    pub(super) fn is_multi_machine(&self) -> bool {
        self.embedded_machine_ids.len() > 1
    }

    /// What in the file is of a machine other than its own, for a
    /// message: packets with a nonzero machine id, RemoteClockSync packets
    /// (None if neither). Perfetto refuses a `machine` override, and a
    /// `clocks` override that pins a clockless file, at the first such
    /// packet (its CheckManifestSingleMachine), even when every packet
    /// carries the same nonzero id.
    pub(super) fn other_machines(&self) -> Option<String> {
        let ids = self
            .embedded_machine_ids
            .iter()
            .any(|&id| id != 0)
            .then(|| {
                format!(
                    "embedded machine ids {}",
                    list_ids(&self.embedded_machine_ids)
                )
            });
        let sync = self
            .has_remote_clock_sync
            .then_some("RemoteClockSync packets".to_owned());
        let found: Vec<String> = ids.into_iter().chain(sync).collect();
        (!found.is_empty()).then(|| found.join(", "))
    }
}

impl Manifest {
    /// The entry for an input, matched by any of its names in the order
    /// given (exact path first, then base name or member name).
    pub fn entry_for(&self, names: &[String]) -> Option<&FileEntry> {
        names
            .iter()
            .find_map(|n| self.files.iter().find(|e| e.path == *n))
    }

    fn entry_by_path(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|e| e.path == path)
    }

    /// Machine names an entry declares for its file.
    pub(super) fn declares(&self, path: &str, machine: &str) -> bool {
        self.entry_by_path(path).is_some_and(|e| {
            e.machine.as_deref() == Some(machine) || e.machines.iter().any(|(_, n)| n == machine)
        })
    }

    /// An entry naming an input that is not a trace (an archive, a
    /// manifest: `containers`) may not override anything.
    pub fn check_containers(&self, containers: &[String]) -> Result<(), ManifestError> {
        for (i, e) in self.files.iter().enumerate() {
            let overrides = e.machine.is_some() || !e.machines.is_empty() || e.clocks.is_some();
            if overrides && containers.contains(&e.path) {
                return Err(err(
                    format!("files[{i}]"),
                    format!(
                        "'{}': overrides are not supported for trace files which are themselves archives or perfetto_manifest files; remove its `machine`, `machines` and `clocks`",
                        e.path
                    ),
                ));
            }
            if let Some(c) = &e.clocks
                && containers.contains(&c.sync_to.file)
            {
                return Err(err(
                    format!("files[{i}].clocks.sync_to.file"),
                    format!(
                        "'{}': overrides are not supported for trace files which are themselves archives or perfetto_manifest files; relate the clock to a trace in it",
                        c.sync_to.file
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks that need the inputs. `facts` maps a manifest file path to that
    /// input's facts (`None`: no such input).
    pub fn check_against_inputs(
        &self,
        facts: &dyn Fn(&str) -> Option<FileFacts>,
    ) -> Result<(), ManifestError> {
        if let Some(tt) = &self.trace_time
            && let Some(file) = &tt.file
        {
            let Some(ff) = facts(file) else {
                return Err(err(
                    "trace_time.file",
                    format!("trace_time: file names '{file}', which is not among the inputs"),
                ));
            };
            match &tt.machine {
                None if ff.is_multi_machine() => {
                    return Err(err(
                        "trace_time",
                        format!(
                            "trace_time: file '{file}' is a multi-machine trace; also name the machine with trace_time.machine"
                        ),
                    ));
                }
                Some(g) if !self.declares(file, g) => {
                    return Err(err(
                        "trace_time.machine",
                        format!(
                            "trace_time: machine '{g}' is not a machine declared by file '{file}'"
                        ),
                    ));
                }
                _ => {}
            }
        }

        for (i, e) in self.files.iter().enumerate() {
            let key = format!("files[{i}]");
            // An entry for a file that is not among the inputs configures nothing.
            let Some(ff) = facts(&e.path) else {
                continue;
            };
            let overrides = e.machine.is_some() || !e.machines.is_empty() || e.clocks.is_some();
            if ff.is_archive_or_manifest && overrides {
                return Err(err(
                    key,
                    "overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
                ));
            }
            if e.machine.is_some()
                && let Some(others) = ff.other_machines()
            {
                return Err(err(
                    join(&key, "machine"),
                    format!(
                        "'{}' is a multi-machine trace ({others}). Replace `machine` with a `machines` block",
                        e.path
                    ),
                ));
            }
            if !e.machines.is_empty() {
                // Id 0 is packets without a machine id: the file's base
                // machine, which needs no declaration.
                if let Some(id) = ff
                    .embedded_machine_ids
                    .iter()
                    .find(|id| **id != 0 && !e.machines.iter().any(|(k, _)| k == *id))
                {
                    return Err(err(
                        join(&key, "machines"),
                        format!(
                            "machines: trace has a packet from undeclared machine id {id}; add {{\"id\": {id}, \"name\": ...}}"
                        ),
                    ));
                }
            }
            let Some(c) = &e.clocks else {
                continue;
            };
            self.check_clocks(e, c, &ff, &key, facts)?;
        }
        Ok(())
    }
}

fn list_ids(ids: &BTreeSet<u32>) -> String {
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
