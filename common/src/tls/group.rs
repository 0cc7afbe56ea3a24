//! `tracesync pki ... --group G`: the keys a service user must read.

use std::path::PathBuf;

use super::pki::PkiError;

/// `--group G`, looked up before anything is written.
pub fn lookup_group(group: &str) -> Result<nix::unistd::Gid, PkiError> {
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => Err(PkiError::NoSuchGroup {
            group: group.to_owned(),
        }),
        Err(source) => Err(PkiError::GroupLookup {
            group: group.to_owned(),
            source,
        }),
    }
}

/// `--group G`: the private keys among `files` (all but the CA's) become
/// readable by group `gid` (owner unchanged, mode 0640), so a service
/// running as another user in that group (`User=tracesync`) can read them;
/// the CA key stays 0600. Changing to a group the caller is not in needs
/// root (or CAP_CHOWN).
pub fn share_keys_with_group(files: &[PathBuf], gid: nix::unistd::Gid) -> Result<(), PkiError> {
    use std::os::unix::fs::PermissionsExt;
    for key in files.iter().filter(|f| {
        f.extension().is_some_and(|e| e == "key") && f.file_name().is_some_and(|n| n != "ca.key")
    }) {
        nix::unistd::chown(key, None, Some(gid)).map_err(|source| PkiError::Chown {
            path: key.clone(),
            gid,
            source,
        })?;
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o640)).map_err(
            |source| PkiError::Chmod {
                path: key.clone(),
                source,
            },
        )?;
    }
    Ok(())
}
