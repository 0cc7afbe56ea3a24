//! Which machine every packet of every input belongs to, as Perfetto assigns
//! machines when it merges traces.
//!
//! - Ids embedded in packets (`TracePacket.machine_id`, written by a relay
//!   host) become machines keyed by that raw id: the same id in several
//!   files is one machine (Perfetto keeps one context per raw machine id
//!   across the files of a merge). A file whose packets all carry one id is
//!   adopted onto the file's base machine, which then takes that raw id
//!   (Perfetto relabels its host row), unless the base already holds data
//!   or another id, or the id is already a machine.
//! - A manifest names a whole file's machine (`machine`) or renames embedded
//!   ids (`machines`); equal names are one machine.
//! - Every other file belongs to the host machine, its clocks scoped to the
//!   file; `--machine-per-file` gives each such file a machine of its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tracesync_protocol::perfetto::SystemInfo;

/// Raw ids of manifest-named machines start here, outside the 32-bit space
/// of embedded ids (Perfetto's convention).
pub const FIRST_NAMED_RAW_ID: u64 = 1 << 32;

/// Index of a machine in [`MachineTable`]; 0 is the host.
pub type MachineIdx = u32;
pub const HOST: MachineIdx = 0;

#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// Human-readable name; filled from the manifest, SystemInfo, or derived.
    pub name: Option<String>,
    /// Perfetto's `machine.raw_id`: 0 host, embedded id, or >= 2^32 if named.
    pub raw_id: u64,
    /// The value stamped into `TracePacket.machine_id` (0 = the output's host).
    pub output_id: u32,
    /// The first SystemInfo seen for this machine (its raw bytes).
    pub system_info: Option<Vec<u8>>,
    /// Whether any input packet belongs to it.
    pub used: bool,
    /// Name derived from the input when nothing names the machine.
    fallback_name: Option<String>,
}

/// Where one (file, embedded id) pair lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    pub machine: MachineIdx,
    /// Clock scope of this file on that machine: 0 for the machine's first
    /// file (its canonical clocks), else a scope private to the file.
    pub scope: u32,
}

/// How one input's embedded ids map to machines.
#[derive(Clone, Debug, Default)]
pub struct FileMachines {
    pub base: Option<Placement>,
    pub embedded: BTreeMap<u32, Placement>,
}

impl FileMachines {
    /// The placement of a packet with embedded id `id` (0 = none).
    pub fn get(&self, id: u32) -> Option<Placement> {
        if id == 0 {
            self.base
        } else {
            self.embedded.get(&id).copied()
        }
    }
}

/// What the first pass learned about a file's machines.
pub struct FileMachineFacts<'a> {
    /// Embedded ids of its packets; 0 stands for packets without one.
    pub ids: &'a BTreeSet<u32>,
    /// Embedded id of its first packet (0: none).
    pub first_id: u32,
    /// Manifest `machine.name` for the file.
    pub manifest_machine: Option<&'a str>,
    /// Manifest `machines` renames (id -> name).
    pub manifest_renames: &'a [(u32, String)],
    /// Gives the file its own machine (`--machine-per-file`), with this name.
    pub own_machine_name: Option<String>,
}

#[derive(Debug)]
pub struct MachineTable {
    machines: Vec<Machine>,
    by_name: HashMap<String, MachineIdx>,
    /// Machines that already have a file with scope 0.
    has_canonical: BTreeSet<MachineIdx>,
    /// Machines of embedded (raw 32-bit) ids, shared by every file.
    by_raw: HashMap<u32, MachineIdx>,
    next_named_raw: u64,
}

impl MachineTable {
    pub fn new() -> Self {
        Self {
            machines: vec![Machine {
                fallback_name: Some("host".into()),
                ..Machine::default()
            }],
            by_name: HashMap::new(),
            has_canonical: BTreeSet::new(),
            by_raw: HashMap::new(),
            next_named_raw: FIRST_NAMED_RAW_ID,
        }
    }

