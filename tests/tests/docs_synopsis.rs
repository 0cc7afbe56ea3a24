//! The command-line docs say what the binary parses. Each check here once
//! caught a drift a user ran into:
//!
//! - docs/operations-cli.md's synopsis names every `tracesync` command and
//!   exactly the flags `--help` gives it, each with its value as `--help`
//!   names it (`--connect SOCKET|HOST:PORT`) or its possible values
//!   (`--format perfetto|jsonl`): the merge synopsis once lacked
//!   `--since`/`--until`;
//! - every flag a docs or README example gives a `tracesync` command exists;
//! - the clock-edge origins the docs list are the spellings `tracesync
//!   clocks` prints (it once printed `samedomain` for `same-domain`);
//! - every page the man page refers to, `tracesync man --dir` writes.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use clap::CommandFactory;
use tracesync_cli::args::Cli;
use tracesync_core::clock::EdgeOrigin;
use tracesync_tests::live::bin;
use tracesync_tests::tp::repo_root;

/// A flag as clap defines it: its long name, short letter and the value
/// the docs must show (`VALUE`, or `a|b|c` for an enum), if it takes one.
#[derive(Debug)]
struct Flag {
    short: Option<char>,
    value: Option<String>,
}

/// Every leaf command ("merge", "pki init", ...) with its flags.
fn commands() -> BTreeMap<String, BTreeMap<String, Flag>> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut BTreeMap<String, BTreeMap<String, Flag>>) {
        let subs: Vec<_> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help" && !s.is_hide_set())
            .collect();
        if subs.is_empty() && !path.is_empty() {
            let flags = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set() && !a.is_positional())
                .filter_map(|a| {
                    let long = a.get_long()?.to_owned();
                    if long == "help" || long == "version" {
                        return None;
                    }
                    let takes_value = a.get_action().takes_values();
                    let values: Vec<String> = a
                        .get_possible_values()
                        .iter()
                        .filter(|v| !v.is_hide_set())
                        .map(|v| v.get_name().to_owned())
                        .collect();
                    let value = takes_value.then(|| {
                        if values.is_empty() {
                            a.get_value_names()
                                .map(|n| {
                                    n.iter()
                                        .map(ToString::to_string)
                                        .collect::<Vec<_>>()
                                        .join(" ")
                                })
                                .unwrap_or_else(|| long.to_uppercase())
                        } else {
                            values.join("|")
                        }
                    });
                    Some((
                        long,
                        Flag {
                            short: a.get_short(),
                            value,
                        },
                    ))
                })
                .collect();
            out.insert(path.to_owned(), flags);
        }
        for sub in subs {
            let path = if path.is_empty() {
                sub.get_name().to_owned()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &path, out);
        }
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = BTreeMap::new();
    walk(&cmd, "", &mut out);
    out
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The lines of every fenced code block of `text`.
fn code_lines(text: &str) -> Vec<&str> {
    let mut inside = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if inside {
            lines.push(line);
        }
    }
    lines
}

/// The command a line runs (`tracesync pki init ...` -> "pki init") and
/// the words after it, if it runs a known one.
fn invocation<'a>(
    line: &'a str,
    known: &BTreeMap<String, BTreeMap<String, Flag>>,
) -> Option<(String, Vec<&'a str>)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let start = words
        .iter()
        .position(|w| *w == "tracesync" || w.ends_with("/tracesync"))?;
    let rest = &words[start + 1..];
    for take in [2, 1] {
        if rest.len() >= take {
            let name = rest[..take].join(" ");
            if known.contains_key(&name) {
                return Some((name, rest[take..].to_vec()));
            }
        }
    }
    None
}

/// `--flag VALUE` / `-f VALUE` pairs of a synopsis entry's words.
fn synopsis_flags(words: &[&str]) -> Vec<(String, Option<String>)> {
    let clean = |w: &str| {
        w.trim_start_matches(['[', '('])
            .trim_end_matches(['.', ']', ')'])
            .to_owned()
    };
    let mut flags = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = clean(words[i]);
        if w.starts_with('-') && w.len() > 1 && w != "-" {
            let closes = words[i].ends_with(']') || words[i].ends_with(')');
            let value = words
                .get(i + 1)
                .filter(|next| !closes && !next.starts_with(['[', '(', '-']) && **next != "|")
                .map(|next| clean(next));
            if value.is_some() {
                i += 1;
            }
            flags.push((w, value));
        }
        i += 1;
    }
    flags
}

