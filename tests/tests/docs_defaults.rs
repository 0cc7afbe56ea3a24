//! The defaults docs/format.md and the operations pages (docs/operations.md
//! and docs/operations-*.md) state are the ones the binaries use: every
//! statement "`KEY` (default VALUE)", "`KEY`, VALUE by default", "`KEY`
//! VALUE" and every row of a `| key | default |` table
//! that names a key of the shipped configs (configs/daemon.toml shows every
//! daemon option with its default, configs/relay.toml every relay option
//! commented with its default) must give that value. The flags the docs
//! and configs name must be in the binaries' `--help`, each naming the key
//! it overrides; and `--check-config` of the shipped configs with the TLS
//! files given passes (the configs are the defaults the binaries accept).

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::collections::BTreeMap;
use std::process::Command;

use tracesync_tests::live::bin;
use tracesync_tests::tp::repo_root;

/// One config key: its value as written, and the flag that overrides it.
#[derive(Debug, Clone)]
struct Key {
    value: String,
    flag: Option<String>,
    file: &'static str,
}

/// `section.key` -> value (commented `# key = value` lines count as the
/// default too), with `Flag: --x` of the comment just above.
fn config_keys(file: &'static str, keys: &mut BTreeMap<String, Key>) {
    let text = std::fs::read_to_string(repo_root().join("configs").join(file)).expect("config");
    let mut section = String::new();
    let mut flag: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            flag = None;
            continue;
        }
        let (commented, body) = match line.strip_prefix('#') {
            Some(rest) => (true, rest.trim()),
            None => (false, line),
        };
        if let Some(f) = body.split("Flag: ").nth(1) {
            flag = f
                .split([',', ' ', '.'])
                .next()
                .filter(|f| f.starts_with("--"))
                .map(str::to_owned);
            continue;
        }
        let Some((name, value)) = body.split_once(" = ") else {
            if !commented {
                flag = None;
            }
            continue;
        };
        let plain = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !plain || name.is_empty() {
            continue;
        }
        let key = if section.is_empty() {
            name.to_owned()
        } else {
            format!("{section}.{name}")
        };
        keys.entry(key).or_insert(Key {
            value: value.trim().trim_matches('"').to_owned(),
            flag: flag.take(),
            file,
        });
    }
}

/// A stated value in the unit of `key` (bytes, seconds, milliseconds, ns),
/// or the text itself for other keys.
fn normalize(key: &str, stated: &str) -> String {
    let stated = stated.trim().trim_matches('`').trim_matches('"');
    let mut parts = stated.split_whitespace();
    let number: Option<f64> = parts.next().and_then(|n| n.replace('_', "").parse().ok());
    let unit = parts.next().unwrap_or("");
    let Some(number) = number else {
        return stated.to_owned();
    };
    let factor = if key.ends_with("-bytes") {
        match unit {
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            _ => 1.0,
        }
    } else if key.ends_with("-seconds") {
        match unit {
            "min" | "minutes" => 60.0,
            "h" | "hour" | "hours" => 3600.0,
            "day" | "days" => 86_400.0,
            _ => 1.0,
        }
    } else if key.ends_with("-ms") {
        match unit {
            "s" => 1000.0,
            _ => 1.0,
        }
    } else if key.ends_with("-ns") {
        match unit {
            "µs" | "us" => 1000.0,
            "ms" => 1e6,
            _ => 1.0,
        }
    } else {
        1.0
    };
    format!("{}", (number * factor).round() as u64)
}

