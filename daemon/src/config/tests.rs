use std::path::Path;

use clap::Parser;

use super::*;

fn parse(text: &str) -> Result<DaemonConfig, ConfigError> {
    DaemonConfig::from_toml(text, Path::new("daemon.toml"))
}

#[test]
fn empty_file_gives_the_defaults() {
    let config = parse("").expect("empty config");
    assert_eq!(config, DaemonConfig::default());
    assert_eq!(config.listen.data.port(), 7410);
    assert_eq!(config.listen.sync.port(), 7411);
    assert_eq!(config.listen.control, Path::new(DEFAULT_CONTROL_PATH));
    assert_eq!(config.output.dir, Path::new(DEFAULT_OUTPUT_DIR));
    assert_eq!(config.output.commit_interval_ms, 100);
    assert_eq!(config.merge.window_ms, 500);
    assert_eq!(config.limits.max_relays, 256);
    assert_eq!(config.limits.max_frame_bytes, MAX_FRAME_BYTES as u64);
    assert_eq!(config.auth.required_token(), None);
    assert!(config.metrics.listen.is_none());
}

#[test]
fn shipped_example_parses_and_matches_the_defaults() {
    let text = include_str!("../../../configs/daemon.toml");
    let config = parse(text).expect("configs/daemon.toml");
    // The example documents the defaults: it must not drift from them.
    assert_eq!(config, DaemonConfig::default());
}

