//! A log of every write and flush a test machine sent to its disk, in the dm-log-writes format
//! that qemu's `blklogwrites` block driver writes, and its replay onto a copy of the disk.
//!
//! Replaying the first `n` entries onto the disk as it was before the boot gives the disk a
//! power cut right after the `n`-th completed request would leave, when nothing the disk
//! acknowledged before it is lost and nothing after it was written (adr/0008, amended).
//!
//! The format (all little-endian), as qemu's driver and the kernel's dm-log-writes write it:
//! sector 0 of the log holds the super block (`magic`, `version`, `nr_entries`, `sectorsize`:
//! u64, u64, u64, u32); the entries follow from sector 1, each one log sector holding its
//! header (`sector`, `nr_sectors`, `flags`, `data_len`: four u64) and then, unless it is a
//! discard, `nr_sectors` sectors of the data written. `sector` and `nr_sectors` count log
//! sectors (`sectorsize` bytes). A flush is an entry of no sectors with the FLUSH flag; a
//! write of zeroes carries its zeroes as data; a mark (the kernel's, never qemu's) keeps its
//! `data_len` bytes of text in its header's sector, right after the header.
//!
//! qemu rewrites the super block (its `nr_entries`) only at a flush, so a log whose machine
//! was killed may hold entries past the count: they are read too while they are whole and
//! well-formed, and told apart ([`WriteLog::counted`]).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use crate::{shown, Error, IoContext as _, Result};

/// The super block's magic number.
pub const MAGIC: u64 = 0x006a_7366_7773_6872;
/// The only version of the format.
pub const VERSION: u64 = 1;

/// The disk was told to make everything it acknowledged before this durable.
pub const FLUSH: u64 = 1 << 0;
/// This write was durable when acknowledged.
pub const FUA: u64 = 1 << 1;
/// These sectors were discarded (no data in the log).
pub const DISCARD: u64 = 1 << 2;
/// A named point in the log (no sectors; its text in the header's sector).
pub const MARK: u64 = 1 << 3;
/// The kernel's hint that a write is metadata (newer dm-log-writes); changes nothing here.
pub const METADATA: u64 = 1 << 4;
const KNOWN_FLAGS: u64 = FLUSH | FUA | DISCARD | MARK | METADATA;

const SUPER_BYTES: usize = 8 + 8 + 8 + 4;
const HEADER_BYTES: usize = 4 * 8;

/// What one entry of the log is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Data written at `sector` (its bytes are in the log); `fua` when durable at once.
    Write { fua: bool },
    /// Sectors discarded: their content is undefined afterwards (replayed as zeroes).
    Discard,
    /// A flush of the disk's cache, with no data.
    Flush,
    /// A mark and its text.
    Mark(String),
}

/// One entry: a request the disk completed, in the order it completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its place in the log, from 0.
    pub index: usize,
    pub kind: Kind,
    /// The first sector it touches, in log sectors.
    pub sector: u64,
    /// How many sectors it touches.
    pub nr_sectors: u64,
    /// The raw flags.
    pub flags: u64,
    /// Where its data starts in the log file (writes only).
    data_at: Option<u64>,
}

impl Entry {
    /// True when the disk's cache was flushed here: everything before this entry is durable.
    /// (A FUA write is durable itself but makes nothing before it durable.)
    pub fn is_flush(&self) -> bool {
        self.flags & FLUSH != 0
    }

    /// True for a write or a discard: an entry that changes the disk.
    pub fn changes_disk(&self) -> bool {
        matches!(self.kind, Kind::Write { .. } | Kind::Discard)
    }
}

