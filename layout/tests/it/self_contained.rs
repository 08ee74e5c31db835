//! The repository explains itself: no file sends a reader to a document outside it, and
//! every document it names is there.
//!
//! A test's outside inputs (nixpkgs' `lib` and the upstream NixOS files the module is
//! evaluated against) are parameters with a documented default beside the checkout; they
//! are the only outside paths a file may name.

use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the layout crate sits in the repository root")
        .to_path_buf()
}

/// Not the repository's own text: build output, caches, fuzzing state, git itself.
const NOT_SOURCE: [&str; 6] = [
    ".git",
    "target",
    "checks/boot/cache",
    "fuzz/target",
    "fuzz/corpus",
    "fuzz/artifacts",
];

/// The outside inputs of the NixOS evaluation: parameters (`TACID_NIXPKGS_LIB`,
/// `TACID_NIXOS_SUBSET`, `TACID_IMPERMANENCE`), with these defaults. A file may name a default as it is, not a
/// path beneath it (the facts a reader needs from there are in docs/nixos.md).
const OUTSIDE_TEST_INPUTS: [&str; 3] = [
    "../shared/nixpkgs-lib/lib",
    "../shared/nixos-subset/impermanence",
    "../shared/nixos-subset",
];

/// Documents that live outside the repository, which no file here may lean on.
const OUTSIDE_DOCUMENTS: [&str; 3] = ["DESIGN.md", "MACHINE-NOTES.md", "STYLE.md"];

/// The outside documents as prose names them, a word in capitals ("DESIGN asked for"). The
/// repository's own `docs/design.md` is spelled in lower case and is not one.
const OUTSIDE_DOCUMENT_WORDS: [&str; 2] = ["DESIGN", "MACHINE-NOTES"];

/// A character that continues a path or a word.
fn continues(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-')
}

/// Whether `word` stands in `line` as a word of its own (`DESIGN`, `DESIGN.md`), not as
/// part of a longer one (`DESIGNER`, `NO_DESIGN`).
fn has_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(continues) && !after.is_some_and(continues)
    })
}

/// Whether a line sends its reader to something outside the repository: a document that
/// lives elsewhere, or a file beside the checkout other than a test input's default as it
/// is (`../shared/nixos-subset` may be named; `../shared/nixos-subset/README` may not).
fn leans_outside(line: &str) -> bool {
    let beside = line.match_indices("../shared/").any(|(at, _)| {
        let rest = &line[at..];
        !OUTSIDE_TEST_INPUTS.iter().any(|input| {
            rest.strip_prefix(input)
                .is_some_and(|after| !after.chars().next().is_some_and(continues))
        })
    });
    beside
        || OUTSIDE_DOCUMENTS.iter().any(|doc| line.contains(doc))
        || OUTSIDE_DOCUMENT_WORDS
            .iter()
            .any(|word| has_word(line, word))
}

fn text_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .expect("beneath the root")
            .to_string_lossy()
            .into_owned();
        if NOT_SOURCE.contains(&rel.as_str()) {
            continue;
        }
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            text_files(&path, root, out);
        } else if kind.is_file() {
            // Binary files (images, fuzz seeds) are not documents.
            if let Ok(text) = fs::read_to_string(&path) {
                out.push((rel, text));
            }
        }
    }
}

fn repository_text() -> Vec<(String, String)> {
    let root = repo();
    let mut files = Vec::new();
    text_files(&root, &root, &mut files);
    assert!(
        files.iter().any(|(rel, _)| rel == "ARCHITECTURE.md"),
        "the walk found the repository's files"
    );
    files
}

#[test]
fn no_file_sends_a_reader_outside_the_repository() {
    let mut found = Vec::new();
    for (rel, text) in repository_text() {
        if rel == "layout/tests/it/self_contained.rs" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if leans_outside(line) {
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these lines lean on documents outside the repository (say it here instead, in \
         docs/design.md, docs/machine-facts.md or an ADR):\n{}",
        found.join("\n")
    );
}

/// Relative link targets of a Markdown text: `[text](target)`, without an anchor.
fn markdown_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            links.push(target.to_owned());
        }
        rest = &rest[end..];
    }
    links
}

