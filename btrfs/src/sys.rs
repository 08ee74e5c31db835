//! The Btrfs ioctls, each a small safe function over `rustix::ioctl`, and the one syscall
//! rustix does not wrap (`open_by_handle_at`, through `libc`): the floor that benchmarks
//! measure [`crate::Dir`] against. Production code uses [`crate::Dir`], which checks names
//! and sources and classifies errors; these return the bare errno.
//!
//! The only module with `unsafe`: every block is an ioctl (or `open_by_handle_at`) whose
//! argument is a plain-data struct of the exact type and size the kernel expects for that
//! opcode (the opcode is computed from that very type), owned by the caller for the duration
//! of the call.
#![allow(unsafe_code)]

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;

use linux_raw_sys::btrfs::{
    btrfs_ioctl_fs_info_args, btrfs_ioctl_get_subvol_info_args, btrfs_ioctl_ino_lookup_args,
    btrfs_ioctl_logical_ino_args, btrfs_ioctl_search_args_v2, btrfs_ioctl_search_key,
    btrfs_ioctl_send_args, btrfs_ioctl_vol_args, btrfs_ioctl_vol_args_v2,
    BTRFS_FIRST_FREE_OBJECTID, BTRFS_IOCTL_MAGIC, BTRFS_SUBVOL_SPEC_BY_ID,
};
use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, Ioctl, IoctlOutput, NoArg, Opcode, Updater};

const MAGIC: u8 = BTRFS_IOCTL_MAGIC as u8;
const SYNC: Opcode = opcode::none(MAGIC, 8);
const SUBVOL_CREATE: Opcode = opcode::write::<btrfs_ioctl_vol_args>(MAGIC, 14);
const INO_LOOKUP: Opcode = opcode::read_write::<btrfs_ioctl_ino_lookup_args>(MAGIC, 18);
const TREE_SEARCH_V2: Opcode = opcode::read_write::<btrfs_ioctl_search_args_v2>(MAGIC, 17);
const SNAP_CREATE_V2: Opcode = opcode::write::<btrfs_ioctl_vol_args_v2>(MAGIC, 23);
const SEND: Opcode = opcode::write::<btrfs_ioctl_send_args>(MAGIC, 38);
const SUBVOL_GETFLAGS: Opcode = opcode::read::<u64>(MAGIC, 25);
const SUBVOL_SETFLAGS: Opcode = opcode::write::<u64>(MAGIC, 26);
const FS_INFO: Opcode = opcode::read::<btrfs_ioctl_fs_info_args>(MAGIC, 31);
const LOGICAL_INO_V2: Opcode = opcode::read_write::<btrfs_ioctl_logical_ino_args>(MAGIC, 59);
const GET_SUBVOL_INFO: Opcode = opcode::read::<btrfs_ioctl_get_subvol_info_args>(MAGIC, 60);
const SNAP_DESTROY_V2: Opcode = opcode::write::<btrfs_ioctl_vol_args_v2>(MAGIC, 63);

/// A zeroed value of a linux-raw-sys ioctl struct.
///
/// # Safety
/// `T` must be plain old data for which all-zero bytes are a valid value (integers,
/// arrays of integers, unions of those, raw pointers): true of every struct used here.
unsafe fn zeroed<T>() -> T {
    // SAFETY: the caller promises all-zero is a valid `T`.
    unsafe { std::mem::zeroed() }
}

/// `BTRFS_IOC_SEND`: write the send stream of the read-only subvolume `fd` into `out`
/// (a pipe or file), incremental against the subvolume with id `parent` when given (which is
/// then also the one clone source). Blocks until the whole stream is written; needs
/// CAP_SYS_ADMIN. A reader that goes away ends it with `EPIPE`.
pub fn send(fd: BorrowedFd<'_>, out: BorrowedFd<'_>, parent: Option<u64>) -> Result<(), Errno> {
    let mut clone_sources: [u64; 1] = [parent.unwrap_or(0)];
    // SAFETY: plain data; all-zero is valid.
    let mut args: btrfs_ioctl_send_args = unsafe { zeroed() };
    args.send_fd = i64::from(out.as_raw_fd());
    if let Some(parent) = parent {
        args.parent_root = parent;
        args.clone_sources_count = 1;
        args.clone_sources = clone_sources.as_mut_ptr();
    }
    // SAFETY: SEND reads a `btrfs_ioctl_send_args`, and through it `clone_sources_count`
    // u64s at `clone_sources`, which lives on this stack frame for the whole call.
    unsafe { ioctl(fd, Updater::<SEND, _>::new(&mut args)) }
}