/// A parsed log, reading its data from the file as entries are replayed.
#[derive(Debug)]
pub struct WriteLog {
    path: PathBuf,
    file: File,
    /// Bytes in a log sector (and a disk sector, as the log counts them).
    pub sector_size: u64,
    /// How many entries the super block counts (up to the last flush qemu saw).
    pub counted: u64,
    pub entries: Vec<Entry>,
    /// True when the log ends in a torn entry (its machine was killed while writing it);
    /// that entry is not in [`WriteLog::entries`].
    pub torn_tail: bool,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

impl WriteLog {
    /// Read the log at `path`.
    pub fn open(path: &Path) -> Result<WriteLog> {
        let file = File::open(path).context(|| format!("opening the write log {}", shown(path)))?;
        let len = file
            .metadata()
            .context(|| format!("reading the size of {}", shown(path)))?
            .len();
        let bad = |why: String| Error::Other(format!("write log {}: {why}", shown(path)));
        let mut sup = [0u8; SUPER_BYTES];
        file.read_exact_at(&mut sup, 0)
            .map_err(|e| bad(format!("no super block ({e})")))?;
        let magic = u64_at(&sup, 0);
        if magic != MAGIC {
            return Err(bad(format!("magic {magic:#x}, not {MAGIC:#x}")));
        }
        let version = u64_at(&sup, 8);
        if version != VERSION {
            return Err(bad(format!("version {version}, not {VERSION}")));
        }
        let counted = u64_at(&sup, 16);
        let sector_size = u64::from(u32::from_le_bytes([sup[24], sup[25], sup[26], sup[27]]));
        if !sector_size.is_power_of_two() || sector_size < HEADER_BYTES as u64 {
            return Err(bad(format!("sector size {sector_size}")));
        }
        let mut entries = Vec::new();
        let mut torn_tail = false;
        let mut at = sector_size;
        let mut header = vec![0u8; sector_size as usize];
        loop {
            let index = entries.len();
            let within = index < usize::try_from(counted).unwrap_or(usize::MAX);
            if at + sector_size > len {
                if within {
                    return Err(bad(format!(
                        "the super block counts {counted} entries, the file ends at entry {index}"
                    )));
                }
                // Past the count, a header that is not all there is a torn tail, or none.
                torn_tail = at < len;
                break;
            }
            file.read_exact_at(&mut header, at)
                .map_err(|e| bad(format!("entry {index}: {e}")))?;
            let (sector, nr_sectors, flags, data_len) = (
                u64_at(&header, 0),
                u64_at(&header, 8),
                u64_at(&header, 16),
                u64_at(&header, 24),
            );
            let blank = sector == 0 && nr_sectors == 0 && flags == 0 && data_len == 0;
            let well_formed = flags & !KNOWN_FLAGS == 0
                && !blank
                && (flags & MARK == 0 || data_len <= sector_size - HEADER_BYTES as u64);
            if !well_formed {
                if within {
                    return Err(bad(format!(
                        "entry {index} at byte {at} is not an entry (sector {sector}, \
                         {nr_sectors} sectors, flags {flags:#x}, data_len {data_len})"
                    )));
                }
                break;
            }
            let data_bytes = if flags & DISCARD != 0 {
                0
            } else {
                nr_sectors
                    .checked_mul(sector_size)
                    .ok_or_else(|| bad(format!("entry {index}: {nr_sectors} sectors")))?
            };
            let data_at = at + sector_size;
            if data_at + data_bytes > len {
                if within {
                    return Err(bad(format!("entry {index}: its data runs past the file")));
                }
                torn_tail = true;
                break;
            }
            let kind = if flags & MARK != 0 {
                let text = &header[HEADER_BYTES..HEADER_BYTES + data_len as usize];
                Kind::Mark(String::from_utf8_lossy(text).into_owned())
            } else if flags & DISCARD != 0 {
                Kind::Discard
            } else if nr_sectors == 0 && flags & FLUSH != 0 {
                Kind::Flush
            } else {
                Kind::Write {
                    fua: flags & FUA != 0,
                }
            };
            entries.push(Entry {
                index,
                data_at: matches!(kind, Kind::Write { .. }).then_some(data_at),
                kind,
                sector,
                nr_sectors,
                flags,
            });
            at = data_at + data_bytes;
        }
        Ok(WriteLog {
            path: path.to_owned(),
            file,
            sector_size,
            counted,
            entries,
            torn_tail,
        })
    }