/// `adr/NNNN` and `docs/NAME.md` as prose names them.
fn named_documents(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (prefix, is_part) in [
        ("adr/", (|c: char| c.is_ascii_digit()) as fn(char) -> bool),
        ("docs/", |c: char| {
            c.is_ascii_lowercase() || c == '-' || c == '.'
        }),
    ] {
        let mut rest = text;
        while let Some(at) = rest.find(prefix) {
            let preceded_by_word = text.len() - rest.len() + at > 0
                && text.as_bytes()[text.len() - rest.len() + at - 1].is_ascii_alphanumeric();
            rest = &rest[at + prefix.len()..];
            let len = rest.find(|c: char| !is_part(c)).unwrap_or(rest.len());
            let name = rest[..len].trim_end_matches('.');
            if preceded_by_word || name.is_empty() {
                continue;
            }
            if prefix == "adr/" && name.len() == 4 {
                names.push(format!("adr/{name}"));
            } else if prefix == "docs/" && name.ends_with(".md") {
                names.push(format!("docs/{name}"));
            }
        }
    }
    names
}

#[test]
fn every_document_named_exists() {
    let root = repo();
    let adrs: Vec<String> = fs::read_dir(root.join("adr"))
        .expect("adr/ exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut missing = Vec::new();
    for (rel, text) in repository_text() {
        if rel.ends_with(".md") {
            let dir = Path::new(&rel).parent().unwrap_or(Path::new(""));
            for link in markdown_links(&text) {
                if !root.join(dir).join(&link).exists() {
                    missing.push(format!("{rel}: link to {link}"));
                }
            }
        }
        for name in named_documents(&text) {
            let exists = match name.strip_prefix("adr/") {
                Some(number) => adrs.iter().any(|a| a.starts_with(&format!("{number}-"))),
                None => root.join(&name).exists(),
            };
            if !exists {
                missing.push(format!("{rel}: names {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documents named that are not in the repository:\n{}",
        missing.join("\n")
    );
}

#[test]
fn what_leans_outside_is_told_from_what_does_not() {
    for ours in [
        "defaulting to `../shared/nixpkgs-lib/lib` and `../shared/nixos-subset` next to it",
        "{ nixpkgsLib ? ../../../shared/nixpkgs-lib/lib",
        "default ../shared/nixos-subset",
        "(../shared/nixos-subset.)",
        "two real parts are at hand (../shared, next to the repository)",
        "docs/design.md says so; the design tacid is built to",
        "const NO_DESIGN_HERE: u8 = 0; // DESIGNER",
    ] {
        assert!(!leans_outside(ours), "flagged: {ours}");
    }
    for outside in [
        "their provenance: `../shared/nixos-subset/README`",
        "see ../shared/nixpkgs-lib/ORIGIN",
        "import ../shared/nixpkgs-lib/lib/fixed-points.nix",
        "../shared/nixpkgs-lib-old/lib",
        "../shared/other/file",
        "DESIGN and the tracker asked for at most 2.0",
        "as DESIGN.md says",
        "(DESIGN, section 4)",
        "see MACHINE-NOTES",
    ] {
        assert!(leans_outside(outside), "not flagged: {outside}");
    }
}

#[test]
fn the_document_finders_find_what_prose_writes() {
    assert_eq!(
        markdown_links("see [the map](ARCHITECTURE.md#code) and [x](https://e.org)"),
        ["ARCHITECTURE.md"]
    );
    assert_eq!(
        named_documents("(adr/0007) and `docs/nixos.md`. Not madr/0001 nor adr/12."),
        ["adr/0007", "docs/nixos.md"]
    );
}
