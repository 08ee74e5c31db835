//! The sealed format: parts and the authenticated manifest; seal, list, check, unseal.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::Mac as _;
use layout::SnapshotName;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use uuid::Uuid;

use crate::error::{capped, SealError, StoreError};
use crate::store::Store;
use crate::{manifest_key, part_key, SealKey, FORMAT_PREFIX};

/// The first line of every manifest.
pub const MANIFEST_MAGIC: &[u8] = b"tacid-manifest-v1\n";
/// The most bytes a manifest may have (a 1 TiB stream in 16 MiB parts is ~7 MB of JSON);
/// a bigger object is refused before it is read.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// Every Btrfs send stream starts with these bytes.
pub const STREAM_MAGIC: &[u8] = b"btrfs-stream\0";
/// zstd's level: its default, the `zstd` command's too.
const ZSTD_LEVEL: i32 = 3;
/// The age file of a part of `n` bytes is at most this much larger (header, nonce, one
/// 16-byte tag per 64 KiB chunk).
fn max_stored(part_bytes: u64) -> u64 {
    part_bytes + (part_bytes / (64 << 10) + 1) * 16 + 4096
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What is being sealed: the snapshot and, for an incremental stream, its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyMeta {
    pub name: SnapshotName,
    pub uuid: Uuid,
    /// `(name, uuid)` of the parent snapshot of an incremental stream; None for a full one.
    pub parent: Option<(SnapshotName, Uuid)>,
}

/// One stored part: its size and the SHA-256 of the stored (encrypted) bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartEntry {
    pub bytes: u64,
    /// Lowercase hex.
    pub sha256: String,
}

/// A sealed copy's manifest, as authenticated by its MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub key_id: String,
    pub name: SnapshotName,
    pub uuid: Uuid,
    pub parent_name: Option<SnapshotName>,
    pub parent_uuid: Option<Uuid>,
    /// 0 for a full copy; a parent's depth + 1 for an incremental one.
    pub depth: u32,
    /// The caller's counter: higher is newer.
    pub generation: u64,
    /// 32 hex chars, random per copy: names its parts' directory.
    pub copy_id: String,
    pub created_micros: u64,
    /// Bytes of the send stream.
    pub plain_bytes: u64,
    /// Bytes stored, all parts.
    pub stored_bytes: u64,
    /// Compressed bytes per part (the last may have fewer).
    pub part_bytes: u64,
    pub parts: Vec<PartEntry>,
}

/// The manifest's JSON body, as stored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    format: u32,
    key_id: String,
    name: String,
    uuid: Uuid,
    parent_name: Option<String>,
    parent_uuid: Option<Uuid>,
    depth: u32,
    generation: u64,
    copy_id: String,
    created_micros: u64,
    plain_bytes: u64,
    stored_bytes: u64,
    part_bytes: u64,
    parts: Vec<PartEntry>,
}

/// A copy as [`copies`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// Its manifest authenticates and every part is there with its size.
    Good(Manifest),
    /// Something under a manifest's name that cannot be used, and why; with its manifest
    /// when that authenticates (a part is missing or of another size): the copy is still
    /// this machine's, and its parent still needed by it.
    Bad {
        name: String,
        problem: String,
        manifest: Option<Manifest>,
    },
}

/// How long a part no manifest names, or a store's temporary file, is left alone before
/// [`clean`] removes it: another writer on the same place (a second machine with the same
/// imported key during a move, a copy still being sealed) puts parts before their manifest,
/// and its copy must not lose them. A seal that ran longer than this between two parts
/// would lose its first ones; a day is far past any.
pub const CLEAN_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// What [`clean`] removed and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// The copy ids whose parts were removed (no manifest names them, all older than the
    /// grace period).
    pub copies: Vec<String>,
    pub parts: u64,
    pub bytes: u64,
    /// The copy ids whose parts no manifest names yet, kept: written within the grace
    /// period (or at a time the store does not say), perhaps a copy being sealed.
    pub young: Vec<String>,
    /// The store's temporary files removed (puts a power cut or a kill left).
    pub temporaries: u64,
    /// Why no part was removed: the listing lacks manifests the caller knows are there
    /// (an emptied or unreadable directory, a wrong prefix, a store rolled back), so what
    /// looks orphaned may be the parts of copies the listing does not show.
    pub refused: Option<String>,
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Seal the send stream `plaintext` of `meta` into `store` in parts of
/// `layout::defaults::SEAL_PART_BYTES`: parts first, each put durably and read back (size
/// and digest) before the next, so that the manifest, put last, names only parts the store
/// holds; then the manifest read back and the parts listed with their sizes. An
/// incremental's parent must have a manifest here that authenticates, with its uuid.
/// `moved` counts the stream's bytes read.
pub fn seal(
    store: &dyn Store,
    key: &SealKey,
    meta: CopyMeta,
    generation: u64,
    plaintext: &mut dyn Read,
    moved: &AtomicU64,
) -> Result<Manifest, SealError> {
    seal_with(
        store,
        key,
        meta,
        generation,
        plaintext,
        moved,
        layout::defaults::SEAL_PART_BYTES,
    )
}