    /// The data one write entry carries.
    pub fn data(&self, entry: &Entry) -> Result<Vec<u8>> {
        let Some(at) = entry.data_at else {
            return Ok(Vec::new());
        };
        let mut data = vec![0u8; (entry.nr_sectors * self.sector_size) as usize];
        self.file
            .read_exact_at(&mut data, at)
            .context(|| format!("reading entry {} of {}", entry.index, shown(&self.path)))?;
        Ok(data)
    }

    /// Do the entries in `range` to the disk image `image` (open for writing), in order: a
    /// write writes its data, a discard writes zeroes, a flush or a mark does nothing.
    pub fn replay(&self, range: Range<usize>, image: &File) -> Result<()> {
        self.replay_only(range, image)
    }

    /// Do the entries at `indices` (in the order given) to `image`, as [`WriteLog::replay`].
    pub fn replay_only(
        &self,
        indices: impl IntoIterator<Item = usize>,
        image: &File,
    ) -> Result<()> {
        for i in indices {
            let entry = &self.entries[i];
            let at = entry.sector * self.sector_size;
            let bytes = match entry.kind {
                Kind::Write { .. } => self.data(entry)?,
                Kind::Discard => vec![0u8; (entry.nr_sectors * self.sector_size) as usize],
                Kind::Flush | Kind::Mark(_) => continue,
            };
            image
                .write_all_at(&bytes, at)
                .context(|| format!("replaying entry {} at byte {at}", entry.index))?;
        }
        Ok(())
    }

    /// The disks a power cut can leave, in log order ([`crash_states`]).
    pub fn crash_states(&self, max_subset_writes: usize) -> Vec<CrashState> {
        crash_states(&self.entries, max_subset_writes)
    }

    /// Indices of the entries that flush.
    pub fn flushes(&self) -> impl Iterator<Item = usize> + '_ {
        self.entries
            .iter()
            .filter(|e| e.is_flush())
            .map(|e| e.index)
    }
}

/// A disk a power cut can leave: every entry before `flushed` reached it (the last flush
/// before the cut made them durable), and of the writes after that flush, exactly `kept`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashState {
    /// The number of entries that are durable: up to and including the last flush.
    pub flushed: usize,
    /// The writes (and discards) after it that reached the disk, in log order.
    pub kept: Vec<usize>,
    /// `Some(n)` when this disk is the log's first `n` entries: a cut right after entry
    /// `n - 1` with nothing lost from the disk's cache.
    pub prefix: Option<usize>,
}

impl CrashState {
    /// The entries to replay onto the disk as it was before the log, in order.
    pub fn entries(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.flushed).chain(self.kept.iter().copied())
    }
}

impl std::fmt::Display for CrashState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.prefix {
            Some(n) => write!(f, "the first {n} entries"),
            None => write!(
                f,
                "the first {} entries and of the writes after them only {:?}",
                self.flushed, self.kept
            ),
        }
    }
}

