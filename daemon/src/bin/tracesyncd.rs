//! `tracesyncd`: the host daemon. Relays stream their machines' trace
//! packets to it; it writes one rolling merged trace (see `tracesync_daemon::server`).
fn main() -> std::process::ExitCode {
    tracesync_daemon::server::daemon::main()
}