/// [`seal`] with another part size (1 KiB up to `SEAL_PART_BYTES`; tests cut small parts).
pub fn seal_with(
    store: &dyn Store,
    key: &SealKey,
    meta: CopyMeta,
    generation: u64,
    plaintext: &mut dyn Read,
    moved: &AtomicU64,
    part_bytes: usize,
) -> Result<Manifest, SealError> {
    if !(1024..=layout::defaults::SEAL_PART_BYTES).contains(&part_bytes) {
        return Err(SealError::Io(format!(
            "a part is 1 KiB to {} bytes, not {part_bytes}",
            layout::defaults::SEAL_PART_BYTES
        )));
    }
    let name = meta.name;
    let depth = match meta.parent {
        None => 0,
        Some((parent, parent_uuid)) => {
            let found = open_manifest(store, key, &parent.to_string()).map_err(|e| match e {
                SealError::NotFound(_) => SealError::NotFound(format!(
                    "the parent {parent} of {name} has no sealed copy on {}; seal a full copy instead",
                    store.describe()
                )),
                other => other,
            })?;
            if found.uuid != parent_uuid {
                return Err(SealError::Untrusted(format!(
                    "the sealed copy of {parent} on {} is of the snapshot {}, not {parent_uuid}: \
                     an incremental on it would not restore; seal a full copy instead",
                    store.describe(),
                    found.uuid
                )));
            }
            found.depth.checked_add(1).ok_or_else(|| {
                SealError::Io(format!(
                    "the chain below {parent} is too long; seal a full copy"
                ))
            })?
        }
    };
    let copy_id = Uuid::new_v4().simple().to_string();
    let mut parts = PartWriter {
        store,
        key,
        copy_id: &copy_id,
        part_bytes,
        buf: Vec::with_capacity(part_bytes),
        entries: Vec::new(),
    };
    let sealed = compress(&mut parts, plaintext, moved, name);
    let plain_bytes = match sealed {
        Ok(n) => n,
        Err(e) => {
            parts.discard();
            return Err(e);
        }
    };
    let entries = std::mem::take(&mut parts.entries);
    let manifest = Manifest {
        key_id: key.key_id().to_owned(),
        name,
        uuid: meta.uuid,
        parent_name: meta.parent.map(|p| p.0),
        parent_uuid: meta.parent.map(|p| p.1),
        depth,
        generation,
        copy_id: copy_id.clone(),
        created_micros: now_micros(),
        plain_bytes,
        stored_bytes: entries.iter().map(|p| p.bytes).sum(),
        part_bytes: part_bytes as u64,
        parts: entries,
    };
    let bytes = render_manifest(key, &manifest)?;
    let mkey = manifest_key(key.key_id(), &name.to_string());
    let done = store
        .put(&mkey, &bytes)
        .map_err(SealError::from)
        .and_then(|()| read_back(store, key, &manifest, &mkey, &bytes));
    if let Err(e) = done {
        // Not a copy: nothing of it may be counted. The manifest first, so no listing
        // ever shows a copy whose parts are going.
        let _ = store.delete(&mkey);
        for i in 0..manifest.parts.len() {
            let _ = store.delete(&part_key(key.key_id(), &copy_id, i));
        }
        return Err(e);
    }
    Ok(manifest)
}

/// Read the stream into zstd into the parts; the stream's bytes. The stream is read on
/// this thread and compressed, encrypted and stored on another, so that the sender (`btrfs
/// send` behind a pipe) never waits for the compressor.
/// The zstd worker's job: input compressed as one piece and then given out.
const ZSTD_JOB_BYTES: u32 = 4 << 20;
/// How long the stream may pause before what zstd holds is flushed out into parts.
const IDLE_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

fn compress(
    parts: &mut PartWriter<'_>,
    plaintext: &mut dyn Read,
    moved: &AtomicU64,
    name: SnapshotName,
) -> Result<u64, SealError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
    let abandoned = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let abandoned = &abandoned;
        let worker = s.spawn(move || -> Result<(), SealError> {
            let mut encoder = zstd::stream::write::Encoder::new(&mut *parts, ZSTD_LEVEL)
                .map_err(|e| SealError::Io(format!("zstd: {e}")))?;
            // One zstd worker: compressing overlaps with encrypting and storing parts.
            encoder
                .multithread(1)
                .map_err(|e| SealError::Io(format!("zstd: {e}")))?;
            // Small jobs: the worker's output comes out a job at a time, so a part is stored
            // while the stream still flows, not only once a default-sized job (up to tens of
            // MiB) has filled.
            encoder
                .set_parameter(zstd::stream::raw::CParameter::JobSize(ZSTD_JOB_BYTES))
                .map_err(|e| SealError::Io(format!("zstd: {e}")))?;
            // zstd's worker gives out what it compressed only when it is called again: while
            // the sender pauses, flush (blocks, not the frame), so that what came is sealed and
            // stored as parts fill, not held until more input arrives.
            loop {
                match rx.recv_timeout(IDLE_FLUSH) {
                    Ok(chunk) => encoder.write_all(&chunk).map_err(stored_error)?,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        encoder.flush().map_err(stored_error)?
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            // The reader gave up: no last part for a stream that is not whole.
            if abandoned.load(Ordering::SeqCst) {
                return Ok(());
            }
            encoder.finish().map_err(stored_error)?;
            parts.flush_part().map_err(stored_error)
        });
        let read = read_stream(plaintext, moved, name, &tx);
        if read.is_err() {
            abandoned.store(true, Ordering::SeqCst);
        }
        drop(tx);
        let worked = worker
            .join()
            .unwrap_or_else(|_| Err(SealError::Io("the sealing thread panicked".into())));
        match (read, worked) {
            // The worker stopped first (a store error): the reader saw only a closed channel.
            (Err(ReadStop::WorkerGone), Err(e)) | (Ok(_), Err(e)) => Err(e),
            (Err(ReadStop::WorkerGone), Ok(())) => {
                Err(SealError::Io("the sealing thread stopped early".into()))
            }
            (Err(ReadStop::Failed(e)), _) => Err(e),
            (Ok(total), Ok(())) => Ok(total),
        }
    })
}

