//! Binary output refuses a terminal: a Perfetto trace (protobuf) written to
//! a tty only garbles it, as `journalctl -o export` or `gzip` refuse too.

use std::io::IsTerminal;

use tracesync_common::exit;

/// `Err(64)` after one line naming the fix when standard output is a
/// terminal; `what` is the command line's name for the output.
pub fn refuse_binary_stdout(what: &str, fix: &str) -> Result<(), u8> {
    if std::io::stdout().is_terminal() {
        eprintln!(
            "tracesync: {what}: refusing to write a binary Perfetto trace to a terminal; {fix}"
        );
        return Err(exit::USAGE);
    }
    Ok(())
}
