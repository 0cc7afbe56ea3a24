//! `tracesync`: merge, clocks, demo, tail, status.
fn main() -> std::process::ExitCode {
    tracesync::cli::main()
}