enum ReadStop {
    WorkerGone,
    Failed(SealError),
}

/// The stream's bytes, checked to start as a send stream, sent on in chunks.
fn read_stream(
    plaintext: &mut dyn Read,
    moved: &AtomicU64,
    name: SnapshotName,
    tx: &std::sync::mpsc::SyncSender<Vec<u8>>,
) -> Result<u64, ReadStop> {
    let reading = |e: io::Error| {
        ReadStop::Failed(SealError::Io(format!(
            "reading the send stream of {name}: {e}"
        )))
    };
    const CHUNK: usize = 256 << 10;
    let mut total = 0u64;
    let mut first = true;
    loop {
        let mut buf = vec![0u8; CHUNK];
        let mut have = 0;
        // Fill the chunk (a pipe gives 64 KiB at a time) or reach the end.
        while have < CHUNK {
            match plaintext.read(&mut buf[have..]) {
                Ok(0) => break,
                Ok(n) => {
                    have += n;
                    // Counted as read, not as a chunk is sent on: a slow sender's progress
                    // shows before a whole chunk has come.
                    moved.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(reading(e)),
            }
        }
        if have == 0 {
            break;
        }
        if first {
            if !buf[..have].starts_with(STREAM_MAGIC) {
                return Err(ReadStop::Failed(SealError::Io(format!(
                    "what was given to seal as {name} is not a btrfs send stream (it does not start with \"btrfs-stream\"); nothing was kept"
                ))));
            }
            first = false;
        }
        buf.truncate(have);
        total += have as u64;
        tx.send(buf).map_err(|_| ReadStop::WorkerGone)?;
    }
    if first {
        return Err(ReadStop::Failed(SealError::Io(format!(
            "the send stream of {name} was empty; nothing was kept"
        ))));
    }
    Ok(total)
}

/// The store's error if it was one, else the io error in words.
fn stored_error(e: io::Error) -> SealError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<Stored>()) {
        Some(Stored(inner)) => inner.clone(),
        None => SealError::Io(format!("sealing: {e}")),
    }
}

/// zstd's output, cut into parts, each encrypted and put as it fills.
struct PartWriter<'a> {
    store: &'a dyn Store,
    key: &'a SealKey,
    copy_id: &'a str,
    part_bytes: usize,
    buf: Vec<u8>,
    entries: Vec<PartEntry>,
}

/// Carries a store's error through io::Write.
#[derive(Debug)]
struct Stored(SealError);
impl std::fmt::Display for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
impl std::error::Error for Stored {}

impl PartWriter<'_> {
    fn flush_part(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let sealed = encrypt(self.key, &self.buf).map_err(|e| io::Error::other(Stored(e)))?;
        let index = self.entries.len();
        let pkey = part_key(self.key.key_id(), self.copy_id, index);
        let stored = |e: StoreError| io::Error::other(Stored(e.into()));
        self.store.put(&pkey, &sealed).map_err(stored)?;
        let entry = PartEntry {
            bytes: sealed.len() as u64,
            sha256: sha256_hex(&sealed),
        };
        // Read back now, before any manifest can name it: a manifest never names a part
        // the store does not hold as it was put.
        let got = self.store.get(&pkey, entry.bytes).map_err(stored)?;
        if got.len() as u64 != entry.bytes || sha256_hex(&got) != entry.sha256 {
            return Err(io::Error::other(Stored(SealError::Untrusted(format!(
                "{} did not keep part {index} as it was stored (read back {} bytes, other \
                 content): the store loses or changes data; nothing of this copy is kept, check the store",
                self.store.describe(),
                got.len()
            )))));
        }
        self.entries.push(entry);
        self.buf.clear();
        Ok(())
    }

    /// Best effort: remove the parts put so far (what is left, [`clean`] removes).
    fn discard(&self) {
        for i in 0..=self.entries.len() {
            let _ = self
                .store
                .delete(&part_key(self.key.key_id(), self.copy_id, i));
        }
    }
}

