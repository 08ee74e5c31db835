//! What this machine remembers of the generations it wrote to each sealed target, so that
//! a store serving an older (genuine, authenticated) manifest is caught: the MAC proves a
//! manifest is this machine's, not that it is the newest. Kept in
//! `COPIER_STATE_DIR/generations.json`, written durably.
//!
//! It keeps a tombstone for each copy it deleted (its name, UUID, generation and when), so
//! that a store serving a deleted copy's manifest again is caught too: that manifest is
//! genuine and as new as any this machine wrote for its name. The tombstones of a target
//! are bounded ([`MAX_TOMBSTONES`]); past that, the oldest deletions are forgotten.
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

/// Tombstones kept per target: about 200 bytes each in the file, so a few MiB at most,
/// and more deletions than a target's retention makes in years.
pub const MAX_TOMBSTONES: usize = 10_000;

/// One target's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetGenerations {
    /// The highest generation this machine gave a copy on the target.
    pub highest: u64,
    /// Per copy name, the generation this machine last gave it.
    pub copies: BTreeMap<String, u64>,
    /// Per copy name, the copy this machine deleted (absent in files written before
    /// tombstones were kept).
    #[serde(default)]
    pub deleted: BTreeMap<String, Tombstone>,
    /// Per copy name, the generation of the copy this machine stored whole there (its
    /// manifest read back) and has not deleted: a listing without it has lost it. None in
    /// files written before it was kept, until a seal returns or a listing finds one of
    /// this machine's copies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<BTreeMap<String, u64>>,
}

impl TargetGenerations {
    /// The copies stored whole and not deleted (none when not known yet).
    pub fn stored(&self) -> BTreeMap<String, u64> {
        self.sealed.clone().unwrap_or_default()
    }
}

/// A copy this machine deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The deleted copy's UUID (its snapshot's), hyphenated.
    pub uuid: String,
    /// The deleted manifest's generation: a manifest of the name this old or older is the
    /// deleted copy (or an older one) served again.
    pub generation: u64,
    /// When it was deleted (microseconds since the Unix epoch).
    pub deleted_micros: i64,
    /// The delete did not return yet (or failed, or a power cut stopped it): its manifest
    /// still there is the copy being deleted, not one put back. Absent: the delete
    /// returned (and in files written before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
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

/// A manifest this machine knows is not the copy it keeps: an older one than it wrote for
/// its name, or one of a copy it deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    Older {
        name: String,
        served: u64,
        wrote: u64,
    },
    Deleted {
        name: String,
        served: u64,
        deleted: Tombstone,
    },
    /// A copy whose delete on this machine did not finish.
    Deleting {
        name: String,
        served: u64,
        deleted: Tombstone,
    },
}