/// Copy `name`, one path component of any bytes but NUL and `/`, into a C string field (all
/// far longer than 255).
fn put_name(field: &mut [std::ffi::c_char], name: &OsStr) -> Result<(), Errno> {
    let name = name.as_bytes();
    if name.len() > crate::NAME_MAX || name.len() >= field.len() {
        return Err(Errno::NAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::INVAL);
    }
    for (dst, src) in field.iter_mut().zip(name) {
        *dst = *src as std::ffi::c_char;
    }
    field[name.len()] = 0;
    Ok(())
}

/// The id of the subvolume (tree) holding `fd` (`BTRFS_IOC_INO_LOOKUP` with treeid 0 and
/// the first free objectid: the one form the kernel allows without CAP_SYS_ADMIN).
pub fn tree_id(fd: BorrowedFd<'_>) -> Result<u64, Errno> {
    // SAFETY: all-zero is valid for this plain-data struct.
    let mut args: btrfs_ioctl_ino_lookup_args = unsafe { zeroed() };
    args.treeid = 0;
    args.objectid = u64::from(BTRFS_FIRST_FREE_OBJECTID);
    // SAFETY: INO_LOOKUP takes a `btrfs_ioctl_ino_lookup_args` in and out.
    unsafe { ioctl(fd, Updater::<INO_LOOKUP, _>::new(&mut args)) }?;
    Ok(args.treeid)
}

/// The path of inode `ino` within subvolume `tree` (`BTRFS_IOC_INO_LOOKUP`, which follows
/// the inode's first back reference up to the subvolume root; needs CAP_SYS_ADMIN), as
/// bytes relative to that root, without the kernel's trailing `/`. Empty for the root.
pub fn ino_lookup_path(fd: BorrowedFd<'_>, tree: u64, ino: u64) -> Result<Vec<u8>, Errno> {
    // SAFETY: all-zero is valid for this plain-data struct.
    let mut args: btrfs_ioctl_ino_lookup_args = unsafe { zeroed() };
    args.treeid = tree;
    args.objectid = ino;
    // SAFETY: INO_LOOKUP takes a `btrfs_ioctl_ino_lookup_args` in and out.
    unsafe { ioctl(fd, Updater::<INO_LOOKUP, _>::new(&mut args)) }?;
    let mut path: Vec<u8> = args
        .name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    if path.last() == Some(&b'/') {
        path.pop();
    }
    Ok(path)
}

/// `BTRFS_IOC_GET_SUBVOL_INFO` on any fd inside the subvolume (no capability needed).
pub fn get_subvol_info(fd: BorrowedFd<'_>) -> Result<btrfs_ioctl_get_subvol_info_args, Errno> {
    // SAFETY: all-zero is valid for this plain-data struct.
    let mut args: btrfs_ioctl_get_subvol_info_args = unsafe { zeroed() };
    // SAFETY: GET_SUBVOL_INFO writes a `btrfs_ioctl_get_subvol_info_args`.
    unsafe { ioctl(fd, Updater::<GET_SUBVOL_INFO, _>::new(&mut args)) }?;
    Ok(args)
}

/// `BTRFS_IOC_FS_INFO`: the filesystem's UUID (`fsid`), the same for every subvolume of it,
/// on any fd inside it (no capability needed).
pub fn fs_uuid(fd: BorrowedFd<'_>) -> Result<[u8; 16], Errno> {
    // SAFETY: all-zero is valid for this plain-data struct (flags 0: no optional fields asked).
    let mut args: btrfs_ioctl_fs_info_args = unsafe { zeroed() };
    // SAFETY: FS_INFO writes a `btrfs_ioctl_fs_info_args`.
    unsafe { ioctl(fd, Updater::<FS_INFO, _>::new(&mut args)) }?;
    Ok(args.fsid)
}

/// `BTRFS_IOC_SNAP_CREATE_V2`: snapshot the subvolume whose root is `source` as
/// `dest/name`.
pub fn snap_create(
    dest: BorrowedFd<'_>,
    source: BorrowedFd<'_>,
    name: impl AsRef<OsStr>,
    flags: u64,
) -> Result<(), Errno> {
    // SAFETY: all-zero is valid for this plain-data struct (its unions hold integers).
    let mut args: btrfs_ioctl_vol_args_v2 = unsafe { zeroed() };
    args.fd = i64::from(source.as_raw_fd());
    args.flags = flags;
    // SAFETY: writing a field of a union of plain-data members.
    put_name(unsafe { &mut args.__bindgen_anon_2.name }, name.as_ref())?;
    // SAFETY: SNAP_CREATE_V2 reads a `btrfs_ioctl_vol_args_v2`; `source` stays open.
    unsafe { ioctl(dest, Updater::<SNAP_CREATE_V2, _>::new(&mut args)) }
}

