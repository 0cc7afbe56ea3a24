//! The machine name a device gives itself when the relay is given none.
//!
//! On Android the host name is `localhost` on every phone, so the name is
//! taken from the device's properties instead: `ro.product.model` and
//! `ro.serialno`, read with `getprop`, made into one name the relay's and
//! the PKI's rules take as it is (ASCII letters, digits, `-`, `_` and `.`,
//! no leading or trailing `-`): `Pixel 8` with serial `1A2B3C` is
//! `Pixel-8-1A2B3C`, a DNS name, so `tracesync pki issue --name` writes
//! `Pixel-8-1A2B3C.crt` and no one has to quote it. Elsewhere, or when
//! the properties say nothing, the caller keeps the host name.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tracesync_protocol::relay::MAX_MACHINE_NAME_BYTES;

/// Android's `getprop` (every Android has it there).
pub const SYSTEM_GETPROP: &str = "/system/bin/getprop";

/// Where a name came from, for the relay's first log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// `--name` or the file's `name`.
    Given,
    /// Android's `ro.product.model` and `ro.serialno`.
    DeviceProperties,
    /// The kernel's host name.
    HostName,
}

impl NameSource {
    pub fn describe(self) -> &'static str {
        match self {
            NameSource::Given => "name given",
            NameSource::DeviceProperties => "name from ro.product.model and ro.serialno",
            NameSource::HostName => "name from the host name",
        }
    }
}

/// The `getprop` to ask on this machine: None unless it is Android (an
/// `ANDROID_ROOT` in the environment, or `/system/bin/getprop` there).
/// Pure: the caller passes what it found.
pub fn android_getprop(
    android_root: Option<&OsStr>,
    system_getprop_exists: bool,
) -> Option<PathBuf> {
    if system_getprop_exists {
        return Some(PathBuf::from(SYSTEM_GETPROP));
    }
    // An Android environment without the usual path: the one on PATH.
    android_root
        .filter(|root| !root.is_empty())
        .map(|_| PathBuf::from("getprop"))
}

/// This machine's `getprop`, if it is Android.
pub fn detect_getprop() -> Option<PathBuf> {
    android_getprop(
        std::env::var_os("ANDROID_ROOT").as_deref(),
        Path::new(SYSTEM_GETPROP).is_file(),
    )
}

/// `getprop KEY` run with `program`: the value, trimmed; None when it
/// cannot run, fails or prints nothing.
pub fn read_property(program: &Path, key: &str) -> Option<String> {
    let out = Command::new(program)
        .arg(key)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (!value.is_empty()).then_some(value)
}

/// The device's name from its properties (`getprop` answers a key with
/// its value, or None): model and serial joined, either alone if the
/// other is unknown; None when neither gives a usable name.
pub fn device_name(getprop: impl Fn(&str) -> Option<String>) -> Option<String> {
    let model = getprop("ro.product.model").and_then(|m| name_part(&m));
    let serial = getprop("ro.serialno").and_then(|s| name_part(&s));
    let name = match (model, serial) {
        (Some(model), Some(serial)) => format!("{model}-{serial}"),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => return None,
    };
    Some(cap(name))
}

/// One property as a piece of a name: every run of other characters is
/// one `-`, none at either end; None if nothing is left.
fn name_part(value: &str) -> Option<String> {
    let mut part = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '.') {
            part.push(c);
        } else if !part.is_empty() && !part.ends_with('-') {
            part.push('-');
        }
    }
    let part = part.trim_end_matches('-');
    (!part.is_empty()).then(|| part.to_owned())
}

/// At most the Hello's limit (the name is ASCII: any byte is a boundary).
fn cap(mut name: String) -> String {
    name.truncate(MAX_MACHINE_NAME_BYTES);
    let kept = name.trim_end_matches('-').len();
    name.truncate(kept);
    name
}