impl Write for PartWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = self.part_bytes - self.buf.len();
        let n = room.min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == self.part_bytes {
            self.flush_part()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn encrypt(key: &SealKey, plain: &[u8]) -> Result<Vec<u8>, SealError> {
    let encryptor =
        age::Encryptor::with_recipients(std::iter::once(key.recipient() as &dyn age::Recipient))
            .map_err(|e| SealError::Io(format!("age: {e}")))?;
    let mut out = Vec::with_capacity(max_stored(plain.len() as u64) as usize);
    let mut w = encryptor
        .wrap_output(&mut out)
        .map_err(|e| SealError::Io(format!("age: {e}")))?;
    w.write_all(plain)
        .and_then(|()| w.finish().map(drop))
        .map_err(|e| SealError::Io(format!("age: {e}")))?;
    Ok(out)
}

/// After the manifest is put: it reads back as it was put, and every part it names is
/// listed with its size (each was read back whole when it was put).
fn read_back(
    store: &dyn Store,
    key: &SealKey,
    manifest: &Manifest,
    mkey: &str,
    mbytes: &[u8],
) -> Result<(), SealError> {
    let name = manifest.name;
    let got = store.get(mkey, MAX_MANIFEST_BYTES)?;
    if got != mbytes {
        return Err(SealError::Untrusted(format!(
            "{} did not keep the manifest of {name} as it was stored: the store loses or \
             changes data; nothing of this copy is kept, check the store",
            store.describe()
        )));
    }
    let listed: BTreeMap<String, u64> = store
        .list(&format!("{}{}/", parts_prefix(key), manifest.copy_id))?
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    for (i, entry) in manifest.parts.iter().enumerate() {
        let size = listed.get(&part_key(key.key_id(), &manifest.copy_id, i));
        if size != Some(&entry.bytes) {
            return Err(SealError::Untrusted(format!(
                "{} no longer lists part {i} of {name} with its {} bytes once the manifest was \
                 stored: the store loses data; nothing of this copy is kept, check the store",
                store.describe(),
                entry.bytes
            )));
        }
    }
    Ok(())
}

fn render_manifest(key: &SealKey, m: &Manifest) -> Result<Vec<u8>, SealError> {
    let body = Body {
        format: 1,
        key_id: m.key_id.clone(),
        name: m.name.to_string(),
        uuid: m.uuid,
        parent_name: m.parent_name.map(|n| n.to_string()),
        parent_uuid: m.parent_uuid,
        depth: m.depth,
        generation: m.generation,
        copy_id: m.copy_id.clone(),
        created_micros: m.created_micros,
        plain_bytes: m.plain_bytes,
        stored_bytes: m.stored_bytes,
        part_bytes: m.part_bytes,
        parts: m.parts.clone(),
    };
    let json = serde_json::to_vec(&body).map_err(|e| SealError::Io(format!("manifest: {e}")))?;
    let mut mac = HmacSha256::new_from_slice(key.mac_key()).expect("HMAC takes any key length");
    mac.update(&json);
    let mut out = MANIFEST_MAGIC.to_vec();
    out.extend_from_slice(hex::encode(mac.finalize().into_bytes()).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&json);
    if out.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(SealError::Io(format!(
            "the manifest of {} would be {} bytes, more than {MAX_MANIFEST_BYTES}; the stream is too large for one copy",
            m.name,
            out.len()
        )));
    }
    Ok(out)
}

/// The manifest stored as `name`, authenticated: MAC first, then the JSON, then its fields.
fn open_manifest(store: &dyn Store, key: &SealKey, name: &str) -> Result<Manifest, SealError> {
    let mkey = manifest_key(key.key_id(), name);
    let bytes = store.get(&mkey, MAX_MANIFEST_BYTES).map_err(|e| match e {
        StoreError::NotFound(_) => SealError::NotFound(format!(
            "there is no sealed copy named {name} on {} (for this machine's key {})",
            store.describe(),
            key.key_id()
        )),
        StoreError::TooBig { size, .. } => SealError::Untrusted(format!(
            "the manifest of {name} on {} is {size} bytes, more than a manifest may have: \
             it is not this machine's; delete the copy and seal it again",
            store.describe()
        )),
        other => other.into(),
    })?;
    parse_manifest(&bytes, key, name).map_err(|problem| {
        SealError::Untrusted(format!(
            "the sealed copy {name} on {} is refused: {problem}; nothing of it was used. \
             Delete it and seal it again, and check the store",
            store.describe()
        ))
    })
}

/// The manifest in `bytes` if it authenticates with `key` and is the one of `name`; else
/// what is wrong, in words.
fn parse_manifest(bytes: &[u8], key: &SealKey, name: &str) -> Result<Manifest, String> {
    let rest = bytes
        .strip_prefix(MANIFEST_MAGIC)
        .ok_or("its manifest does not start with tacid-manifest-v1 (damaged, or not a manifest)")?;
    if rest.len() < 65 || rest[64] != b'\n' {
        return Err("its manifest has no MAC line (damaged or cut short)".into());
    }
    let (mac_hex, body) = (&rest[..64], &rest[65..]);
    let tag = hex::decode(mac_hex).map_err(|_| {
        "its manifest does not authenticate with this machine's key (its MAC line is not hex: changed or damaged)"
    })?;
    let mut mac = HmacSha256::new_from_slice(key.mac_key()).expect("HMAC takes any key length");
    mac.update(body);
    mac.verify_slice(&tag).map_err(|_| {
        "its manifest does not authenticate with this machine's key (it was changed or \
         damaged, or another machine made it)"
            .to_owned()
    })?;
    // Authenticated from here on: what does not fit is a bug or another version, not an
    // attack, but still refused.
    let body: Body = serde_json::from_slice(body)
        .map_err(|e| format!("its authenticated manifest does not parse ({e})"))?;
    if body.format != 1 {
        return Err(format!(
            "its manifest is format {}, this is format 1",
            body.format
        ));
    }
    if body.key_id != key.key_id() {
        return Err(format!(
            "its manifest is of the key {}, not this machine's {}",
            body.key_id,
            key.key_id()
        ));
    }
    if body.name != name {
        return Err(format!(
            "the manifest kept under this name is the one of {} (another copy's)",
            capped(&body.name)
        ));
    }
    let parse =
        |n: &str| SnapshotName::parse(n).map_err(|e| format!("a name in its manifest: {e}"));
    let snapshot = parse(&body.name)?;
    let parent_name = body.parent_name.as_deref().map(parse).transpose()?;
    if parent_name.is_some() != body.parent_uuid.is_some()
        || (body.depth == 0) != parent_name.is_none()
    {
        return Err("its manifest's parent and depth do not agree".into());
    }
    if !is_hex(&body.copy_id, 32) {
        return Err("its manifest's copy id is not 32 hex digits".into());
    }
    if body.parts.is_empty()
        || body.part_bytes > layout::defaults::SEAL_PART_BYTES as u64
        || body
            .parts
            .iter()
            .any(|p| p.bytes > max_stored(body.part_bytes) || !is_hex(&p.sha256, 64))
        || body.parts.iter().map(|p| p.bytes).sum::<u64>() != body.stored_bytes
    {
        return Err("its manifest's parts do not add up".into());
    }
    Ok(Manifest {
        key_id: body.key_id,
        name: snapshot,
        uuid: body.uuid,
        parent_name,
        parent_uuid: body.parent_uuid,
        depth: body.depth,
        generation: body.generation,
        copy_id: body.copy_id,
        created_micros: body.created_micros,
        plain_bytes: body.plain_bytes,
        stored_bytes: body.stored_bytes,
        part_bytes: body.part_bytes,
        parts: body.parts,
    })
}