/// `BTRFS_IOC_SUBVOL_CREATE`: an empty subvolume `dir/name`.
pub fn subvol_create(dir: BorrowedFd<'_>, name: impl AsRef<OsStr>) -> Result<(), Errno> {
    // SAFETY: all-zero is valid for this plain-data struct.
    let mut args: btrfs_ioctl_vol_args = unsafe { zeroed() };
    put_name(&mut args.name, name.as_ref())?;
    // SAFETY: SUBVOL_CREATE reads a `btrfs_ioctl_vol_args`.
    unsafe { ioctl(dir, Updater::<SUBVOL_CREATE, _>::new(&mut args)) }
}

/// `BTRFS_IOC_SNAP_DESTROY_V2` with `BTRFS_SUBVOL_SPEC_BY_ID`.
pub fn snap_destroy_by_id(fd: BorrowedFd<'_>, id: u64) -> Result<(), Errno> {
    // SAFETY: all-zero is valid for this plain-data struct.
    let mut args: btrfs_ioctl_vol_args_v2 = unsafe { zeroed() };
    args.flags = u64::from(BTRFS_SUBVOL_SPEC_BY_ID);
    args.__bindgen_anon_2.subvolid = id;
    // SAFETY: SNAP_DESTROY_V2 reads a `btrfs_ioctl_vol_args_v2`.
    unsafe { ioctl(fd, Updater::<SNAP_DESTROY_V2, _>::new(&mut args)) }
}

/// The file handle type Btrfs gives an inode without its parent (`FILEID_BTRFS_WITHOUT_PARENT`
/// in the kernel's `include/linux/exportfs.h`), and the length of its `struct btrfs_fid`:
/// objectid, root objectid (the subvolume id), generation.
const FILEID_BTRFS_WITHOUT_PARENT: i32 = 0x4d;
const BTRFS_FID_SIZE_NON_CONNECTABLE: u32 = 8 + 8 + 4;

/// `struct file_handle` followed by the packed `struct btrfs_fid` (its u64 fields fall on
/// 8-byte offsets after the 8-byte header, so `repr(C)` lays them out exactly).
#[repr(C)]
struct BtrfsFileHandle {
    handle_bytes: u32,
    handle_type: i32,
    objectid: u64,
    root_objectid: u64,
    generation: u32,
    _padding: u32,
}

/// Open the directory `ino` of subvolume `subvolume` by its file handle (`open_by_handle_at`,
/// the handle Btrfs gives NFS): no path is walked, so neither the depth of the directory nor
/// the bytes of the names on the way matter, and one descriptor is used. `generation` is the
/// inode's (its INODE_ITEM's); a wrong one is ESTALE. `mount` is any descriptor on a mount of
/// the filesystem. Needs CAP_DAC_READ_SEARCH.
pub fn open_dir_by_handle(
    mount: BorrowedFd<'_>,
    subvolume: u64,
    ino: u64,
    generation: u32,
) -> Result<OwnedFd, Errno> {
    let mut handle = BtrfsFileHandle {
        handle_bytes: BTRFS_FID_SIZE_NON_CONNECTABLE,
        handle_type: FILEID_BTRFS_WITHOUT_PARENT,
        objectid: ino,
        root_objectid: subvolume,
        generation,
        _padding: 0,
    };
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: `handle` is a `struct file_handle` header followed by `handle_bytes` (20) bytes
    // of handle, all inside it and alive for the call; the kernel only reads them.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            std::ptr::addr_of_mut!(handle).cast::<libc::file_handle>(),
            flags,
        )
    };
    if fd < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `BTRFS_IOC_LOGICAL_INO_V2` with `BTRFS_LOGICAL_INO_ARGS_IGNORE_OFFSET`: every
