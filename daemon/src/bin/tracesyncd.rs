//! `tracesyncd`: the host daemon (live capture arrives with the live-capture work).
fn main() -> std::process::ExitCode {
    eprintln!(
        "tracesyncd: live capture is not built yet; use `tracesync merge` for recorded traces"
    );
    std::process::ExitCode::from(tracesync::exit::SOFTWARE)
}
