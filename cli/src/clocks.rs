//! `tracesync clocks`: every edge of the clock graph of recorded traces,
//! like Perfetto's clock_snapshot table, with its origin.

use std::collections::HashMap;
use std::io::Write;

use tracesync_protocol::clock_ids::builtin_name;

use crate::merge::Prepared;

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
            let machine = plan
                .machines
                .get(node.machine)
                .name
                .clone()
                .unwrap_or_default();
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
            let origin = format!("{:?}", edge.origin).to_lowercase();
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
                    "{}\t{origin}\t{machine}\t{source}\t{}\t{}\t{}\t{value}\t{ts}",
                    edge.snapshot_id,
                    node.clock,
                    name.unwrap_or("-"),
                    node.seq
                )?;
            }
        }
    }
    out.flush()
}