/// (inode, file offset, subvolume id) whose file extent references the data extent at
/// logical address `logical` — the kernel's back-reference walk, the one btdu samples with.
/// `buf` (u64 words, at most 2 MiB of them) receives the triples; the answer is how many
/// triples there are and how many did not fit. Needs CAP_SYS_ADMIN.
pub fn logical_ino(
    fd: BorrowedFd<'_>,
    logical: u64,
    buf: &mut [u64],
) -> Result<(usize, usize), Errno> {
    const HEADER_WORDS: usize = 2; // bytes_left, bytes_missing, elem_cnt, elem_missed: 4 u32
    if buf.len() < HEADER_WORDS + 3 || buf.len() > 2 << 20 {
        return Err(Errno::INVAL);
    }
    // SAFETY: all-zero is valid for this plain-data struct.
    let mut args: btrfs_ioctl_logical_ino_args = unsafe { zeroed() };
    args.logical = logical;
    args.size = (buf.len() * 8) as u64;
    args.flags = u64::from(linux_raw_sys::btrfs::BTRFS_LOGICAL_INO_ARGS_IGNORE_OFFSET);
    args.inodes = buf.as_mut_ptr() as u64;
    // SAFETY: LOGICAL_INO_V2 reads the args and writes at most `size` bytes at `inodes`,
    // which is `buf`, alive and exclusively borrowed for the call.
    unsafe { ioctl(fd, Updater::<LOGICAL_INO_V2, _>::new(&mut args)) }?;
    // The second word holds the container's elem_cnt and elem_missed, two native u32s.
    let word = buf[1].to_ne_bytes();
    let elem_cnt = ne_u32(&word[..4]) as usize;
    let elem_missed = ne_u32(&word[4..]) as usize;
    Ok((elem_cnt / 3, elem_missed / 3))
}

/// `BTRFS_IOC_SUBVOL_GETFLAGS` on a subvolume root.
pub fn subvol_getflags(fd: BorrowedFd<'_>) -> Result<u64, Errno> {
    let mut flags = 0u64;
    // SAFETY: SUBVOL_GETFLAGS writes one u64.
    unsafe { ioctl(fd, Updater::<SUBVOL_GETFLAGS, _>::new(&mut flags)) }?;
    Ok(flags)
}

/// `BTRFS_IOC_SUBVOL_SETFLAGS` on a subvolume root.
pub fn subvol_setflags(fd: BorrowedFd<'_>, mut flags: u64) -> Result<(), Errno> {
    // SAFETY: SUBVOL_SETFLAGS reads one u64.
    unsafe { ioctl(fd, Updater::<SUBVOL_SETFLAGS, _>::new(&mut flags)) }
}

/// `BTRFS_IOC_SYNC`: commit the current transaction and wait for it.
pub fn sync(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: SYNC takes no argument.
    unsafe { ioctl(fd, NoArg::<SYNC>::new()) }
}

/// The search key of [`TreeSearch`], as plain numbers.
#[derive(Debug, Clone, Copy)]
pub struct SearchKey {
    pub tree_id: u64,
    pub min: (u64, u8, u64),
    pub max: (u64, u8, u64),
}

/// One item found by a tree search: its key and its bytes (little-endian on-disk format).
#[derive(Debug)]
pub struct Item<'a> {
    pub objectid: u64,
    pub item_type: u32,
    pub offset: u64,
    pub data: &'a [u8],
}

const HEADER_LEN: usize = std::mem::size_of::<linux_raw_sys::btrfs::btrfs_ioctl_search_header>();
const ARGS_LEN: usize = std::mem::size_of::<btrfs_ioctl_search_args_v2>();

/// A reusable buffer for `BTRFS_IOC_TREE_SEARCH_V2`. 64 KiB holds ~140 root items, so
/// listing 1000 subvolumes takes a dozen calls.
#[derive(Debug)]
pub struct TreeSearch {
    // u64 words: the args struct needs 8-byte alignment; the kernel fills the tail.
    words: Vec<u64>,
}

const SEARCH_BUF_BYTES: usize = 64 * 1024;

impl Default for TreeSearch {
    fn default() -> Self {
        TreeSearch::new()
    }
}

impl TreeSearch {
    pub fn new() -> Self {
        TreeSearch {
            words: vec![0; (ARGS_LEN + SEARCH_BUF_BYTES) / 8],
        }
    }

