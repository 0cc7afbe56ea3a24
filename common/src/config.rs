//! What both binaries' configurations share: where the file is looked for,
//! how it is read, and the one-line error that names the file and the
//! position (`file:line:column`) or the flag.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Where the shipped configuration and TLS files live.
pub const CONFIG_DIR: &str = "/etc/tracesync";

/// What a configuration error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A configuration file.
    File(PathBuf),
    /// No file: the built-in defaults.
    Defaults,
    /// A command-line flag (its name without the dashes).
    Flag(&'static str),
}

/// A configuration error, displayed as one line: `file:line:column: message`,
/// `file: message`, `built-in defaults: message` or `--flag: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub origin: Origin,
    /// 1-based line and column in the file, when known.
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl ConfigError {
    /// An error about the file as a whole (`file` None: the defaults).
    pub fn file(file: Option<&Path>, message: impl Into<String>) -> Self {
        Self {
            origin: file.map_or(Origin::Defaults, |f| Origin::File(f.to_path_buf())),
            position: None,
            message: message.into(),
        }
    }

    /// An error at byte `offset` of the file's `text`.
    pub fn at(file: &Path, text: &str, offset: usize, message: impl Into<String>) -> Self {
        Self {
            origin: Origin::File(file.to_path_buf()),
            position: Some(line_column(text, offset)),
            message: message.into(),
        }
    }

    /// An error in a flag's value.
    pub fn flag(flag: &'static str, message: impl Into<String>) -> Self {
        Self {
            origin: Origin::Flag(flag),
            position: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.origin, self.position) {
            (Origin::File(file), Some((line, col))) => {
                write!(f, "{}:{line}:{col}: {}", file.display(), self.message)
            }
            (Origin::File(file), None) => write!(f, "{}: {}", file.display(), self.message),
            (Origin::Defaults, _) => write!(f, "built-in defaults: {}", self.message),
            (Origin::Flag(flag), _) => write!(f, "--{flag}: {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The search order: `explicit` (`--config FILE`) if given, else `default`
/// if it exists, else none (built-in defaults).
pub fn find(explicit: Option<&Path>, default: &str) -> Option<PathBuf> {
    match explicit {
        Some(path) => Some(path.to_path_buf()),
        None => Some(PathBuf::from(default)).filter(|p| p.exists()),
    }
}

/// The file's text.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            // The shipped units run as user tracesync; an installed config
            // is root's until its group is set (the tmpfiles.d entry does).
            "; the service user needs group read: `systemd-tmpfiles --create tracesync.conf` \
             (or chgrp tracesync and chmod 0640 the file)"
        } else {
            "; check the path and its permissions"
        };
        ConfigError::file(
            Some(path),
            format!("cannot read the config file: {e}{hint}"),
        )
    })
}

/// Deserializes `text` (the file `file`); toml's error becomes one line at
/// its position.
pub fn parse<T: DeserializeOwned>(text: &str, file: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        // toml's message may span lines; keep the error to one.
        let message = e.message().trim().replace('\n', "; ");
        match e.span() {
            Some(span) => ConfigError::at(file, text, span.start, message),
            None => ConfigError::file(Some(file), message),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        // "bé" is 3 bytes, 2 characters.
        assert_eq!(line_column(text, 9), (2, 3));
        assert_eq!(line_column(text, 1_000), (3, 1));
    }

    #[test]
    fn errors_are_one_line_naming_their_place() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Section {
            a: u32,
        }
        let err = parse::<Section>("a = 1\nb = 2\n", Path::new("x.toml")).unwrap_err();
        assert_eq!(err.position, Some((2, 1)));
        assert!(
            err.to_string().starts_with("x.toml:2:1: unknown field"),
            "{err}"
        );
        assert!(!err.to_string().contains('\n'));
        assert_eq!(ConfigError::flag("host", "bad").to_string(), "--host: bad");
        assert_eq!(
            ConfigError::file(None, "no").to_string(),
            "built-in defaults: no"
        );
        assert_eq!(find(None, "/nonexistent/tracesync.toml"), None);
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é\nx", 3), (2, 1));
        assert_eq!(line_column("ab", 99), (1, 3));
    }
}