fn manifests_prefix(key: &SealKey) -> String {
    format!("{FORMAT_PREFIX}/{}/manifests/", key.key_id())
}

fn parts_prefix(key: &SealKey) -> String {
    format!("{FORMAT_PREFIX}/{}/parts/", key.key_id())
}

/// Every copy on the store under this key: good ones (manifest authenticates, every part
/// there with its size) and bad ones with what is wrong. A store that fails is an error.
pub fn copies(store: &dyn Store, key: &SealKey) -> Result<Vec<Listed>, SealError> {
    let manifests = store.list(&manifests_prefix(key))?;
    let parts: BTreeMap<String, u64> = store
        .list(&parts_prefix(key))?
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    let mut listed = Vec::new();
    for mkey in manifests.into_iter().map(|o| o.key) {
        let name = mkey[manifests_prefix(key).len()..].to_owned();
        if SnapshotName::parse(&name).is_err() {
            listed.push(Listed::Bad {
                problem: "an object among the manifests whose name is no snapshot name".into(),
                name,
                manifest: None,
            });
            continue;
        }
        match open_manifest(store, key, &name) {
            Ok(m) => {
                let mut problem = None;
                for (i, entry) in m.parts.iter().enumerate() {
                    match parts.get(&part_key(key.key_id(), &m.copy_id, i)) {
                        None => {
                            problem = Some(format!("part {i} of {} is missing", m.parts.len()));
                            break;
                        }
                        Some(&size) if size != entry.bytes => {
                            problem = Some(format!(
                                "part {i} of {} has {size} bytes, its manifest says {}",
                                m.parts.len(),
                                entry.bytes
                            ));
                            break;
                        }
                        Some(_) => {}
                    }
                }
                listed.push(match problem {
                    None => Listed::Good(m),
                    Some(problem) => Listed::Bad {
                        name,
                        problem,
                        manifest: Some(m),
                    },
                });
            }
            Err(SealError::Untrusted(problem)) => listed.push(Listed::Bad {
                name,
                problem,
                manifest: None,
            }),
            // Gone between the listing and the read: not a copy any more.
            Err(SealError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(listed)
}

/// The chain of `name`: its full copy first, `name`'s last. Every manifest authenticates
/// and each names the one before as its parent (uuid and depth).
pub fn chain(
    store: &dyn Store,
    key: &SealKey,
    name: &SnapshotName,
) -> Result<Vec<Manifest>, SealError> {
    chain_checked(store, key, name, &|_| None)
}

/// [`chain`], and each manifest's generation at least what `remembered` says for its name
/// (the generation this machine wrote): an older one is refused.
pub fn chain_checked(
    store: &dyn Store,
    key: &SealKey,
    name: &SnapshotName,
    remembered: &dyn Fn(&SnapshotName) -> Option<u64>,
) -> Result<Vec<Manifest>, SealError> {
    chain_with(store, name, &mut |n| {
        open_remembered(store, key, n, remembered)
    })
}

/// The manifest of `n`, refused when older than `remembered` says.
fn open_remembered(
    store: &dyn Store,
    key: &SealKey,
    n: &SnapshotName,
    remembered: &dyn Fn(&SnapshotName) -> Option<u64>,
) -> Result<Manifest, SealError> {
    let m = open_manifest(store, key, &n.to_string())?;
    if let Some(wrote) = remembered(n) {
        if m.generation < wrote {
            return Err(SealError::Untrusted(format!(
                "{} served an older manifest of {n} (generation {}; this machine wrote {wrote}): \
                 the store rolled the copy back or lost its newer one; nothing of it was used. \
                 Check the store, then delete the copy and seal it again",
                store.describe(),
                m.generation
            )));
        }
    }
    Ok(m)
}

/// The chain of `name`, each manifest from `open`.
fn chain_with(
    store: &dyn Store,
    name: &SnapshotName,
    open: &mut dyn FnMut(&SnapshotName) -> Result<Manifest, SealError>,
) -> Result<Vec<Manifest>, SealError> {
    let mut chain = vec![open(name)?];
    loop {
        let last = chain.last().expect("not empty");
        let (Some(parent), Some(parent_uuid)) = (last.parent_name, last.parent_uuid) else {
            break;
        };
        let child = last.name;
        let depth = last.depth;
        let up = open(&parent).map_err(|e| match e {
            SealError::NotFound(_) => SealError::NotFound(format!(
                "{child} is incremental on {parent}, whose sealed copy is not on {}: the copy cannot be restored; seal a full copy",
                store.describe()
            )),
            other => other,
        })?;
        if up.uuid != parent_uuid || up.depth + 1 != depth {
            return Err(SealError::Untrusted(format!(
                "the sealed copy {parent} on {} is not the parent {child} was sealed on \
                 (another snapshot or another chain); {child} cannot be restored from it; seal a full copy",
                store.describe()
            )));
        }
        chain.push(up);
    }
    chain.reverse();
    Ok(chain)
}

/// Read the whole chain of `name` back: every part read, digest-checked, decrypted,
/// decompressed, each stream's start checked. `moved` counts stored bytes read.
pub fn verify(
    store: &dyn Store,
    key: &SealKey,
    name: &SnapshotName,
    moved: &AtomicU64,
) -> Result<Vec<Manifest>, SealError> {
    verify_checked(store, key, name, moved, &|_| None)
}

/// [`verify`] with the generations this machine remembers (see [`chain_checked`]).
pub fn verify_checked(
    store: &dyn Store,
    key: &SealKey,
    name: &SnapshotName,
    moved: &AtomicU64,
    remembered: &dyn Fn(&SnapshotName) -> Option<u64>,
) -> Result<Vec<Manifest>, SealError> {
    Verifier::new(store, key, moved, remembered).verify(name).0
}

/// Verifies many copies in one act, each stored copy read once: copies share the start of
/// their chains, and a chain already read back in this act is not read again.
pub struct Verifier<'a> {
    store: &'a dyn Store,
    key: &'a SealKey,
    moved: &'a AtomicU64,
    remembered: &'a dyn Fn(&SnapshotName) -> Option<u64>,
    /// Each manifest as opened (and checked against `remembered`) in this act.
    manifests: HashMap<SnapshotName, Result<Manifest, SealError>>,
    /// Each copy id read back in this act, and how that went.
    read: HashMap<String, Result<(), SealError>>,
}

impl std::fmt::Debug for Verifier<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("store", &self.store.describe())
            .field("copies_read", &self.read.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Verifier<'a> {
    /// `moved` counts every stored byte read, for progress; `remembered` as in
    /// [`chain_checked`].
    pub fn new(
        store: &'a dyn Store,
        key: &'a SealKey,
        moved: &'a AtomicU64,
        remembered: &'a dyn Fn(&SnapshotName) -> Option<u64>,
    ) -> Verifier<'a> {
        Verifier {
            store,
            key,
            moved,
            remembered,
            manifests: HashMap::new(),
            read: HashMap::new(),
        }
    }

    /// [`verify_checked`] of `name`, and the stored bytes read for it: those of copies in
    /// its chain that no earlier name of this act read (what was read for an earlier name
    /// is not read again, and not counted again).
    pub fn verify(&mut self, name: &SnapshotName) -> (Result<Vec<Manifest>, SealError>, u64) {
        let (store, key, remembered) = (self.store, self.key, self.remembered);
        let manifests = &mut self.manifests;
        let chain = chain_with(store, name, &mut |n| {
            manifests
                .entry(*n)
                .or_insert_with(|| open_remembered(store, key, n, remembered))
                .clone()
        });
        let chain = match chain {
            Ok(chain) => chain,
            Err(e) => return (Err(e), 0),
        };
        let mine = AtomicU64::new(0);
        for m in &chain {
            let result = match self.read.get(&m.copy_id) {
                Some(done) => done.clone(),
                None => {
                    let result =
                        decode(store, key, m, &mut io::sink(), &[self.moved, &mine]).map(drop);
                    self.read.insert(m.copy_id.clone(), result.clone());
                    result
                }
            };
            if let Err(e) = result {
                return (Err(e), mine.load(Ordering::Relaxed));
            }
        }
        (Ok(chain), mine.load(Ordering::Relaxed))
    }
}

/// Write the plaintext of `chain` (full first, as [`chain`] returns it) to `out`, stream
/// after stream. Each part's size and SHA-256 are checked against its authenticated
/// manifest before it is decrypted, so nothing unauthenticated is ever written; on an
/// error, what was written is the plaintext of the parts before the bad one. `moved`
/// counts stored bytes read. Returns the bytes written.
pub fn unseal(
    store: &dyn Store,
    key: &SealKey,
    chain: &[Manifest],
    out: &mut dyn Write,
    moved: &AtomicU64,
) -> Result<u64, SealError> {
    let Some(first) = chain.first() else {
        return Err(SealError::NotFound(
            "nothing to unseal: the chain is empty".into(),
        ));
    };
    if first.depth != 0 {
        return Err(SealError::Untrusted(format!(
            "the chain given to unseal starts at {}, which is not a full copy",
            first.name
        )));
    }
    for pair in chain.windows(2) {
        if pair[1].parent_uuid != Some(pair[0].uuid) || pair[1].depth != pair[0].depth + 1 {
            return Err(SealError::Untrusted(format!(
                "{} is not incremental on {} in the chain given to unseal",
                pair[1].name, pair[0].name
            )));
        }
    }
    if let Some(m) = chain.iter().find(|m| m.key_id != key.key_id()) {
        return Err(SealError::Untrusted(format!(
            "{} was sealed with the key {}, not this machine's {}",
            m.name,
            m.key_id,
            key.key_id()
        )));
    }
    let mut total = 0;
    for m in chain {
        total += decode(store, key, m, out, &[moved])?;
    }
    Ok(total)
}

/// One copy's stream into `out`; its plaintext bytes.
fn decode(
    store: &dyn Store,
    key: &SealKey,
    m: &Manifest,
    out: &mut dyn Write,
    moved: &[&AtomicU64],
) -> Result<u64, SealError> {
    let reader = PartReader {
        store,
        key,
        manifest: m,
        next: 0,
        current: io::Cursor::new(Vec::new()),
        error: None,
        moved,
    };
    let mut decoder = zstd::stream::read::Decoder::with_buffer(io::BufReader::new(reader))
        .map_err(|e| SealError::Io(format!("zstd: {e}")))?
        .single_frame();
    let broken = |decoder: &mut zstd::stream::read::Decoder<'_, io::BufReader<PartReader<'_>>>,
                  e: io::Error| {
        decoder.get_mut().get_mut().error.take().unwrap_or_else(|| {
            SealError::Untrusted(format!(
                "the sealed copy {} authenticates but does not decompress ({e}); it cannot be restored: seal it again",
                m.name
            ))
        })
    };
    let mut head = [0u8; 13];
    let mut have = 0;
    while have < head.len() {
        match decoder.read(&mut head[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(broken(&mut decoder, e)),
        }
    }
    if head[..have] != *STREAM_MAGIC {
        return Err(SealError::Untrusted(format!(
            "the sealed copy {} holds no btrfs send stream; it cannot be restored",
            m.name
        )));
    }
    let writing = |e: io::Error| SealError::Io(format!("writing the stream of {}: {e}", m.name));
    out.write_all(&head).map_err(writing)?;
    let mut total = head.len() as u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match decoder.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(broken(&mut decoder, e)),
        };
        out.write_all(&buf[..n]).map_err(writing)?;
        total += n as u64;
    }
    // Every part must have been used: nothing after the zstd frame.
    let mut rest = decoder.finish();
    let mut extra = [0u8; 1];
    match rest.read(&mut extra) {
        Ok(0) => {}
        Ok(_) => {
            return Err(SealError::Untrusted(format!(
                "the sealed copy {} has bytes after its stream's end",
                m.name
            )))
        }
        Err(e) => {
            return Err(rest
                .get_mut()
                .error
                .take()
                .unwrap_or_else(|| SealError::Io(e.to_string())))
        }
    }
    if total != m.plain_bytes {
        return Err(SealError::Untrusted(format!(
            "the sealed copy {} unsealed to {total} bytes, its manifest says {}",
            m.name, m.plain_bytes
        )));
    }
    Ok(total)
}

