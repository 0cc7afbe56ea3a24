//! Turns what the first pass found into a plan for the second: machines,
//! trace time, every clock edge (snapshots, remote syncs, manifest), and the
//! placement of every file's clocks on the merged timeline.

use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, TRACE_FILE, is_sequence_clock};

use super::first_pass::{ClockEvent, FileScan, SnapClock};
use super::inputs::{Content, InputSource};
use super::machines::{
    FileMachineFacts, FileMachines, MachineTable, Placement, name_for_own_machine,
};
use super::manifest::{ClockOverride, FileEntry, FileFacts, Manifest, ManifestError, TraceTime};
use super::remote::{SyncRound, sync_edges};
use tracesync_core::clock::timeline::{Claimant, Timeline};
use tracesync_core::clock::{ClockNode, EdgeOrigin, SnapshotClock};

/// How the second pass treats one input.
#[derive(Clone, Debug)]
pub struct FilePlan {
    pub machines: FileMachines,
    /// Clock of packets with no clock id and no sequence default.
    pub default_clock: u32,
    /// A converted input (JSON, systrace): its packets are written at their
    /// resolved time (`chrome_json::written`).
    pub converted: bool,
}

#[derive(Debug)]
pub struct Plan {
    pub machines: MachineTable,
    pub files: Vec<FilePlan>,
    pub timeline: Timeline,
}

/// The clock node of `clock` on a file's placement and packet sequence.
pub fn node(placement: Placement, seq: u32, clock: u32) -> ClockNode {
    let seq = if is_sequence_clock(clock) { seq } else { 0 };
    ClockNode::new(placement.machine, placement.scope, seq, clock)
}

fn snapshot_clocks(placement: Placement, seq: u32, clocks: &[SnapClock]) -> Vec<SnapshotClock> {
    clocks
        .iter()
        .map(|c| SnapshotClock {
            node: node(placement, seq, c.clock),
            value: c.value,
            unit_multiplier_ns: c.unit,
            is_incremental: c.incremental,
        })
        .collect()
}

/// Looks up the input a manifest path names.
fn input_index(inputs: &[InputSource], path: &str) -> Option<usize> {
    inputs
        .iter()
        .position(|i| i.names.iter().any(|n| n == path))
}

/// Builds the plan. Manifest errors that need the inputs are reported here.
///
/// The steps run in an order Perfetto's results depend on: trace time is
/// claimed file by file in processing order (the manifest's first), edges
/// are added in each file's stream order, manifest overrides after every
/// file's own edges, and default clocks placed last, in processing order.
pub fn build_plan(
    inputs: &[InputSource],
    scans: &[FileScan],
    manifest: Option<&Manifest>,
    machine_per_file: bool,
) -> Result<Plan, ManifestError> {
    if let Some(m) = manifest {
        check_manifest(m, inputs, scans)?;
    }
    let entries: Vec<_> = inputs
        .iter()
        .map(|i| manifest.and_then(|m| m.entry_for(&i.names)))
        .collect();
    let mut planner = Planner::new(inputs, manifest.and_then(|m| m.trace_time.as_ref()));
    let mut planned = Vec::with_capacity(inputs.len());
    for i in processing_order(inputs) {
        let (scan, entry) = (&scans[i], entries[i]);
        let file_machines = planner.assign_machines(i, scan, entry, machine_per_file);
        planner.claim_trace_time(i, scan, &file_machines);
        planner.add_clock_events(scan, &file_machines);
        planned.push((
            i,
            FilePlan {
                machines: file_machines,
                default_clock: default_clock(scan, entry, &inputs[i]),
                converted: inputs[i].content.is_converted(),
            },
        ));
    }
    planned.sort_by_key(|(i, _)| *i);
    let files: Vec<FilePlan> = planned.into_iter().map(|(_, f)| f).collect();
    for (i, entry) in entries.iter().enumerate() {
        if let Some(over) = entry.and_then(|e| e.clocks.as_ref()) {
            planner.add_clock_override(over, &files[i], &files);
        }
    }
    Ok(planner.finish(files))
}