    pub fn get(&self, idx: MachineIdx) -> &Machine {
        &self.machines[idx as usize]
    }

    pub fn get_mut(&mut self, idx: MachineIdx) -> &mut Machine {
        &mut self.machines[idx as usize]
    }

    pub fn len(&self) -> usize {
        self.machines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.machines.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (MachineIdx, &Machine)> {
        self.machines
            .iter()
            .enumerate()
            .map(|(i, m)| (i as MachineIdx, m))
    }

    fn named(&mut self, name: &str) -> MachineIdx {
        if let Some(&idx) = self.by_name.get(name) {
            return idx;
        }
        let idx = self.push(Machine {
            name: Some(name.to_owned()),
            raw_id: self.next_named_raw,
            ..Machine::default()
        });
        self.next_named_raw += 1;
        self.by_name.insert(name.to_owned(), idx);
        idx
    }

    fn push(&mut self, machine: Machine) -> MachineIdx {
        self.machines.push(machine);
        (self.machines.len() - 1) as MachineIdx
    }

    /// Assigns the machines of input number `file` (0-based, input order).
    pub fn assign_file(&mut self, file: usize, facts: &FileMachineFacts<'_>) -> FileMachines {
        let rename = |id: u32| {
            facts
                .manifest_renames
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, n)| n.as_str())
        };
        let base_idx = if let Some(name) = facts.manifest_machine.or_else(|| rename(0)) {
            self.named(name)
        } else if let Some(name) = &facts.own_machine_name {
            let idx = self.push(Machine {
                raw_id: self.next_named_raw,
                fallback_name: Some(name.clone()),
                ..Machine::default()
            });
            self.next_named_raw += 1;
            idx
        } else {
            HOST
        };
        let mut out = FileMachines::default();
        let scope_for = |table: &mut Self, m: MachineIdx| {
            table.machines[m as usize].used = true;
            if table.has_canonical.insert(m) {
                0
            } else {
                file as u32 + 1
            }
        };
        let embedded: Vec<u32> = facts.ids.iter().copied().filter(|&id| id != 0).collect();
        // A file with no packet of its host has the machine of its first
        // packet adopted onto its base machine: a single-machine trace has
        // one machine, not an empty host plus one remote. The base takes
        // the embedded raw id, as Perfetto relabels its host row, unless it
        // has a raw id of its own already or the id is a machine already
        // (then that machine is used). (Perfetto adopts at the first remote
        // packet whenever no host packet came before it, even if host
        // packets follow; such a file keeps its host apart here.)
        let adopted = Some(facts.first_id)
            .filter(|&id| id != 0 && !facts.ids.contains(&0))
            .filter(|&id| rename(id).is_none() && facts.manifest_machine.is_none())
            .filter(|id| facts.manifest_renames.is_empty() && !self.by_raw.contains_key(id))
            .filter(|_| {
                let base = &self.machines[base_idx as usize];
                base.raw_id == 0 || (facts.own_machine_name.is_some() && !base.used)
            });
        if let Some(id) = adopted {
            self.machines[base_idx as usize].raw_id = u64::from(id);
            self.by_raw.insert(id, base_idx);
        }
        if facts.ids.contains(&0) || adopted.is_some() || facts.ids.is_empty() {
            let scope = scope_for(self, base_idx);
            out.base = Some(Placement {
                machine: base_idx,
                scope,
            });
        }
        for id in embedded {
            // An adopted id always got the base placement above.
            let placement = if let (true, Some(base)) = (adopted == Some(id), out.base) {
                base
            } else {
                let m = match rename(id) {
                    Some(name) => self.named(name),
                    None => match self.by_raw.get(&id) {
                        Some(&m) => m,
                        None => {
                            let m = self.push(Machine {
                                raw_id: u64::from(id),
                                fallback_name: Some(format!("machine-{id}")),
                                ..Machine::default()
                            });
                            self.by_raw.insert(id, m);
                            m
                        }
                    },
                };
                let scope = scope_for(self, m);
                Placement { machine: m, scope }
            };
            out.embedded.insert(id, placement);
        }
        out
    }

    /// Records a SystemInfo seen for `machine`; the first one is kept.
    pub fn note_system_info(&mut self, machine: MachineIdx, bytes: &[u8]) {
        let m = &mut self.machines[machine as usize];
        if m.system_info.is_none() {
            m.system_info = Some(bytes.to_vec());
        }
    }

    /// Fixes names and output ids once every input was read: the machine
    /// of trace time becomes the output's host (no machine_id), every other
    /// used machine gets a distinct non-zero 32-bit id, its embedded id
    /// where that is free.
    pub fn finalize(&mut self, trace_time_machine: MachineIdx) {
        for m in &mut self.machines {
            if m.name.is_none() {
                let from_system_info = m
                    .system_info
                    .as_deref()
                    .and_then(|b| <SystemInfo as prost::Message>::decode(b).ok())
                    .and_then(|si| si.machine_name)
                    .filter(|n| !n.is_empty());
                m.name = from_system_info.or_else(|| m.fallback_name.clone());
            }
        }
        // Names are how users tell machines apart (Perfetto UI, the jsonl
        // `machine`, `tail --machine`), so two used machines never share
        // one: two relay-recorded files both had a `machine-7`, two VMs on
        // one kernel the same utsname name, and nothing in the output told
        // them apart. Manifest names stay as written (one name is one
        // machine); any other repeated name gets "-2", "-3", ...
        let mut seen: BTreeSet<String> = self.by_name.keys().cloned().collect();
        for (idx, m) in self.machines.iter_mut().enumerate() {
            let Some(name) = m.name.as_deref().filter(|_| m.used) else {
                continue;
            };
            if self.by_name.get(name) == Some(&(idx as MachineIdx)) {
                continue;
            }
            let mut unique = name.to_owned();
            let mut n = 2;
            while !seen.insert(unique.clone()) {
                unique = format!("{name}-{n}");
                n += 1;
            }
            m.name = Some(unique);
        }
        // The trace-time machine is the output's host. It keeps an embedded
        // raw id in its packets (Perfetto then adopts that id onto its host
        // row, as it did for the input) unless some other used machine is
        // raw id 0, which only the output's host can be.
        let other_raw0 = self
            .machines
            .iter()
            .enumerate()
            .any(|(idx, m)| m.used && m.raw_id == 0 && idx as MachineIdx != trace_time_machine);
        let mut taken = BTreeSet::new();
        let mut pending = Vec::new();
        for (idx, m) in self.machines.iter_mut().enumerate() {
            if idx as MachineIdx == trace_time_machine {
                m.output_id = match u32::try_from(m.raw_id) {
                    Ok(id @ 1..) if !other_raw0 => id,
                    _ => 0,
                };
                taken.insert(m.output_id);
            } else if let Ok(id @ 1..) = u32::try_from(m.raw_id) {
                if taken.insert(id) {
                    m.output_id = id;
                } else {
                    pending.push(idx);
                }
            } else {
                pending.push(idx);
            }
        }
        for idx in pending {
            let m = &mut self.machines[idx];
            let seed = m.name.clone().unwrap_or_else(|| format!("machine-{idx}"));
            let mut id = fnv1a32(seed.as_bytes()).max(1);
            while !taken.insert(id) {
                id = id.wrapping_add(1).max(1);
            }
            m.output_id = id;
        }
    }
}