/// The decrypted parts of one copy in order, each checked (size, SHA-256) before it is
/// decrypted.
struct PartReader<'a> {
    store: &'a dyn Store,
    key: &'a SealKey,
    manifest: &'a Manifest,
    next: usize,
    current: io::Cursor<Vec<u8>>,
    error: Option<SealError>,
    /// Each counts the stored bytes read.
    moved: &'a [&'a AtomicU64],
}

impl PartReader<'_> {
    fn load(&mut self) -> Result<Vec<u8>, SealError> {
        let m = self.manifest;
        let i = self.next;
        let entry = &m.parts[i];
        let count = m.parts.len();
        let said = |what: &str| {
            SealError::Untrusted(format!(
                "part {i} of {count} of the sealed copy {} on {} {what}; nothing of it was used. \
                 The copy cannot be restored from this store: check the store, delete the copy and seal it again",
                m.name,
                self.store.describe()
            ))
        };
        let bytes = self
            .store
            .get(&part_key(self.key.key_id(), &m.copy_id, i), entry.bytes)
            .map_err(|e| match e {
                StoreError::NotFound(_) => said("is missing"),
                StoreError::TooBig { size, .. } => said(&format!(
                    "has {size} bytes, its manifest says {}",
                    entry.bytes
                )),
                other => other.into(),
            })?;
        for counter in self.moved {
            counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        if bytes.len() as u64 != entry.bytes {
            return Err(said(&format!(
                "has {} bytes, its manifest says {} (cut short?)",
                bytes.len(),
                entry.bytes
            )));
        }
        if sha256_hex(&bytes) != entry.sha256 {
            return Err(said(
                "is not the part sealed there (changed, damaged, or another part or copy's put in its place)",
            ));
        }
        // Authenticated (its digest is in the MAC'd manifest): decrypt.
        let decryptor = age::Decryptor::new_buffered(&bytes[..])
            .map_err(|e| said(&format!("does not decrypt ({e})")))?;
        let mut plain = Vec::with_capacity(m.part_bytes as usize);
        decryptor
            .decrypt(std::iter::once(self.key.identity() as &dyn age::Identity))
            .map_err(|e| said(&format!("does not decrypt with this machine's key ({e})")))?
            .take(m.part_bytes + 1)
            .read_to_end(&mut plain)
            .map_err(|e| said(&format!("does not decrypt ({e})")))?;
        if plain.len() as u64 > m.part_bytes
            || (i + 1 < count && plain.len() as u64 != m.part_bytes)
        {
            return Err(said("decrypts to another size than a part has"));
        }
        Ok(plain)
    }
}

