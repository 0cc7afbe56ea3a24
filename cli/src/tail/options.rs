//! What `tail` was asked for, and what its two sources (the daemon,
//! a capture directory) share: naming the machines asked for, writing out.

use std::collections::BTreeMap;
use std::io::{self, Write};

use tracesync_common::exit;
use tracesync_core::control::{TailFormat, TimeMode};

use crate::merge::window::TimeSpec;

/// Most records `-n` may ask for (the records are held until caught up).
pub const MAX_LINES: u64 = 100_000;

/// What `tail` was asked for.
#[derive(Clone, Debug)]
pub struct TailOptions {
    pub format: TailFormat,
    pub machines: Vec<String>,
    pub time: TimeMode,
    pub lines: Option<u64>,
    pub since: Option<TimeSpec>,
}

/// The `--machine` values no known machine matches (by name or raw id).
/// `host` is machine 0, which every capture has: never unknown.
pub fn unknown_machines(wanted: &[String], known: &BTreeMap<u32, Option<String>>) -> Vec<String> {
    wanted
        .iter()
        .filter(|w| {
            *w != "host"
                && !known.iter().any(|(raw_id, name)| {
                    name.as_deref() == Some(w.as_str()) || raw_id.to_string() == **w
                })
        })
        .cloned()
        .collect()
}

/// `host, phone, #42` or `none yet`.
pub fn known_list(known: &BTreeMap<u32, Option<String>>) -> String {
    if known.is_empty() {
        return "none yet".to_owned();
    }
    known
        .iter()
        .map(|(raw_id, name)| match (name, raw_id) {
            (Some(n), _) => tracesync_protocol::text::escape_control(n).into_owned(),
            (None, 0) => "host".to_owned(),
            (None, id) => format!("#{id}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes and flushes; a closed reader (`| head`) ends the tail quietly.
pub(crate) fn write_all(out: &mut impl Write, data: &[u8]) -> Result<(), u8> {
    match out.write_all(data).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(exit::OK),
        Err(e) => {
            eprintln!("tracesync: cannot write to standard output: {e}");
            Err(exit::IOERR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_machines_are_named_against_the_known_ones() {
        let known: BTreeMap<u32, Option<String>> =
            [(0, None), (7, Some("phone".to_owned()))].into();
        let wanted = ["host", "phone", "7", "nosuch"].map(String::from);
        assert_eq!(unknown_machines(&wanted, &known), vec!["nosuch".to_owned()]);
        // Before anything is known, the host is.
        assert!(unknown_machines(&wanted[..1], &BTreeMap::new()).is_empty());
        assert_eq!(known_list(&known), "host, phone");
        assert_eq!(known_list(&BTreeMap::new()), "none yet");
    }
}