#[test]
fn values_are_read() {
    let config = parse(
        r#"
        [listen]
        data = "127.0.0.1:9000"
        [metrics]
        listen = "127.0.0.1:9002"
        [auth]
        token = "s3cret"
        [output]
        dir = "/tmp/out"
        rotate-bytes = 0
        fsync = false
        [merge]
        window-ms = 250
        queue-bytes = 268435456
        [limits]
        max-relays = 3
        [log]
        level = "debug"
        format = "json"
        "#,
    )
    .expect("config");
    assert_eq!(config.listen.data, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(
        config.metrics.listen,
        Some("127.0.0.1:9002".parse().unwrap())
    );
    assert_eq!(
        config.log.format,
        tracesync_common::logging::LogFormat::Json
    );
    assert_eq!(config.auth.required_token(), Some("s3cret"));
    assert_eq!(config.output.dir, Path::new("/tmp/out"));
    assert_eq!(config.output.rotate_bytes, 0);
    assert!(!config.output.fsync);
    assert_eq!(config.merge.window_ms, 250);
    assert_eq!(config.merge.queue_bytes, 256 << 20);
    assert_eq!(config.limits.max_relays, 3);
    assert_eq!(config.log.level, LogLevel::Debug);
    // Untouched keys keep their defaults.
    assert_eq!(config.output.commit_interval_ms, 100);
}

#[test]
fn empty_token_means_no_token() {
    let config = parse("[auth]\ntoken = \"\"\n").expect("config");
    assert_eq!(config.auth.required_token(), None);
}

#[test]
fn unknown_key_is_reported_with_its_line_and_column() {
    let err = parse("[output]\ndir = \"/x\"\n  no-such-key = 1\n").expect_err("unknown key");
    assert_eq!(err.position, Some((3, 3)), "{err}");
    assert!(err.message.contains("no-such-key"), "{err}");
    let line = err.to_string();
    assert!(line.starts_with("daemon.toml:3:3: "), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
}

#[test]
fn unknown_section_is_an_error() {
    let err = parse("[outptu]\ndir = \"/x\"\n").expect_err("unknown section");
    assert_eq!(err.position.map(|p| p.0), Some(1), "{err}");
    assert!(err.message.contains("outptu"), "{err}");
}

#[test]
fn wrong_type_is_reported_at_the_value() {
    let err = parse("[limits]\nmax-relays = \"many\"\n").expect_err("wrong type");
    assert_eq!(err.position, Some((2, 14)), "{err}");
    let err = parse("[listen]\ndata = \"not an address\"\n").expect_err("bad address");
    assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
}

#[test]
fn out_of_range_value_is_reported_at_the_value() {
    let err = parse("[limits]\nmax-relays = 0\n").expect_err("zero relays");
    assert_eq!(err.position, Some((2, 14)), "{err}");
    assert!(err.message.contains("max relays"), "{err}");
    let err = parse("[output]\ncommit-interval-ms = 0\n").expect_err("zero interval");
    assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
    let err = parse("[merge]\nqueue-bytes = 1048576\n").expect_err("1 MiB queue");
    assert_eq!(err.position, Some((2, 15)), "{err}");
    assert_eq!(
        err.message,
        "merge queue bytes must be in 8388608..=68719476736, got 1048576"
    );
    let err = parse("[log]\nlevel = \"loud\"\n").expect_err("bad level");
    assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
}

#[test]
fn frame_timeout_and_token_limits_are_checked() {
    use tracesync_protocol::relay::MAX_TOKEN_BYTES;
    assert_eq!(DaemonConfig::default().limits.frame_timeout_ms, 30_000);
    let config = parse("[limits]\nframe-timeout-ms = 2500\n").expect("config");
    assert_eq!(config.limits.frame_timeout_ms, 2500);
    let err = parse("[limits]\nframe-timeout-ms = 999\n").expect_err("too short");
    assert_eq!(err.position, Some((2, 20)), "{err}");
    assert!(err.message.contains("frame timeout"), "{err}");
    let at_limit = format!("[auth]\ntoken = \"{}\"\n", "t".repeat(MAX_TOKEN_BYTES));
    let config = parse(&at_limit).expect("a token at the limit");
    assert_eq!(
        config.auth.required_token().map(str::len),
        Some(MAX_TOKEN_BYTES)
    );
    let over = format!("[auth]\ntoken = \"{}\"\n", "t".repeat(MAX_TOKEN_BYTES + 1));
    let err = parse(&over).expect_err("a token over the limit");
    assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
    assert!(err.message.contains("1025 bytes"), "{err}");
    let long = "t".repeat(MAX_TOKEN_BYTES + 1);
    assert!(DaemonArgs::try_parse_from(["tracesyncd", "--token", &long]).is_err());
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("daemon.toml");
    std::fs::write(
        &file,
        "[listen]\ndata = \"127.0.0.1:1\"\n[limits]\nmax-relays = 5\n[merge]\nwindow-ms = 9\n",
    )
    .expect("write config");
    let args = DaemonArgs::try_parse_from([
        "tracesyncd",
        "--config",
        file.to_str().expect("utf-8 path"),
        "--listen",
        "127.0.0.1:0",
        "--max-relays",
        "7",
        "--output",
        "/tmp/o",
        "--token",
        "t",
        "--rotate-seconds",
        "60",
        "--tls",
        "off",
    ])
    .expect("args");
    let (config, used) = DaemonConfig::load(&args).expect("load");
    assert_eq!(used.as_deref(), Some(file.as_path()));
    assert_eq!(config.listen.data, "127.0.0.1:0".parse().unwrap());
    assert_eq!(config.limits.max_relays, 7);
    assert_eq!(config.output.dir, Path::new("/tmp/o"));
    assert_eq!(config.auth.required_token(), Some("t"));
    assert_eq!(config.output.rotate_seconds, 60);
    // Not overridden: the file's value.
    assert_eq!(config.merge.window_ms, 9);
}

#[test]
fn flags_are_range_checked_like_the_file() {
    assert!(DaemonArgs::try_parse_from(["tracesyncd", "--max-relays", "0"]).is_err());
    assert!(DaemonArgs::try_parse_from(["tracesyncd", "--merge-window-ms", "x"]).is_err());
    assert!(DaemonArgs::try_parse_from(["tracesyncd", "--listen", "nowhere"]).is_err());
}

#[test]
fn missing_config_file_names_the_file() {
    let args = DaemonArgs {
        config: Some("/nonexistent/tracesync/daemon.toml".into()),
        ..DaemonArgs::default()
    };
    let err = DaemonConfig::load(&args).expect_err("missing file");
    assert!(
        err.to_string()
            .starts_with("/nonexistent/tracesync/daemon.toml: cannot read"),
        "{err}"
    );
}

#[test]
fn tls_section_is_read_and_flags_override_it() {
    let config = parse(
        "[tls]\nmode = \"off\"\ncert = \"/x/d.crt\"\nkey = \"/x/d.key\"\nclient-ca = \"/x/ca.crt\"\n",
    )
    .expect("config");
    assert_eq!(config.tls.mode, crate::tls::TlsMode::Off);
    assert_eq!(config.tls.client_ca.get_ref(), Path::new("/x/ca.crt"));
    assert!(parse("[tls]\nmode = \"maybe\"\n").is_err());
    assert!(parse("[tls]\nca = \"/x\"\n").is_err(), "unknown key");
    let mut config = DaemonConfig::default();
    assert_eq!(
        config.tls.mode,
        crate::tls::TlsMode::Required,
        "TLS is the default"
    );
    let args = DaemonArgs::try_parse_from(["tracesyncd", "--tls", "off", "--tls-cert", "/y.crt"])
        .expect("args");
    config.apply_flags(&args);
    assert_eq!(config.tls.mode, crate::tls::TlsMode::Off);
    assert_eq!(config.tls.cert.get_ref(), Path::new("/y.crt"));
}

#[test]
fn unreadable_tls_files_point_at_their_key() {
    let text = "[tls]\ncert = \"/nonexistent/d.crt\"\nclient-ca = \"/nonexistent/ca.crt\"\n";
    let config = parse(text).expect("config");
    let err = config
        .check_tls(Some(Path::new("daemon.toml")), Some(text))
        .expect_err("missing files");
    // The CA is read first.
    assert!(
        err.to_string()
            .starts_with("daemon.toml:3:13: tls.client-ca: cannot read /nonexistent/ca.crt"),
        "{err}"
    );
    // Not in the file: no position, and a hint.
    let err = DaemonConfig::default()
        .check_tls(Some(Path::new("daemon.toml")), Some(""))
        .expect_err("defaults are absent here");
    assert!(err.position.is_none());
    assert!(err.message.contains("--tls off"), "{err}");
}

#[test]
fn sync_section_defaults_are_the_probers_and_values_are_read() {
    let config = parse("").expect("empty config");
    let prober = config.sync.prober_config();
    assert_eq!(prober, tracesync_core::sync::ProberConfig::default());
    assert_eq!(config.sync.sync_point_threshold_ns, 1_000);
    let config = parse(
        "[sync]\nburst-probes = 4\nburst-interval-ms = 5\nsteady-interval-ms = 500\n\
         min-interval-ms = 50\nmax-interval-ms = 1000\nwarmup-ms = 0\ntrain-length = 1\n\
         probe-timeout-ms = 800\nsync-point-threshold-ns = 250\n",
    )
    .expect("[sync]");
    let prober = config.sync.prober_config();
    assert_eq!(prober.burst_probes, 4);
    assert_eq!(prober.burst_interval_ns, 5_000_000);
    assert_eq!(prober.steady_interval_ns, 500_000_000);
    assert_eq!(prober.min_interval_ns, 50_000_000);
    assert_eq!(prober.max_interval_ns, 1_000_000_000);
    assert_eq!(prober.warmup_ns, 0);
    assert_eq!(prober.train_length, 1);
    assert_eq!(prober.probe_timeout_ns, 800_000_000);
    assert_eq!(config.sync.sync_point_threshold_ns, 250);
}

#[test]
fn sync_section_ranges_name_the_key() {
    let err = parse("[sync]\nmin-interval-ms = 5\n").expect_err("too fast");
    assert_eq!(err.position, Some((2, 19)), "{err}");
    assert_eq!(
        err.message,
        "[sync] min-interval-ms must be in 10..=60000, got 5"
    );
    let err = parse("[sync]\ntrain-length = 0\n").expect_err("no probes");
    assert_eq!(err.message, "[sync] train-length must be in 1..=8, got 0");
    let err = parse("[sync]\nmin-interval-ms = 300\n").expect_err("min above max");
    assert_eq!(err.position, None);
    assert_eq!(
        err.to_string(),
        "daemon.toml: [sync] min-interval-ms (300) must not exceed max-interval-ms (250)"
    );
    let err = parse("[sync]\nsteady-interval-ms = 1000\n").expect_err("steady above max");
    assert!(
        err.message.starts_with("[sync] steady-interval-ms (1000)"),
        "{err}"
    );
    let err = parse("[sync]\nrate = 4\n").expect_err("unknown key");
    assert!(err.message.starts_with("unknown field `rate`"), "{err}");
}

#[test]
fn a_crl_that_cannot_be_used_is_an_error_at_its_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = dir.path();
    crate::tls::pki::init(pki, &["localhost".into()]).expect("pki init");
    crate::tls::pki::issue(pki, "relay-a", None).expect("pki issue");
    crate::tls::pki::revoke(pki, "relay-a").expect("pki revoke");
    let other = tempfile::tempdir().expect("tempdir");
    crate::tls::pki::init(other.path(), &["localhost".into()]).expect("pki init");
    crate::tls::pki::issue(other.path(), "x", None).expect("pki issue");
    crate::tls::pki::revoke(other.path(), "x").expect("pki revoke");
    std::fs::write(
        pki.join("garbage.crl"),
        "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
    )
    .expect("write");
    let text = |crl: &Path| {
        format!(
            "[tls]\ncert = \"{}\"\nkey = \"{}\"\nclient-ca = \"{}\"\ncrl = \"{}\"\n",
            pki.join("daemon.crt").display(),
            pki.join("daemon.key").display(),
            pki.join("ca.crt").display(),
            crl.display()
        )
    };
    let file = Path::new("daemon.toml");

    // The lab CRL is fine; --check-config's check passes.
    let good = text(&pki.join("ca.crl"));
    let config = parse(&good).expect("config");
    assert_eq!(
        config.tls.crl.as_ref().map(|c| c.get_ref().clone()),
        Some(pki.join("ca.crl"))
    );
    config
        .check_tls(Some(file), Some(&good))
        .expect("the lab CRL loads");

    for (crl, want) in [
        (pki.join("missing.crl"), "cannot read"),
        (pki.join("garbage.crl"), "not a certificate revocation list"),
        (
            other.path().join("ca.crl"),
            "was not issued by a CA of [tls] client-ca",
        ),
    ] {
        let bad = text(&crl);
        let err = parse(&bad)
            .expect("config")
            .check_tls(Some(file), Some(&bad))
            .expect_err("a bad CRL");
        // Line 5, column 7: the value of `crl =`.
        assert!(
            err.to_string().starts_with("daemon.toml:5:7: tls.crl: "),
            "{err}"
        );
        assert!(err.message.contains(want), "{crl:?}: {err}");
        assert!(!err.to_string().contains('\n'));
    }

    // From the flag: the flag is named.
    let args = DaemonArgs::try_parse_from([
        "tracesyncd".as_ref(),
        "--tls-crl".as_ref(),
        pki.join("missing.crl").as_os_str(),
    ])
    .expect("args");
    let mut config = parse(&good).expect("config");
    config.apply_flags(&args);
    let err = config
        .check_tls(Some(file), Some(&good))
        .expect_err("missing CRL");
    assert!(
        err.to_string().starts_with("--tls-crl: cannot read "),
        "{err}"
    );
}

#[test]
fn the_idle_timeout_leaves_room_for_heartbeats() {
    assert_eq!(DaemonConfig::default().limits.idle_timeout_ms, 60_000);
    let config = parse("[limits]\nidle-timeout-ms = 5000\n").expect("config");
    assert_eq!(config.limits.idle_timeout_ms, 5000);
    // A relay heartbeats at least every 2 s: a limit near that is refused.
    let err = parse("[limits]\nidle-timeout-ms = 4999\n").expect_err("too short");
    assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
    assert!(err.message.contains("idle timeout"), "{err}");
    assert!(parse("[limits]\nidle-timeout-ms = 3600001\n").is_err());
}

#[test]
fn ingest_shards_come_from_the_file_or_the_flag_and_0_is_automatic() {
    assert_eq!(DaemonConfig::default().merge.ingest_shards, 1);
    let config = parse("[merge]\ningest-shards = 0\n").expect("automatic");
    assert_eq!(config.merge.shards(8), 7);
    assert_eq!(config.merge.shards(1), 1);
    let config = parse("[merge]\ningest-shards = 3\n").expect("three");
    assert_eq!(config.merge.shards(2), 3);
    let err = parse("[merge]\ningest-shards = 65\n").expect_err("too many");
    assert!(
        err.to_string()
            .contains("ingest shards (0 = automatic) must be in 0..=64, got 65"),
        "{err}"
    );
    let args = DaemonArgs::try_parse_from(["tracesyncd", "--ingest-shards", "2"]).expect("args");
    assert_eq!(args.ingest_shards, Some(2));
    assert!(DaemonArgs::try_parse_from(["tracesyncd", "--ingest-shards", "65"]).is_err());
}
