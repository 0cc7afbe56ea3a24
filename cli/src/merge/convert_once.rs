//! A converted input (Chrome JSON, systrace) is converted once, not in
//! each pass: held from the first pass to the second ([`Held`]), or
//! spilled ([`Spill`]); and what the second pass found converting a held
//! one, which the first pass never saw.

use std::cmp::Reverse;

use super::first_pass::InputFault;
use super::inputs::{Held, InputSource, MAX_HELD, Spill};
use super::stats::MergeStats;

/// How each converted input is converted once instead of in each pass:
/// held (the first pass reads it to its first packet, the second goes on
/// from there) when there are at most [`MAX_HELD`] (the largest first),
/// else spilled (the first pass leaves its protobuf in a temporary file
/// the second pass reads; without one, an input is converted twice).
/// Under `--strict` none is held: every fault must be known before
/// anything is written.
pub fn convert_once(traces: &mut [InputSource], strict: bool) {
    let mut converted: Vec<usize> = (0..traces.len())
        .filter(|&i| traces[i].content.is_converted())
        .collect();
    // Stable: ties go to the earlier input.
    converted.sort_by_key(|&i| Reverse(traces[i].stored_len()));
    let held = if strict || converted.len() > MAX_HELD {
        0
    } else {
        MAX_HELD
    };
    for (rank, &i) in converted.iter().enumerate() {
        if rank < held {
            traces[i].held = Some(Held::new());
        } else {
            traces[i].spill = Spill::create().ok();
        }
    }
}

/// What the second pass found converting the held inputs: the fault that
/// ended one (new: the first pass read only its first packet), reported
/// now, and the conversions' counts.
pub fn note_held_inputs(
    inputs: &[InputSource],
    faults: &mut Vec<InputFault>,
    stats: &mut MergeStats,
    report: &mut dyn FnMut(&InputFault),
) {
    for held in inputs.iter().filter_map(|i| i.held.as_ref()) {
        if held.was_resumed() {
            stats.json.add(&held.counts());
        }
        if let Some(fault) = held.take_fault() {
            report(&fault);
            if !faults.iter().any(|f| f.display == fault.display) {
                stats.inputs_with_errors += 1;
            }
            faults.push(fault);
        }
    }
}
