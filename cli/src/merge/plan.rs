//! Turns what the first pass found into a plan for the second: machines,
//! trace time, every clock edge (snapshots, remote syncs, manifest), and the
//! placement of every file's clocks on the merged timeline.

use tracesync_protocol::clock_ids::{BOOTTIME, TRACE_FILE, is_sequence_clock};

use super::first_pass::{ClockEvent, FileScan, SnapClock};
use super::inputs::InputSource;
use super::machines::{
    FileMachineFacts, FileMachines, MachineTable, Placement, name_for_own_machine,
};
use super::manifest::{FileFacts, Manifest, ManifestError};
use super::remote::sync_edges;
use tracesync_core::clock::timeline::{Claimant, Timeline};
use tracesync_core::clock::{ClockNode, EdgeOrigin, SnapshotClock};

/// How the second pass treats one input.
#[derive(Clone, Debug)]
pub struct FilePlan {
    pub machines: FileMachines,
    /// Clock of packets with no clock id and no sequence default.
    pub default_clock: u32,
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
pub fn build_plan(
    inputs: &[InputSource],
    scans: &[FileScan],
    manifest: Option<&Manifest>,
    machine_per_file: bool,
) -> Result<Plan, ManifestError> {
    if let Some(m) = manifest {
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
        })?;
    }
    let entries: Vec<_> = inputs
        .iter()
        .map(|i| manifest.and_then(|m| m.entry_for(&i.names)))
        .collect();
    let mut machines = MachineTable::new();
    let mut timeline = Timeline::new();
    let manifest_time = manifest.and_then(|m| m.trace_time.as_ref());
    let manifest_time_file = manifest_time
        .and_then(|t| t.file.as_deref())
        .and_then(|p| input_index(inputs, p));
    if let Some(tt) = manifest_time
        && tt.file.is_none()
    {
        timeline.claim_trace_time(ClockNode::new(0, 0, 0, tt.clock), Claimant::Manifest);
    }
    let mut files = Vec::with_capacity(inputs.len());
    for (i, (scan, entry)) in scans.iter().zip(&entries).enumerate() {
        let renames = entry.map(|e| e.machines.as_slice()).unwrap_or_default();
        let manifest_machine = entry.and_then(|e| e.machine.as_deref());
        let own_machine_name = (machine_per_file
            && manifest_machine.is_none()
            && !renames.iter().any(|(id, _)| *id == 0))
        .then(|| {
            name_for_own_machine(
                scan.system_infos.get(&0).map(Vec::as_slice),
                &inputs[i].display,
            )
        });
        let file_machines = machines.assign_file(
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
                machines.note_system_info(p.machine, bytes);
            }
        }
        if let (Some(tt), Some(fi)) = (manifest_time, manifest_time_file)
            && fi == i
        {
            let placement = match tt.machine.as_deref() {
                Some(name) => find_named(&machines, &file_machines, name),
                None => file_machines.base,
            };
            if let Some(p) = placement {
                timeline.claim_trace_time(node(p, 0, tt.clock), Claimant::Manifest);
            }
        }
        if manifest_time.is_none() {
            // First claimant wins: an explicit primary clock, or BOOTTIME
            // inferred from a snapshot that has it. The file's own (base)
            // machine claims before its embedded ones, whatever the packet
            // order: Perfetto gives a relayed machine's snapshots to that
            // machine's own clock tracker, so they never pick trace time
            // over the relay host's (a remote snapshot written first moved
            // the whole merged timeline onto the remote machine's clock).
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
                    timeline.claim_trace_time(
                        node(p, 0, c),
                        Claimant::Trace {
                            source: inputs[i].display.clone(),
                        },
                    );
                }
            }
        }
        for event in &scan.events {
            match event {
                ClockEvent::Snapshot {
                    embedded,
                    seq,
                    clocks,
                    ..
                } => {
                    let Some(p) = file_machines.get(*embedded) else {
                        continue;
                    };
                    add_edge(
                        &mut timeline,
                        &snapshot_clocks(p, *seq, clocks),
                        EdgeOrigin::Snapshot,
                    );
                }
                ClockEvent::RemoteSync { embedded, rounds } => {
                    let (Some(client), Some(host)) =
                        (file_machines.get(*embedded), file_machines.base)
                    else {
                        continue;
                    };
                    if client.machine == host.machine {
                        continue;
                    }
                    // The client clocks stand in for the relay's own snapshots.
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
                            add_edge(
                                &mut timeline,
                                &snapshot_clocks(client, 0, &clocks),
                                EdgeOrigin::Snapshot,
                            );
                        }
                    }
                    // Every clock on both sides is related, as Perfetto
                    // does (a sync of REALTIME alone relates the machines).
                    for e in sync_edges(rounds) {
                        let edge = [
                            SnapshotClock::ns(node(client, 0, e.clock), e.client),
                            SnapshotClock::ns(node(host, 0, e.clock), e.host),
                        ];
                        add_edge(&mut timeline, &edge, EdgeOrigin::Sync);
                    }
                }
            }
        }
        let pinned = entry
            .and_then(|e| e.clocks.as_ref())
            .is_some_and(|c| c.clock.is_none());
        let default_clock = if pinned {
            TRACE_FILE
        } else {
            scan.primary_clock.unwrap_or(BOOTTIME)
        };
        files.push(FilePlan {
            machines: file_machines,
            default_clock,
        });
    }
    // Manifest clock overrides: "the source clock reads T when the
    // reference clock reads T + offset_ns".
    for (i, entry) in entries.iter().enumerate() {
        let Some(over) = entry.and_then(|e| e.clocks.as_ref()) else {
            continue;
        };
        let Some(ref_index) = input_index(inputs, &over.sync_to.file) else {
            continue;
        };
        let src = match over.machine.as_deref() {
            Some(name) => find_named(&machines, &files[i].machines, name),
            None => files[i].machines.base,
        };
        let reference = match over.sync_to.machine.as_deref() {
            Some(name) => find_named(&machines, &files[ref_index].machines, name),
            None => files[ref_index].machines.base,
        };
        let (Some(src), Some(reference)) = (src, reference) else {
            continue;
        };
        let src_clock = over.clock.unwrap_or(TRACE_FILE);
        let ref_clock = over.sync_to.clock.unwrap_or(TRACE_FILE);
        let (s, r) = if over.offset_ns >= 0 {
            (0, over.offset_ns as u64)
        } else {
            (over.offset_ns.unsigned_abs(), 0)
        };
        let edge = [
            SnapshotClock::ns(node(src, 0, src_clock), s),
            SnapshotClock::ns(node(reference, 0, ref_clock), r),
        ];
        add_edge(&mut timeline, &edge, EdgeOrigin::Manifest);
    }
    machines.finalize(timeline.trace_clock().machine);
    // Place every file's default clock, in input order, so that which
    // assumption a clock gets does not depend on packet order.
    for file in &files {
        let placements = file
            .machines
            .base
            .into_iter()
            .chain(file.machines.embedded.values().copied());
        for p in placements.collect::<Vec<_>>() {
            timeline.place(node(p, 0, file.default_clock));
        }
    }
    Ok(Plan {
        machines,
        files,
        timeline,
    })
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
