//! The workspace's declared `rust-version` is true: no locked dependency needs a newer
//! Rust. A user on an older nixpkgs then gets cargo's clear "requires rustc X" for the
//! workspace itself, not a refusal deep inside a dependency, and docs/nixos.md can name
//! the oldest nixpkgs release that builds tacid.
//!
//! Each dependency's own `rust-version` is read from its manifest as cargo unpacked it
//! (`$CARGO_HOME/registry/src/*/<name>-<version>/Cargo.toml`). A locked crate with no
//! unpacked source is one no Linux build compiles (Windows and wasm crates); the test
//! checks that with `cargo metadata --filter-platform` for each system the flake builds.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the layout crate sits in the repository root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `"1.89"` or `"1.89.0"` as (1, 89, 0).
fn version(s: &str) -> (u64, u64, u64) {
    let mut parts = s.split('.').map(|p| {
        p.parse::<u64>()
            .unwrap_or_else(|_| panic!("{s:?} is not a Rust version"))
    });
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major, minor, patch)
}

/// The value of `key = "..."` in the TOML table `table` of `text` (a plain string value on
/// one line, as cargo writes manifests it publishes and the workspace's own).
fn toml_string(text: &str, table: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            current = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        if current != table {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == key {
                let v = v.trim();
                if let Some(v) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    return Some(v.to_string());
                }
            }
        }
    }
    None
}

/// Every (name, version) of Cargo.lock that comes from a registry.
fn locked_registry_crates() -> Vec<(String, String)> {
    let lock = read(&repo().join("Cargo.lock"));
    let mut crates = Vec::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| toml_string(&format!("[package]\n{block}"), "package", key);
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            panic!("Cargo.lock has a package without a name or version: {block}");
        };
        if field("source").is_some_and(|s| s.starts_with("registry+")) {
            crates.push((name, version));
        }
    }
    crates
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("neither CARGO_HOME nor HOME is set")
}

/// The unpacked manifest of `name-version`, if cargo unpacked it in any registry.
fn unpacked_manifest(name: &str, version: &str) -> Option<PathBuf> {
    let src = cargo_home().join("registry").join("src");
    let registries = fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}; run `cargo fetch`", src.display()));
    registries
        .filter_map(Result::ok)
        .map(|r| {
            r.path()
                .join(format!("{name}-{version}"))
                .join("Cargo.toml")
        })
        .find(|p| p.is_file())
}

/// The registry crates a build for `target` compiles, by (name, version).
fn built_for(target: &str) -> BTreeSet<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(repo())
        .args([
            "metadata",
            "--offline",
            "--locked",
            "--format-version",
            "1",
            "--filter-platform",
            target,
        ])
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata --filter-platform {target} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let ids: BTreeSet<&str> = meta["resolve"]["nodes"]
        .as_array()
        .expect("a resolve")
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| p["source"].is_string() && ids.contains(p["id"].as_str().unwrap_or("")))
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_string(),
                p["version"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn the_declared_rust_version_covers_every_locked_dependency() {
    let manifest = read(&repo().join("Cargo.toml"));
    let declared = toml_string(&manifest, "workspace.package", "rust-version")
        .expect("Cargo.toml declares [workspace.package] rust-version");
    let crates = locked_registry_crates();
    assert!(!crates.is_empty(), "Cargo.lock locks no registry crate");

    let mut newer = Vec::new();
    let mut not_unpacked = Vec::new();
    let mut checked = 0;
    for (name, ver) in &crates {
        let Some(path) = unpacked_manifest(name, ver) else {
            not_unpacked.push((name.clone(), ver.clone()));
            continue;
        };
        checked += 1;
        if let Some(needs) = toml_string(&read(&path), "package", "rust-version") {
            if version(&needs) > version(&declared) {
                newer.push(format!("{name} {ver} needs Rust {needs}"));
            }
        }
    }
    assert!(
        newer.is_empty(),
        "Cargo.toml declares rust-version = \"{declared}\", but locked dependencies need more: {}. \
         Raise [workspace.package] rust-version to the highest of these (and the oldest nixpkgs \
         release docs/nixos.md names), or lock older versions of them.",
        newer.join("; ")
    );

    // What was not unpacked must be what no Linux build compiles.
    for target in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let built = built_for(target);
        let missing: Vec<String> = not_unpacked
            .iter()
            .filter(|c| built.contains(*c))
            .map(|(n, v)| format!("{n} {v}"))
            .collect();
        assert!(
            missing.is_empty(),
            "a {target} build compiles {}, but cargo has not unpacked its source, so its \
             rust-version cannot be read; run `cargo fetch` and run this test again",
            missing.join(", ")
        );
    }
    println!(
        "rust-version {declared}: {checked} locked crates checked; {} not built on Linux",
        not_unpacked.len()
    );
}
