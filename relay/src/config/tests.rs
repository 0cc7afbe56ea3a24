//! Tests of the relay configuration: file, flags, errors, shipped file.

use super::*;
use crate::tls::TlsMode;

fn parse(text: &str) -> Result<RelayConfig, ConfigError> {
    RelayConfig::from_parts(Some(Path::new("relay.toml")), Some(text), &Flags::default())
}

#[test]
fn defaults_without_a_file() {
    let config = RelayConfig::from_parts(None, None, &Flags::default()).unwrap();
    assert_eq!(config.host, "127.0.0.1:7410");
    assert_eq!(config.when_full, WhenFull::Block);
    assert_eq!(config.linger, Duration::from_millis(20));
    assert_eq!(config.window_bytes, DEFAULT_WINDOW_BYTES);
    assert_eq!(config.clock, ClockChoice::System);
    assert!(config.sources.is_empty());
}

#[test]
fn unknown_key_names_line_and_column() {
    let err = parse("host = \"10.0.0.1:7410\"\n\nbogus-key = 3\n").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("relay.toml:3:1: "), "{text}");
    assert!(text.contains("bogus-key"), "{text}");
}

#[test]
fn wrong_type_names_line_and_column() {
    let err = parse("spool-disk-bytes = \"lots\"\n").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("relay.toml:1:20: "), "{text}");
}

#[test]
fn bad_values_point_at_the_value() {
    let err = parse("when-full = \"explode\"\n").unwrap_err().to_string();
    assert!(err.starts_with("relay.toml:1:13: "), "{err}");
    let err = parse("\nhost = \"a:b:c\"\n").unwrap_err().to_string();
    assert!(err.starts_with("relay.toml:2:8: "), "{err}");
    let err = parse("sources = [\"stdin\", \"tcp:x\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("relay.toml:1:21: "), "{err}");
    let err = parse("spool-memory-bytes = 10\n").unwrap_err().to_string();
    assert!(err.starts_with("relay.toml:1:22: "), "{err}");
    let err = parse("window-bytes = 4096\n").unwrap_err().to_string();
    assert!(err.starts_with("relay.toml:1:16: "), "{err}");
    assert_eq!(
        parse("window-bytes = 1048576\n").unwrap().window_bytes,
        1 << 20
    );
}

#[test]
fn sync_section_picks_the_probe_transport() {
    use crate::probe::SyncTransport;
    assert_eq!(parse("").unwrap().sync.transport, SyncTransport::Auto);
    assert!(parse("").unwrap().sync.kernel_rx_timestamps);
    let config = parse("[sync]\nkernel-rx-timestamps = false\n").unwrap();
    assert!(!config.sync.kernel_rx_timestamps);
    let config = parse("[sync]\ntransport = \"tcp\"\n").unwrap();
    assert_eq!(config.sync.transport, SyncTransport::Tcp);
    let flags = Flags {
        sync_transport: Some(SyncTransport::Udp),
        ..Flags::default()
    };
    let config = RelayConfig::from_parts(None, Some("[sync]\ntransport = \"tcp\"\n"), &flags);
    assert_eq!(config.unwrap().sync.transport, SyncTransport::Udp);
    let err = parse("[sync]\ntransport = \"quic\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("relay.toml:2:13: "), "{err}");
    let err = parse("[sync]\nrate = 4\n").unwrap_err().to_string();
    assert!(err.starts_with("relay.toml:2:1: "), "{err}");
}

#[test]
fn flags_override_the_file() {
    let flags = Flags {
        host: Some("daemon.lan".into()),
        sources: vec!["synthetic:1000".into()],
        when_full: Some(WhenFull::DropOldest),
        clock_offset_ns: Some(-5),
        ..Flags::default()
    };
    let text = "host = \"10.0.0.1:1\"\nsources = [\"stdin\"]\nwhen-full = \"block\"\nclock-drift-ppm = 12.5\ntoken = \"t\"\n";
    let config = RelayConfig::from_parts(None, Some(text), &flags).unwrap();
    assert_eq!(config.host, "daemon.lan:7410");
    assert_eq!(config.sources, ["synthetic:1000"]);
    assert_eq!(config.when_full, WhenFull::DropOldest);
    assert_eq!(config.token, "t");
    assert_eq!(
        config.clock,
        ClockChoice::Simulated {
            offset_ns: -5,
            drift_ppm: 12.5
        }
    );
}

#[test]
fn flag_errors_name_the_flag() {
    let flags = Flags {
        spool_disk_bytes: Some(1),
        ..Flags::default()
    };
    let err = RelayConfig::from_parts(None, None, &flags).unwrap_err();
    assert!(err.to_string().starts_with("--spool-disk-bytes: "), "{err}");
}

#[test]
fn names_and_tokens_longer_than_a_daemon_takes_are_config_errors() {
    use tracesync_protocol::relay::{MAX_MACHINE_NAME_BYTES, MAX_TOKEN_BYTES};
    let at_limit = Flags {
        name: Some("n".repeat(MAX_MACHINE_NAME_BYTES)),
        token: Some("t".repeat(MAX_TOKEN_BYTES)),
        ..Flags::default()
    };
    let config = RelayConfig::from_parts(None, None, &at_limit).unwrap();
    assert_eq!(config.token.len(), MAX_TOKEN_BYTES);
    let long_token = Flags {
        token: Some("t".repeat(MAX_TOKEN_BYTES + 1)),
        ..Flags::default()
    };
    let err = RelayConfig::from_parts(None, None, &long_token).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--token: token of 1025 bytes is over the 1024-byte limit"),
        "{err}"
    );
    let text = format!("token = \"{}\"\n", "t".repeat(MAX_TOKEN_BYTES + 1));
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.starts_with("relay.toml: token of 1025 bytes"), "{err}");
    let long_name = Flags {
        name: Some("n".repeat(MAX_MACHINE_NAME_BYTES + 1)),
        ..Flags::default()
    };
    let err = RelayConfig::from_parts(None, None, &long_name).unwrap_err();
    assert!(err.to_string().starts_with("--name: "), "{err}");
}

#[test]
fn tls_files_are_checked_at_their_key() {
    let text = "host = \"127.0.0.1:7410\"\n\n[tls]\nca = \"/nonexistent/ca.crt\"\n";
    let config = parse(text).unwrap();
    assert_eq!(config.tls.mode, TlsMode::Required, "TLS is the default");
    let err = config.check_tls(Some(text)).unwrap_err().to_string();
    assert!(
        err.starts_with("relay.toml:4:6: tls.ca: cannot read /nonexistent/ca.crt"),
        "{err}"
    );
    let flags = Flags {
        tls_ca: Some("/nonexistent/flag-ca.crt".into()),
        ..Flags::default()
    };
    let config = RelayConfig::from_parts(None, None, &flags).unwrap();
    let err = config.check_tls(None).unwrap_err().to_string();
    assert!(err.starts_with("--tls-ca: "), "{err}");
    let off = parse("[tls]\nmode = \"off\"\n").unwrap();
    off.check_tls(None).unwrap();
    assert!(parse("[tls]\nbogus = 1\n").is_err());
}

#[test]
fn shipped_config_is_valid() {
    let text = include_str!("../../../configs/relay.toml");
    parse(text).unwrap();
}