/// Every disk a power cut during the logged run can leave, under the one rule a disk with a
/// write cache keeps: what was acknowledged before a flush is durable after it; of the writes
/// since the last flush, any may have reached the disk or not.
///
/// So, after each flush (and at the start), the subsets of the writes up to the next flush
/// (each subset replayed in log order, which decides between two writes of one sector): all
/// of them while there are at most `max_subset_writes`, else each prefix, each with one write
/// left out, and each write alone. The whole set of an interval that ends in a flush is the
/// next interval's empty one and is not repeated. Every prefix of the log is among them.
pub fn crash_states(entries: &[Entry], max_subset_writes: usize) -> Vec<CrashState> {
    let mut states = Vec::new();
    let mut start = 0;
    loop {
        let end = entries[start..]
            .iter()
            .position(Entry::is_flush)
            .map(|p| start + p);
        let stop = end.unwrap_or(entries.len());
        let writes: Vec<usize> = (start..stop)
            .filter(|&i| entries[i].changes_disk())
            .collect();
        let k = writes.len();
        let mut subsets: Vec<Vec<usize>> = Vec::new();
        if k <= max_subset_writes {
            for mask in 0u64..(1u64 << k) {
                subsets.push(
                    (0..k)
                        .filter(|b| mask & (1 << b) != 0)
                        .map(|b| writes[b])
                        .collect(),
                );
            }
            // Prefixes first, in order, then the rest: easier to read in a report.
            subsets.sort_by_key(|s| {
                let is_prefix = s.iter().zip(&writes).all(|(a, b)| a == b);
                (!is_prefix, s.len(), s.clone())
            });
        } else {
            for j in 0..=k {
                subsets.push(writes[..j].to_vec());
            }
            for left_out in 0..k {
                let mut s = writes.clone();
                s.remove(left_out);
                subsets.push(s);
            }
            for &one in &writes {
                subsets.push(vec![one]);
            }
            subsets.sort_by_key(|s| {
                let is_prefix = s.iter().zip(&writes).all(|(a, b)| a == b);
                (!is_prefix, s.len(), s.clone())
            });
            subsets.dedup();
        }
        for kept in subsets {
            if end.is_some() && kept.len() == k {
                continue;
            }
            let j = kept.len();
            let prefix = (kept[..] == writes[..j]).then(|| match j {
                0 => start,
                _ => writes[j - 1] + 1,
            });
            states.push(CrashState {
                flushed: start,
                kept,
                prefix,
            });
        }
        match end {
            Some(flush) => start = flush + 1,
            None => break,
        }
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real log: qemu 7.2's `blklogwrites` under `qemu-io` on an 1 MiB disk, made with
    /// (`tests/data/README.md`):
    /// write 0xab at 4096 (4 KiB), flush, write 0xcd at 0 (512 B), write zeroes at 8192
    /// (1 KiB), discard 16384 (4 KiB), write 0x11 at 65536 (8 KiB), then qemu-io's own
    /// flushes as it closes.
    const QEMU_IO_LOG: &[u8] = include_bytes!("../tests/data/qemu-io.blklogwrites");

    fn fixture(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        std::fs::write(&path, bytes).expect("write log");
        (dir, path)
    }

    #[test]
    fn a_real_qemu_log_parses_entry_by_entry() {
        let (_dir, path) = fixture(QEMU_IO_LOG);
        let log = WriteLog::open(&path).expect("parses");
        assert_eq!(log.sector_size, 512);
        assert_eq!(log.counted, log.entries.len() as u64);
        assert!(!log.torn_tail);
        let seen: Vec<(Kind, u64, u64)> = log
            .entries
            .iter()
            .map(|e| (e.kind.clone(), e.sector, e.nr_sectors))
            .collect();
        let write = Kind::Write { fua: false };
        assert_eq!(
            seen[..7],
            [
                (write.clone(), 8, 8),
                (Kind::Flush, 0, 0),
                (write.clone(), 0, 1),
                (write.clone(), 16, 2),
                (Kind::Flush, 0, 0),
                (Kind::Discard, 32, 8),
                (write.clone(), 128, 16),
            ]
        );
        assert!(seen[7..].iter().all(|(k, _, _)| *k == Kind::Flush));
        assert_eq!(log.data(&log.entries[0]).expect("data"), vec![0xab; 4096]);
        assert_eq!(log.data(&log.entries[2]).expect("data"), vec![0xcd; 512]);
        assert_eq!(log.data(&log.entries[3]).expect("data"), vec![0; 1024]);
        assert_eq!(log.data(&log.entries[6]).expect("data"), vec![0x11; 8192]);
        assert_eq!(
            log.flushes().collect::<Vec<_>>()[..2],
            [1, 4],
            "the flushes"
        );
    }

    #[test]
    fn a_prefix_replays_onto_a_copy_of_the_disk() {
        let (dir, path) = fixture(QEMU_IO_LOG);
        let log = WriteLog::open(&path).expect("parses");
        let image_path = dir.path().join("disk");
        let image = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&image_path)
            .expect("image");
        image.set_len(1 << 20).expect("size");
        image.write_all_at(&[0x77; 512], 16384).expect("seed");
        image.write_all_at(&[0x55; 1024], 8192).expect("seed");
        // Up to the first flush: only the first write.
        log.replay(0..2, &image).expect("replay");
        let disk = std::fs::read(&image_path).expect("read");
        assert_eq!(&disk[4096..8192], &[0xab; 4096][..]);
        assert_eq!(&disk[0..512], &[0; 512][..]);
        assert_eq!(&disk[8192..9216], &[0x55; 1024][..]);
        // The rest: the zeroes, the discard (zeroes too) and the last write land.
        log.replay(2..log.entries.len(), &image).expect("replay");
        let disk = std::fs::read(&image_path).expect("read");
        assert_eq!(&disk[0..512], &[0xcd; 512][..]);
        assert_eq!(&disk[8192..9216], &[0; 1024][..]);
        assert_eq!(&disk[16384..16896], &[0; 512][..]);
        assert_eq!(&disk[65536..73728], &[0x11; 8192][..]);
    }

    #[test]
    fn entries_past_the_count_are_read_and_a_torn_one_is_left_out() {
        // The super block counts only up to the first flush, as after a kill before the next.
        let mut bytes = QEMU_IO_LOG.to_vec();
        bytes[16..24].copy_from_slice(&2u64.to_le_bytes());
        let (_dir, path) = fixture(&bytes);
        let log = WriteLog::open(&path).expect("parses");
        assert_eq!(log.counted, 2);
        assert_eq!(
            log.entries.len(),
            WriteLog::open(&fixture(QEMU_IO_LOG).1)
                .map(|l| l.entries.len())
                .unwrap_or(0)
        );
        assert!(!log.torn_tail);
        // Cut inside the last write's data (entry 6 starts at byte 9216, its data at 9728).
        let (_dir, path) = fixture(&bytes[..9728 + 100]);
        let log = WriteLog::open(&path).expect("parses");
        assert_eq!(log.entries.len(), 6);
        assert!(log.torn_tail);
        // Within the count, a short file is an error, not a shorter log.
        let (_dir, path) = fixture(&QEMU_IO_LOG[..9728 + 100]);
        let err = WriteLog::open(&path).expect_err("too short for its count");
        assert!(err.to_string().contains("runs past the file"), "{err}");
    }

    #[test]
    fn what_is_not_a_log_is_refused() {
        let (_dir, path) = fixture(&[0u8; 1024]);
        let err = WriteLog::open(&path).expect_err("no magic");
        assert!(err.to_string().contains("magic"), "{err}");
        let mut bytes = QEMU_IO_LOG.to_vec();
        bytes[8] = 2;
        let (_dir, path) = fixture(&bytes);
        let err = WriteLog::open(&path).expect_err("version 2");
        assert!(err.to_string().contains("version 2"), "{err}");
        // An unknown flag within the count.
        let mut bytes = QEMU_IO_LOG.to_vec();
        bytes[512 + 16] = 0x40;
        let (_dir, path) = fixture(&bytes);
        let err = WriteLog::open(&path).expect_err("flag 0x40");
        assert!(err.to_string().contains("is not an entry"), "{err}");
    }

    #[test]
    fn a_mark_keeps_its_text() {
        // As the kernel writes one: a header sector holding the text, no data sectors.
        let mut bytes = vec![0u8; 1024];
        bytes[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[8..16].copy_from_slice(&VERSION.to_le_bytes());
        bytes[16..24].copy_from_slice(&1u64.to_le_bytes());
        bytes[24..28].copy_from_slice(&512u32.to_le_bytes());
        bytes[512 + 16..512 + 24].copy_from_slice(&MARK.to_le_bytes());
        bytes[512 + 24..512 + 32].copy_from_slice(&4u64.to_le_bytes());
        bytes[512 + 32..512 + 36].copy_from_slice(b"copy");
        let (_dir, path) = fixture(&bytes);
        let log = WriteLog::open(&path).expect("parses");
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.entries[0].kind, Kind::Mark("copy".into()));
        assert!(!log.entries[0].changes_disk());
    }

    fn synthetic(kinds: &str) -> Vec<Entry> {
        kinds
            .chars()
            .enumerate()
            .map(|(index, c)| {
                let (kind, flags) = match c {
                    'w' => (Kind::Write { fua: false }, 0),
                    'd' => (Kind::Discard, DISCARD),
                    'f' => (Kind::Flush, FLUSH),
                    _ => (Kind::Mark(String::new()), MARK),
                };
                Entry {
                    index,
                    kind,
                    sector: index as u64,
                    nr_sectors: 1,
                    flags,
                    data_at: None,
                }
            })
            .collect()
    }

    fn shown_states(states: &[CrashState]) -> Vec<String> {
        states
            .iter()
            .map(|s| match s.prefix {
                Some(n) => format!("{}+{:?}=p{n}", s.flushed, s.kept),
                None => format!("{}+{:?}", s.flushed, s.kept),
            })
            .collect()
    }

    #[test]
    fn crash_states_are_every_subset_of_the_writes_since_the_last_flush() {
        let (_dir, path) = fixture(QEMU_IO_LOG);
        let log = WriteLog::open(&path).expect("parses");
        // w f w w f d w f f
        assert_eq!(
            shown_states(&log.crash_states(8)),
            [
                "0+[]=p0", "2+[]=p2", "2+[2]=p3", "2+[3]", "5+[]=p5", "5+[5]=p6", "5+[6]",
                "9+[]=p9"
            ]
        );
        // A mark changes nothing; a flushed interval's whole set is the next one's start; an
        // unflushed tail is kept whole too.
        assert_eq!(
            shown_states(&crash_states(&synthetic("wmfww"), 8)),
            ["0+[]=p0", "3+[]=p3", "3+[3]=p4", "3+[3, 4]=p5", "3+[4]"]
        );
    }

    #[test]
    fn past_the_limit_an_interval_gives_prefixes_one_left_out_and_each_alone() {
        let states = shown_states(&crash_states(&synthetic("wwwwf"), 2));
        assert_eq!(
            states,
            [
                "0+[]=p0",
                "0+[0]=p1",
                "0+[0, 1]=p2",
                "0+[0, 1, 2]=p3",
                "0+[1]",
                "0+[2]",
                "0+[3]",
                "0+[0, 1, 3]",
                "0+[0, 2, 3]",
                "0+[1, 2, 3]",
                "5+[]=p5"
            ]
        );
    }

    /// Replayed, every prefix of a real log is the disk of one of its crash states, byte for
    /// byte (so checking the crash states checks every prefix).
    #[test]
    fn every_prefix_of_a_real_log_is_a_crash_state() {
        let (dir, path) = fixture(QEMU_IO_LOG);
        let log = WriteLog::open(&path).expect("parses");
        let disk = |entries: &mut dyn Iterator<Item = usize>| -> Vec<u8> {
            let p = dir.path().join("disk");
            let f = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&p)
                .expect("image");
            f.set_len(128 << 10).expect("size");
            f.write_all_at(&[0x77; 128 << 10], 0).expect("seed");
            log.replay_only(entries, &f).expect("replay");
            std::fs::read(&p).expect("read")
        };
        let states: Vec<Vec<u8>> = log
            .crash_states(8)
            .iter()
            .map(|s| disk(&mut s.entries()))
            .collect();
        for n in 0..=log.entries.len() {
            let prefix = disk(&mut (0..n));
            assert!(
                states.contains(&prefix),
                "the first {n} entries are no crash state"
            );
        }
        for s in log.crash_states(8) {
            if let Some(n) = s.prefix {
                assert_eq!(disk(&mut s.entries()), disk(&mut (0..n)), "{s}");
            }
        }
    }
}
