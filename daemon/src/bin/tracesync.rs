//! `tracesync`: merge, clocks (tail, status and demo arrive with live capture).
fn main() -> std::process::ExitCode {
    tracesync::cli::main()
}
