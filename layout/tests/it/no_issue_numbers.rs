//! The repository's text stands on its own: no comment or document sends a reader to an
//! issue by number ("issue 13"), which the repository does not hold. It says why instead.

use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the layout crate sits in the repository root")
        .to_path_buf()
}

/// Build output, caches and git itself: not the repository's own text.
const NOT_SOURCE: [&str; 5] = [
    ".git",
    "target",
    "fuzz/target",
    "fuzz/corpus",
    "checks/boot/cache",
];

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("beneath the root");
        if NOT_SOURCE.iter().any(|n| rel == Path::new(n)) {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["rs", "md", "nix", "sh", "toml", "py"].contains(&e))
            || path.parent().is_some_and(|p| p.ends_with("scripts"))
        {
            out.push(path);
        }
    }
}

/// "issue 13", "Issue 16", "issues 14 and 15", "issue #12" (a word `issue`, then a number).
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("issue").any(|(at, _)| {
        let before_ok = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
        let rest = lower[at + "issue".len()..].trim_start_matches('s');
        let rest = rest.strip_prefix(' ').unwrap_or("");
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        before_ok && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn no_file_cites_an_issue_by_number() {
    let root = repo();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    assert!(files.len() > 100, "found only {} files", files.len());
    let this = file!().rsplit('/').next().unwrap_or_default().to_string();
    let mut found = Vec::new();
    for path in files {
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy() == this)
        {
            continue;
        }
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if cites_an_issue(line) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these send a reader to an issue the repository does not hold; say why instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_citation_is_seen() {
    assert!(cites_an_issue("//! Copies off the disk (issue 13): ..."));
    assert!(cites_an_issue("Issue 16 leaves the decision"));
    assert!(cites_an_issue("issues 14 and 15"));
    assert!(cites_an_issue("(issue #12)"));
    assert!(!cites_an_issue("an issue of 3 things"));
    assert!(!cites_an_issue("btrbk #13"));
    assert!(!cites_an_issue("tissue 4"));
}
