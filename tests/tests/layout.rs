//! The house's rules that the compiler and clippy do not check, read from
//! the sources of every crate of the workspace:
//!
//! - no `#[path]` attribute: a module's file is where the module tree says
//!   (`name.rs`, or `name/mod.rs` for a module with children; clippy's
//!   `self_named_module_files` keeps it to that one convention);
//! - no circle of files importing each other inside any folder: within a
//!   folder, the files of non-test code form a hierarchy, so a reader
//!   follows a call down, never round.
//!
//! Imports are read as text: `use` trees and `super::`/`crate::` paths in
//! code, comments and strings left out. The entries of a folder are its
//! files and its subfolders' `mod.rs` (sibling modules); one imports
//! another when it names it (`super::sibling`, `crate::...::sibling`), or
//! an item its parent re-exports from it (`pub use sibling::Thing`). The
//! parent (`mod.rs`) is the folder's face, not one of its entries. Test
//! code is left out: `#[cfg(test)]` modules, inline or in files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tracesync_tests::tp::repo_root;

/// A module of non-test code: its file, and its path from the crate root.
#[derive(Clone, Debug)]
struct Module {
    file: PathBuf,
    path: Vec<String>,
    /// Its children, by name (declared with `mod name;`, not under cfg(test)).
    children: BTreeSet<String>,
    /// Items it re-exports from a child (`pub use child::Item`): a path to
    /// the item through this module leads to that child.
    reexports: BTreeMap<String, String>,
}

/// The crates' roots: `src/lib.rs` and `src/main.rs` of every member.
fn crate_roots(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("workspace members");
    let mut roots = Vec::new();
    for member in members.trim_end_matches(']').split(',') {
        let dir = root.join(member.trim().trim_matches('"'));
        for file in ["src/lib.rs", "src/main.rs"] {
            if dir.join(file).is_file() {
                roots.push(dir.join(file));
            }
        }
    }
    roots
}

/// `text` without comments and string literals (their contents could look
/// like paths).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if b.get(i + 1).is_some_and(|&c| c == b'"' || c == b'#')
                && !b
                    .get(i.wrapping_sub(1))
                    .is_some_and(|c| c.is_ascii_alphanumeric()) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                i += 2 + hashes;
                while i < b.len() && !b[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('x', '\n', '\''), not a lifetime.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// `code` without the items under `#[cfg(test)]` (inline modules and
/// functions), and the names of test-only `mod name;` declarations.
fn without_test_code(code: &str) -> (String, BTreeSet<String>) {
    let mut out = String::with_capacity(code.len());
    let mut test_mods = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        // The item ends at its `;` (a `mod name;`) or its closing brace.
        let semi = after.find(';');
        let brace = after.find('{');
        match (semi, brace) {
            (Some(s), b) if b.is_none_or(|b| s < b) => {
                let item = &after[..s];
                if let Some(name) = item.split_whitespace().skip_while(|w| *w != "mod").nth(1) {
                    test_mods.insert(name.to_owned());
                }
                rest = &after[s + 1..];
            }
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = after.len();
                for (i, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = "",
        }
    }
    out.push_str(rest);
    (out, test_mods)
}

/// The `mod name;` declarations of a file's code (test ones already out).
fn declared_mods(code: &str) -> BTreeSet<String> {
    let mut mods = BTreeSet::new();
    for stmt in code.split(';') {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "mod")
            && i + 2 == words.len()
            && words[..i]
                .iter()
                .all(|w| w.starts_with("pub") || w.starts_with('#') || w.ends_with(']'))
        {
            mods.insert(words[i + 1].to_owned());
        }
    }
    mods
}

/// Every module of non-test code under `root_file`.
fn modules(root_file: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut todo = vec![(root_file.to_path_buf(), Vec::<String>::new())];
    while let Some((file, path)) = todo.pop() {
        let text = std::fs::read_to_string(&file).expect("read source");
        let (code, _) = without_test_code(&code_only(&text));
        let children = declared_mods(&code);
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let dir = if matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
            file.parent().expect("dir").to_path_buf()
        } else {
            file.with_extension("")
        };
        for child in &children {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(child).join("mod.rs");
            let child_file = if flat.is_file() { flat } else { nested };
            assert!(
                child_file.is_file(),
                "{}: mod {child}: no file",
                file.display()
            );
            let mut child_path = path.clone();
            child_path.push(child.clone());
            todo.push((child_file, child_path));
        }
        let reexports = reexports(&code, &children);
        out.push(Module {
            file,
            path,
            children,
            reexports,
        });
    }
    out
}