impl Default for MachineTable {
    fn default() -> Self {
        Self::new()
    }
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A machine name for `--machine-per-file`: SystemInfo.machine_name, else
/// the utsname, else the file name.
pub fn name_for_own_machine(system_info: Option<&[u8]>, display: &str) -> String {
    let si = system_info.and_then(|b| <SystemInfo as prost::Message>::decode(b).ok());
    if let Some(name) = si
        .as_ref()
        .and_then(|s| s.machine_name.clone())
        .filter(|n| !n.is_empty())
    {
        return name;
    }
    if let Some(uts) = si.and_then(|s| s.utsname) {
        let parts: Vec<String> = [uts.sysname, uts.release, uts.machine]
            .into_iter()
            .flatten()
            .filter(|p| !p.is_empty())
            .collect();
        if !parts.is_empty() {
            return parts.join("-");
        }
    }
    let base = display.rsplit(['/', ':']).next().unwrap_or(display);
    base.split('.')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(base)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[u32]) -> BTreeSet<u32> {
        list.iter().copied().collect()
    }

    fn facts<'a>(ids: &'a BTreeSet<u32>) -> FileMachineFacts<'a> {
        FileMachineFacts {
            ids,
            first_id: if ids.contains(&0) {
                0
            } else {
                ids.first().copied().unwrap_or(0)
            },
            manifest_machine: None,
            manifest_renames: &[],
            own_machine_name: None,
        }
    }

    #[test]
    fn plain_files_share_the_host_with_private_scopes() {
        let mut t = MachineTable::new();
        let a = ids(&[0]);
        let fa = t.assign_file(0, &facts(&a));
        let fb = t.assign_file(1, &facts(&a));
        assert_eq!(
            fa.get(0),
            Some(Placement {
                machine: HOST,
                scope: 0
            })
        );
        assert_eq!(
            fb.get(0),
            Some(Placement {
                machine: HOST,
                scope: 2
            })
        );
    }

    #[test]
    fn single_embedded_id_is_adopted_and_keeps_its_raw_id() {
        let mut t = MachineTable::new();
        let only7 = ids(&[7]);
        let f = t.assign_file(0, &facts(&only7));
        assert_eq!(
            f.get(7),
            Some(Placement {
                machine: HOST,
                scope: 0
            })
        );
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(HOST).raw_id, 7, "the host row takes the embedded id");
        // A second file of machine 7 is the same machine, with its own scope.
        let g = t.assign_file(1, &facts(&only7));
        assert_eq!(
            g.get(7),
            Some(Placement {
                machine: HOST,
                scope: 2
            })
        );
        // Another single-id file cannot be adopted onto a host that already
        // holds machine 7: it gets a machine of its own.
        let only9 = ids(&[9]);
        let h = t.assign_file(2, &facts(&only9));
        let m9 = h.get(9).unwrap().machine;
        assert_ne!(m9, HOST);
        assert_eq!(t.get(m9).raw_id, 9);
        t.finalize(HOST);
        assert_eq!(t.get(HOST).output_id, 7, "the output keeps machine_id 7");
        assert_eq!(t.get(m9).output_id, 9);
    }

    #[test]
    fn adoption_relabels_the_host_row_of_other_files() {
        // Perfetto checks "host has data" per file: a plain host file before
        // does not stop the next file's machine 7 from being adopted onto
        // the host row, which becomes raw id 7.
        let mut t = MachineTable::new();
        let plain = ids(&[0]);
        t.assign_file(0, &facts(&plain));
        let only7 = ids(&[7]);
        let f = t.assign_file(1, &facts(&only7));
        assert_eq!(f.get(7).unwrap().machine, HOST);
        assert_eq!(t.get(HOST).raw_id, 7);
        t.finalize(HOST);
        assert_eq!(t.get(HOST).output_id, 7);
    }

    #[test]
    fn first_of_several_ids_is_adopted_only_without_host_packets() {
        // tracesync's own output of an adopted machine 7 and a machine 9:
        // machine 7's packets come first, no packet is the host's.
        let mut t = MachineTable::new();
        let both = ids(&[7, 9]);
        let f = t.assign_file(
            0,
            &FileMachineFacts {
                first_id: 7,
                ..facts(&both)
            },
        );
        assert_eq!(f.get(7).unwrap().machine, HOST);
        assert_eq!(t.get(HOST).raw_id, 7);
        assert_ne!(f.get(9).unwrap().machine, HOST);
        // With host packets after the first remote one, the host stays.
        let mut t = MachineTable::new();
        let mixed = ids(&[0, 7]);
        let f = t.assign_file(
            0,
            &FileMachineFacts {
                first_id: 7,
                ..facts(&mixed)
            },
        );
        assert_ne!(f.get(0), f.get(7));
        assert_eq!(t.get(HOST).raw_id, 0);
    }

    #[test]
    fn the_same_embedded_id_in_two_relay_files_is_one_machine() {
        let mut t = MachineTable::new();
        let relay = ids(&[0, 7]);
        let f1 = t.assign_file(0, &facts(&relay));
        let f2 = t.assign_file(1, &facts(&relay));
        let m1 = f1.get(7).unwrap();
        let m2 = f2.get(7).unwrap();
        assert_eq!(m1.machine, m2.machine, "id 7 in two files is one machine");
        assert_eq!((m1.scope, m2.scope), (0, 2), "each file has its clocks");
        assert_eq!(t.get(m1.machine).raw_id, 7);
        t.finalize(HOST);
        assert_eq!(t.get(m1.machine).output_id, 7);
        assert_eq!(t.get(m1.machine).name.as_deref(), Some("machine-7"));
    }

    #[test]
    fn manifest_names_share_one_machine() {
        let mut t = MachineTable::new();
        let plain = ids(&[0]);
        let named = |t: &mut MachineTable, file| {
            t.assign_file(
                file,
                &FileMachineFacts {
                    ids: &plain,
                    first_id: 0,
                    manifest_machine: Some("phone"),
                    manifest_renames: &[],
                    own_machine_name: None,
                },
            )
        };
        let a = named(&mut t, 0);
        let b = named(&mut t, 1);
        assert_eq!(a.get(0).unwrap().machine, b.get(0).unwrap().machine);
        assert_eq!(a.get(0).unwrap().scope, 0);
        assert_eq!(b.get(0).unwrap().scope, 2);
        assert_eq!(t.get(a.get(0).unwrap().machine).raw_id, FIRST_NAMED_RAW_ID);
        t.finalize(HOST);
        assert_eq!(
            t.get(a.get(0).unwrap().machine).name.as_deref(),
            Some("phone")
        );
    }

    #[test]
    fn repeated_names_are_made_unique_but_manifest_names_kept() {
        let mut t = MachineTable::new();
        let plain = ids(&[0]);
        let own = |t: &mut MachineTable, file, name: &str| {
            t.assign_file(
                file,
                &FileMachineFacts {
                    ids: &plain,
                    first_id: 0,
                    manifest_machine: None,
                    manifest_renames: &[],
                    own_machine_name: Some(name.into()),
                },
            )
        };
        // Two files of one utsname, then a manifest machine of that name.
        let a = own(&mut t, 0, "vm").get(0).unwrap().machine;
        let b = own(&mut t, 1, "vm").get(0).unwrap().machine;
        let named = t
            .assign_file(
                2,
                &FileMachineFacts {
                    ids: &plain,
                    first_id: 0,
                    manifest_machine: Some("vm"),
                    manifest_renames: &[],
                    own_machine_name: None,
                },
            )
            .get(0)
            .unwrap()
            .machine;
        t.finalize(a);
        let name = |m| t.get(m).name.clone().unwrap();
        assert_eq!(name(named), "vm", "the manifest's name is kept");
        assert_eq!(name(a), "vm-2");
        assert_eq!(name(b), "vm-3");
        assert_ne!(t.get(b).output_id, t.get(named).output_id);
    }

    #[test]
    fn own_machine_names() {
        let si = SystemInfo {
            machine_name: Some("vm1".into()),
            ..Default::default()
        };
        let bytes = prost::Message::encode_to_vec(&si);
        assert_eq!(name_for_own_machine(Some(&bytes), "x.pftrace"), "vm1");
        assert_eq!(name_for_own_machine(None, "dir/phone.pftrace.gz"), "phone");
        assert_eq!(name_for_own_machine(None, "a.zip:traces/watch.pb"), "watch");
    }
}
