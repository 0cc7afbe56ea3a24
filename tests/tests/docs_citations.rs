//! The project's docs stand alone: README.md, every docs/*.md and every
//! bench/**/*.md cite only files the repository has, and none names the
//! private design brief the project grew from.
//!
//! A citation is a markdown link to a relative path, or a path-like token
//! (in backticks or plain text, code blocks included) that starts with a
//! top-level directory of the repository (`core/...`, `docs/...`) or ends
//! in `.md`. Globs (`*`), placeholders (`<file>`, all-caps segments such as
//! `DIR` or `FILE`) and URLs are not citations; `:line` and `#anchor`
//! suffixes are dropped before the path is looked up. A link or a `.md`
//! name is looked up beside its page (and, for a bare page name, in docs/
//! and the repository root too); a top-level path from the root.
//!
//! The set of pages is one too: README.md's "Documentation" table links
//! every page of docs/, the opening table of docs/architecture.md (the
//! map) every other one, and every page says in its first lines whom it
//! is for.

use std::path::{Path, PathBuf};

use tracesync_tests::tp::repo_root;

/// The top-level directories a cited path may start with.
const TOP_DIRS: &[&str] = &[
    "protocol", "common", "core", "capture", "daemon", "cli", "relay", "sim", "tests", "vm-guest",
    "scripts", "configs", "systemd", "docs", "bench", "tools", ".ci",
];

/// All-caps names that are real files, not placeholders.
const CAPS_FILES: &[&str] = &["README", "CHANGELOG", "HISTORY", "LICENSE"];

/// Characters that end a path-like token in running text.
fn is_separator(c: char) -> bool {
    c.is_whitespace() || "`()[],;\"'|=&".contains(c)
}

/// One citation: the 1-based line, the path as cited (suffixes dropped),
/// and whether it is a link (looked up beside its page only).
#[derive(Debug, PartialEq)]
struct Citation {
    line: usize,
    path: String,
    link: bool,
}

/// The path a token cites, if it is a citation at all.
fn cited_path(token: &str) -> Option<String> {
    let token = token.trim_start_matches(['*', '_']);
    if token.contains("://") || token.starts_with("mailto:") {
        return None;
    }
    let top = TOP_DIRS
        .iter()
        .any(|dir| token.strip_prefix(dir).is_some_and(|r| r.starts_with('/')));
    // `path:line`, `path:line:column`, `path#anchor`.
    let path = token.split('#').next().unwrap_or("");
    let path = if top {
        path.split(':').next().unwrap_or("")
    } else {
        path
    };
    let path = path.trim_end_matches(['.', ':', '*', '!', '?', '_']);
    if !(top || path.ends_with(".md")) || is_placeholder(path) {
        return None;
    }
    Some(path.to_owned())
}

/// A glob or a placeholder such as `<file>.sync.jsonl`, `DIR/out` or
/// `docs/TOPIC.md`: not the name of one file.
fn is_placeholder(path: &str) -> bool {
    if path.contains(['*', '<', '>', '{', '}', '$', '~']) || path.contains("...") {
        return true;
    }
    path.split('/').any(|segment| {
        let stem = segment.split('.').next().unwrap_or("");
        !stem.is_empty()
            && stem
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && stem.chars().any(|c| c.is_ascii_uppercase())
            && !CAPS_FILES.contains(&stem)
    })
}

/// The targets of the markdown links on one line: `[text](target "title")`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        rest = &after[end..];
        if target.is_empty()
            || target.starts_with('#')
            || target.contains("://")
            || target.starts_with("mailto:")
        {
            continue;
        }
        let path = target.split('#').next().unwrap_or("");
        if !is_placeholder(path) {
            targets.push(path.to_owned());
        }
    }
    targets
}

/// Every citation in a page's text.
fn citations(text: &str) -> Vec<Citation> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        for path in link_targets(line) {
            found.push(Citation {
                line: line_no,
                path,
                link: true,
            });
        }
        for token in line.split(is_separator) {
            // A link's target is a token too: it is checked once, as a link.
            if let Some(path) = cited_path(token)
                && !found.iter().any(|c| c.line == line_no && c.path == path)
            {
                found.push(Citation {
                    line: line_no,
                    path,
                    link: false,
                });
            }
        }
    }
    found
}

/// Whether a citation on the page at `page` (relative to `root`) names
/// something the repository has.
fn exists(root: &Path, page: &Path, citation: &Citation) -> bool {
    let beside = root.join(page).parent().map(|dir| dir.join(&citation.path));
    if citation.link {
        return beside.is_some_and(|p| p.exists());
    }
    let top = TOP_DIRS.iter().any(|dir| {
        citation
            .path
            .strip_prefix(dir)
            .is_some_and(|r| r.starts_with('/'))
    });
    if top {
        return root.join(&citation.path).exists();
    }
    let bare = !citation.path.contains('/');
    beside.is_some_and(|p| p.exists())
        || (bare && root.join("docs").join(&citation.path).exists())
        || (bare && root.join(&citation.path).exists())
}

/// README.md, docs/*.md and bench/**/*.md, relative to the root.
fn pages(root: &Path) -> Vec<PathBuf> {
    fn markdown_under(root: &Path, dir: &Path, deep: bool, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            return;
        };
        for entry in entries.flatten() {
            let rel = dir.join(entry.file_name());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if deep {
                    markdown_under(root, &rel, deep, out);
                }
            } else if rel.extension().is_some_and(|e| e == "md") {
                out.push(rel);
            }
        }
    }
    let mut pages = vec![PathBuf::from("README.md")];
    markdown_under(root, Path::new("docs"), false, &mut pages);
    markdown_under(root, Path::new("bench"), true, &mut pages);
    pages.sort();
    pages
}