impl Read for PartReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            if self.next == self.manifest.parts.len() {
                return Ok(0);
            }
            match self.load() {
                Ok(plain) => {
                    self.current = io::Cursor::new(plain);
                    self.next += 1;
                }
                Err(e) => {
                    let words = e.to_string();
                    self.error = Some(e);
                    return Err(io::Error::other(words));
                }
            }
        }
    }
}

/// Delete the copy `name`: its manifest first (from then on it is no copy), then its parts.
/// A manifest that does not authenticate is deleted too (its parts are then [`clean`]'s).
pub fn delete_copy(store: &dyn Store, key: &SealKey, name: &SnapshotName) -> Result<(), SealError> {
    let n = name.to_string();
    let mkey = manifest_key(key.key_id(), &n);
    let found = match open_manifest(store, key, &n) {
        Ok(m) => Some(m),
        Err(SealError::Untrusted(_)) => None,
        Err(e) => return Err(e),
    };
    store.delete(&mkey)?;
    if let Some(m) = found {
        let prefix = format!("{}{}/", parts_prefix(key), m.copy_id);
        for part in store.list(&prefix)? {
            store.delete(&part.key)?;
        }
    }
    Ok(())
}

/// Remove the parts no manifest names (copies cut short, deleted halfway) and the store's
/// temporary files, once older than [`CLEAN_GRACE`]: younger ones may be a copy another
/// writer is sealing right now. Parts a manifest that does not authenticate claims are
/// kept (they may still be wanted; a person decides). For acts that write (seal, delete);
/// never needed to read.
pub fn clean(store: &dyn Store, key: &SealKey) -> Result<CleanReport, SealError> {
    clean_older_than(store, key, CLEAN_GRACE)
}

