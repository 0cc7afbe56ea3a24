use super::*;
use crate::tls::IdentityError;
use tracesync_capture::names::BINDINGS_NAME;

#[test]
fn raw_ids_and_instances_stay_with_their_first_name() {
    let b = Bindings::default();
    let _ = b.claim("a", 1, 100).unwrap();
    let _ = b.claim("A", 1, 100).unwrap(); // same name, other case
    let _ = b.claim("b", 2, 200).unwrap();
    let err = b.claim("b", 1, 200).unwrap_err();
    assert_eq!(
        err,
        IdentityError::RawIdHeld {
            raw_id: 1,
            holder: "a".into(),
            name: "b".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "certificate-identity-mismatch: raw machine id 1 belongs to machine \"a\" on this \
         daemon; a certificate for \"b\" cannot send as it"
    );
    let err = b.claim("b", 3, 100).unwrap_err();
    assert_eq!(
        err.to_string(),
        "certificate-identity-mismatch: relay instance 0000000000000064 belongs to machine \
         \"a\" on this daemon; a certificate for \"b\" cannot resume it"
    );
    // A refused claim binds nothing.
    let _ = b.claim("c", 3, 300).unwrap();
}

#[test]
fn each_name_keeps_its_recent_bindings_only() {
    let b = Bindings::default();
    for i in 0..(BINDINGS_PER_NAME as u32 + 2) {
        let _ = b.claim("a", i, u64::from(i)).unwrap();
    }
    // The two oldest were released; the newest are still held.
    let _ = b.claim("b", 0, 0).unwrap();
    let _ = b.claim("b", 1, 1).unwrap();
    assert!(b.claim("b", BINDINGS_PER_NAME as u32, 50).is_err());
}

#[test]
fn bindings_are_saved_and_reloaded_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BINDINGS_NAME);
    let (b, loaded) = Bindings::open(&path).unwrap();
    assert_eq!(loaded.names, 0);
    assert!(b.is_persistent());
    assert!(!path.exists(), "nothing written before a binding");
    assert_eq!(b.claim("Relay-A", 11, 0xa1).unwrap(), Claimed::New);
    assert_eq!(b.claim("relay-a", 11, 0xa1).unwrap(), Claimed::Held);
    assert_eq!(b.claim("relay-b", 22, 0xb1).unwrap(), Claimed::New);
    b.save().unwrap();
    b.save().unwrap(); // unchanged: nothing to do
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "{\"name\":\"relay-a\",\"raw_ids\":[11],\"instances\":[\"00000000000000a1\"]}\n\
         {\"name\":\"relay-b\",\"raw_ids\":[22],\"instances\":[\"00000000000000b1\"]}\n"
    );
    drop(b);

    // The restarted daemon: relay-b cannot take relay-a's raw id or
    // instance first; relay-a keeps both.
    let (b, loaded) = Bindings::open(&path).unwrap();
    assert_eq!((loaded.names, loaded.ignored_lines), (2, 0));
    assert!(
        loaded.summary().contains("2 machine names"),
        "{}",
        loaded.summary()
    );
    let err = b.claim("relay-b", 11, 0xb2).unwrap_err();
    assert!(
        matches!(&err, IdentityError::RawIdHeld { holder, .. } if holder == "relay-a"),
        "{err:?}"
    );
    let err = b.claim("relay-b", 23, 0xa1).unwrap_err();
    assert!(
        matches!(err, IdentityError::InstanceHeld { instance: 0xa1, .. }),
        "{err:?}"
    );
    assert_eq!(b.claim("relay-a", 11, 0xa1).unwrap(), Claimed::Held);
    assert_eq!(b.claim("relay-a", 12, 0xa2).unwrap(), Claimed::New);
    b.save().unwrap();
    let (_, loaded) = Bindings::open(&path).unwrap();
    assert_eq!(loaded.names, 2);
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("\"raw_ids\":[11,12]")
    );
}

