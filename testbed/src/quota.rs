//! Oracles for space accounting, from `btrfs-progs` (never the code under test): Btrfs
//! quotas turned on for a test's own filesystem and rescanned, and the tree blocks of each
//! subvolume as `btrfs inspect-internal dump-tree` reads them from the device.
//!
//! Quotas count data extents and tree blocks together; the tree blocks of a subvolume are
//! counted apart here so that a test can hold the data part exactly (adr/0029).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::time::{Duration, Instant};

use crate::{path_str, run, LoopFs};

/// One qgroup's numbers, in bytes (`btrfs qgroup show --raw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qgroup {
    pub referenced: u64,
    pub exclusive: u64,
}

/// Per subvolume id: the tree blocks its tree reaches, and how many of them only it reaches.
pub type TreeBlocks = BTreeMap<u64, (u64, u64)>;

impl LoopFs {
    /// `btrfs quota enable` on this filesystem.
    pub fn enable_quotas(&self) -> io::Result<()> {
        run("btrfs", &["quota", "enable", &path_str(self.top())?]).map(drop)
    }

    /// `btrfs quota rescan -w`: recount every qgroup from scratch and wait; returns how long
    /// it took.
    pub fn quota_rescan(&self) -> io::Result<Duration> {
        let start = Instant::now();
        run("btrfs", &["quota", "rescan", "-w", &path_str(self.top())?])?;
        Ok(start.elapsed())
    }

    /// Every level-0 qgroup (one per subvolume), by subvolume id.
    pub fn qgroups(&self) -> io::Result<BTreeMap<u64, Qgroup>> {
        let out = run(
            "btrfs",
            &["qgroup", "show", "--raw", &path_str(self.top())?],
        )?;
        let mut map = BTreeMap::new();
        for line in out.lines() {
            let mut words = line.split_whitespace();
            let (Some(id), Some(rfer), Some(excl)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let Some(id) = id.strip_prefix("0/").and_then(|i| i.parse().ok()) else {
                continue;
            };
            let (Ok(referenced), Ok(exclusive)) = (rfer.parse(), excl.parse()) else {
                continue;
            };
            map.insert(
                id,
                Qgroup {
                    referenced,
                    exclusive,
                },
            );
        }
        Ok(map)
    }

    /// Make the level-1 qgroup `1/n` and put the subvolumes `ids` in it (its exclusive is then
    /// what they hold together and nobody else; rescan before reading it).
    pub fn qgroup_of(&self, n: u64, ids: &[u64]) -> io::Result<()> {
        let top = path_str(self.top())?;
        let group = format!("1/{n}");
        run("btrfs", &["qgroup", "create", &group, &top])?;
        for id in ids {
            run(
                "btrfs",
                &[
                    "qgroup",
                    "assign",
                    "--no-rescan",
                    &format!("0/{id}"),
                    &group,
                    &top,
                ],
            )?;
        }
        Ok(())
    }

    /// Every level-1 qgroup, by its number.
    pub fn qgroups_level1(&self) -> io::Result<BTreeMap<u64, Qgroup>> {
        let out = run(
            "btrfs",
            &["qgroup", "show", "--raw", &path_str(self.top())?],
        )?;
        let mut map = BTreeMap::new();
        for line in out.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let Some(n) = w.first().and_then(|id| id.strip_prefix("1/")?.parse().ok()) else {
                continue;
            };
            if let (Some(Ok(referenced)), Some(Ok(exclusive))) =
                (w.get(1).map(|v| v.parse()), w.get(2).map(|v| v.parse()))
            {
                map.insert(
                    n,
                    Qgroup {
                        referenced,
                        exclusive,
                    },
                );
            }
        }
        Ok(map)
    }

    /// The filesystem's tree block size (`nodesize` in the superblock).
    pub fn nodesize(&self) -> io::Result<u64> {
        self.superblock_field("nodesize")
    }

    /// For each subvolume id in `ids`: the number of tree blocks its tree reaches, and how
    /// many of them no other tree of `ids` reaches, read from the device by
    /// `btrfs inspect-internal dump-tree -t ID` after a commit (the device's page cache is
    /// flushed first, so nothing stale is read).
    pub fn tree_blocks(&self, ids: &[u64]) -> io::Result<TreeBlocks> {
        Ok(self.tree_blocks_of(ids, &[])?.0)
    }

    /// As [`LoopFs::tree_blocks`], and also how many tree blocks are reached by members of
    /// `set` (a part of `ids`) and by no other tree of `ids`.
    pub fn tree_blocks_of(&self, ids: &[u64], set: &[u64]) -> io::Result<(TreeBlocks, u64)> {
        run("btrfs", &["filesystem", "sync", &path_str(self.top())?])?;
        run("blockdev", &["--flushbufs", &path_str(self.device())?])?;
        let mut blocks: HashMap<u64, HashSet<u64>> = HashMap::new();
        for id in ids {
            let out = run(
                "btrfs",
                &[
                    "inspect-internal",
                    "dump-tree",
                    "-t",
                    &id.to_string(),
                    &path_str(self.device())?,
                ],
            )?;
            let mine: HashSet<u64> = out
                .lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    match w.next() {
                        Some("leaf" | "node") => w.next()?.parse().ok(),
                        _ => None,
                    }
                })
                .collect();
            if mine.is_empty() {
                return Err(io::Error::other(format!(
                    "testbed: dump-tree of tree {id} shows no blocks:\n{out}"
                )));
            }
            blocks.insert(*id, mine);
        }
        let mut holders: HashMap<u64, u32> = HashMap::new();
        let mut outside: HashSet<u64> = HashSet::new();
        for (id, mine) in &blocks {
            for b in mine {
                *holders.entry(*b).or_default() += 1;
                if !set.contains(id) {
                    outside.insert(*b);
                }
            }
        }
        let within: HashSet<u64> = set
            .iter()
            .filter_map(|id| blocks.get(id))
            .flatten()
            .filter(|b| !outside.contains(*b))
            .copied()
            .collect();
        let each = blocks
            .iter()
            .map(|(id, mine)| {
                let only = mine.iter().filter(|b| holders[*b] == 1).count() as u64;
                (*id, (mine.len() as u64, only))
            })
            .collect();
        Ok((each, within.len() as u64))
    }
}
