//! The options table a user reads in docs/nixos.md states the defaults the module has.
//!
//! Every NixOS option whose default the module takes from the layout (`d.KEY`, that is
//! `layout.json`'s `defaults`, which `layout::defaults` renders; or `layout.KEY`) must have
//! a row in the table, and the row's default must be that value, with its size in GiB or
//! MiB, when it gives one, the same. Change a default in `layout/src/defaults.rs` and this
//! test names the rows to mend.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn read(rel: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the layout crate sits in the repository root")
        .join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn contract() -> Value {
    serde_json::from_str(&layout::Contract::get().to_json()).expect("the contract is JSON")
}

/// A Nix identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..len]
}

/// Where an option's default comes from in the contract.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// `d.KEY`: `defaults.KEY`.
    Default(String),
    /// `layout.KEY`: the contract's own `KEY`.
    Layout(String),
}

impl Source {
    fn parse(expr: &str) -> Option<Self> {
        let expr = expr.trim();
        if let Some(key) = expr.strip_prefix("d.") {
            Some(Self::Default(ident(key).to_owned()))
        } else {
            expr.strip_prefix("layout.")
                .map(|key| Self::Layout(ident(key).to_owned()))
        }
    }

    fn value(&self, contract: &Value) -> Value {
        let found = match self {
            Self::Default(key) => &contract["defaults"][key],
            Self::Layout(key) => &contract[key],
        };
        assert!(!found.is_null(), "the contract has no {self:?}");
        found.clone()
    }
}

/// (option's last name, where its default comes from) for every option of the module whose
/// default is the layout's: `NAME = count d.KEY ...` and `NAME = lib.mkOption { ...
/// default = d.KEY; ... }`.
fn module_defaults(module: &str) -> Vec<(String, Source)> {
    let mut found = Vec::new();
    let mut option: Option<String> = None;
    for line in module.lines().map(str::trim) {
        if let Some((name, rhs)) = line.split_once(" = ") {
            let name = name.trim();
            if let Some(expr) = rhs.strip_prefix("count ") {
                if let Some(source) = Source::parse(expr) {
                    found.push((name.to_owned(), source));
                }
                continue;
            }
            if rhs.starts_with("lib.mkOption") {
                option = Some(name.to_owned());
                continue;
            }
            if name == "default" {
                if let (Some(opt), Some(source)) = (&option, Source::parse(rhs)) {
                    found.push((opt.clone(), source));
                }
            }
        }
    }
    found
}

/// (option, default cell) of every row of docs/nixos.md's options table.
fn table_rows(doc: &str) -> Vec<(String, String)> {
    doc.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // "| `services.tacid.x` | default | what it does |" splits into five cells.
            let option = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let default = cells.get(2)?;
            option
                .starts_with("services.tacid.")
                .then(|| (option.to_owned(), (*default).to_owned()))
        })
        .collect()
}

/// The first `code` span of a cell.
fn first_code(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// A size a cell gives in words, `(2 GiB)`, in bytes.
fn size_in_words(cell: &str) -> Option<u64> {
    let inner = &cell[cell.find('(')? + 1..];
    let inner = &inner[..inner.find(')')?];
    let (number, unit) = inner.split_once(' ')?;
    let shift = match unit {
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    number.parse::<u64>().ok().map(|n| n << shift)
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn the_options_table_states_the_layouts_defaults() {
    let contract = contract();
    let module = read("nixos-modules/tacid.nix");
    let rows = table_rows(&read("docs/nixos.md"));
    let options = module_defaults(&module);

    // Every default the module reads is some option's default, so none escapes the table.
    let defaults = contract["defaults"]
        .as_object()
        .expect("the contract has its defaults");
    for key in defaults.keys() {
        let read_by_module = module.contains(&format!("d.{key}"));
        let an_option = options
            .iter()
            .any(|(_, s)| *s == Source::Default(key.clone()));
        assert_eq!(
            read_by_module, an_option,
            "the module reads d.{key} other than as an option's default"
        );
    }
    assert!(
        options.len() >= 9,
        "found too few options with the layout's defaults in the module: {options:?}"
    );

    let mut wrong = Vec::new();
    for (name, source) in &options {
        let suffix = format!(".{name}");
        // A copy target's counts (`copies.<name>.keep.daily`) share their last word with
        // the snapshots' retention (`retention.daily`): each is looked for among its own; a
        // sealed target's (`copies.<name>.seal.fullEvery`) is a copy target's too.
        let of_copies = matches!(source, Source::Default(key) if key.starts_with("keep_copies_") || key.starts_with("seal_"));
        let matching: Vec<&(String, String)> = rows
            .iter()
            .filter(|(o, _)| o.ends_with(&suffix) && o.contains(".copies.") == of_copies)
            .collect();
        let [(option, cell)] = matching.as_slice() else {
            wrong.push(format!(
                "{name}: {} rows of the options table end in {suffix}, not one",
                matching.len()
            ));
            continue;
        };
        let value = source.value(&contract);
        let want = shown(&value);
        if first_code(cell) != Some(want.as_str()) {
            wrong.push(format!(
                "{option}: the table says {cell}, the layout {want}"
            ));
        }
        if let (Some(words), Some(bytes)) = (size_in_words(cell), value.as_u64()) {
            if words != bytes {
                wrong.push(format!("{option}: {cell} is not {bytes} bytes in words"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/nixos.md's options table differs from layout::defaults (layout.json):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_readers_read_what_the_files_write() {
    let module = concat!(
        "  approverGroup = lib.mkOption {\n    type = x;\n    default = d.approver_group;\n",
        "  };\n  hourly = count d.keep_hourly ''\n",
        "  device = lib.mkOption {\n    default = layout.default_device;\n",
    );
    assert_eq!(
        module_defaults(module),
        [
            (
                "approverGroup".to_owned(),
                Source::Default("approver_group".to_owned())
            ),
            (
                "hourly".to_owned(),
                Source::Default("keep_hourly".to_owned())
            ),
            (
                "device".to_owned(),
                Source::Layout("default_device".to_owned())
            ),
        ]
    );
    let doc = concat!(
        "| option | default | what |\n|---|---|---|\n",
        "| `services.tacid.retention.freeFloorBytes` | `2147483648` (2 GiB) | x |\n",
    );
    let rows = table_rows(doc);
    assert_eq!(
        rows,
        [(
            "services.tacid.retention.freeFloorBytes".to_owned(),
            "`2147483648` (2 GiB)".to_owned()
        )]
    );
    assert_eq!(first_code(&rows[0].1), Some("2147483648"));
    assert_eq!(size_in_words(&rows[0].1), Some(2 << 30));
    assert_eq!(size_in_words("`10`"), None);
}
