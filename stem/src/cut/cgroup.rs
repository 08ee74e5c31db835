//! The cgroup v2 freezer, by files: `cgroup.freeze` (write `1` or `0`) and `cgroup.events`
//! (`frozen 1` once every task in the cgroup and beneath it has stopped).

use std::path::{Path, PathBuf};

use layout::cut::UnitName;

/// How deep beneath the root a unit's cgroup may be (`system.slice/x.slice/y.service` and
/// the like); systemd's trees are shallow.
const MAX_DEPTH: usize = 8;
/// Most directories looked at while finding a unit, so that a huge tree costs a bounded time.
const MAX_DIRS: usize = 20_000;

/// The cgroup directory named `unit` beneath `root` (as systemd names a unit's cgroup), or
/// none when the unit has no cgroup (it is not running). Two of that name is an error.
pub fn find(root: &Path, unit: &UnitName) -> Result<Option<PathBuf>, String> {
    if !root.join("cgroup.procs").is_file() {
        return Err(format!(
            "{} is not a cgroup v2 directory (no cgroup.procs); give the stem --cgroup-root",
            root.display()
        ));
    }
    let mut found: Option<PathBuf> = None;
    let mut seen = 0usize;
    let mut level = vec![root.to_path_buf()];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for dir in level {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                // cgroupfs has no symlinks; a file type that is not a directory is a knob.
                if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    continue;
                }
                seen += 1;
                if seen > MAX_DIRS {
                    return Err(format!(
                        "more than {MAX_DIRS} cgroups beneath {}; give the stem a narrower --cgroup-root",
                        root.display()
                    ));
                }
                let path = entry.path();
                if entry.file_name().as_encoded_bytes() == unit.as_str().as_bytes() {
                    if let Some(first) = &found {
                        return Err(format!(
                            "two cgroups are named {unit}: {} and {}",
                            first.display(),
                            path.display()
                        ));
                    }
                    found = Some(path);
                } else {
                    next.push(path);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(found)
}

/// Ask the kernel to freeze (`true`) or thaw (`false`) the cgroup `dir`.
pub fn set_frozen(dir: &Path, frozen: bool) -> Result<(), String> {
    let file = dir.join("cgroup.freeze");
    std::fs::write(&file, if frozen { "1" } else { "0" })
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Whether the cgroup `dir` reports every task stopped (`frozen 1` in `cgroup.events`).
pub fn is_frozen(dir: &Path) -> Result<bool, String> {
    let file = dir.join("cgroup.events");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    Ok(text.lines().any(|l| l.trim() == "frozen 1"))
}
