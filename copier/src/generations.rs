//! What this machine remembers of the generations it wrote to each sealed target, so that
//! a store serving an older (genuine, authenticated) manifest is caught: the MAC proves a
//! manifest is this machine's, not that it is the newest. Kept in
//! `COPIER_STATE_DIR/generations.json`, written durably.
//!
//! What it cannot know: after a dead disk this file is gone with the machine; a store that
//! serves an older manifest then is caught only by a generation a person remembers, or by a
//! second target.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable;

/// The file's name in the state directory.
pub const FILE_NAME: &str = "generations.json";
/// Larger than any file this writes for a few thousand copies; a larger one is refused.
const MAX_BYTES: u64 = 16 << 20;

/// One target's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetGenerations {
    /// The highest generation this machine gave a copy on the target.
    pub highest: u64,
    /// Per copy name, the generation this machine last gave it (kept after a delete, so
    /// that a deleted copy's manifest served again is refused too).
    pub copies: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct File {
    targets: BTreeMap<String, TargetGenerations>,
}

/// The remembered generations, and where they are kept.
#[derive(Debug)]
pub struct Generations {
    path: PathBuf,
    file: File,
}

/// A manifest older than the one this machine wrote for its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Older {
    pub name: String,
    pub served: u64,
    pub wrote: u64,
}

impl std::fmt::Display for Older {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the target served an older manifest of {} (generation {}; this machine wrote {}): \
             someone with access to the target put back an old copy; do not trust this target \
             until you know why, and make a new copy",
            self.name, self.served, self.wrote
        )
    }
}

impl Generations {
    /// Read `dir/generations.json`; a missing file is an empty memory.
    pub fn load(dir: &Path) -> Result<Generations, String> {
        let path = dir.join(FILE_NAME);
        let shown = path.display();
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Generations {
                    path,
                    file: File::default(),
                })
            }
            Err(e) => return Err(format!("cannot open {shown}: {e}")),
        };
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {shown}: {e}"))?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(format!("{shown} is larger than {MAX_BYTES} bytes"));
        }
        let file = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{shown} is not valid ({e}): it is the copier's own memory of what it wrote; \
                 move it aside to start again (older manifests are then no longer caught)"
            )
        })?;
        Ok(Generations { path, file })
    }

    /// The memory of `target` (empty when none).
    pub fn of(&self, target: &str) -> TargetGenerations {
        self.file.targets.get(target).cloned().unwrap_or_default()
    }

    /// Remember that `name` on `target` is given `generation`, durably, before it returns.
    pub fn remember(&mut self, target: &str, name: &str, generation: u64) -> Result<(), String> {
        let mut next = self.file.clone();
        let t = next.targets.entry(target.to_owned()).or_default();
        t.highest = t.highest.max(generation);
        t.copies.insert(name.to_owned(), generation);
        let bytes = serde_json::to_vec_pretty(&next).map_err(|e| e.to_string())?;
        durable::write_file(&self.path, &bytes, 0o600)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        self.file = next;
        Ok(())
    }

    /// `Err` when `served` is older than what this machine wrote for `name` on `target`.
    pub fn check(&self, target: &str, name: &str, served: u64) -> Result<(), Older> {
        match self
            .file
            .targets
            .get(target)
            .and_then(|t| t.copies.get(name))
        {
            Some(&wrote) if served < wrote => Err(Older {
                name: name.to_owned(),
                served,
                wrote,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_generations_survive_a_reload_and_catch_an_older_manifest() {
        let dir = tempfile::tempdir().expect("a directory");
        let mut g = Generations::load(dir.path()).expect("empty");
        assert_eq!(g.of("usb").highest, 0);
        g.remember("usb", "@home.x", 3).expect("write");
        g.remember("usb", "@home.x", 5).expect("write");
        let g = Generations::load(dir.path()).expect("reload");
        assert_eq!(g.of("usb").highest, 5);
        assert_eq!(g.check("usb", "@home.x", 5), Ok(()));
        let older = g.check("usb", "@home.x", 3).expect_err("older");
        assert!(older
            .to_string()
            .contains("older manifest of @home.x (generation 3; this machine wrote 5)"));
        assert_eq!(g.check("usb", "@home.y", 1), Ok(()));
        assert_eq!(g.check("nas", "@home.x", 1), Ok(()));
    }

    #[test]
    fn a_damaged_file_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").expect("write");
        let e = Generations::load(dir.path()).expect_err("refused");
        assert!(e.contains("move it aside"), "{e}");
    }
}
