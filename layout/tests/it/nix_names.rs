//! The NixOS side names nothing the Rust side does not have.
//!
//! The module (nixos-modules/) reads every name from `layout.json`, this crate's contract
//! rendered, and every shipped file and binary from `shipped.json`. These tests fail when
//! the committed JSON drifts from the crate, when a file the package installs or a binary
//! the module runs does not exist in the repository, when a unit or D-Bus file names
//! something else, and when a Nix file reads a key neither JSON file has.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the layout crate sits in the repository root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn contract() -> Value {
    serde_json::from_str(&layout::Contract::get().to_json()).expect("the contract is JSON")
}

fn shipped() -> Value {
    serde_json::from_str(&read("nixos-modules/shipped.json"))
        .expect("nixos-modules/shipped.json is JSON")
}

/// One file the package installs, resolved through the contract.
struct ShippedFile {
    /// Path in the repository.
    source: String,
    /// Directory in the package.
    install_dir: String,
    /// The target that enables it, when the module enables it.
    wanted_by: Option<String>,
}

fn shipped_files() -> Vec<ShippedFile> {
    let contract = contract();
    let shipped = shipped();
    let files = shipped["files"]
        .as_array()
        .expect("shipped.json has a files list");
    files
        .iter()
        .map(|f| {
            let key = f["layout_key"].as_str().expect("layout_key is a string");
            let name = contract[key].as_str().unwrap_or_else(|| {
                panic!("shipped.json names layout key {key:?}, which the contract does not have")
            });
            let suffix = f["suffix"].as_str().expect("suffix is a string");
            let dir = f["source_dir"].as_str().expect("source_dir is a string");
            ShippedFile {
                source: format!("{dir}/{name}{suffix}"),
                install_dir: f["install_dir"].as_str().expect("install_dir").to_owned(),
                wanted_by: f
                    .get("wanted_by")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }
        })
        .collect()
}

/// (crate directory, binary name) for every binary the module and package use.
fn shipped_binaries() -> Vec<(String, String)> {
    let shipped = shipped();
    let bins = shipped["binaries"]
        .as_object()
        .expect("shipped.json has binaries");
    bins.values()
        .map(|b| {
            (
                b["crate"].as_str().expect("crate").to_owned(),
                b["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect()
}

/// The names of the binaries a crate builds: each `[[bin]]`'s `name`, plus what Cargo
/// finds by itself (unless `autobins = false`): the package name for `src/main.rs`, and
/// each `src/bin/NAME.rs` or `src/bin/NAME/main.rs`.
fn binaries_of_crate(dir: &str) -> BTreeSet<String> {
    let manifest = read(&format!("{dir}/Cargo.toml"));
    let mut section = String::new();
    let mut package_name = None;
    let mut bins = BTreeSet::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "name" {
            continue;
        }
        let value = value.trim().trim_matches('"').to_owned();
        match section.as_str() {
            "[[bin]]" => {
                bins.insert(value);
            }
            "[package]" => package_name = Some(value),
            _ => {}
        }
    }
    if manifest
        .lines()
        .any(|l| l.replace(' ', "") == "autobins=false")
    {
        return bins;
    }
    if repo().join(dir).join("src/main.rs").exists() {
        let main_is_declared = manifest.contains("\"src/main.rs\"");
        if !main_is_declared {
            bins.extend(package_name);
        }
    }
    if let Ok(entries) = fs::read_dir(repo().join(dir).join("src/bin")) {
        for path in entries.flatten().map(|e| e.path()) {
            let stem = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned);
            let is_rs = path.extension().is_some_and(|x| x == "rs");
            if let Some(stem) = stem.filter(|_| is_rs || path.join("main.rs").exists()) {
                bins.insert(stem);
            }
        }
    }
    bins
}

/// Values of `key=` lines in one `[section]` of a systemd-style file.
fn ini_values(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut in_section = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == format!("[{section}]");
            continue;
        }
        if !in_section || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == key {
                out.push(v.trim().to_owned());
            }
        }
    }
    out
}