#[test]
fn the_file_stays_bounded_per_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BINDINGS_NAME);
    let (b, _) = Bindings::open(&path).unwrap();
    for i in 0..(BINDINGS_PER_NAME as u32 * 3) {
        let _ = b.claim("a", i, u64::from(i)).unwrap();
        b.save().unwrap();
    }
    let (b, loaded) = Bindings::open(&path).unwrap();
    assert_eq!((loaded.names, loaded.ignored_lines), (1, 0));
    let n = BINDINGS_PER_NAME as u32;
    // Released ids may go to another name; the most recent may not.
    let _ = b.claim("b", 0, 1000).unwrap();
    assert!(b.claim("b", 3 * n - 1, 1001).is_err());
    assert!(b.claim("b", 2 * n, 1002).is_err());
    let _ = b.claim("b", 2 * n - 1, 1003).unwrap();
}

#[test]
fn a_corrupt_file_keeps_its_valid_lines_and_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BINDINGS_NAME);
    let good = "{\"name\":\"a\",\"raw_ids\":[1],\"instances\":[\"0000000000000001\"]}";
    let text = [
        good,
        "{\"name\":\"b\",\"raw_ids\":[2],\"instan", // torn
        "\u{0}\u{0}garbage",
        "{\"name\":\"c\",\"raw_ids\":[1],\"instances\":[]}", // a's raw id again
        "{\"name\":\"a\",\"raw_ids\":[5],\"instances\":[]}", // a twice
        "{\"name\":\"d\",\"raw_ids\":[4],\"instances\":[\"xyz\"]}",
        "{\"name\":\"e\",\"raw_ids\":[6],\"instances\":[],\"extra\":1}",
        "",
        "{\"name\":\"f\",\"raw_ids\":[7],\"instances\":[\"00000000000000ff\"]}",
    ]
    .join("\n");
    std::fs::write(&path, &text).unwrap();
    let (b, loaded) = Bindings::open(&path).unwrap();
    assert_eq!(loaded.names, 2, "a and f");
    assert_eq!(loaded.ignored_lines, 6);
    assert!(
        loaded.first_bad.as_deref().unwrap().starts_with("line 2: "),
        "{loaded:?}"
    );
    let line = loaded.summary();
    assert!(!line.contains('\n'));
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(line.contains("6 lines are not valid bindings"), "{line}");
    assert!(line.contains(".corrupt"), "{line}");
    assert!(line.contains("--raw-id"), "{line}");
    // The damaged file is kept for the operator; a clean one replaces it.
    let aside = dir.path().join(format!("{BINDINGS_NAME}{CORRUPT_SUFFIX}"));
    assert_eq!(loaded.set_aside.as_deref(), Some(aside.as_path()));
    assert_eq!(std::fs::read_to_string(&aside).unwrap(), text);
    let (_, again) = Bindings::open(&path).unwrap();
    assert_eq!((again.names, again.ignored_lines), (2, 0));
    // The valid lines hold.
    assert!(b.claim("x", 1, 99).is_err());
    assert!(b.claim("x", 7, 98).is_err());
    assert!(b.claim("x", 9, 0xff).is_err());
    let _ = b.claim("x", 2, 97).unwrap();
}

#[test]
fn an_unusable_file_is_one_line_and_links_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BINDINGS_NAME);
    std::fs::create_dir(&path).unwrap();
    let err = Bindings::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("is a directory") && !err.contains('\n'),
        "{err}"
    );
    std::fs::remove_dir(&path).unwrap();

    let target = dir.path().join("elsewhere");
    std::fs::write(
        &target,
        "{\"name\":\"a\",\"raw_ids\":[1],\"instances\":[]}\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let err = Bindings::open(&path).unwrap_err();
    assert_eq!(err.exit_code(), tracesync_common::exit::IOERR);
    let err = err.to_string();
    assert!(err.contains("symbolic link"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
}