/// A time as people read it, in UTC (`2026-12-05 14:10:00 UTC`).
fn when(micros: i64) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| format!("{micros} µs after 1970"))
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Older {
                name,
                served,
                wrote,
            } => write!(
                f,
                "the target served an older manifest of {name} (generation {served}; this \
                 machine wrote {wrote}): someone with access to the target put back an old \
                 copy; do not trust this target until you know why, and make a new copy"
            ),
            Stale::Deleted {
                name,
                served,
                deleted,
            } => write!(
                f,
                "the target served a manifest of {name} (generation {served}), a copy that \
                 was deleted on this machine at {} (uuid {}, generation {}): someone with \
                 access to the target put back a deleted copy; do not trust this target until \
                 you know why, and make a new copy",
                when(deleted.deleted_micros),
                deleted.uuid,
                deleted.generation
            ),
            Stale::Deleting {
                name,
                served,
                deleted,
            } => write!(
                f,
                "{name} (generation {served}) is being deleted: its delete on this machine at \
                 {} did not finish; the next copy or delete on this target finishes it",
                when(deleted.deleted_micros)
            ),
        }
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
    /// A tombstone of the name goes: the new copy's generation is higher than the deleted
    /// one's, which is then caught as older.
    pub fn remember(&mut self, target: &str, name: &str, generation: u64) -> Result<(), String> {
        self.change(target, |t| {
            t.highest = t.highest.max(generation);
            t.copies.insert(name.to_owned(), generation);
            t.deleted.remove(name);
            if let Some(sealed) = &mut t.sealed {
                sealed.remove(name);
            }
        })
    }

    /// Remember, durably, that the copy `name` of `generation` on `target` is stored whole.
    pub fn sealed(&mut self, target: &str, name: &str, generation: u64) -> Result<(), String> {
        self.change(target, |t| {
            t.sealed
                .get_or_insert_default()
                .insert(name.to_owned(), generation);
        })
    }

    /// Learn, durably, that each of `found` (a copy name and generation a listing shows,
    /// authenticated) is a copy this machine stored whole, when it is the generation this
    /// machine last gave the name; written only when something is new.
    pub fn learn(&mut self, target: &str, found: &[(String, u64)]) -> Result<(), String> {
        let t = self.of(target);
        let new: Vec<&(String, u64)> = found
            .iter()
            .filter(|(n, g)| {
                t.copies.get(n) == Some(g) && !t.sealed.as_ref().is_some_and(|s| s.contains_key(n))
            })
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        self.change(target, |t| {
            for (n, g) in new {
                t.sealed.get_or_insert_default().insert(n.clone(), *g);
            }
        })
    }

    /// Remember, durably, that the delete of `name` on `target` returned: its tombstone,
    /// if still "deleting", is final.
    pub fn buried(&mut self, target: &str, name: &str) -> Result<(), String> {
        if !self
            .file
            .targets
            .get(target)
            .and_then(|t| t.deleted.get(name))
            .is_some_and(|d| d.deleting)
        {
            return Ok(());
        }
        self.change(target, |t| {
            if let Some(d) = t.deleted.get_mut(name) {
                d.deleting = false;
            }
        })
    }

    /// Remember, durably, that this machine begins to delete the copy `name` on `target`
    /// (`uuid`, `generation`) at `deleted_micros`: its tombstone says "deleting" until
    /// [`Generations::buried`]. Past [`MAX_TOMBSTONES`] on the target, the oldest deletion
    /// is forgotten.
    pub fn bury(
        &mut self,
        target: &str,
        name: &str,
        uuid: &str,
        generation: u64,
        deleted_micros: i64,
    ) -> Result<(), String> {
        self.change(target, |t| {
            t.highest = t.highest.max(generation);
            let wrote = t.copies.remove(name).unwrap_or(0);
            if let Some(sealed) = &mut t.sealed {
                sealed.remove(name);
            }
            t.deleted.insert(
                name.to_owned(),
                Tombstone {
                    uuid: uuid.to_owned(),
                    generation: generation.max(wrote),
                    deleted_micros,
                    deleting: true,
                },
            );
            while t.deleted.len() > MAX_TOMBSTONES {
                let oldest = t
                    .deleted
                    .iter()
                    .min_by_key(|(n, d)| (d.deleted_micros, d.generation, (*n).clone()))
                    .map(|(n, _)| n.clone());
                match oldest {
                    Some(n) => t.deleted.remove(&n),
                    None => break,
                };
            }
        })
    }

    /// Apply `change` to `target`'s memory and write the whole file durably; the memory in
    /// hand changes only once the file is written.
    fn change(
        &mut self,
        target: &str,
        change: impl FnOnce(&mut TargetGenerations),
    ) -> Result<(), String> {
        let mut next = self.file.clone();
        change(next.targets.entry(target.to_owned()).or_default());
        let bytes = serde_json::to_vec_pretty(&next).map_err(|e| e.to_string())?;
        durable::write_file(&self.path, &bytes, 0o600)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        self.file = next;
        Ok(())
    }

    /// `Err` when the manifest of `name` of generation `served` on `target` is older than
    /// what this machine wrote for the name, or is (or is older than) a copy it deleted.
    pub fn check(&self, target: &str, name: &str, served: u64) -> Result<(), Stale> {
        let Some(t) = self.file.targets.get(target) else {
            return Ok(());
        };
        if let Some(&wrote) = t.copies.get(name) {
            if served < wrote {
                return Err(Stale::Older {
                    name: name.to_owned(),
                    served,
                    wrote,
                });
            }
        }
        match t.deleted.get(name) {
            Some(d) if served <= d.generation && d.deleting => Err(Stale::Deleting {
                name: name.to_owned(),
                served,
                deleted: d.clone(),
            }),
            Some(d) if served <= d.generation => Err(Stale::Deleted {
                name: name.to_owned(),
                served,
                deleted: d.clone(),
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
    fn a_deleted_copy_is_caught_until_a_newer_copy_of_its_name_is_written() {
        let dir = tempfile::tempdir().expect("a directory");
        let mut g = Generations::load(dir.path()).expect("empty");
        g.remember("usb", "@home.x", 3).expect("write");
        // 2026-12-05 14:10:00 UTC.
        g.bury("usb", "@home.x", "u-x", 3, 1_796_479_800_000_000)
            .expect("write");
        // The delete did not return yet: the copy still served is the one being deleted.
        let deleting = g.check("usb", "@home.x", 3).expect_err("deleting");
        assert!(matches!(deleting, Stale::Deleting { .. }), "{deleting}");
        assert!(
            deleting.to_string().contains("is being deleted"),
            "{deleting}"
        );
        let g = Generations::load(dir.path()).expect("reload");
        assert!(matches!(
            g.check("usb", "@home.x", 3),
            Err(Stale::Deleting { .. })
        ));
        let mut g = g;
        g.buried("usb", "@home.x").expect("write");
        let g2 = Generations::load(dir.path()).expect("reload");
        let stale = g2.check("usb", "@home.x", 3).expect_err("deleted");
        assert!(
            stale.to_string().contains(
                "a copy that was deleted on this machine at 2026-12-05 14:10:00 UTC (uuid u-x, generation 3)"
            ),
            "{stale}"
        );
        assert!(g2.check("usb", "@home.x", 2).is_err());
        assert_eq!(g2.check("usb", "@home.y", 3), Ok(()));
        // Copied again: the new copy is good, the deleted one caught as older.
        let mut g = g2;
        g.remember("usb", "@home.x", 7).expect("write");
        assert_eq!(g.check("usb", "@home.x", 7), Ok(()));
        assert!(matches!(
            g.check("usb", "@home.x", 3),
            Err(Stale::Older { .. })
        ));
    }

    #[test]
    fn the_tombstones_are_bounded_the_oldest_forgotten() {
        let dir = tempfile::tempdir().expect("a directory");
        let mut g = Generations::load(dir.path()).expect("empty");
        let mut next = g.file.clone();
        let t = next.targets.entry("usb".into()).or_default();
        for i in 0..MAX_TOMBSTONES as u64 {
            t.deleted.insert(
                format!("@home.{i:05}"),
                Tombstone {
                    uuid: format!("u{i}"),
                    generation: i + 1,
                    deleted_micros: i as i64,
                    deleting: false,
                },
            );
        }
        g.file = next;
        g.bury("usb", "@home.new", "u-new", 99_999, 1 << 50)
            .expect("write");
        let g = Generations::load(dir.path()).expect("reload");
        let t = g.of("usb");
        assert_eq!(t.deleted.len(), MAX_TOMBSTONES);
        assert!(!t.deleted.contains_key("@home.00000"));
        assert!(t.deleted.contains_key("@home.00001"));
        assert!(t.deleted.contains_key("@home.new"));
        let bytes = std::fs::metadata(dir.path().join(FILE_NAME))
            .expect("file")
            .len();
        assert!(bytes < MAX_BYTES / 4, "{bytes} bytes");
    }

    #[test]
    fn a_file_without_tombstones_reads() {
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(
            dir.path().join(FILE_NAME),
            br#"{"targets": {"usb": {"highest": 4, "copies": {"@home.x": 4}}}}"#,
        )
        .expect("write");
        let g = Generations::load(dir.path()).expect("reads");
        assert_eq!(g.of("usb").highest, 4);
        assert!(g.of("usb").deleted.is_empty());
    }

    #[test]
    fn stored_copies_are_kept_until_deleted_and_learned_in_files_from_before() {
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(
            dir.path().join(FILE_NAME),
            br#"{"targets": {"usb": {"highest": 4, "copies": {"@home.x": 4, "@home.y": 2}}}}"#,
        )
        .expect("write");
        let mut g = Generations::load(dir.path()).expect("reads");
        assert_eq!(g.of("usb").sealed, None, "not known yet");
        // A listing finds @home.x as written, and @home.y at another generation.
        g.learn("usb", &[("@home.x".into(), 4), ("@home.y".into(), 1)])
            .expect("write");
        let g = Generations::load(dir.path()).expect("reload");
        assert_eq!(
            g.of("usb").stored(),
            BTreeMap::from([("@home.x".to_owned(), 4)])
        );
        let mut g = g;
        g.remember("usb", "@home.z", 5).expect("write");
        assert!(
            !g.of("usb").stored().contains_key("@home.z"),
            "not yet whole"
        );
        g.sealed("usb", "@home.z", 5).expect("write");
        assert!(g.of("usb").stored().contains_key("@home.z"));
        g.bury("usb", "@home.x", "u-x", 4, 0).expect("write");
        let g = Generations::load(dir.path()).expect("reload");
        assert_eq!(
            g.of("usb").stored(),
            BTreeMap::from([("@home.z".to_owned(), 5)])
        );
    }

    #[test]
    fn a_damaged_file_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").expect("write");
        let e = Generations::load(dir.path()).expect_err("refused");
        assert!(e.contains("move it aside"), "{e}");
    }
}
