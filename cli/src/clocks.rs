//! `tracesync clocks`: every edge of the clock graph of recorded traces,
//! like Perfetto's clock_snapshot table, with its origin.

use std::collections::HashMap;
use std::io::Write;

use tracesync_protocol::clock_ids::builtin_name;
use tracesync_protocol::text::Escaped;

use std::path::PathBuf;

use tracesync_common::exit;

use crate::merge::{Prepared, capture, prepare};

/// Prints the graph like Perfetto's clock_snapshot table, plus each edge's origin.
pub fn print(prepared: Prepared, json: bool) -> std::io::Result<()> {
    let Prepared {
        inputs, mut plan, ..
    } = prepared;
    let mut sources: HashMap<(u32, u32), &str> = HashMap::new();
    for (input, file) in inputs.iter().zip(&plan.files) {
        for p in file
            .machines
            .base
            .iter()
            .chain(file.machines.embedded.values())
        {
            sources
                .entry((p.machine, p.scope))
                .or_insert(&input.display);
        }
    }
    let edges = plan.timeline.graph().edges().to_vec();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if !json {
        writeln!(
            out,
            "snapshot_id\torigin\tmachine\tsource\tclock_id\tclock_name\tseq\tclock_value\tts"
        )?;
    }
    for edge in edges {
        for (node, value) in &edge.clocks {
            let name = plan.machines.get(node.machine).name.as_deref();
            let machine = name.unwrap_or_default();
            let source = sources
                .get(&(node.machine, node.scope))
                .copied()
                .unwrap_or("");
            // Edges hold ns; a conversion starts from the clock's raw
            // units (an exact multiple: the ns were made from them).
            let graph = plan.timeline.graph();
            let ts = if graph.is_incremental(*node) || *value < 0 {
                None
            } else {
                let raw = *value / graph.unit_ns(*node).max(1);
                plan.timeline.to_trace_time(*node, raw as u64).ok()
            };
            let origin = edge.origin.name();
            let name = builtin_name(node.clock);
            if json {
                let row = serde_json::json!({
                    "snapshot_id": edge.snapshot_id, "origin": origin, "machine": machine,
                    "raw_id": plan.machines.get(node.machine).raw_id, "source": source,
                    "clock_id": node.clock, "clock_name": name, "seq": node.seq,
                    "clock_value": value, "ts": ts,
                });
                writeln!(out, "{row}")?;
            } else {
                let ts = ts.map_or_else(|| "-".to_owned(), |t| t.to_string());
                writeln!(
                    out,
                    "{}\t{origin}\t{}\t{source}\t{}\t{}\t{}\t{value}\t{ts}",
                    edge.snapshot_id,
                    // A tab or a new line in a name would forge a column or a row.
                    Escaped(machine),
                    node.clock,
                    name.unwrap_or("-"),
                    node.seq
                )?;
            }
        }
    }
    out.flush()
}

/// The flags and inputs of `tracesync clocks`.
#[derive(Debug, clap::Args)]
pub struct ClocksArgs {
    /// One JSON object per edge instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A perfetto_manifest JSON file (version 1), as merge applies it.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Give each input that would go to the host machine a machine of its own (as merge).
    #[arg(long)]
    pub machine_per_file: bool,
    /// The inputs of a merge, or a capture directory.
    #[arg(required = true, value_name = "INPUT|DIR")]
    pub inputs: Vec<PathBuf>,
}

/// Runs `tracesync clocks`; its exit code.
pub fn run(args: ClocksArgs) -> u8 {
    let ClocksArgs {
        json,
        manifest,
        machine_per_file,
        inputs,
    } = args;
    // A capture directory (as `merge DIR` reads it): its rolled files.
    let inputs = match capture::detect(&inputs) {
        Ok(Some(capture)) if capture.dir.is_some() => {
            capture.files.into_iter().map(|f| f.path).collect()
        }
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            return e.code;
        }
        _ => inputs,
    };
    let mut report = |fault: &crate::merge::first_pass::InputFault| eprintln!("tracesync: {fault}");
    let prepared = match prepare(
        &inputs,
        manifest.as_deref(),
        (machine_per_file, false, false),
        &mut report,
    ) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            return e.exit_code();
        }
    };
    let code = if prepared.faults.is_empty() {
        exit::OK
    } else {
        exit::DATAERR
    };
    match print(prepared, json) {
        Ok(()) => code,
        // A closed reader (`| head`) ends the listing quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => {
            eprintln!("tracesync: error: cannot write: {e}");
            exit::IOERR
        }
    }
}
