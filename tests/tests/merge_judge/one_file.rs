//! (a) One host file, and (b) a relay-recorded file (TV-23 shape).

use super::*;

// (a) one host file

#[test]
fn single_host_file_monotonic_and_default_clock() {
    if !tp::require_or_skip("single_host_file_monotonic_and_default_clock") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // BOOTTIME runs 5 s ahead of MONOTONIC, 6 s after a 1 s suspend.
    let mut p = vec![
        snap(1, &[(BT, 10 * S), (MONO, 5 * S)]),
        system_info("6.1-host"),
        track(2, 10, "mono"),
        track(3, 20, "default"),
        // Sequence 4 defaults to MONOTONIC through TracePacketDefaults.
        build::on_sequence(
            TracePacket {
                trace_packet_defaults: Some(TracePacketDefaults {
                    timestamp_clock_id: Some(MONO),
                }),
                ..build::track_descriptor(30, "seq-default", None)
            },
            4,
        ),
    ];
    p.extend(slice(2, 10, MONO, 6 * S, 7 * S, "mono_early"));
    p.extend(slice(3, 20, BT, 11 * S + 500, 12 * S, "default_early").map(no_clock));
    p.extend([no_clock(build::slice_begin(
        8 * S,
        MONO,
        4,
        30,
        "seqdefault_early",
    ))]);
    p.extend([no_clock(build::slice_end(8 * S + 10, MONO, 4, 30))]);
    p.push(snap(1, &[(BT, 20 * S), (MONO, 14 * S)]));
    p.extend(slice(2, 10, MONO, 15 * S, 16 * S, "mono_late"));
    p.push(build::instant(15 * S + 7, MONO, 2, 10, "mono_instant"));
    p.extend(slice(3, 20, BT, 22 * S, 23 * S, "default_late").map(no_clock));
    p.push(no_clock(build::instant(
        16 * S,
        MONO,
        4,
        30,
        "seqdefault_late",
    )));
    let input = write(d, "host.pftrace", &p);
    let j = judge(d, "a", &[&input], &[]);
    assert_same_as_input(&input, &j, &[]);

    assert_eq!(j.by_raw_id(), BTreeMap::from([(0, 0)]));
    assert_eq!(j.releases, [(0, Some("6.1-host".into()))]);
    // Pinned values: nearest snapshot at or below each MONOTONIC value.
    for (name, ts, dur) in [
        ("mono_early", 11 * S, S),
        ("default_early", 11 * S + 500, S - 500),
        ("seqdefault_early", 13 * S, 10),
        ("mono_late", 21 * S, S),
        ("mono_instant", 21 * S + 7, 0),
        ("default_late", 22 * S, S),
        ("seqdefault_late", 22 * S, 0),
    ] {
        let s = j.slice(name);
        assert_eq!(
            (s.machine, s.ts, s.dur),
            (0, ts as i64, dur as i64),
            "{name}"
        );
    }
}

// (b) a relay-recorded file (TV-23 shape)

/// Host packets and machine 7's in one file, as traced + traced_relay
/// record them: machine 7 is 48 s + `extra` ahead (client minus host), so
/// its slices land at the same host times whatever `extra` is.
pub(super) fn relay_recorded(d: &Path, name: &str, extra: u64) -> PathBuf {
    let vm = |v: u64| v + extra;
    let mut p = vec![
        snap(1, &[(BT, S), (MONO, S / 2)]),
        build::on_sequence(system_info("6.1-host"), 1),
        on(7, build::on_sequence(system_info("5.15-vm"), 1)),
        on(
            7,
            build::remote_clock_sync(1, &[(vm(50 * S), 2 * S), (vm(50 * S), 2 * S)]),
        ),
        // Machine 7's own snapshot: MONOTONIC 10 s behind its BOOTTIME.
        on(7, snap(5, &[(BT, vm(50 * S)), (MONO, vm(40 * S))])),
        track(2, 1, "host"),
        on(7, track(3, 7, "vm")),
        on(7, track(4, 8, "vm-default")),
    ];
    p.extend(slice(2, 1, BT, 1_100_000_000, 1_200_000_000, "host_slice"));
    let host_mono = S / 2 + 300_000_000;
    p.extend(slice(
        2,
        1,
        MONO,
        host_mono,
        host_mono + 100_000_000,
        "host_mono",
    ));
    let vm_slice = [vm(50_100_000_000), vm(50_150_000_000)];
    p.extend(slice(3, 7, BT, vm_slice[0], vm_slice[1], "vm_slice").map(|x| on(7, x)));
    let vm_mono = [vm(40_200_000_000), vm(40_300_000_000)];
    p.extend(slice(3, 7, MONO, vm_mono[0], vm_mono[1], "vm_mono").map(|x| on(7, x)));
    let instant = build::instant(vm(40_250_000_000), MONO, 3, 7, "vm_mono_instant");
    p.push(on(7, instant));
    let vm_default = [vm(50_400_000_000), vm(50_500_000_000)];
    p.extend(
        slice(4, 8, BT, vm_default[0], vm_default[1], "vm_default").map(|x| on(7, no_clock(x))),
    );
    write(d, name, &p)
}

