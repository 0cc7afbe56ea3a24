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

/// A fake `getprop` answering from `props`.
fn props<'a>(props: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |key| {
        props
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn a_phone_is_named_by_its_model_and_serial() {
    let pixel = [("ro.product.model", "Pixel 8"), ("ro.serialno", "1A2B3C4D")];
    assert_eq!(
        device::device_name(props(&pixel)).as_deref(),
        Some("Pixel-8-1A2B3C4D")
    );
    // Either alone when the other says nothing (shell may not read the
    // serial on some builds).
    assert_eq!(
        device::device_name(props(&[("ro.product.model", "Pixel 8")])).as_deref(),
        Some("Pixel-8")
    );
    assert_eq!(
        device::device_name(props(&[("ro.serialno", "emulator-5554")])).as_deref(),
        Some("emulator-5554")
    );
    assert_eq!(device::device_name(props(&[])), None);
    assert_eq!(
        device::device_name(props(&[("ro.product.model", " ?! "), ("ro.serialno", "")])),
        None
    );
}

#[test]
fn device_names_pass_the_name_rules_as_they_are() {
    let odd = [
        ("ro.product.model", "  Galaxy S23 Ultra (SM-S918B/DS) «5G» "),
        ("ro.serialno", "R5CW\t31\n"),
    ];
    let name = device::device_name(props(&odd)).expect("a name");
    assert_eq!(name, "Galaxy-S23-Ultra-SM-S918B-DS-5G-R5CW-31");
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    );
    assert!(!name.starts_with('-') && !name.ends_with('-'));
    let long = "M".repeat(400);
    let capped = device::device_name(props(&[("ro.product.model", &long)])).expect("a name");
    assert_eq!(
        capped.len(),
        tracesync_protocol::relay::MAX_MACHINE_NAME_BYTES
    );
}

#[test]
fn a_device_name_is_the_machine_s_own_not_an_explicit_one() {
    // One kernel, one machine: the device's name hashes the boot id alone,
    // as the host name does.
    let boot = "b00t".to_owned();
    let id = MachineIdentity::from_parts(boot.clone(), "Pixel-8-1A2B3C4D", None);
    assert_eq!(id.machine_name, "Pixel-8-1A2B3C4D");
    assert_eq!(id.hint, boot);
    assert_eq!(id.name_source, NameSource::HostName);
    let given = MachineIdentity::from_parts(boot, "Pixel-8-1A2B3C4D", Some("bench-phone"));
    assert_eq!(given.name_source, NameSource::Given);
    assert_eq!(given.hint, "b00t/bench-phone");
}

#[test]
fn android_is_told_by_its_getprop_or_its_environment() {
    use std::ffi::OsStr;
    assert_eq!(
        device::android_getprop(None, true).as_deref(),
        Some(std::path::Path::new(device::SYSTEM_GETPROP))
    );
    assert_eq!(
        device::android_getprop(Some(OsStr::new("/system")), false).as_deref(),
        Some(std::path::Path::new("getprop"))
    );
    assert_eq!(device::android_getprop(Some(OsStr::new("")), false), None);
    assert_eq!(device::android_getprop(None, false), None);
}

#[test]
fn properties_are_read_with_the_getprop_program() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let getprop = dir.path().join("getprop");
    std::fs::write(
        &getprop,
        "#!/bin/sh\ncase \"$1\" in\n  ro.product.model) echo 'Pixel 8' ;;\n  \
         ro.serialno) echo 1A2B3C4D ;;\n  ro.broken) exit 1 ;;\n  *) echo ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&getprop, std::fs::Permissions::from_mode(0o755)).unwrap();
    let read = |key: &str| device::read_property(&getprop, key);
    assert_eq!(read("ro.product.model").as_deref(), Some("Pixel 8"));
    assert_eq!(read("ro.unknown"), None, "an empty answer is no value");
    assert_eq!(read("ro.broken"), None);
    assert_eq!(
        device::device_name(read).as_deref(),
        Some("Pixel-8-1A2B3C4D")
    );
    assert_eq!(
        device::read_property(&dir.path().join("missing"), "ro.serialno"),
        None
    );
}