#[test]
fn the_synopsis_gives_every_command_and_flag_as_help_does() {
    let known = commands();
    assert!(known.len() >= 13, "{:?}", known.keys());
    let doc = read("docs/operations-cli.md");
    let block = doc
        .split("## Synopsis")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("docs/operations-cli.md has a ## Synopsis with a code block");
    // Entries: a line naming a command, with its indented continuations.
    let mut entries: Vec<String> = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        match entries.last_mut() {
            Some(last) if line.starts_with(' ') => last.push_str(line),
            _ => entries.push(line.to_owned()),
        }
    }
    let mut seen = BTreeSet::new();
    let mut drifts = Vec::new();
    for entry in &entries {
        let Some((name, words)) = invocation(entry, &known) else {
            drifts.push(format!("not a tracesync command: {entry}"));
            continue;
        };
        seen.insert(name.clone());
        let flags = &known[&name];
        let mut documented = BTreeSet::new();
        for (spelled, value) in synopsis_flags(&words) {
            let long = match spelled.strip_prefix("--") {
                Some(long) => long.to_owned(),
                None => match flags
                    .iter()
                    .find(|(_, f)| f.short.map(|c| format!("-{c}")) == Some(spelled.clone()))
                {
                    Some((long, _)) => long.clone(),
                    None => {
                        drifts.push(format!("{name}: {spelled} is not a flag of --help"));
                        continue;
                    }
                },
            };
            let Some(flag) = flags.get(&long) else {
                drifts.push(format!("{name}: --{long} is not in --help"));
                continue;
            };
            if value != flag.value {
                drifts.push(format!(
                    "{name}: --{long} shows {value:?}, --help gives {:?}",
                    flag.value
                ));
            }
            documented.insert(long);
        }
        for long in flags.keys().filter(|l| !documented.contains(*l)) {
            drifts.push(format!("{name}: --{long} of --help is not in the synopsis"));
        }
    }
    for name in known.keys().filter(|n| !seen.contains(*n)) {
        drifts.push(format!("tracesync {name} has no synopsis"));
    }
    assert!(
        drifts.is_empty(),
        "docs/operations-cli.md ## Synopsis:\n{}",
        drifts.join("\n")
    );
}

#[test]
fn every_flag_an_example_gives_tracesync_exists() {
    let known = commands();
    let mut pages = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(repo_root().join("docs")).expect("docs/") {
        let name = entry
            .expect("docs/ entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    let mut checked = 0;
    let mut drifts = Vec::new();
    for page in &pages {
        let text = read(page);
        for line in code_lines(&text) {
            let Some((name, words)) = invocation(line, &known) else {
                continue;
            };
            for word in words
                .iter()
                .take_while(|w| !["|", ">", "&&", "&", ";", "#"].contains(w))
            {
                let flag = word
                    .trim_start_matches(['[', '('])
                    .split('=')
                    .next()
                    .unwrap_or_default();
                let flag = flag.trim_end_matches([']', ')', '.', ',']);
                let Some(long) = flag.strip_prefix("--") else {
                    continue;
                };
                checked += 1;
                if !known[&name].contains_key(long) {
                    drifts.push(format!("{page}: tracesync {name} has no --{long}: {line}"));
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} example flags found");
    assert!(drifts.is_empty(), "{}", drifts.join("\n"));
}

#[test]
fn the_documented_clock_origins_are_the_printed_ones() {
    let printed: Vec<&str> = EdgeOrigin::ALL.iter().map(|o| o.name()).collect();
    let doc = read("docs/operations-cli.md");
    let listed = doc
        .split("with its origin (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("operations-cli.md lists the origins: 'with its origin (a, b, ...)'");
    let listed: Vec<String> = listed
        .split(',')
        .map(|w| w.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        listed, printed,
        "docs/operations-cli.md vs tracesync clocks"
    );
    // And the binary prints those names: a recorded two-machine merge has a
    // snapshot and a rendezvous edge at least.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(bin("tracesync"))
        .args(["demo", "--offline", "--out"])
        .arg(dir.path())
        .output()
        .expect("demo --offline");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let traces: Vec<_> = std::fs::read_dir(dir.path().join("inputs"))
        .expect("demo out")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "pftrace") && !p.to_string_lossy().contains("merged")
        })
        .collect();
    assert!(
        !traces.is_empty(),
        "no recorded traces in the offline demo's output"
    );
    let out = Command::new(bin("tracesync"))
        .arg("clocks")
        .args(&traces)
        .output()
        .expect("clocks");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let origins: BTreeSet<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').nth(1))
        .collect();
    assert!(!origins.is_empty(), "{text}");
    for origin in origins {
        assert!(
            printed.contains(&origin),
            "tracesync clocks printed {origin:?}, not documented"
        );
    }
}

#[test]
fn every_page_the_man_page_names_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(bin("tracesync"))
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("tracesync man --dir");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: BTreeSet<String> = std::fs::read_dir(dir.path())
        .expect("man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        written.contains("tracesync.1") && written.contains("tracesync-pki-init.1"),
        "{written:?}"
    );
    // What the printed page (as installed) and every written page refer to.
    let stdout = Command::new(bin("tracesync"))
        .arg("man")
        .output()
        .expect("tracesync man");
    let mut pages = vec![String::from_utf8_lossy(&stdout.stdout).into_owned()];
    for name in &written {
        pages.push(std::fs::read_to_string(dir.path().join(name)).expect("page"));
    }
    let mut refs = BTreeSet::new();
    for page in &pages {
        for (at, _) in page.match_indices("(1)") {
            let start = page[..at]
                .rfind(|c: char| c.is_whitespace())
                .map_or(0, |s| s + 1);
            let name = page[start..at].replace("\\-", "-");
            if name.starts_with("tracesync") {
                refs.insert(name);
            }
        }
    }
    assert!(refs.contains("tracesync-merge"), "{refs:?}");
    let missing: Vec<_> = refs
        .iter()
        .filter(|r| !written.contains(&format!("{r}.1")))
        .collect();
    assert!(
        missing.is_empty(),
        "pages referred to but not written: {missing:?}"
    );
    // `tracesync --help` names the command that makes them.
    let help = Command::new(bin("tracesync"))
        .arg("--help")
        .output()
        .expect("--help");
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("\n  man "),
        "tracesync --help lacks man"
    );
}