/// The config key a backticked name in the docs stands for, if any:
/// `--flag`, `section.key`, `[section] key`, or a key unique among the
/// sections.
fn resolve<'a>(name: &str, keys: &'a BTreeMap<String, Key>) -> Option<(&'a String, &'a Key)> {
    if let Some(flag) = name.strip_prefix("--") {
        let flag = format!("--{flag}");
        return keys.iter().find(|(_, k)| k.flag.as_deref() == Some(&flag));
    }
    let dotted = name.replace("] ", ".").replace('[', "");
    if let Some(found) = keys.get_key_value(&dotted) {
        return Some(found);
    }
    let mut suffix = keys
        .iter()
        .filter(|(k, _)| k.rsplit('.').next() == Some(name));
    match (suffix.next(), suffix.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// The pages of one topic of docs/: `TOPIC.md` and every `TOPIC-*.md`
/// (a page past ~600 lines is split into those), by file name.
fn topic_pages(topic: &str) -> Vec<String> {
    let main = format!("{topic}.md");
    let prefix = format!("{topic}-");
    let mut pages: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n == &main || (n.starts_with(&prefix) && n.ends_with(".md")))
        .collect();
    pages.sort();
    assert!(pages.contains(&main), "docs/{main} is missing: {pages:?}");
    pages
}

fn read_doc(doc: &str) -> String {
    std::fs::read_to_string(repo_root().join("docs").join(doc))
        .unwrap_or_else(|e| panic!("docs/{doc}: {e}"))
}

/// Every default a doc states for a config key: (key, stated, where).
fn stated_defaults(doc: &str, keys: &BTreeMap<String, Key>) -> Vec<(String, String, String)> {
    let text = read_doc(doc);
    let mut found = Vec::new();
    // Tables whose columns start `| key | default |`: each row's first two.
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| key | default |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells.get(1).map_or("", |c| c.trim_matches('`'));
        if let (Some((key, _)), Some(value)) = (resolve(name, keys), cells.get(2)) {
            found.push((
                key.clone(),
                (*value).to_owned(),
                format!("{doc}: table row `{name}`"),
            ));
        }
    }
    // Statements may break across lines.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut rest = flat.as_str();
    while let Some(start) = rest.find('`') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('`') else { break };
        let name = &after[..end];
        let tail = &after[end + 1..];
        rest = tail;
        let Some((key, _)) = resolve(name, keys) else {
            continue;
        };
        let value = if let Some(v) = tail
            .strip_prefix(" (default ")
            .or_else(|| tail.strip_prefix(" old (default "))
        {
            v.split([')', ';', ',']).next()
        } else if let Some(v) = tail.strip_prefix(", default ") {
            v.split([')', ';', ',']).next()
        } else if let Some(v) = tail.strip_prefix(", ") {
            v.split(" by default").next().filter(|_| {
                v.contains(" by default")
                    && v.find(" by default").unwrap_or(usize::MAX) < 20
                    && v.starts_with(|c: char| c.is_ascii_digit())
            })
        } else if let Some(v) = tail.strip_prefix(' ') {
            // "(`rotate-seconds` 1 h)": a number right after the name.
            v.split([')', ',', ';'])
                .next()
                .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()) && v.len() < 12)
        } else {
            None
        };
        if let Some(value) = value {
            let at: String = name.chars().take(40).collect();
            found.push((
                key.clone(),
                value.trim().to_owned(),
                format!("{doc}: `{at}`"),
            ));
        }
    }
    found
}

#[test]
fn the_defaults_in_the_docs_are_the_shipped_ones() {
    let mut keys = BTreeMap::new();
    config_keys("daemon.toml", &mut keys);
    let mut relay_keys = BTreeMap::new();
    config_keys("relay.toml", &mut relay_keys);
    assert!(keys.len() > 30, "{keys:?}");
    let mut checked = 0;
    let mut wrong = Vec::new();
    let mut docs = vec![("format.md".to_owned(), &keys)];
    for page in topic_pages("operations") {
        docs.push((page.clone(), &keys));
        docs.push((page, &relay_keys));
    }
    for (doc, keys) in docs {
        for (key, stated, at) in stated_defaults(&doc, keys) {
            let shipped = &keys[&key];
            let want = normalize(&key, &shipped.value);
            let got = normalize(&key, &stated);
            checked += 1;
            if got != want {
                wrong.push(format!(
                    "{at} says {key} defaults to {stated:?}, configs/{} has {:?}",
                    shipped.file, shipped.value
                ));
            }
        }
    }
    eprintln!("docs-defaults: {checked} stated defaults checked against configs/*.toml");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The statements this test exists for are among them.
    assert!(checked >= 15, "only {checked} statements found");
}

