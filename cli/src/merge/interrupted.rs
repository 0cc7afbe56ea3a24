//! Ctrl-C (SIGINT), SIGTERM or SIGHUP while `tracesync merge -o FILE`
//! writes: the temporary `FILE.tmp` is removed, then the process ends as
//! the signal would have ended it (a shell sees 130 for Ctrl-C). A merge
//! that fails already removes it; without this, an interrupted one left
//! a partial copy of the output beside it.
//!
//! Invariant: only the temporary is removed, never `FILE` (renamed into
//! place only once complete). A signal after the rename finds no
//! temporary and ends the process all the same.

use std::path::Path;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Removes the temporary of `output` if a signal ends the merge; nothing
/// for standard output or an output that is not a regular file (written
/// in place, no temporary). Best effort: without a handler the signal
/// ends the process as before.
pub fn remove_temporary_on_signal(output: &Path) {
    if output.as_os_str() == "-" {
        return;
    }
    let Some(temp) = super::temp_path(output) else {
        return;
    };
    let Ok(mut signals) = Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("tracesync-signal".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let _ = std::fs::remove_file(&temp);
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                // Not reached for these signals (their default ends the
                // process); the shell's convention if it were.
                std::process::exit(128 + signal);
            }
        });
}
