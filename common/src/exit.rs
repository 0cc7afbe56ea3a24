//! sysexits(3) codes; docs/operations-cli.md ("Exit codes") says what each
//! means for each binary.

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

/// The man page of a binary's command line (clap_mangen), for
/// `tracesync man`, `tracesyncd --man` and `tracesync-relay --man`
/// (scripts/package.sh installs them). Written to standard output.
pub fn print_man_page(command: clap::Command) -> std::process::ExitCode {
    let mut page = Vec::new();
    // The help subcommand gets no page of its own, so the page names none.
    let written = clap_mangen::Man::new(command.disable_help_subcommand(true))
        .render(&mut page)
        .and_then(|()| std::io::Write::write_all(&mut std::io::stdout().lock(), &page));
    match written {
        Ok(()) => std::process::ExitCode::from(OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::ExitCode::from(OK),
        Err(e) => {
            eprintln!("cannot write the man page: {e}");
            std::process::ExitCode::from(IOERR)
        }
    }
}

/// Writes `command`'s man page and one per subcommand (`NAME-SUB.1`, the
/// pages the main page refers to) into `dir`, creating it. The exit code.
pub fn write_man_pages(command: clap::Command, dir: &std::path::Path) -> std::process::ExitCode {
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!(
            "cannot create {}: {e}; give a writable --dir",
            dir.display()
        );
        return std::process::ExitCode::from(CANTCREAT);
    }
    match clap_mangen::generate_to(command, dir) {
        Ok(()) => std::process::ExitCode::from(OK),
        Err(e) => {
            eprintln!("cannot write the man pages into {}: {e}", dir.display());
            std::process::ExitCode::from(IOERR)
        }
    }
}