#[test]
fn every_flag_the_configs_and_docs_name_is_in_help() {
    let help = |binary: &str, args: &[&str]| {
        let out = Command::new(bin(binary))
            .args(args)
            .arg("--help")
            .output()
            .expect("--help");
        assert!(out.status.success(), "{binary} {args:?} --help");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let daemon_help = help("tracesyncd", &[]);
    let relay_help = help("tracesync-relay", &[]);
    let mut keys = BTreeMap::new();
    config_keys("daemon.toml", &mut keys);
    let mut flags = 0;
    for (key, k) in &keys {
        let Some(flag) = &k.flag else { continue };
        flags += 1;
        let at = daemon_help
            .find(&format!("{flag} "))
            .unwrap_or_else(|| panic!("configs/daemon.toml names {flag}, not in --help"));
        // The flag's help names the key it overrides, as operations.md says.
        let entry = &daemon_help[at..daemon_help[at..]
            .find("\n\n")
            .map_or(daemon_help.len(), |e| at + e)];
        assert!(
            entry.contains(&format!("[{key}]")),
            "{flag}'s help does not name [{key}]: {entry}"
        );
    }
    assert!(flags >= 10, "{flags} flags");
    let mut relay_keys = BTreeMap::new();
    config_keys("relay.toml", &mut relay_keys);
    for key in relay_keys.keys().filter(|k| !k.contains('.')) {
        // A relay flag of the same name overrides each top-level key.
        if ["token", "sources"].contains(&key.as_str()) {
            continue;
        }
        assert!(
            relay_help.contains(&format!("--{key} ")) || relay_help.contains(&format!("--{key}\n")),
            "configs/relay.toml key {key} has no --{key} in tracesync-relay --help"
        );
    }
    // tracesync's own defaults: the control socket, as operations-cli.md says.
    let status_help = help("tracesync", &["status"]);
    let control = "/run/tracesync/control.sock";
    assert!(
        status_help.contains(&format!("[default: {control}]")),
        "{status_help}"
    );
    let cli = read_doc("operations-cli.md");
    assert!(
        cli.contains(&format!("over the control socket (default\n`{control}`)")),
        "operations-cli.md names another default control socket"
    );
    // The operations pages together.
    let ops = topic_pages("operations")
        .iter()
        .map(|page| read_doc(page))
        .collect::<Vec<_>>()
        .join("\n");
    // Flags the docs show for the commands of this round exist.
    for (binary, args, flag, in_docs) in [
        (
            "tracesync",
            vec!["status"],
            "-v, --verbose",
            "tracesync status [--connect SOCKET|HOST:PORT] [--json] [-v]",
        ),
        (
            "tracesync",
            vec!["completions"],
            "<SHELL>",
            "tracesync completions SHELL",
        ),
        (
            "tracesync",
            vec!["pki", "init"],
            "--group <GROUP>",
            "--group GROUP",
        ),
        (
            "tracesync-relay",
            vec![],
            "--give-up-after-seconds",
            "--give-up-after-seconds",
        ),
        (
            "tracesync-relay",
            vec![],
            "--keep-retrying",
            "--keep-retrying",
        ),
        (
            "tracesyncd",
            vec![],
            "--check-user <USER>",
            "--check-user USER",
        ),
    ] {
        let text = help(binary, &args);
        assert!(text.contains(flag), "{binary} {args:?} --help lacks {flag}");
        assert!(
            ops.contains(in_docs),
            "the operations pages lack {in_docs:?}"
        );
    }
}

/// Every `section.key` the docs name (for a section of the daemon's
/// config) is a key of configs/daemon.toml (operations.md once said
/// `listen.metrics` for `[metrics] listen`): format.md and the operations
/// and reliability pages.
#[test]
fn every_dotted_key_in_the_docs_exists() {
    let mut keys = BTreeMap::new();
    config_keys("daemon.toml", &mut keys);
    let text = std::fs::read_to_string(repo_root().join("configs/daemon.toml")).expect("config");
    let sections: Vec<String> = text
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix('[')?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    // Keys shown commented out (no default value) count too.
    let commented: Vec<String> = text
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("# ")?
                .split_once(" = ")
                .map(|(k, _)| k.to_owned())
        })
        .collect();
    let mut unknown = Vec::new();
    // The status report's `output` object shares the prefix.
    let status_fields = [
        "output.vanished",
        "output.failing",
        "output.errors",
        "output.episodes",
    ];
    let mut docs = vec!["format.md".to_owned()];
    docs.extend(topic_pages("operations"));
    docs.extend(topic_pages("reliability"));
    for doc in &docs {
        let doc_text = read_doc(doc);
        for token in doc_text.split('`').skip(1).step_by(2) {
            let Some((section, key)) = token.split_once('.') else {
                continue;
            };
            let shaped = !key.is_empty()
                && key.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                && sections.iter().any(|s| s == section);
            if shaped
                && !keys.contains_key(token)
                && !commented.iter().any(|c| c == key)
                && !status_fields.contains(&token)
            {
                unknown.push(format!("{doc}: `{token}`"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "not keys of configs/daemon.toml:\n{}",
        unknown.join("\n")
    );
}
