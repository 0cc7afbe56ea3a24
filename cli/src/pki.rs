//! `tracesync pki`: a lab PKI for mutual TLS between relays and the daemon
//! (the CA, the daemon's and relays' certificates, renewal, revocation),
//! made by `tracesync_common::tls::pki`.

use std::path::PathBuf;

use clap::Subcommand;
use tracesync_common::exit;
use tracesync_common::tls::pki;

#[derive(Debug, Subcommand)]
pub enum PkiCommand {
    /// Make a CA (ca.crt, ca.key) and the daemon's certificate (daemon.crt, daemon.key) in DIR.
    Init {
        /// Names the daemon's certificate carries (host names or IPs; relays
        /// check the one they connect to). Default: this host's name,
        /// localhost, 127.0.0.1, ::1.
        #[arg(long = "daemon-name", value_name = "NAME")]
        daemon_names: Vec<String>,
        /// Days the daemon's certificate is valid (from an hour ago, for clock
        /// skew); the CA is valid for 3650 days, or as long if longer.
        #[arg(long, value_name = "N", default_value_t = tracesync_common::tls::pki::DEFAULT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(tracesync_common::tls::pki::MAX_DAYS)))]
        days: u32,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
        /// Make the new private keys (not the CA's) readable by this group
        /// (mode 0640), e.g. `tracesync` for the shipped units' User=tracesync.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Issue a relay certificate for machine NAME (NAME.crt, NAME.key), signed by DIR/ca.key.
    Issue {
        /// The machine name the relay sends (its --name, or its host name).
        #[arg(long)]
        name: String,
        /// Also bind this raw machine id (only for relays with a fixed id).
        #[arg(long, value_name = "ID")]
        raw_id: Option<u32>,
        /// Days the certificate is valid (from an hour ago, for clock skew).
        #[arg(long, value_name = "N", default_value_t = tracesync_common::tls::pki::DEFAULT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(tracesync_common::tls::pki::MAX_DAYS)))]
        days: u32,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
        /// Make the new private keys (not the CA's) readable by this group
        /// (mode 0640), e.g. `tracesync` for the shipped units' User=tracesync.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Replace NAME.crt/NAME.key (or, with --daemon, daemon.crt/daemon.key) by a new key and
    /// certificate with the same names, signed by the same CA (DIR/ca.key).
    Renew {
        /// The machine whose relay certificate to renew.
        #[arg(long, required_unless_present = "daemon", conflicts_with = "daemon")]
        name: Option<String>,
        /// Renew the daemon's certificate instead.
        #[arg(long)]
        daemon: bool,
        /// With --daemon: the names the new certificate carries instead of
        /// the current one's (host names or IPs the relays connect to).
        #[arg(long = "daemon-name", value_name = "NAME", requires = "daemon")]
        daemon_names: Vec<String>,
        /// Days the new certificate is valid (from an hour ago, for clock skew).
        #[arg(long, value_name = "N", default_value_t = tracesync_common::tls::pki::DEFAULT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(tracesync_common::tls::pki::MAX_DAYS)))]
        days: u32,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
        /// Make the new private keys (not the CA's) readable by this group
        /// (mode 0640), e.g. `tracesync` for the shipped units' User=tracesync.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Revoke NAME.crt: add its serial to DIR/ca.crl (made if missing), signed by DIR/ca.key.
    /// The daemon refuses it once its `[tls] crl` names that file and it restarts.
    Revoke {
        /// The machine whose current certificate (NAME.crt) to revoke.
        #[arg(long)]
        name: String,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
    },
}

/// Runs `tracesync pki`; its exit code.
pub fn run(command: PkiCommand) -> u8 {
    let group = match &command {
        PkiCommand::Init { group, .. }
        | PkiCommand::Issue { group, .. }
        | PkiCommand::Renew { group, .. } => group.clone(),
        PkiCommand::Revoke { .. } => None,
    };
    let gid = match group.as_deref().map(pki::lookup_group).transpose() {
        Ok(gid) => gid,
        Err(e) => {
            eprintln!("tracesync: error: pki: {e}");
            return e.exit_code();
        }
    };
    let result = match command {
        PkiCommand::Init {
            daemon_names,
            days,
            dir,
            ..
        } => {
            let names = if daemon_names.is_empty() {
                let mut names: Vec<String> = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .into_iter()
                    .collect();
                names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
                names
            } else {
                daemon_names
            };
            pki::init_for(&dir, &names, days)
        }
        PkiCommand::Issue {
            name,
            raw_id,
            days,
            dir,
            ..
        } => pki::issue_for(&dir, &name, raw_id, days),
        PkiCommand::Renew {
            name,
            daemon,
            daemon_names,
            days,
            dir,
            ..
        } => {
            let holder = match name {
                Some(name) if !daemon => pki::Holder::Relay(name),
                _ => pki::Holder::Daemon {
                    names: daemon_names,
                },
            };
            pki::renew(&dir, &holder, days)
        }
        PkiCommand::Revoke { name, dir } => pki::revoke(&dir, &name).map(|(crl, already)| {
            if already {
                eprintln!("tracesync: pki: {name}'s certificate was already revoked");
            }
            vec![crl]
        }),
    };
    let result = result.and_then(|files| match gid {
        Some(gid) => pki::share_keys_with_group(&files, gid).map(|()| files),
        None => Ok(files),
    });
    match result {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("tracesync: error: pki: {e}");
            e.exit_code()
        }
    }
}
