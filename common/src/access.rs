//! Whether a user can read a file or write into a directory, from the
//! permission bits (what `--check-config --check-user USER` answers for the
//! service's `User=` before systemd starts the daemon as that user).
//!
//! The rule is the kernel's for plain modes: root passes (except for
//! nothing here), the owner's bits for the owner, the group's bits for a
//! member of the file's group, else the other bits; every directory on the
//! way must be searchable. ACLs and capabilities are not consulted.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

/// Why a user or a directory fails a check.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("no such user {0:?}")]
    NoSuchUser(String),
    #[error("cannot look up user {name:?}: {source}")]
    LookUp { name: String, source: nix::Error },
    /// `key` names the setting.
    #[error("{key}: {} exists and is not a directory", path.display())]
    NotADirectory { key: String, path: PathBuf },
    #[error("{key}: {}: {why}", path.display())]
    NotWritable {
        key: String,
        path: PathBuf,
        why: String,
    },
    #[error("{key}: {}: {} is not a directory, so it cannot be created", path.display(), ancestor.display())]
    UnderAFile {
        key: String,
        path: PathBuf,
        ancestor: PathBuf,
    },
}

/// A user and its groups.
#[derive(Clone, Debug)]
pub struct Who {
    pub name: String,
    uid: Uid,
    groups: Vec<Gid>,
}

impl Who {
    /// The user running this process.
    pub fn current() -> Self {
        let uid = Uid::effective();
        let name = User::from_uid(uid)
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |u| u.name);
        let mut groups = nix::unistd::getgroups().unwrap_or_default();
        groups.push(Gid::effective());
        Self { name, uid, groups }
    }

    /// A user by name, with its primary and supplementary groups.
    pub fn named(name: &str) -> Result<Self, AccessError> {
        let user = match User::from_name(name) {
            Ok(Some(user)) => user,
            Ok(None) => return Err(AccessError::NoSuchUser(name.to_owned())),
            Err(source) => {
                return Err(AccessError::LookUp {
                    name: name.to_owned(),
                    source,
                });
            }
        };
        let groups = std::ffi::CString::new(name)
            .ok()
            .and_then(|c| nix::unistd::getgrouplist(&c, user.gid).ok())
            .unwrap_or_else(|| vec![user.gid]);
        Ok(Self {
            name: user.name,
            uid: user.uid,
            groups,
        })
    }

    fn allows(&self, meta: &std::fs::Metadata, bits: u32) -> bool {
        if self.uid.is_root() {
            return true;
        }
        let mode = meta.mode();
        let shift = if meta.uid() == self.uid.as_raw() {
            6
        } else if self.groups.iter().any(|g| g.as_raw() == meta.gid()) {
            3
        } else {
            0
        };
        (mode >> shift) & bits == bits
    }

    /// None if every directory above `path` can be searched, else the first
    /// that cannot.
    fn blocked_on_the_way(&self, path: &Path) -> Option<PathBuf> {
        let absolute = std::path::absolute(path).ok()?;
        for dir in absolute.ancestors().skip(1) {
            if let Ok(meta) = std::fs::metadata(dir)
                && !self.allows(&meta, 0o1)
            {
                return Some(dir.to_path_buf());
            }
        }
        None
    }

    /// Why this user cannot read the file at `path`, if it cannot.
    pub fn cannot_read(&self, path: &Path) -> Option<String> {
        if let Some(dir) = self.blocked_on_the_way(path) {
            return Some(format!(
                "user {} cannot search {} ({})",
                self.name,
                dir.display(),
                describe(&dir)
            ));
        }
        let meta = std::fs::metadata(path).ok()?;
        (!self.allows(&meta, 0o4))
            .then(|| format!("not readable by user {} ({})", self.name, describe(path)))
    }

    /// Why this user cannot create files in the existing directory `dir`,
    /// if it cannot.
    pub fn cannot_write_into(&self, dir: &Path) -> Option<String> {
        if let Some(blocked) = self.blocked_on_the_way(dir) {
            return Some(format!(
                "user {} cannot search {} ({})",
                self.name,
                blocked.display(),
                describe(&blocked)
            ));
        }
        let meta = std::fs::metadata(dir).ok()?;
        (!self.allows(&meta, 0o3))
            .then(|| format!("not writable by user {} ({})", self.name, describe(dir)))
    }
}

/// `owner UID:GID, mode 0NNN` of a path, for messages.
fn describe(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(meta) => format!(
            "owner {}:{}, mode {:04o}",
            meta.uid(),
            meta.gid(),
            meta.mode() & 0o7777
        ),
        Err(e) => e.to_string(),
    }
}

/// What a directory that may not exist yet needs: itself, if it exists, a
/// directory this user can write into; else its nearest existing ancestor
/// a directory (systemd or the daemon creates the rest). `key` names the
/// setting in the message.
pub fn check_dir(who: &Who, key: &str, dir: &Path) -> Result<(), AccessError> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(AccessError::NotADirectory {
            key: key.to_owned(),
            path: dir.to_path_buf(),
        }),
        Ok(_) => match who.cannot_write_into(dir) {
            Some(why) => Err(AccessError::NotWritable {
                key: key.to_owned(),
                path: dir.to_path_buf(),
                why,
            }),
            None => Ok(()),
        },
        Err(_) => {
            let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
            for ancestor in absolute.ancestors().skip(1) {
                match std::fs::metadata(ancestor) {
                    Ok(meta) if meta.is_dir() => return Ok(()),
                    Ok(_) => {
                        return Err(AccessError::UnderAFile {
                            key: key.to_owned(),
                            path: dir.to_path_buf(),
                            ancestor: ancestor.to_path_buf(),
                        });
                    }
                    Err(_) => continue,
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_directory_under_a_file_and_a_file_as_directory_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let who = Who::current();
        let under = file.join("out");
        let e = check_dir(&who, "[output] dir", &under).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "[output] dir: {}: {} is not a directory, so it cannot be created",
                under.display(),
                file.display()
            )
        );
        let e = check_dir(&who, "[output] dir", &file).unwrap_err();
        assert!(matches!(e, AccessError::NotADirectory { .. }), "{e}");
        assert!(
            e.to_string().ends_with("exists and is not a directory"),
            "{e}"
        );
        check_dir(&who, "[output] dir", &tmp.path().join("a/b")).unwrap();
    }

    #[test]
    fn mode_bits_decide_for_a_user_that_is_not_root() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("k.key");
        std::fs::write(&key, "x").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A user that owns nothing here and is in no group of it.
        let nobody = Who {
            name: "nobody".into(),
            uid: Uid::from_raw(65534),
            groups: vec![Gid::from_raw(65534)],
        };
        let meta = std::fs::metadata(&key).unwrap();
        let owner_group = Who {
            name: "member".into(),
            uid: Uid::from_raw(65534),
            groups: vec![Gid::from_raw(meta.gid())],
        };
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let why = nobody.cannot_read(&key).expect("0600 is not for others");
        assert!(
            why.starts_with("not readable by user nobody (owner "),
            "{why}"
        );
        assert!(why.ends_with("mode 0600)"), "{why}");
        assert!(owner_group.cannot_read(&key).is_some());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(owner_group.cannot_read(&key), None);
        assert!(nobody.cannot_read(&key).is_some());
        assert!(nobody.cannot_write_into(tmp.path()).is_some());
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let why = owner_group
            .cannot_read(&key)
            .expect("directory not searchable");
        assert!(why.contains("cannot search"), "{why}");
    }
}
