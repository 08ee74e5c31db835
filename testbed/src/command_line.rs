//! A daemon's command line as its unit file gives it and as the binary defaults it, so a
//! test can hold the shipped unit, the binary and `layout::defaults` to one value each.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// `--flag value` pairs of the unit's `ExecStart=` (flags without a value are left out).
pub fn exec_start_flags(unit: &str) -> BTreeMap<String, String> {
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart=");
    let words: Vec<&str> = exec.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0].starts_with("--") && !w[1].starts_with("--"))
        .map(|w| (w[0].to_owned(), w[1].to_owned()))
        .collect()
}

/// Each option's default as the binary's own `--help` states it (`[default: X]`).
pub fn defaults_from_help(bin: &Path) -> BTreeMap<String, String> {
    let out = Command::new(bin)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run {} --help: {e}", bin.display()));
    assert!(out.status.success(), "{} --help failed", bin.display());
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    let mut defaults = BTreeMap::new();
    let mut flag: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('-') {
            flag = trimmed
                .split([' ', ','])
                .find(|w| w.starts_with("--"))
                .map(str::to_owned);
        }
        if let (Some(f), Some(at)) = (&flag, line.find("[default: ")) {
            let rest = &line[at + "[default: ".len()..];
            let value = &rest[..rest.find(']').expect("a closing bracket")];
            defaults.insert(f.clone(), value.to_owned());
        }
    }
    defaults
}

/// Every `--flag value` of the unit is the binary's own default for that flag.
pub fn assert_unit_passes_the_binarys_defaults(unit: &str, bin: &Path, skip: &[&str]) {
    let defaults = defaults_from_help(bin);
    for (flag, value) in exec_start_flags(unit) {
        if skip.contains(&flag.as_str()) {
            continue;
        }
        assert_eq!(
            defaults.get(&flag),
            Some(&value),
            "the unit passes {flag} {value}, but {} defaults it to {:?}: a daemon started by \
             hand would not behave as the shipped unit does",
            bin.display(),
            defaults.get(&flag)
        );
    }
}
