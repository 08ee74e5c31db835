//! The keeper and the CLI build on no privileged code (adr/0003): neither links the stem or
//! the Btrfs crate, whatever their features; nor the copier, the sealing library or what
//! only it needs (the key's cryptography, the object store's network client): the keeper
//! never holds a key or a byte of a copy. Only the interface crates cross over.

use std::process::Command;

fn normal_deps(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--all-features",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_keeper_and_the_cli_do_not_depend_on_privileged_code() {
    for package in ["keeper", "tacid-cli"] {
        let deps = normal_deps(package);
        assert!(
            deps.iter().any(|d| d == package),
            "{package} is not in its own tree: {deps:?}"
        );
        for privileged in ["stem", "btrfs", "copier", "seal", "age", "object_store"] {
            assert!(
                !deps.iter().any(|d| d == privileged),
                "{package} depends on {privileged}: {deps:?}"
            );
        }
    }
    // The keeper's way to the copier is its interface, and only that.
    assert!(normal_deps("keeper")
        .iter()
        .any(|d| d == "copier-interface"));
}
