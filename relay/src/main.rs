//! `tracesync-relay`: the relay agent (streaming arrives with the live-capture work).
fn main() -> std::process::ExitCode {
    eprintln!("tracesync-relay: not built yet");
    std::process::ExitCode::from(70)
}
