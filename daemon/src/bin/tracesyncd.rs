//! `tracesyncd`: the host daemon. Relays stream their machines' trace
//! packets to it; it writes one rolling merged trace (see `tracesync::server`).
fn main() -> std::process::ExitCode {
    tracesync::server::daemon::main()
}
