//! `tracesync-capture-check DIR`: the identities of a capture written from
//! synthetic sources (`--source synthetic:RATE`), read back from its rolled
//! files: per source, packets, counters missing below the highest seen, and
//! duplicates. `scripts/install-check.sh` runs it on the capture it copies
//! out of the installed machine. Prints one line per source, then
//! `packets N lost L dup D`; exits 0 when nothing was lost or duplicated and
//! some packet was read, 1 otherwise, 66 when DIR holds no readable capture.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: tracesync-capture-check DIR");
        return ExitCode::from(64);
    };
    let report = match tracesync_cli::check::check_dir(std::path::Path::new(&dir)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("tracesync-capture-check: {e}");
            return ExitCode::from(66);
        }
    };
    for (source, s) in &report.sources {
        println!(
            "{source}: packets {} missing {} dup {} highest {}",
            s.packets,
            s.missing,
            s.duplicates,
            s.highest.map_or_else(|| "-".to_owned(), |h| h.to_string())
        );
    }
    for torn in &report.unreadable {
        println!("unreadable: {torn}");
    }
    let (packets, lost, dup) = (
        report.total_packets(),
        report.total_missing(),
        report.total_duplicates(),
    );
    println!(
        "packets {packets} lost {lost} dup {dup} ({} files)",
        report.files.len()
    );
    if packets > 0 && lost == 0 && dup == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
