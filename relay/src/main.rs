//! `tracesync-relay`: streams this machine's Perfetto trace packets to a
//! tracesync daemon (see `tracesync_relay::agent`).
fn main() -> std::process::ExitCode {
    tracesync_relay::agent::main()
}
