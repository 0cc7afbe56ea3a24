//! Who this relay is: its kernel's boot id, its machine name, and the
//! Perfetto-style raw machine id derived from them.
//!
//! Perfetto's host derives a relayed machine's id from a hint string (the
//! relay's boot id): FNV-1a-64 of the hint, low 32 bits, 0 mapped to 1.
//! tracesync does the same, so one kernel is one machine; a relay given an
//! explicit name other than the machine's own hashes `"<boot_id>/<name>"`
//! instead, so several named relays on one kernel (time namespaces, the
//! demo) are distinct machines.
//!
//! The machine's own name is the host name, except on Android, where every
//! phone is `localhost` and the name comes from the device's properties
//! ([`device`]).

pub mod device;

pub use device::NameSource;

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
const HOSTNAME_PATH: &str = "/proc/sys/kernel/hostname";

/// The relay's machine identity, sent in Hello and in its SystemInfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineIdentity {
    /// The kernel's boot id, or a pseudo one (`"pseudo-<hex>"`) where the
    /// kernel has none.
    pub boot_id: String,
    pub machine_name: String,
    /// Where `machine_name` came from.
    pub name_source: NameSource,
    /// Perfetto raw machine id: never 0 (0 is the host).
    pub raw_id: u32,
    /// The string `raw_id` is the hash of.
    pub hint: String,
}

impl MachineIdentity {
    /// Reads the boot id and the machine's own name (an Android device's
    /// properties, else the host name). `name` overrides the machine name
    /// (the relay's `--name`); the device is not asked then.
    pub fn detect(name: Option<&str>) -> Self {
        let boot_id = std::fs::read_to_string(BOOT_ID_PATH)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(pseudo_boot_id);
        if let Some(name) = name.filter(|n| !n.trim().is_empty()) {
            return Self::from_parts(boot_id, &read_hostname(), Some(name));
        }
        let from_device = device::detect_getprop()
            .and_then(|getprop| device::device_name(|key| device::read_property(&getprop, key)));
        match from_device {
            Some(own) => Self {
                name_source: NameSource::DeviceProperties,
                ..Self::from_parts(boot_id, &own, None)
            },
            None => Self::from_parts(boot_id, &read_hostname(), None),
        }
    }

    /// The same identity with its raw id bound to its name (under TLS): the
    /// hash of `<boot_id>/<name>` whatever the name's source, so no other
    /// machine's certificate can claim it from the boot id alone (see
    /// `tracesync_protocol::relay::name_bound_raw_id`).
    pub fn bound_to_name(self) -> Self {
        let hint = format!("{}/{}", self.boot_id, self.machine_name);
        Self {
            raw_id: raw_machine_id(&hint),
            hint,
            ..self
        }
    }

    /// The identity for a given boot id and the machine's own name (pure):
    /// `name` other than `own_name` is an explicit name.
    pub fn from_parts(boot_id: String, own_name: &str, name: Option<&str>) -> Self {
        let explicit = name
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != own_name);
        let (machine_name, hint, name_source) = match explicit {
            Some(n) => (n.to_owned(), format!("{boot_id}/{n}"), NameSource::Given),
            None => (own_name.to_owned(), boot_id.clone(), NameSource::HostName),
        };
        Self {
            raw_id: raw_machine_id(&hint),
            boot_id,
            machine_name,
            name_source,
            hint,
        }
    }
}

pub use tracesync_protocol::relay::{fnv1a64, raw_machine_id};

fn read_hostname() -> String {
    std::fs::read_to_string(HOSTNAME_PATH)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            let uts = nix::sys::utsname::uname().ok()?;
            Some(uts.nodename().to_string_lossy().into_owned())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Stands in for a boot id where the kernel has none: a hash of the boot
/// time and the kernel's uname, stable for one boot and distinct between
/// kernels, as Perfetto's fallback is.
fn pseudo_boot_id() -> String {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let btime = stat.lines().find(|l| l.starts_with("btime ")).unwrap_or("");
    let mut seed = btime.to_owned();
    if let Ok(uts) = nix::sys::utsname::uname() {
        for part in [
            uts.sysname(),
            uts.nodename(),
            uts.release(),
            uts.version(),
            uts.machine(),
        ] {
            seed.push('\n');
            seed.push_str(&part.to_string_lossy());
        }
    }
    format!("pseudo-{:016x}", fnv1a64(seed.as_bytes()))
}

#[cfg(test)]
mod tests;
