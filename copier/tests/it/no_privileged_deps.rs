//! The copier builds on no privileged code: it links neither the stem nor the Btrfs crate
//! (only the stem's interface, for the pipe's framing). And `copier-interface`, which the
//! keeper links, brings no crypto, no network and no seal: the keeper stays without them.

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

fn assert_without(package: &str, forbidden: &[&str]) {
    let deps = normal_deps(package);
    assert!(
        deps.iter().any(|d| d == package),
        "{package} is not in its own tree: {deps:?}"
    );
    for f in forbidden {
        assert!(
            !deps.iter().any(|d| d == f),
            "{package} depends on {f}: {deps:?}"
        );
    }
}

#[test]
fn the_copier_links_no_privileged_crate_and_its_interface_no_crypto_or_network() {
    assert_without("copier", &["stem", "btrfs"]);
    assert_without(
        "copier-interface",
        &[
            "seal",
            "copier",
            "stem",
            "btrfs",
            "age",
            "object_store",
            "reqwest",
        ],
    );
}