/// The order Perfetto processes inputs in (an archive's members): protobuf
/// traces in input order, then the converted ones (JSON, systrace) by
/// name. Machines, scopes and trace-time claims follow it.
fn processing_order(inputs: &[InputSource]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| {
            let converted = inputs[i].content.is_converted();
            (converted, converted.then(|| &inputs[i].display))
        };
        key(a).cmp(&key(b))
    });
    order
}

/// The manifest's checks that need the inputs' facts.
fn check_manifest(
    m: &Manifest,
    inputs: &[InputSource],
    scans: &[FileScan],
) -> Result<(), ManifestError> {
    m.check_against_inputs(&|path| {
        input_index(inputs, path).map(|i| FileFacts {
            embedded_machine_ids: scans[i].ids.clone(),
            has_clock_snapshots: scans[i].has_clock_snapshots,
            has_remote_clock_sync: scans[i]
                .events
                .iter()
                .any(|e| matches!(e, ClockEvent::RemoteSync { .. })),
            is_archive_or_manifest: false,
        })
    })
}

/// Clock of a file's packets with no clock id and no sequence default: a
/// file the manifest pins (no clock named), and a JSON trace (which has no
/// absolute clock at all), run on the file's private clock; a systrace on
/// its machine's MONOTONIC, as Perfetto reads the format.
fn default_clock(scan: &FileScan, entry: Option<&FileEntry>, input: &InputSource) -> u32 {
    let pinned = entry
        .and_then(|e| e.clocks.as_ref())
        .is_some_and(|c| c.clock.is_none());
    match input.content {
        _ if pinned => TRACE_FILE,
        Content::ChromeJson { .. } => TRACE_FILE,
        Content::Systrace { .. } => MONOTONIC,
        Content::Proto => scan.primary_clock.unwrap_or(BOOTTIME),
    }
}

/// What the plan is built in: the machines and the timeline, filled file by
/// file.
struct Planner<'a> {
    inputs: &'a [InputSource],
    machines: MachineTable,
    timeline: Timeline,
    manifest_time: Option<&'a TraceTime>,
    /// The input the manifest's trace time names, if it names one.
    manifest_time_file: Option<usize>,
}

impl<'a> Planner<'a> {
    fn new(inputs: &'a [InputSource], manifest_time: Option<&'a TraceTime>) -> Self {
        let mut timeline = Timeline::new();
        if let Some(tt) = manifest_time
            && tt.file.is_none()
        {
            timeline.claim_trace_time(ClockNode::new(0, 0, 0, tt.clock), Claimant::Manifest);
        }
        Self {
            inputs,
            machines: MachineTable::new(),
            timeline,
            manifest_time,
            manifest_time_file: manifest_time
                .and_then(|t| t.file.as_deref())
                .and_then(|p| input_index(inputs, p)),
        }
    }

    /// Input `i`'s machines (embedded ids, manifest names, its own machine
    /// with `--machine-per-file`) and their SystemInfos.
    fn assign_machines(
        &mut self,
        i: usize,
        scan: &FileScan,
        entry: Option<&FileEntry>,
        machine_per_file: bool,
    ) -> FileMachines {
        let renames = entry.map(|e| e.machines.as_slice()).unwrap_or_default();
        let manifest_machine = entry.and_then(|e| e.machine.as_deref());
        let own_machine_name = (machine_per_file
            && manifest_machine.is_none()
            && !renames.iter().any(|(id, _)| *id == 0))
        .then(|| {
            name_for_own_machine(
                scan.system_infos.get(&0).map(Vec::as_slice),
                &self.inputs[i].display,
            )
        });
        let file_machines = self.machines.assign_file(
            i,
            &FileMachineFacts {
                ids: &scan.ids,
                first_id: scan.first_id.unwrap_or(0),
                manifest_machine,
                manifest_renames: renames,
                own_machine_name,
            },
        );
        for (id, bytes) in &scan.system_infos {
            if let Some(p) = file_machines.get(*id) {
                self.machines.note_system_info(p.machine, bytes);
            }
        }
        file_machines
    }