/// Where TV-23 puts the slices of [`relay_recorded`]: (name, on machine 7,
/// ts, dur).
pub(super) const RELAY_SLICES: [(&str, bool, i64, i64); 6] = [
    ("host_slice", false, 1_100_000_000, 100_000_000),
    ("host_mono", false, 1_300_000_000, 100_000_000),
    // TV-23: 50.1 s on machine 7 is 2.1 s on the host.
    ("vm_slice", true, 2_100_000_000, 50_000_000),
    ("vm_mono", true, 2_200_000_000, 100_000_000),
    ("vm_mono_instant", true, 2_250_000_000, 0),
    ("vm_default", true, 2_400_000_000, 100_000_000),
];

#[test]
fn relay_recorded_file_with_remote_clock_sync() {
    if !tp::require_or_skip("relay_recorded_file_with_remote_clock_sync") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = relay_recorded(d, "relay.pftrace", 0);
    let j = judge(d, "b", &[&input], &[]);
    // Trace processor v52 leaves a remote packet without clock id in trace
    // time, unshifted (docs/format.md); tracesync places it on its machine's
    // BOOTTIME and stamps the clock id, so vm_default moves by design.
    assert_same_as_input(&input, &j, &["vm_default"]);
    assert_eq!(j.by_raw_id(), BTreeMap::from([(0, 0), (7, 7)]));
    assert_eq!(
        j.releases,
        [(0, Some("6.1-host".into())), (7, Some("5.15-vm".into()))]
    );
    for (name, remote, ts, dur) in RELAY_SLICES {
        let s = j.slice(name);
        let machine = if remote { 7 } else { 0 };
        assert_eq!((s.machine, s.ts, s.dur), (machine, ts, dur), "{name}");
    }
    assert_eq!(j.names.get(&7).map(String::as_str), Some("machine-7"));
}

/// tables/tests.py `test_machine`: a host SystemInfo and one of machine
/// 2420838448 with Android fields (some not in tracesync's own proto: the
/// merge keeps a SystemInfo's bytes as they are). The merged trace's
/// `machine` table is the input's, and what Perfetto's test expects.
#[test]
fn machine_table_of_two_system_infos() {
    use tracesync_protocol::perfetto::{SystemInfo, Utsname};
    if !tp::require_or_skip("machine_table_of_two_system_infos") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let info = |sysname: &str, version: &str, release: &str, extra: &[u8], build: Option<&str>| {
        let mut bytes = SystemInfo {
            utsname: Some(Utsname {
                sysname: Some(sysname.into()),
                version: Some(version.into()),
                release: Some(release.into()),
                machine: Some("x86_64".into()),
            }),
            android_build_fingerprint: build.map(Into::into),
            num_cpus: Some(if build.is_some() { 8 } else { 4 }),
            ..Default::default()
        }
        .encode_to_vec();
        bytes.extend_from_slice(extra);
        bytes
    };
    // android_device_manufacturer (14) "Android", android_soc_model (9),
    // android_sdk_version (5) 33: fields tracesync's proto does not name.
    let mut android = Vec::new();
    prost::encoding::string::encode(14, &"Android".to_owned(), &mut android);
    prost::encoding::string::encode(9, &"some_soc_model".to_owned(), &mut android);
    prost::encoding::uint64::encode(5, &33, &mut android);
    // TracePacket: system_info (45), trusted_packet_sequence_id (10), and
    // machine_id (98) for the second.
    let packet = |info: Vec<u8>, machine: Option<u32>| {
        let mut p = Vec::new();
        prost::encoding::bytes::encode(45, &info, &mut p);
        prost::encoding::uint32::encode(10, &1, &mut p);
        if let Some(m) = machine {
            prost::encoding::uint32::encode(98, &m, &mut p);
        }
        p
    };
    let mut trace = Vec::new();
    for p in [
        packet(info("Darwin", "Foobar", "22.6.0", &[], None), None),
        packet(
            info(
                "Linux",
                "#1 SMP PREEMPT Wed Apr  2 01:42:00 UTC 2025",
                "6.6.82-android15-8-g1a7680db913a-ab13304129",
                &android,
                Some("android_test_fingerprint"),
            ),
            Some(2_420_838_448),
        ),
    ] {
        prost::encoding::bytes::encode(1, &p, &mut trace);
    }
    let input = d.join("machines.pftrace");
    std::fs::write(&input, &trace).unwrap();
    let out = d.join("merged.pftrace");
    merge_to(&out, &[&input], &[]);
    let sql = "SELECT raw_id, sysname, release, version, arch, num_cpus, \
               android_build_fingerprint, android_device_manufacturer, android_sdk_version \
               FROM machine ORDER BY raw_id";
    let table = |path: &Path| {
        tp::query(path, &[sql]).expect("trace processor")[0]
            .rows
            .clone()
    };
    let merged = table(&out);
    assert_eq!(
        merged,
        table(&input),
        "the merged trace's machine table is the input's"
    );
    let expected = serde_json::json!([
        [
            0, "Darwin", "22.6.0", "Foobar", "x86_64", 4, null, null, null
        ],
        [
            2_420_838_448_u64,
            "Linux",
            "6.6.82-android15-8-g1a7680db913a-ab13304129",
            "#1 SMP PREEMPT Wed Apr  2 01:42:00 UTC 2025",
            "x86_64",
            8,
            "android_test_fingerprint",
            "Android",
            33
        ]
    ]);
    assert_eq!(serde_json::Value::from(merged), expected);
}