/// The items a module re-exports from its children, by name (the last
/// segment, or the `as` name).
fn reexports(code: &str, children: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let Some(at) = stmt
            .find("pub use ")
            .or_else(|| stmt.find("pub(crate) use "))
        else {
            continue;
        };
        let tree = &stmt[at..];
        let tree = &tree[tree.find("use ").map_or(0, |i| i + 4)..];
        for path in expand_use(tree) {
            let segs: Vec<&str> = path.split("::").collect();
            let segs = if segs.first() == Some(&"self") {
                &segs[1..]
            } else {
                &segs[..]
            };
            if let (Some(child), Some(last)) = (segs.first(), segs.last())
                && segs.len() > 1
                && children.contains(*child)
            {
                let name = last.rsplit("as").next().unwrap_or(last);
                out.insert(name.to_owned(), (*child).to_owned());
            }
        }
    }
    out
}

/// The paths a `use` tree names, braces expanded: `a::{b, c::d}` gives
/// `a::b` and `a::c::d`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand_use(&format!("{prefix}{p}")))
        .collect()
}

/// The tree of a `use` statement (`pub` or not) and the text before it
/// (attributes, or the end of the previous item).
fn use_tree(stmt: &str) -> Option<(&str, &str)> {
    let at = stmt.find("use ")?;
    let before = stmt[..at].trim_end();
    let visibility = before
        .rsplit(|c: char| c.is_whitespace() || c == ']' || c == '}' || c == ';')
        .next()
        .unwrap_or("");
    let item_start = before.len() - visibility.len();
    let prefix_ok = visibility.is_empty() || visibility.starts_with("pub");
    let lead = before[..item_start].trim_end();
    let starts_item = lead.is_empty() || lead.ends_with(']') || lead.ends_with('}');
    (prefix_ok && starts_item).then(|| (&stmt[..item_start], stmt[at + 4..].trim_end_matches(';')))
}

/// The paths a file names: its `use` trees expanded, and every path of
/// two or more segments in its code.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest_code = String::new();
    for stmt in code.split_inclusive(';') {
        match use_tree(stmt) {
            Some((before, tree)) => {
                for p in expand_use(tree) {
                    paths.push(p.split("::").map(str::to_owned).collect());
                }
                rest_code.push_str(before);
            }
            None => rest_code.push_str(stmt),
        }
    }
    let words: Vec<char> = rest_code.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut i = 0;
    while i < words.len() {
        if (i == 0 || !(ident(words[i - 1]) || words[i - 1] == ':')) && ident(words[i]) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let start = j;
                while j < words.len() && ident(words[j]) {
                    j += 1;
                }
                segs.push(words[start..j].iter().collect::<String>());
                if words.get(j) == Some(&':') && words.get(j + 1) == Some(&':') {
                    j += 2;
                    if !words.get(j).is_some_and(|&c| ident(c)) {
                        break;
                    }
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                paths.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths
}

/// The module a path names from `from` (`super`, `self`, `crate` resolved;
/// a bare first segment is a child of `from` if it has one), as far as
/// modules go, and whether more follows (an item of it).
fn resolve(from: &Module, path: &[String], children: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut at: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => from.path.clone(),
        "super" => {
            let mut p = from.path.clone();
            p.pop()?;
            p
        }
        first if children.contains(first) => {
            let mut p = from.path.clone();
            p.push(first.to_owned());
            return Some(p);
        }
        _ => return None,
    };
    let mut segs = path[1..].iter();
    // `super::super::...`
    let mut next = segs.next();
    while next.is_some_and(|s| s == "super") {
        at.pop()?;
        next = segs.next();
    }
    if let Some(seg) = next {
        at.push(seg.clone());
    }
    for seg in segs {
        at.push(seg.clone());
    }
    Some(at)
}

/// Whether two modules are entries of one folder: children of the same
/// module (a file, or a folder module's `mod.rs`). Their parent is the
/// folder's face: it declares, re-exports and often holds the type its
/// files implement, so a child naming it is no circle.
fn siblings(a: &Module, b: &Module) -> bool {
    !a.path.is_empty()
        && a.path.len() == b.path.len()
        && a.path[..a.path.len() - 1] == b.path[..b.path.len() - 1]
}