    /// Every item with a key in `[key.min, key.max]` (keys compare as (objectid, type,
    /// offset) tuples, not field by field), in key order, handed to `each`. Loops over
    /// result batches, advancing the minimum key past the last item seen.
    pub fn for_each(
        &mut self,
        fd: BorrowedFd<'_>,
        key: SearchKey,
        mut each: impl FnMut(Item<'_>),
    ) -> Result<(), Errno> {
        self.scan(fd, key, 0, |item| {
            each(item);
            std::ops::ControlFlow::Continue(())
        })
        .map(drop)
    }

    /// Like [`TreeSearch::for_each`], but only in tree blocks written in transaction
    /// `min_transid` or later (the kernel skips whole unchanged subtrees: the cheap way to
    /// find what changed since a generation), and `each` may stop the walk. Returns false
    /// when `each` stopped it, true when the range was walked to its end.
    pub fn scan(
        &mut self,
        fd: BorrowedFd<'_>,
        key: SearchKey,
        min_transid: u64,
        mut each: impl FnMut(Item<'_>) -> std::ops::ControlFlow<()>,
    ) -> Result<bool, Errno> {
        let mut min = key.min;
        loop {
            // SAFETY: all-zero is valid for this plain-data struct.
            let mut sk: btrfs_ioctl_search_key = unsafe { zeroed() };
            sk.tree_id = key.tree_id;
            (sk.min_objectid, sk.min_type, sk.min_offset) = (min.0, u32::from(min.1), min.2);
            (sk.max_objectid, sk.max_type, sk.max_offset) =
                (key.max.0, u32::from(key.max.1), key.max.2);
            sk.min_transid = min_transid;
            sk.max_transid = u64::MAX;
            sk.nr_items = u32::MAX;
            let found = self.call(fd, sk)?;
            if found.nr_items == 0 {
                return Ok(true);
            }
            let bytes = self.result_bytes();
            let mut at = 0usize;
            let mut last = None;
            for _ in 0..found.nr_items {
                let header = &bytes[at..at + HEADER_LEN];
                let objectid = ne_u64(&header[8..16]);
                let offset = ne_u64(&header[16..24]);
                let item_type = ne_u32(&header[24..28]);
                let len = ne_u32(&header[28..32]) as usize;
                let data = &bytes[at + HEADER_LEN..at + HEADER_LEN + len];
                at += HEADER_LEN + len;
                last = Some((objectid, item_type, offset));
                let flow = each(Item {
                    objectid,
                    item_type,
                    offset,
                    data,
                });
                if flow.is_break() {
                    return Ok(false);
                }
            }
            let Some((objectid, item_type, offset)) = last else {
                return Ok(true);
            };
            // The next key after the last one seen.
            min = if offset < u64::MAX {
                (objectid, item_type as u8, offset + 1)
            } else if item_type < 255 {
                (objectid, item_type as u8 + 1, 0)
            } else if objectid < u64::MAX {
                (objectid + 1, 0, 0)
            } else {
                return Ok(true);
            };
            if min > key.max {
                return Ok(true);
            }
        }
    }

    fn call(
        &mut self,
        fd: BorrowedFd<'_>,
        sk: btrfs_ioctl_search_key,
    ) -> Result<btrfs_ioctl_search_key, Errno> {
        let args = self.words.as_mut_ptr().cast::<btrfs_ioctl_search_args_v2>();
        // SAFETY: `words` is 8-byte aligned and at least ARGS_LEN bytes long, so it holds
        // one `btrfs_ioctl_search_args_v2` header; the flexible buffer follows it.
        unsafe {
            std::ptr::addr_of_mut!((*args).key).write(sk);
            std::ptr::addr_of_mut!((*args).buf_size).write(SEARCH_BUF_BYTES as u64);
        }
        // SAFETY: TREE_SEARCH_V2 reads the header and writes at most `buf_size` bytes after
        // it, all inside `words`.
        unsafe {
            ioctl(
                fd,
                SearchV2 {
                    words: &mut self.words,
                },
            )
        }?;
        // SAFETY: as above; the kernel updated `key.nr_items`.
        Ok(unsafe { std::ptr::addr_of!((*args).key).read() })
    }

    fn result_bytes(&self) -> &[u8] {
        // SAFETY: viewing initialized u64 words as bytes; u8 has no alignment or validity
        // requirement.
        let all = unsafe {
            std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.words.len() * 8)
        };
        &all[ARGS_LEN..]
    }
}

/// The TREE_SEARCH_V2 call with the whole buffer (header + results) as its argument.
struct SearchV2<'a> {
    words: &'a mut Vec<u64>,
}

// SAFETY: the opcode is TREE_SEARCH_V2 and the pointer covers the whole argument buffer.
unsafe impl Ioctl for SearchV2<'_> {
    type Output = ();
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        TREE_SEARCH_V2
    }

    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        self.words.as_mut_ptr().cast()
    }

    unsafe fn output_from_ptr(_: IoctlOutput, _: *mut std::ffi::c_void) -> rustix::io::Result<()> {
        Ok(())
    }
}

fn ne_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_ne_bytes(a)
}

fn ne_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_ne_bytes(a)
}