#[test]
fn committed_layout_json_is_what_the_layout_crate_renders() {
    let committed = read(layout::CONTRACT_JSON_PATH);
    let rendered = layout::Contract::get().to_json();
    assert!(
        committed == rendered,
        "{} has drifted from the layout crate; regenerate it with\n  \
         cargo run -q -p layout --bin tacid-layout > {}\n\
         rendered now:\n{rendered}",
        layout::CONTRACT_JSON_PATH,
        layout::CONTRACT_JSON_PATH,
    );
}

#[test]
fn every_file_the_package_ships_exists_in_the_repository() {
    let missing: Vec<_> = shipped_files()
        .into_iter()
        .map(|f| f.source)
        .filter(|s| !repo().join(s).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "shipped.json installs files that do not exist: {missing:?}"
    );
}

#[test]
fn every_binary_the_module_runs_is_built_by_its_crate() {
    let mut problems = Vec::new();
    for (dir, name) in shipped_binaries() {
        let built = binaries_of_crate(&dir);
        if !built.contains(&name) {
            problems.push(format!("{dir}/Cargo.toml builds {built:?}, not {name:?}"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn unit_files_run_shipped_binaries_and_say_what_enables_them() {
    let binaries: BTreeSet<String> = shipped_binaries().into_iter().map(|(_, n)| n).collect();
    let shipped = shipped();
    let unit_paths = &shipped["unit_paths"];
    let binaries_dir = unit_paths["binaries_dir"]
        .as_str()
        .expect("unit_paths.binaries_dir");
    let tools: BTreeSet<String> = unit_paths["tools"]
        .as_object()
        .expect("unit_paths.tools")
        .keys()
        .cloned()
        .collect();
    let contract = contract();
    let keeper_unit = contract["keeper_unit"].as_str().expect("keeper unit");
    let mut problems = Vec::new();
    let mut units_seen = 0;
    // Units, not the stem's drop-ins for copies (stem/systemd/copies/*.conf).
    for file in shipped_files()
        .into_iter()
        .filter(|f| f.source.contains("/systemd/") && !f.source.ends_with(".conf"))
    {
        units_seen += 1;
        let Ok(text) = fs::read_to_string(repo().join(&file.source)) else {
            problems.push(format!("{} is missing", file.source));
            continue;
        };
        let starts = ini_values(&text, "Service", "ExecStart");
        // A timer or a socket starts a service; it runs nothing itself.
        let is_timer = file.source.ends_with(".timer") || file.source.ends_with(".socket");
        if is_timer && !starts.is_empty() {
            problems.push(format!(
                "{} is a timer or socket with an ExecStart=",
                file.source
            ));
        }
        if !is_timer && starts.len() != 1 {
            problems.push(format!(
                "{} has {} ExecStart= lines, not one",
                file.source,
                starts.len()
            ));
        }
        let execs: Vec<String> = [
            "ExecStartPre",
            "ExecStart",
            "ExecStartPost",
            "ExecStop",
            "ExecStopPost",
        ]
        .iter()
        .flat_map(|k| ini_values(&text, "Service", k))
        .collect();
        // The initrd units run in the initrd, where the module puts the binary at /bin
        // (boot.initrd.systemd.extraBin); the daemons' units name binaries_dir, which the
        // package rewrites to its own store paths, and tools the package knows.
        let in_initrd =
            !["lib/systemd/system", "lib/systemd/user"].contains(&file.install_dir.as_str());
        for exec in execs {
            let program = exec.trim_start_matches(['-', '@', '+', '!', ':']);
            let program = program.split_whitespace().next().unwrap_or_default();
            let (dir, name) = program.rsplit_once('/').unwrap_or(("", program));
            let ok = if in_initrd {
                dir == "/bin" && binaries.contains(name)
            } else {
                dir == binaries_dir && (binaries.contains(name) || tools.contains(name))
            };
            if !ok {
                problems.push(format!(
                    "{} runs {program:?}: expected {} followed by a shipped binary{}",
                    file.source,
                    if in_initrd { "/bin/" } else { binaries_dir },
                    if in_initrd {
                        ""
                    } else {
                        " or a tool listed in shipped.json"
                    },
                ));
            }
        }
        // The module's drop-in rewrites values in the keeper's ExecStart: the approver group
        // and the retention flags (tacid.nix; its build fails when a flag is missing, and
        // checks/nix-checks.sh runs it against this unit). Here: the approver group.
        if file.source.ends_with(keeper_unit)
            && !starts.iter().any(|s| s.contains(" --approver-group "))
        {
            problems.push(format!(
                "{}: ExecStart must pass --approver-group, which the NixOS module rewrites",
                file.source
            ));
        }
        if let Some(target) = &file.wanted_by {
            let wanted = ini_values(&text, "Install", "WantedBy");
            if !wanted
                .iter()
                .flat_map(|w| w.split_whitespace())
                .any(|w| w == target)
            {
                problems.push(format!(
                    "the module enables {} from {target}, but its [Install] says WantedBy={wanted:?}",
                    file.source
                ));
            }
        }
    }
    assert_eq!(
        units_seen, 13,
        "shipped.json should ship the stem, its receiver (socket and service), keeper, copier, timeline (service and timer), health (service and timer), the alert and the notifier's user unit, and two initrd units"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn dbus_files_name_the_layouts_bus_names_and_units() {
    let contract = contract();
    let units: BTreeSet<String> = shipped_files()
        .iter()
        .filter(|f| f.install_dir == "lib/systemd/system")
        .map(|f| f.source.rsplit('/').next().expect("file name").to_owned())
        .collect();
    let mut problems = Vec::new();
    for key in ["stem_bus_name", "keeper_bus_name", "copier_bus_name"] {
        let bus = contract[key].as_str().expect("bus name");
        for file in shipped_files()
            .iter()
            .filter(|f| f.source.contains(&format!("/{bus}.")))
        {
            let Ok(text) = fs::read_to_string(repo().join(&file.source)) else {
                problems.push(format!("{} is missing", file.source));
                continue;
            };
            if file.source.ends_with(".conf") {
                if !text.contains(&format!("own=\"{bus}\"")) {
                    problems.push(format!("{} does not let anybody own {bus}", file.source));
                }
            } else {
                let names = ini_values(&text, "D-BUS Service", "Name");
                if names != [bus] {
                    problems.push(format!("{} says Name={names:?}, not {bus}", file.source));
                }
                for unit in ini_values(&text, "D-BUS Service", "SystemdService") {
                    if !units.contains(&unit) {
                        problems.push(format!(
                            "{} activates {unit}, which the package does not ship ({units:?})",
                            file.source
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every `layout.<key>` and `shipped.binaries.<key>` a Nix file reads exists.
#[test]
fn nix_files_read_only_keys_the_json_has() {
    let contract = contract();
    let shipped = shipped();
    let mut nix_files = vec![repo().join("flake.nix")];
    for dir in ["nixos-modules", "checks/nixos", "checks"] {
        if let Ok(entries) = fs::read_dir(repo().join(dir)) {
            nix_files.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "nix")),
            );
        }
    }
    let mut problems = Vec::new();
    let mut keys_read = 0;
    for path in nix_files.iter().filter(|p| p.exists()) {
        let text = fs::read_to_string(path).expect("readable Nix file");
        for (prefix, table) in [
            ("layout.", &contract),
            ("shipped.binaries.", &shipped["binaries"]),
        ] {
            for (i, _) in text.match_indices(prefix) {
                // Only a whole identifier ending in `layout` (not `mylayout.`).
                let before = text[..i].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-') {
                    continue;
                }
                let key: String = text[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if key.is_empty() || (prefix == "layout." && key == "json") {
                    continue;
                }
                keys_read += 1;
                if table.get(&key).is_none() {
                    problems.push(format!(
                        "{} reads {prefix}{key}, which does not exist",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(
        keys_read > 10,
        "expected the Nix files to read many layout keys, found {keys_read}"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}
