//! `tracesync pki ... --group G`: the keys a service user must read.

use std::path::PathBuf;

/// `--group G`, looked up before anything is written.
pub fn lookup_group(group: &str) -> Result<nix::unistd::Gid, String> {
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => Err(format!(
            "--group {group}: no such group; create it (systemd-sysusers \
             systemd/tracesync.sysusers makes `tracesync`) or give an existing one"
        )),
        Err(e) => Err(format!("--group {group}: cannot look it up: {e}")),
    }
}

/// `--group G`: the private keys among `files` (all but the CA's) become
/// readable by group `gid` (owner unchanged, mode 0640), so a service
/// running as another user in that group (`User=tracesync`) can read them;
/// the CA key stays 0600. Changing to a group the caller is not in needs
/// root (or CAP_CHOWN).
pub fn share_keys_with_group(files: &[PathBuf], gid: nix::unistd::Gid) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for key in files.iter().filter(|f| {
        f.extension().is_some_and(|e| e == "key") && f.file_name().is_some_and(|n| n != "ca.key")
    }) {
        nix::unistd::chown(key, None, Some(gid)).map_err(|e| {
            format!(
                "cannot give {} to group {gid}: {e} (run as root, or as a member of the group)",
                key.display()
            )
        })?;
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o640))
            .map_err(|e| format!("cannot chmod 0640 {}: {e}", key.display()))?;
    }
    Ok(())
}
