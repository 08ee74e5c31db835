//! The modules of every crate point one way: within each module, the sibling modules its
//! files name (`crate::a`, `super::b`) form no cycle. A cycle means two modules that can only
//! be understood, changed and tested together; the map in ARCHITECTURE.md says which way
//! each crate's arrows point.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the layout crate sits in the repository root")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, with its module path (`engine::changes` for
/// `src/engine/changes.rs` and `src/engine/changes/mod.rs`; empty for `lib.rs`/`main.rs`).
fn modules(src: &Path, dir: &Path, out: &mut Vec<(Vec<String>, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            modules(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).expect("beneath src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.push((parts, path));
        }
    }
}

/// The module paths a file names: `crate::a::b` as `[a, b]`, `super::x` resolved against
/// the file's own module, each item of `crate::{a, b::c}` on its own. Only the leading
/// identifiers; the caller cuts them to modules.
fn references(text: &str, own: &[String]) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    for (start, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
        .chain(code.match_indices("self::"))
    {
        // Skip `$crate::` and paths inside longer identifiers.
        if let Some(&before) = start.checked_sub(1).and_then(|i| code.as_bytes().get(i)) {
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'$' || before == b':'
            {
                continue;
            }
        }
        paths_at(&code[start..], own, &mut found);
    }
    found
}

/// The paths starting at `text` (`crate::a::{b, c::d}` → `a::b`, `a::c::d`), resolved
/// against `own` for `crate` and `super`.
fn paths_at(text: &str, own: &[String], found: &mut Vec<Vec<String>>) {
    let mut base: Vec<String> = own.to_vec();
    let mut path: Vec<String> = Vec::new();
    let mut tail = text;
    loop {
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        match &tail[..end] {
            "crate" if path.is_empty() => base.clear(),
            "super" if path.is_empty() => {
                base.pop();
            }
            "self" if path.is_empty() => {}
            "" => {}
            w => path.push(w.to_string()),
        }
        tail = &tail[end..];
        if let Some(rest) = tail.strip_prefix("::") {
            tail = rest;
            if let Some(group) = tail.strip_prefix('{') {
                // Each item of the group, split at commas outside nested braces.
                let mut depth = 0;
                let mut item_start = 0;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            item(&group[item_start..i], &base, &path, found);
                            return;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            item(&group[item_start..i], &base, &path, found);
                            item_start = i + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
        } else {
            break;
        }
    }
    let mut full = base;
    full.extend(path);
    found.push(full);
}

fn item(text: &str, base: &[String], path: &[String], found: &mut Vec<Vec<String>>) {
    let text = text.trim();
    if text.is_empty() || text == "self" {
        let mut full = base.to_vec();
        full.extend(path.iter().cloned());
        found.push(full);
        return;
    }
    let mut prefix = base.to_vec();
    prefix.extend(path.iter().cloned());
    // An item is a path of its own below the prefix: resolve it as if written `crate::…`.
    let mut sub = Vec::new();
    paths_at(text, &[], &mut sub);
    for p in sub {
        let mut full = prefix.clone();
        full.extend(p);
        found.push(full);
    }
}

/// A cycle in `edges`, if any, as the modules along it.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut c = stack[at..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(c) = visit(node, edges, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// The crates whose modules are held to one direction: every workspace member with a `src`.
fn crate_sources() -> Vec<PathBuf> {
    let root = repo();
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    let members = manifest
        .split("members")
        .nth(1)
        .and_then(|m| m.split(']').next())
        .expect("a members list");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root.join(m).join("src"))
        .filter(|p| p.is_dir())
        .collect()
}

/// What each module re-exports (`pub use engine::{Engine, Snapshot}` in `lib.rs`): (the
/// module, a name) → the path the name comes from, so that `crate::Engine` counts as an arrow
/// to `engine`, not to the crate root.
fn reexports(files: &[(Vec<String>, PathBuf)]) -> BTreeMap<(Vec<String>, String), Vec<String>> {
    let mut out = BTreeMap::new();
    for (own, path) in files {
        let text = fs::read_to_string(path).expect("readable source");
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for (at, _) in text
            .match_indices("pub use ")
            .chain(text.match_indices("pub(crate) use "))
        {
            let rest = &text[at..];
            let rest = &rest[rest.find("use ").map_or(0, |i| i + 4)..];
            let statement = rest.split(';').next().unwrap_or("");
            let mut found = Vec::new();
            paths_at(statement, own, &mut found);
            for full in found {
                if let Some(name) = full.last() {
                    out.insert((own.clone(), name.clone()), full.clone());
                }
            }
        }
    }
    out
}