/// [`clean`] with another grace period: what was last written `grace` or longer ago (by
/// the store's clock against this machine's) goes.
pub fn clean_older_than(
    store: &dyn Store,
    key: &SealKey,
    grace: Duration,
) -> Result<CleanReport, SealError> {
    clean_expecting(store, key, grace, &BTreeSet::new())
}

/// [`clean_older_than`], removing no part unless every manifest named in `expected` (the
/// copies the caller stored and did not delete) is listed: a listing without them is not
/// one to decide by what is orphaned.
pub fn clean_expecting(
    store: &dyn Store,
    key: &SealKey,
    grace: Duration,
    expected: &BTreeSet<String>,
) -> Result<CleanReport, SealError> {
    let mut kept = BTreeSet::new();
    let mprefix = manifests_prefix(key);
    let pprefix = parts_prefix(key);
    // Parts first: a copy whose parts are listed here and whose manifest is put after the
    // manifests are listed is then seen with its manifest missing, but its parts are young.
    let parts = store.list(&pprefix)?;
    let manifests = store.list(&mprefix)?;
    let listed: BTreeSet<&str> = manifests.iter().map(|o| &o.key[mprefix.len()..]).collect();
    let missing: Vec<&str> = expected
        .iter()
        .map(String::as_str)
        .filter(|n| !listed.contains(n))
        .collect();
    if !missing.is_empty() {
        let shown: Vec<String> = missing.iter().take(3).map(|n| capped(n)).collect();
        return Ok(CleanReport {
            temporaries: store.remove_temporaries(grace)?,
            refused: Some(format!(
                "{} lists no manifest of {} copies this machine stored there and did not \
                 delete ({}{}): no part was removed, since what looks orphaned may be theirs",
                store.describe(),
                missing.len(),
                shown.join(", "),
                if missing.len() > 3 { ", …" } else { "" }
            )),
            ..CleanReport::default()
        });
    }
    for mkey in manifests.into_iter().map(|o| o.key) {
        let name = &mkey[mprefix.len()..];
        match open_manifest(store, key, name) {
            Ok(m) => {
                kept.insert(m.copy_id);
            }
            Err(SealError::Untrusted(_)) => {
                // Unauthenticated, so used only to keep, never to delete.
                if let Ok(bytes) = store.get(&mkey, MAX_MANIFEST_BYTES) {
                    if let Some(id) = loose_copy_id(&bytes) {
                        kept.insert(id);
                    }
                }
            }
            Err(SealError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    // Each orphan copy's parts, and when the newest of them was written.
    let mut orphans: BTreeMap<String, (Vec<crate::store::Object>, Option<SystemTime>)> =
        BTreeMap::new();
    for part in parts {
        let Some((copy_id, _)) = part.key[pprefix.len()..].split_once('/') else {
            continue;
        };
        if kept.contains(copy_id) || !is_hex(copy_id, 32) {
            continue;
        }
        let entry = orphans
            .entry(copy_id.to_owned())
            .or_insert_with(|| (Vec::new(), Some(UNIX_EPOCH)));
        entry.1 = match (entry.1, part.modified) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        entry.0.push(part);
    }
    let now = SystemTime::now();
    let old = |t: Option<SystemTime>| {
        t.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age >= grace))
    };
    let mut report = CleanReport::default();
    for (copy_id, (parts, newest)) in orphans {
        if !old(newest) {
            report.young.push(copy_id);
            continue;
        }
        for part in parts {
            store.delete(&part.key)?;
            report.parts += 1;
            report.bytes += part.size;
        }
        report.copies.push(copy_id);
    }
    report.temporaries = store.remove_temporaries(grace)?;
    Ok(report)
}

fn loose_copy_id(bytes: &[u8]) -> Option<String> {
    let body = bytes.splitn(3, |b| *b == b'\n').nth(2)?;
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("copy_id")?.as_str().map(str::to_owned)
}
