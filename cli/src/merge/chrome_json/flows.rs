//! Version 1 flow events (`s` start, `t` step, `f` end) as TrackEvent's
//! legacy flow events, which the trace processor binds as its JSON
//! importer does: a start or step to the slice open on the thread, an end
//! to the next slice to begin on it, or with `"bp": "e"` to the enclosing
//! one. A flow is named by its id, category and name.
//!
//! Invariant: the id is Perfetto's: an integer, or a string read as
//! hexadecimal (an optional `0x`); any other id is counted as
//! `flow_invalid_id` and the event dropped.

use super::JsonStats;
use super::event::{Id, JsonEvent};

/// The flow id of a v1 flow event.
fn flow_id(id: Option<&Id>) -> Option<u64> {
    match id? {
        Id::Int(n) => Some(*n),
        Id::Str(s) => {
            let s = s.trim();
            let hex = s
                .strip_prefix("0x")
                .or_else(|| s.strip_prefix("0X"))
                .unwrap_or(s);
            u64::from_str_radix(hex, 16).ok()
        }
    }
}

/// The flow id of the v1 flow event `e` (phase `s`, `t` or `f`); None
/// (counted) when its id is not one. The event itself is encoded by the
/// conversion (`convert::direct`).
pub fn v1_flow_id(e: &JsonEvent, stats: &mut JsonStats) -> Option<u64> {
    let id = flow_id(e.id.as_ref());
    if id.is_none() {
        stats.flow_invalid_id += 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_integers_or_hexadecimal_strings() {
        assert_eq!(flow_id(Some(&Id::Int(7))), Some(7));
        assert_eq!(flow_id(Some(&Id::Str("0x1F".into()))), Some(31));
        assert_eq!(flow_id(Some(&Id::Str("ab".into()))), Some(171));
        assert_eq!(flow_id(Some(&Id::Str("flow1".into()))), None);
        assert_eq!(flow_id(None), None);
    }
}