/// `target` with every re-exported name replaced by where it comes from, then cut to the
/// longest module that exists.
fn resolve(
    mut target: Vec<String>,
    known: &BTreeSet<Vec<String>>,
    reexported: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Vec<String> {
    for _ in 0..8 {
        let mut module = target.clone();
        while !module.is_empty() && !known.contains(&module) {
            module.pop();
        }
        let Some(next) = target.get(module.len()) else {
            break;
        };
        match reexported.get(&(module.clone(), next.clone())) {
            Some(origin) if *origin != target[..=module.len()] => {
                let mut resolved = origin.clone();
                resolved.extend(target[module.len() + 1..].iter().cloned());
                target = resolved;
            }
            _ => break,
        }
    }
    while !target.is_empty() && !known.contains(&target) {
        target.pop();
    }
    target
}

#[test]
fn no_crate_has_a_cycle_among_its_modules() {
    let mut problems = Vec::new();
    let sources = crate_sources();
    assert!(sources.len() >= 8, "found only {} crates", sources.len());
    for src in &sources {
        let mut files = Vec::new();
        modules(src, src, &mut files);
        let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
        let reexported = reexports(&files);
        // Edges between siblings: a file in `parent::a` naming `parent::b::…` is `a → b`.
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (own, path) in &files {
            let text = fs::read_to_string(path).expect("readable source");
            // Test modules may reach anything; they are not part of the shape.
            let text = text.split("#[cfg(test)]").next().unwrap_or("");
            for target in references(text, own) {
                // Through re-exports, to the longest module that exists.
                let target = resolve(target, &known, &reexported);
                let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
                // Naming an ancestor (or oneself) is not an arrow between siblings.
                if common == target.len() || common == own.len() {
                    continue;
                }
                let parent = own[..common].join("::");
                let from = format!("{parent}::{}", own[common]);
                let to = format!("{parent}::{}", target[common]);
                edges.entry(from).or_default().insert(to);
            }
        }
        if let Some(c) = cycle(&edges) {
            problems.push(format!("{}: {}", src.display(), c.join(" → ")));
        }
    }
    assert!(
        problems.is_empty(),
        "modules that name each other (make the arrows point one way):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_graph_sees_a_cycle_when_there_is_one() {
    let own = vec!["a".to_string()];
    let refs = references(
        "use crate::b::Thing;\nuse super::c;\nuse crate::{d, e::{f, g}};\n// crate::h",
        &own,
    );
    let refs: Vec<String> = refs.iter().map(|r| r.join("::")).collect();
    let deep = vec!["a".to_string(), "b".to_string()];
    let refs2 = references("use super::super::c::D;\nuse self::e::F;", &deep);
    let refs2: Vec<String> = refs2.iter().map(|r| r.join("::")).collect();
    assert_eq!(refs2, ["c::D", "a::b::e::F"]);
    // `crate::Engine`, re-exported at the root from `engine`, is an arrow to `engine`.
    let known: BTreeSet<Vec<String>> = [
        vec![],
        vec!["engine".to_string()],
        vec!["worker".to_string()],
    ]
    .into_iter()
    .collect();
    let mut reexported = BTreeMap::new();
    reexported.insert(
        (vec![], "Engine".to_string()),
        vec!["engine".to_string(), "Engine".to_string()],
    );
    assert_eq!(
        resolve(vec!["Engine".to_string()], &known, &reexported),
        ["engine"]
    );
    assert_eq!(refs, ["b::Thing", "d", "e::f", "e::g", "c"]);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("::a".into()).or_default().insert("::b".into());
    edges.entry("::b".into()).or_default().insert("::a".into());
    assert!(cycle(&edges).is_some());
    edges.remove("::b");
    assert!(cycle(&edges).is_none());
}