/// The circles of files importing each other inside one folder, in one
/// crate's modules.
fn circles(modules: &[Module]) -> Vec<Vec<PathBuf>> {
    let by_path: BTreeMap<&[String], &Module> =
        modules.iter().map(|m| (m.path.as_slice(), m)).collect();
    let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let index: BTreeMap<&[String], usize> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.path.as_slice(), i))
        .collect();
    for (i, m) in modules.iter().enumerate() {
        let text = std::fs::read_to_string(&m.file).expect("read source");
        let (code, _) = without_test_code(&code_only(&text));
        for path in named_paths(&code) {
            let Some(mut target) = resolve(m, &path, &m.children) else {
                continue;
            };
            let wanted = target.len();
            // The longest prefix that is a module.
            while !target.is_empty() && !by_path.contains_key(target.as_slice()) {
                target.pop();
            }
            // An item a folder module re-exports is its child's.
            if let (Some(module), Some(item)) = (by_path.get(target.as_slice()), path.last())
                && target.len() < wanted
                && let Some(child) = module.reexports.get(item)
            {
                target.push(child.clone());
            }
            let Some(&j) = index.get(target.as_slice()) else {
                continue;
            };
            let t = &modules[j];
            if i != j && siblings(m, t) {
                edges.entry(i).or_default().insert(j);
            }
        }
    }
    // Strongly connected components of more than one file (Tarjan).
    let mut found = Vec::new();
    let mut state = Tarjan::default();
    for v in 0..modules.len() {
        if !state.index.contains_key(&v) {
            state.visit(v, &edges, &mut found);
        }
    }
    found
        .into_iter()
        .map(|c| {
            let mut files: Vec<PathBuf> = c.into_iter().map(|i| modules[i].file.clone()).collect();
            files.sort();
            files
        })
        .collect()
}

#[derive(Default)]
struct Tarjan {
    next: usize,
    index: BTreeMap<usize, usize>,
    low: BTreeMap<usize, usize>,
    stack: Vec<usize>,
    on_stack: BTreeSet<usize>,
}

impl Tarjan {
    fn visit(
        &mut self,
        v: usize,
        edges: &BTreeMap<usize, BTreeSet<usize>>,
        found: &mut Vec<Vec<usize>>,
    ) {
        self.index.insert(v, self.next);
        self.low.insert(v, self.next);
        self.next += 1;
        self.stack.push(v);
        self.on_stack.insert(v);
        for &w in edges.get(&v).into_iter().flatten() {
            if !self.index.contains_key(&w) {
                self.visit(w, edges, found);
                let low = self.low[&v].min(self.low[&w]);
                self.low.insert(v, low);
            } else if self.on_stack.contains(&w) {
                let low = self.low[&v].min(self.index[&w]);
                self.low.insert(v, low);
            }
        }
        if self.low[&v] == self.index[&v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(&w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                found.push(component);
            }
        }
    }
}

/// Every `.rs` file under the crates' directories (sources, tests, benches).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_is_included_by_a_path_attribute() {
    let root = repo_root();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            code_only(&text).contains("#[path")
        })
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        found.is_empty(),
        "files with a #[path] attribute (make the module a folder): {found:?}"
    );
}

#[test]
fn no_folder_holds_a_circle_of_imports() {
    let root = repo_root();
    let mut all = Vec::new();
    for crate_root in crate_roots(&root) {
        for circle in circles(&modules(&crate_root)) {
            let names: Vec<String> = circle
                .iter()
                .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
                .collect();
            all.push(names.join(" <-> "));
        }
    }
    assert!(
        all.is_empty(),
        "files importing each other:\n{}",
        all.join("\n")
    );
}

#[test]
fn the_reader_sees_circles_and_leaves_out_tests_and_reexports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |name: &str, text: &str| {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod c;\npub mod d;\npub use d::Thing;\n#[cfg(test)]\nmod tests;\n",
    );
    // a and b import each other (one through a brace tree, one by path).
    write("a.rs", "use super::{b::{One, Two}, c};\npub struct A;\n");
    write(
        "b.rs",
        "// use super::c::Nothing;\npub fn f() -> crate::a::A { crate::a::A }\n\
         const S: &str = \"super::c::X\";\n",
    );
    // c names d only under cfg(test).
    write(
        "c.rs",
        "#[cfg(test)]\nmod tests {\n    use super::super::d::Thing;\n}\n",
    );
    write("d/mod.rs", "mod e;\npub use e::Thing;\n");
    write("d/e.rs", "pub struct Thing;\nuse super::super::c;\n");
    write("tests.rs", "use super::a::A;\n");
    let found = circles(&modules(&src.join("lib.rs")));
    assert_eq!(found, vec![vec![src.join("a.rs"), src.join("b.rs")]]);
    assert_eq!(
        expand_use("super::{a::{X, Y}, b}"),
        ["super::a::X", "super::a::Y", "super::b"]
    );
}