    /// Input `i`'s claim to trace time: the manifest's clock if it names
    /// this file, else (no manifest trace time) its snapshots'.
    fn claim_trace_time(&mut self, i: usize, scan: &FileScan, file_machines: &FileMachines) {
        if let (Some(tt), Some(fi)) = (self.manifest_time, self.manifest_time_file)
            && fi == i
        {
            let placement = match tt.machine.as_deref() {
                Some(name) => find_named(&self.machines, file_machines, name),
                None => file_machines.base,
            };
            if let Some(p) = placement {
                self.timeline
                    .claim_trace_time(node(p, 0, tt.clock), Claimant::Manifest);
            }
        }
        if self.manifest_time.is_some() {
            return;
        }
        // A systrace claims its MONOTONIC, as Perfetto's systrace reader
        // does (after every protobuf trace: see `processing_order`).
        if matches!(self.inputs[i].content, Content::Systrace { .. })
            && let Some(p) = file_machines.base
        {
            let source = self.inputs[i].display.clone();
            self.timeline
                .claim_trace_time(node(p, 0, MONOTONIC), Claimant::Trace { source });
            return;
        }
        // First claimant wins: an explicit primary clock, or BOOTTIME
        // inferred from a snapshot that has it. The file's own (base)
        // machine claims before its embedded ones, whatever the packet
        // order: Perfetto gives a relayed machine's snapshots to that
        // machine's own clock tracker, so they never pick trace time over
        // the relay host's (a remote snapshot written first moved the whole
        // merged timeline onto the remote machine's clock).
        let snapshots = scan.events.iter().filter_map(|e| match e {
            ClockEvent::Snapshot {
                embedded,
                clocks,
                primary,
                ..
            } => Some((file_machines.get(*embedded)?, clocks, *primary)),
            ClockEvent::RemoteSync { .. } => None,
        });
        let (own, embedded): (Vec<_>, Vec<_>) =
            snapshots.partition(|(p, ..)| Some(*p) == file_machines.base);
        for (p, clocks, primary) in own.into_iter().chain(embedded) {
            let claimed = primary.or_else(|| {
                clocks
                    .iter()
                    .any(|c| c.clock == BOOTTIME)
                    .then_some(BOOTTIME)
            });
            if let Some(c) = claimed {
                let source = self.inputs[i].display.clone();
                self.timeline
                    .claim_trace_time(node(p, 0, c), Claimant::Trace { source });
            }
        }
    }

    /// The edges of a file's clock facts, in its stream order.
    fn add_clock_events(&mut self, scan: &FileScan, file_machines: &FileMachines) {
        for event in &scan.events {
            match event {
                ClockEvent::Snapshot {
                    embedded,
                    seq,
                    clocks,
                    ..
                } => {
                    if let Some(p) = file_machines.get(*embedded) {
                        let clocks = snapshot_clocks(p, *seq, clocks);
                        add_edge(&mut self.timeline, &clocks, EdgeOrigin::Snapshot);
                    }
                }
                ClockEvent::RemoteSync { embedded, rounds } => {
                    if let (Some(client), Some(host)) =
                        (file_machines.get(*embedded), file_machines.base)
                        && client.machine != host.machine
                    {
                        self.add_remote_sync(client, host, rounds);
                    }
                }
            }
        }
    }

