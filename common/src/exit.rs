//! sysexits(3) codes, as DESIGN.md §5 assigns them.

pub const OK: u8 = 0;
pub const USAGE: u8 = 64;
pub const DATAERR: u8 = 65;
pub const NOINPUT: u8 = 66;
pub const NOUSER: u8 = 67;
pub const UNAVAILABLE: u8 = 69;
pub const SOFTWARE: u8 = 70;
pub const CANTCREAT: u8 = 73;
pub const IOERR: u8 = 74;
pub const TEMPFAIL: u8 = 75;
pub const NOPERM: u8 = 77;
pub const CONFIG: u8 = 78;

/// Parses the command line; on `--help`/`--version` or a usage error, prints
/// what clap says and returns the exit code (0 or 64) to exit with.
pub fn parse_args<T: clap::Parser>() -> Result<T, std::process::ExitCode> {
    T::try_parse().map_err(|e| {
        let code = if e.use_stderr() { USAGE } else { OK };
        let _ = e.print();
        std::process::ExitCode::from(code)
    })
}