/// The private brief's name, spelled in pieces so that this file does not
/// cite it either.
fn brief_name() -> String {
    ["DES", "IGN", ".md"].concat()
}

/// Every problem of one page: `page:line: path` per dangling citation, and
/// `page:line: <the brief's name>` per mention of the brief.
fn problems(root: &Path, page: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let brief = brief_name().to_lowercase();
    for (index, line) in text.lines().enumerate() {
        if line.to_lowercase().contains(&brief) {
            found.push(format!(
                "{}:{}: {} (the private brief)",
                page.display(),
                index + 1,
                brief_name()
            ));
        }
    }
    for citation in citations(text) {
        if !exists(root, page, &citation) {
            found.push(format!(
                "{}:{}: {}",
                page.display(),
                citation.line,
                citation.path
            ));
        }
    }
    found
}

#[test]
fn every_citation_in_the_docs_names_a_file_of_the_repository() {
    let root = repo_root();
    let pages = pages(&root);
    assert!(
        pages.iter().filter(|p| p.starts_with("docs")).count() >= 5,
        "docs/ pages not found under {}: {pages:?}",
        root.display()
    );
    let mut dangling = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(root.join(page))
            .unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        checked += citations(&text).len();
        dangling.extend(problems(&root, page, &text));
    }
    eprintln!(
        "docs-citations: {} pages, {checked} citations checked",
        pages.len()
    );
    assert!(
        dangling.is_empty(),
        "{} dangling citations (page:line: path):\n{}",
        dangling.len(),
        dangling.join("\n")
    );
    assert!(checked > 100, "only {checked} citations found");
}

/// The docs pages a markdown table links to: the targets of links in rows
/// (lines starting `|`) of the section under `heading` (to the next
/// heading of that level or higher), by file name.
fn pages_in_table(text: &str, heading: Option<&str>) -> Vec<String> {
    let mut inside = heading.is_none();
    let mut pages = Vec::new();
    for line in text.lines() {
        if let Some(h) = heading {
            if line.starts_with('#') {
                inside = line.trim_start_matches('#').trim() == h;
                continue;
            }
        } else if line.starts_with("## ") {
            // Without a heading: the page's opening, up to its first section.
            break;
        }
        if inside && line.starts_with('|') {
            pages.extend(link_targets(line).into_iter().filter_map(|t| {
                Path::new(&t)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            }));
        }
    }
    pages.sort();
    pages.dedup();
    pages
}

#[test]
fn every_docs_page_is_in_the_readme_and_the_map_and_says_whom_it_is_for() {
    let root = repo_root();
    let mut docs: Vec<String> = pages(&root)
        .iter()
        .filter(|p| p.starts_with("docs"))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    docs.sort();
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let readme = pages_in_table(&read("README.md"), Some("Documentation"));
    assert_eq!(
        readme, docs,
        "README.md's \"Documentation\" table must link every page of docs/, and only those"
    );
    // The map links every other page.
    let others: Vec<String> = docs
        .iter()
        .filter(|p| *p != "architecture.md")
        .cloned()
        .collect();
    let map = pages_in_table(&read("docs/architecture.md"), None);
    assert_eq!(
        map, others,
        "docs/architecture.md's opening table must link every other page of docs/, and only those"
    );
    let unsaid: Vec<&String> = docs
        .iter()
        .filter(|page| {
            let text = read(&format!("docs/{page}"));
            !text
                .lines()
                .take(6)
                .any(|l| l.contains("**For ") || l.contains("for contributors"))
        })
        .collect();
    assert!(
        unsaid.is_empty(),
        "pages that do not say whom they are for in their first lines: {unsaid:?}"
    );
}

#[test]
fn the_parser_finds_links_paths_and_page_names_and_skips_the_rest() {
    let text = "\
See [the map](architecture.md#crates) and `core/src/live/mod.rs:91`.
Plain core/src/nowhere.rs, then docs/format.md's \"Machines\".
Skipped: `docs/operations-*.md`, `<file>.sync.jsonl`, DIR/out, docs/TOPIC.md,
https://perfetto.dev/docs/concepts/clock-sync.md and relay<->daemon.
A page name: clock-sync.md, and a nested one: reference/notes.md.
";
    let found: Vec<(usize, String, bool)> = citations(text)
        .into_iter()
        .map(|c| (c.line, c.path, c.link))
        .collect();
    let want = [
        (1, "architecture.md", true),
        (1, "core/src/live/mod.rs", false),
        (2, "core/src/nowhere.rs", false),
        (2, "docs/format.md", false),
        (5, "clock-sync.md", false),
        (5, "reference/notes.md", false),
    ]
    .map(|(line, path, link)| (line, path.to_owned(), link));
    assert_eq!(found, want);
}

#[test]
fn a_bogus_citation_or_the_brief_is_reported_with_page_and_line() {
    let root = repo_root();
    let page = Path::new("docs/architecture.md");
    let text = format!(
        "# Page\n\nThe map cites `core/src/no_such_file.rs:12` and [a page](no-such-page.md).\n\
         It exists: `core/src/lib.rs`, [format](format.md), operations.md, README.md.\n\
         See {} section 2.\n",
        brief_name()
    );
    let found = problems(&root, page, &text);
    assert_eq!(
        found,
        vec![
            format!(
                "docs/architecture.md:5: {} (the private brief)",
                brief_name()
            ),
            "docs/architecture.md:3: no-such-page.md".to_owned(),
            "docs/architecture.md:3: core/src/no_such_file.rs".to_owned(),
        ]
    );
}