    /// A RemoteClockSync's edges: its client clocks stand in for the
    /// relay's own snapshots, and every clock on both sides is related, as
    /// Perfetto does (a sync of REALTIME alone relates the machines).
    fn add_remote_sync(&mut self, client: Placement, host: Placement, rounds: &[SyncRound]) {
        for round in rounds {
            let clocks: Vec<SnapClock> = round
                .client
                .iter()
                .map(|&(clock, value)| SnapClock {
                    clock,
                    value,
                    unit: 1,
                    incremental: false,
                })
                .collect();
            if clocks.len() > 1 {
                let clocks = snapshot_clocks(client, 0, &clocks);
                add_edge(&mut self.timeline, &clocks, EdgeOrigin::Snapshot);
            }
        }
        for e in sync_edges(rounds) {
            let edge = [
                SnapshotClock::ns(node(client, 0, e.clock), e.client),
                SnapshotClock::ns(node(host, 0, e.clock), e.host),
            ];
            add_edge(&mut self.timeline, &edge, EdgeOrigin::Sync);
        }
    }

    /// A manifest clock override of `file`: "the source clock reads T when
    /// the reference clock reads T + offset_ns".
    fn add_clock_override(&mut self, over: &ClockOverride, file: &FilePlan, files: &[FilePlan]) {
        let Some(ref_file) = input_index(self.inputs, &over.sync_to.file).map(|i| &files[i]) else {
            return;
        };
        let src = match over.machine.as_deref() {
            Some(name) => find_named(&self.machines, &file.machines, name),
            None => file.machines.base,
        };
        let reference = match over.sync_to.machine.as_deref() {
            Some(name) => find_named(&self.machines, &ref_file.machines, name),
            None => ref_file.machines.base,
        };
        let (Some(src), Some(reference)) = (src, reference) else {
            return;
        };
        let src_clock = over.clock.unwrap_or(TRACE_FILE);
        // With no clock named, the reference is the file's private timeline:
        // the clock its own timestamps run on (TRACE_FILE for a JSON or
        // pinned file, BOOTTIME for an unpinned clockless proto), never a
        // TRACE_FILE node none of its packets use.
        let ref_clock = over.sync_to.clock.unwrap_or(ref_file.default_clock);
        let (s, r) = if over.offset_ns >= 0 {
            (0, over.offset_ns as u64)
        } else {
            (over.offset_ns.unsigned_abs(), 0)
        };
        let edge = [
            SnapshotClock::ns(node(src, 0, src_clock), s),
            SnapshotClock::ns(node(reference, 0, ref_clock), r),
        ];
        add_edge(&mut self.timeline, &edge, EdgeOrigin::Manifest);
    }

    /// Places every file's default clock, so that which assumption a clock
    /// gets does not depend on packet order: protobuf traces in input
    /// order, then the converted ones by name, as Perfetto processes an
    /// archive's members (the first private clock placed is the one the
    /// others' pins are measured from).
    fn finish(mut self, files: Vec<FilePlan>) -> Plan {
        self.machines.finalize(self.timeline.trace_clock().machine);
        for file in processing_order(self.inputs).into_iter().map(|i| &files[i]) {
            let placements = file
                .machines
                .base
                .into_iter()
                .chain(file.machines.embedded.values().copied());
            for p in placements.collect::<Vec<_>>() {
                self.timeline.place(node(p, 0, file.default_clock));
            }
        }
        Plan {
            machines: self.machines,
            files,
            timeline: self.timeline,
        }
    }
}

/// Adds an edge; a rejected snapshot is counted by the graph
/// (`invalid_clock_snapshots`) and otherwise ignored, as Perfetto does.
fn add_edge(timeline: &mut Timeline, clocks: &[SnapshotClock], origin: EdgeOrigin) {
    let _ = timeline.graph_mut().add_snapshot(clocks, origin);
}

fn find_named(machines: &MachineTable, file: &FileMachines, name: &str) -> Option<Placement> {
    file.base
        .into_iter()
        .chain(file.embedded.values().copied())
        .find(|p| machines.get(p.machine).name.as_deref() == Some(name))
}
