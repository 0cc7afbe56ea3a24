//! `tracesync`: merge, clocks, demo, pki, tail, status (see `tracesync_cli`).
fn main() -> std::process::ExitCode {
    tracesync_cli::main()
}
