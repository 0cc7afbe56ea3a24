//! Who this relay is: its kernel's boot id, its machine name, and the
//! Perfetto-style raw machine id derived from them.
//!
//! Perfetto's host derives a relayed machine's id from a hint string (the
//! relay's boot id): FNV-1a-64 of the hint, low 32 bits, 0 mapped to 1.
//! tracesync does the same, so one kernel is one machine; a relay given an
//! explicit name other than the host name hashes "<boot_id>/<name>" instead,
//! so several named relays on one kernel (time namespaces, the demo) are
//! distinct machines.

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
const HOSTNAME_PATH: &str = "/proc/sys/kernel/hostname";

/// The relay's machine identity, sent in Hello and in its SystemInfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineIdentity {
    /// The kernel's boot id, or a pseudo one ("pseudo-<hex>") where the
    /// kernel has none.
    pub boot_id: String,
    pub machine_name: String,
    /// Perfetto raw machine id: never 0 (0 is the host).
    pub raw_id: u32,
    /// The string `raw_id` is the hash of.
    pub hint: String,
}

impl MachineIdentity {
    /// Reads the boot id and host name of this kernel. `name` overrides the
    /// machine name (the relay's `--name`).
    pub fn detect(name: Option<&str>) -> Self {
        let hostname = read_hostname();
        let boot_id = std::fs::read_to_string(BOOT_ID_PATH)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(pseudo_boot_id);
        Self::from_parts(boot_id, &hostname, name)
    }

    /// The identity for a given boot id and host name (pure).
    pub fn from_parts(boot_id: String, hostname: &str, name: Option<&str>) -> Self {
        let explicit = name
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != hostname);
        let (machine_name, hint) = match explicit {
            Some(n) => (n.to_owned(), format!("{boot_id}/{n}")),
            None => (hostname.to_owned(), boot_id.clone()),
        };
        Self {
            raw_id: raw_machine_id(&hint),
            boot_id,
            machine_name,
            hint,
        }
    }
}

/// Perfetto's machine id of a hint: FNV-1a-64, low 32 bits, 0 -> 1.
pub fn raw_machine_id(hint: &str) -> u32 {
    match fnv1a64(hint.as_bytes()) as u32 {
        0 => 1,
        id => id,
    }
}

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

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
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn raw_id_is_low_32_bits_never_zero() {
        assert_eq!(raw_machine_id("a"), 0x8601_ec8c);
        assert_eq!(raw_machine_id("foobar"), 0xf739_67e8);
        assert_ne!(raw_machine_id(""), 0);
    }

    #[test]
    fn host_name_hashes_the_boot_id_alone() {
        let boot = "0f0e0d0c-1111-2222-3333-444455556666".to_owned();
        let id = MachineIdentity::from_parts(boot.clone(), "box", None);
        assert_eq!(id.machine_name, "box");
        assert_eq!(id.hint, boot);
        assert_eq!(id.raw_id, raw_machine_id(&boot));
        // Naming the relay after its host changes nothing.
        assert_eq!(
            MachineIdentity::from_parts(boot.clone(), "box", Some("box")),
            id
        );
    }

    #[test]
    fn explicit_names_are_distinct_machines_on_one_kernel() {
        let boot = "b00t".to_owned();
        let a = MachineIdentity::from_parts(boot.clone(), "box", Some("phone-a"));
        let b = MachineIdentity::from_parts(boot.clone(), "box", Some("phone-b"));
        assert_eq!(a.hint, "b00t/phone-a");
        assert_eq!(a.machine_name, "phone-a");
        assert_eq!(a.raw_id, raw_machine_id("b00t/phone-a"));
        assert_ne!(a.raw_id, b.raw_id);
    }

    #[test]
    fn detect_reads_this_kernel() {
        let id = MachineIdentity::detect(None);
        assert!(!id.boot_id.is_empty());
        assert!(!id.machine_name.is_empty());
        assert_ne!(id.raw_id, 0);
        assert_eq!(MachineIdentity::detect(None), id, "stable within one boot");
    }
}
