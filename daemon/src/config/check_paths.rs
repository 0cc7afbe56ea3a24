//! `--check-config`'s checks of the paths a config names, as the user
//! the service runs as (`--check-user`).

use std::path::Path;

use super::{ConfigError, DaemonArgs, DaemonConfig};

impl DaemonConfig {
    /// `--check-config`'s checks of the paths the config names, beyond
    /// parsing, for the user `who` (the one running the check, or
    /// `--check-user`): the output directory and the control socket's
    /// directory, if they exist, must be directories that user can write
    /// into; if missing (systemd or the daemon creates them) their nearest
    /// existing ancestor must be a directory. The TLS files (loaded already)
    /// must be readable by that user too.
    pub fn check_paths(
        &self,
        file: Option<&Path>,
        who: &tracesync_common::access::Who,
        args: &DaemonArgs,
    ) -> Result<(), ConfigError> {
        use tracesync_common::access::check_dir;
        // Named where the path came from: its flag, else the file (or the
        // built-in defaults).
        let error = |flag: &'static str, message: String| {
            if args.gave(flag) {
                ConfigError::flag(flag, message)
            } else {
                ConfigError::file(file, message)
            }
        };
        let access =
            |flag| move |e: tracesync_common::access::AccessError| error(flag, e.to_string());
        // The service reads its config as its own user, not as the root who
        // installed it.
        if let Some(path) = file
            && let Some(why) = who.cannot_read(path)
        {
            return Err(ConfigError::file(
                Some(path),
                format!(
                    "the config file is {why}; `systemd-tmpfiles --create tracesync.conf` \
                     (or chgrp tracesync and chmod 0640 the file) lets the service user read it"
                ),
            ));
        }
        check_dir(who, "[output] dir", &self.output.dir).map_err(access("output"))?;
        if let Some(parent) = self.listen.control.parent()
            && !parent.as_os_str().is_empty()
        {
            check_dir(who, "[listen] control", parent).map_err(access("control"))?;
        }
        if self.tls.mode != crate::tls::TlsMode::Off {
            let tls = &self.tls;
            let files = [
                ("[tls] cert", "tls-cert", Some(&tls.cert)),
                ("[tls] key", "tls-key", Some(&tls.key)),
                ("[tls] client-ca", "tls-client-ca", Some(&tls.client_ca)),
                ("[tls] crl", "tls-crl", tls.crl.as_ref()),
            ];
            for (key, flag, path) in files {
                let Some(path) = path.map(|p| p.get_ref()) else {
                    continue;
                };
                if let Some(why) = who.cannot_read(path) {
                    let hint = if key == "[tls] key" {
                        "; `tracesync pki init --group GROUP` (or chgrp GROUP and chmod \
                         0640) lets a service user in GROUP read it"
                            .to_owned()
                    } else {
                        String::new()
                    };
                    return Err(error(
                        flag,
                        format!("{key}: {}: {why}{hint}", path.display()),
                    ));
                }
            }
        }
        Ok(())
    }
}
