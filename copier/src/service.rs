//! The copier's acts on sealed targets: each on a blocking thread, one per target at a
//! time, the store cleaned of parts no manifest names before each.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use copier_interface::{
    Error, ErrorKind, SealProgress, Sealed, SealedCopy, SealedTarget, Unsealed, Verified,
};
use layout::copies::{CopiesConfig, Place, Target};
use layout::SnapshotName;
use seal::{Listed, SealError, SealKey, Store, StorePlace};
use stem_interface::pipe::{FrameReader, FrameWriter};
use uuid::Uuid;

use crate::credentials;
use crate::generations::Generations;
use crate::pipes::Bounded;
use crate::turns::{Turn, Turns};

/// Where the copier keeps what it keeps.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The recovery key ([`layout::SEAL_KEY_PATH`]).
    pub key: PathBuf,
    /// The copier's state directory ([`layout::COPIER_STATE_DIR`]): generations.json, and
    /// the pinned known_hosts of SSH targets.
    pub state: PathBuf,
    /// The `ssh` client for SSH targets: a name looked up in PATH, or a path.
    pub ssh: PathBuf,
    /// How long a pipe from or to the stem may move nothing before the act gives up.
    pub stall: std::time::Duration,
}

/// The copier: root's sealed targets, the key's path, the memory of generations.
#[derive(Debug, Clone)]
pub struct Copier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: CopiesConfig,
    /// Why root's configuration could not be used (then no target is served): said to
    /// every caller who names a target, rather than leaving the bus without a copier.
    config_error: Option<String>,
    paths: Paths,
    turns: Turns,
    generations: Mutex<Generations>,
    /// The runtime S3 requests run on; the acts run on its blocking threads.
    runtime: tokio::runtime::Handle,
}

/// Seal's END trailer, as the stem writes it.
#[derive(Debug, serde::Deserialize)]
struct SendTrailer {
    uuid: Uuid,
    parent_uuid: Option<Uuid>,
    bytes: u64,
}

/// Unseal's END trailer, as the stem reads it.
#[derive(Debug, serde::Serialize)]
struct UnsealTrailer {
    uuid: String,
    streams: u64,
    bytes: u64,
}

/// A SealError for a person, as the interface names it.
pub fn error_of(e: SealError) -> Error {
    let message = e.to_string();
    let kind = match e {
        SealError::Untrusted(_) => ErrorKind::Untrusted,
        SealError::NotFound(_) => ErrorKind::NotFound,
        SealError::Unreachable(_) => ErrorKind::Unreachable,
        SealError::Full(_) => ErrorKind::Full,
        SealError::KeyMissing(_) => ErrorKind::NoKey,
        SealError::KeyUnsafe { .. } => ErrorKind::KeyUnsafe,
        SealError::Io(_) => ErrorKind::Failed,
    };
    Error::new(kind, message)
}

fn failed(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Failed, message)
}

/// A caller's string, capped before it is shown or logged.
fn shown(text: &str) -> String {
    layout::human::cap(text, 128).into_owned()
}

impl Copier {
    /// The copier of `config`'s sealed targets, or of none with the reason the
    /// configuration could not be read; call from within the runtime.
    pub fn new(config: Result<CopiesConfig, String>, paths: Paths) -> Result<Copier, String> {
        let (config, config_error) = match config {
            Ok(c) => (c, None),
            Err(e) => (CopiesConfig::default(), Some(e)),
        };
        let generations = Generations::load(&paths.state)?;
        Ok(Copier {
            inner: Arc::new(Inner {
                config,
                config_error,
                paths,
                turns: Turns::default(),
                generations: Mutex::new(generations),
                runtime: tokio::runtime::Handle::current(),
            }),
        })
    }

    /// The sealed targets, by name.
    pub fn targets(&self) -> Vec<SealedTarget> {
        self.inner
            .config
            .targets
            .values()
            .filter_map(|t| {
                let s = t.seal.as_ref()?;
                Some(SealedTarget {
                    name: t.name.to_string(),
                    place_shown: t.place.to_string(),
                    full_every: s.full_every,
                    full_past_bytes: s.full_past_bytes.unwrap_or(0),
                })
            })
            .collect()
    }

    /// Every act in flight.
    pub fn progress(&self) -> Vec<SealProgress> {
        self.inner
            .turns
            .in_flight()
            .into_iter()
            .map(|f| SealProgress {
                target: f.target,
                name: f.name,
                doing: f.doing,
                moved: f.moved,
            })
            .collect()
    }

    /// The sealed target `name`, or NotConfigured.
    fn target(&self, name: &str) -> Result<Target, Error> {
        match self.inner.config.target(name) {
            Some(t) if t.is_sealed() => Ok(t.clone()),
            Some(_) => Err(Error::new(
                ErrorKind::NotConfigured,
                format!(
                    "target {} is not sealed: its copies are the stem's (Btrfs copies), not the copier's",
                    shown(name)
                ),
            )),
            None if self.inner.config_error.is_some() => Err(Error::new(
                ErrorKind::NotConfigured,
                format!(
                    "no target is served: root's copies configuration could not be used ({}); \
                     fix it, then restart {}",
                    self.inner.config_error.as_deref().unwrap_or_default(),
                    layout::names::COPIER_UNIT
                ),
            )),
            None => Err(Error::new(
                ErrorKind::NotConfigured,
                format!(
                    "no sealed target is named {}; the sealed targets are those of {} with a \"seal\" object",
                    shown(name),
                    layout::copies::CONFIG_PATH
                ),
            )),
        }
    }

    /// Run `act` on a blocking thread holding the turn of `target`, with the key and the
    /// store open; before an act that writes (seal, delete), the store cleaned of what
    /// copies cut short left long ago (a reading act removes nothing: another writer's
    /// copy in flight must not lose its parts).
    async fn act<T: Send + 'static>(
        &self,
        target: &str,
        name: &str,
        doing: &'static str,
        act: impl FnOnce(&Inner, &Target, &dyn Store, &SealKey, &Turn) -> Result<T, Error>
            + Send
            + 'static,
    ) -> Result<T, Error> {
        let target = self.target(target)?;
        let turn = self
            .inner
            .turns
            .take(target.name.as_str(), name, doing)
            .map_err(|m| Error::new(ErrorKind::Busy, m))?;
        let inner = self.inner.clone();
        let what = if name.is_empty() {
            format!("{doing} on {}", target.name)
        } else {
            format!("{doing} {name} on {}", target.name)
        };
        let name = name.to_owned();
        let answer = tokio::task::spawn_blocking(move || {
            let key = load_key(&inner.paths.key)?;
            let store = inner.open_store(&target)?;
            if matches!(doing, "seal" | "delete") {
                turn.now(&name, "clean");
                inner.finish_deletes(&target, &*store, &key)?;
                inner.clean(&target, &*store, &key)?;
            }
            turn.now(&name, doing);
            act(&inner, &target, &*store, &key, &turn)
        })
        .await
        .unwrap_or_else(|e| Err(failed(format!("the act stopped: {e}"))));
        match &answer {
            Ok(_) => tracing::info!("{what}: done"),
            Err(e) => tracing::warn!("{what}: {}", e.message()),
        }
        answer
    }

    /// Seal the frames read from `from` as the copy `name` on `target`.
    pub async fn seal(
        &self,
        target: &str,
        name: SnapshotName,
        uuid: Uuid,
        parent: Option<(SnapshotName, Uuid)>,
        from: OwnedFd,
    ) -> Result<Sealed, Error> {
        let n = name.to_string();
        self.act(
            target,
            &n,
            "seal",
            move |inner, target, store, key, turn| {
                inner.seal(target, store, key, turn, name, uuid, parent, from)
            },
        )
        .await
    }

    /// The copies on `target`.
    pub async fn copies(&self, target: &str) -> Result<Vec<SealedCopy>, Error> {
        self.act(target, "", "list", move |inner, target, store, key, _| {
            let listed = seal::copies(store, key).map_err(error_of)?;
            inner.learn(target, &listed);
            let generations = inner.generations();
            Ok(listed
                .into_iter()
                .map(|l| match l {
                    Listed::Good(m) => copy_of(&generations, target, &m, String::new()),
                    // Authenticated, a part missing or of another size: its fields are this
                    // machine's (its parent is still needed by it), the problem said.
                    Listed::Bad {
                        problem,
                        manifest: Some(m),
                        ..
                    } => copy_of(
                        &generations,
                        target,
                        &m,
                        layout::human::cap(&problem, 1024).into_owned(),
                    ),
                    // The store named it: capped, as anything the store says.
                    Listed::Bad {
                        name,
                        problem,
                        manifest: None,
                    } => SealedCopy {
                        name: shown(&name),
                        uuid: String::new(),
                        parent_uuid: String::new(),
                        depth: 0,
                        generation: 0,
                        plain_bytes: 0,
                        stored_bytes: 0,
                        created_micros: 0,
                        problem: layout::human::cap(&problem, 1024).into_owned(),
                    },
                })
                .collect())
        })
        .await
    }

    /// Read back `names` (every copy when empty) on `target`, each chain whole.
    pub async fn verify(
        &self,
        target: &str,
        names: Vec<SnapshotName>,
    ) -> Result<Vec<Verified>, Error> {
        self.act(target, "", "verify", move |inner, target, store, key, turn| {
            let mut out = Vec::new();
            let names: Vec<String> = if names.is_empty() {
                let listed = seal::copies(store, key).map_err(error_of)?;
                inner.learn(target, &listed);
                let names: Vec<String> = listed
                    .into_iter()
                    .map(|l| match l {
                        Listed::Good(m) => m.name.to_string(),
                        Listed::Bad { name, .. } => shown(&name),
                    })
                    .collect();
                // What this machine stored whole and did not delete, and the target does
                // not list: an emptied bucket, a wrong prefix, a store rolled back.
                let sealed = inner.generations().of(target.name.as_str()).stored();
                for (missing, generation) in sealed.iter().filter(|(n, _)| !names.contains(n)) {
                    out.push(Verified {
                        name: missing.clone(),
                        ok: false,
                        problem: format!(
                            "missing: written on this machine at generation {generation}, not on \
                             target {} now; check the target's place (a wrong directory, bucket or \
                             prefix, an emptied or rolled-back store), then make a new copy",
                            target.name
                        ),
                        bytes_read: 0,
                    });
                }
                names
            } else {
                names.iter().map(|n| n.to_string()).collect()
            };
            let remembered = inner.remembered(target);
            let remembered = |n: &SnapshotName| remembered.get(&n.to_string()).copied();
            // One verifier for the act: each stored copy is read once, however many chains share it.
            let mut verifier = seal::Verifier::new(store, key, turn.moved(), &remembered);
            for name in names {
                turn.now(&name, "verify");
                let (result, bytes_read) = match SnapshotName::parse(&name) {
                    Err(e) => (Err(format!("the target names a copy {} that is not a snapshot name ({e}); it is not this machine's: remove it", shown(&name))), 0),
                    Ok(parsed) => {
                        let (result, bytes_read) = verifier.verify(&parsed);
                        // The store failing (unreachable, full, refusing) says nothing of
                        // this copy or the ones after it: the act stops with that error.
                        let result = match result {
                            Err(e @ (SealError::Untrusted(_) | SealError::NotFound(_))) => Err(e.to_string()),
                            Err(e) => return Err(error_of(e)),
                            Ok(chain) => inner.not_stale(target, &chain).map_err(|e| e.message()),
                        };
                        (result, bytes_read)
                    }
                };
                out.push(match result {
                    Ok(()) => Verified { name, ok: true, problem: String::new(), bytes_read },
                    Err(problem) => Verified { name, ok: false, problem, bytes_read },
                });
            }
            Ok(out)
        })
        .await
    }

    /// Write the chain of `name` on `target` as frames into `into`, END last.
    pub async fn unseal(
        &self,
        target: &str,
        name: SnapshotName,
        into: OwnedFd,
    ) -> Result<Unsealed, Error> {
        let n = name.to_string();
        self.act(target, &n, "unseal", move |inner, target, store, key, turn| {
            let mut out = FrameWriter::new(Bounded::new(into, inner.paths.stall));
            let result = (|| -> Result<(Vec<seal::Manifest>, u64), Error> {
                let remembered = inner.remembered(target);
                let chain = seal::chain_checked(store, key, &name, &|n| remembered.get(&n.to_string()).copied())
                    .map_err(error_of)?;
                inner.not_stale(target, &chain)?;
                let bytes = seal::unseal(store, key, &chain, &mut out, turn.moved()).map_err(error_of)?;
                Ok((chain, bytes))
            })();
            match result {
                Ok((chain, bytes)) => {
                    let last = chain.last().ok_or_else(|| failed("the chain is empty"))?;
                    let uuid = last.uuid.hyphenated().to_string();
                    out.end(&UnsealTrailer { uuid: uuid.clone(), streams: chain.len() as u64, bytes })
                        .map_err(|e| failed(format!("cannot end the stream to the stem: {e}; nothing it received is kept")))?;
                    Ok(Unsealed {
                        name: name.to_string(),
                        uuid,
                        chain: chain.iter().map(|m| m.name.to_string()).collect(),
                        bytes,
                    })
                }
                Err(e) => {
                    out.abort(&e.message());
                    Err(e)
                }
            }
        })
        .await
    }

    /// Delete the copy `name` on `target`, unless another copy's chain needs it. Its
    /// tombstone is kept first, durably, saying "deleting", and final once the delete
    /// returned: its manifest served again after that is refused, and one still there
    /// because the delete failed is the copy being deleted, finished by the next writing act.
    pub async fn delete(&self, target: &str, name: SnapshotName) -> Result<(), Error> {
        let n = name.to_string();
        self.act(target, &n, "delete", move |inner, target, store, key, _| {
            let listed = seal::copies(store, key).map_err(error_of)?;
            // Every copy whose manifest authenticates names its parent, good or not: a
            // glitched copy in the middle of a chain still links the ones after it.
            let needed_by: Vec<String> = listed
                .iter()
                .filter_map(|l| match l {
                    Listed::Good(m) | Listed::Bad { manifest: Some(m), .. }
                        if m.parent_name == Some(name) =>
                    {
                        Some(m.name.to_string())
                    }
                    _ => None,
                })
                .collect();
            if !needed_by.is_empty() {
                return Err(Error::new(
                    ErrorKind::Needed,
                    format!(
                        "{name} is needed by {}: a fetch of those replays {name} first; delete them first",
                        layout::human::and_list(&needed_by.iter().map(String::as_str).collect::<Vec<_>>())
                    ),
                ));
            }
            let deleting = listed.iter().find_map(|l| match l {
                Listed::Good(m) | Listed::Bad { manifest: Some(m), .. } if m.name == name => {
                    Some((m.uuid.hyphenated().to_string(), m.generation))
                }
                _ => None,
            });
            // A copy this machine stored that the target does not list any more: buried
            // too, so that verify stops asking for it once a person deleted it.
            let deleting = deleting.or_else(|| {
                let t = inner.generations().of(target.name.as_str());
                t.stored().get(&name.to_string()).map(|g| (String::new(), *g))
            });
            let now = layout::human::unix_micros(std::time::SystemTime::now());
            let state = inner.paths.state.display().to_string();
            if let Some((uuid, generation)) = &deleting {
                // Before the delete: a manifest put back after it must never find no record.
                inner
                    .generations()
                    .bury(target.name.as_str(), &name.to_string(), uuid, *generation, now)
                    .map_err(|e| failed(format!("{e}; {name} was not deleted: free space in {state} and try again")))?;
            }
            let result = seal::delete_copy(store, key, &name).map_err(error_of);
            let gone = match &result {
                Ok(()) => true,
                Err(e) => e.kind() == Some(ErrorKind::NotFound),
            };
            if deleting.is_some() && gone {
                inner
                    .generations()
                    .buried(target.name.as_str(), &name.to_string())
                    .map_err(|e| failed(format!("{e}; {name} was deleted, but this machine still says it is being deleted: free space in {state}")))?;
            }
            result
        })
        .await
    }
}

impl Inner {
    fn generations(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.generations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store of `target`, its credentials checked first.
    fn open_store(&self, target: &Target) -> Result<Box<dyn Store>, Error> {
        let seal_config = target
            .seal
            .as_ref()
            .ok_or_else(|| failed(format!("target {} is not sealed", target.name)))?;
        let place = match &target.place {
            Place::Local(path) => StorePlace::Dir {
                path: PathBuf::from(path),
            },
            // The far directory is the forced command's (`tacid-copy-target DIR`), not the client's.
            Place::Ssh {
                user, host, port, ..
            } => {
                let known_hosts_dir = self.paths.state.join("ssh");
                ensure_private_dir(&known_hosts_dir)?;
                StorePlace::Ssh {
                    program: self.paths.ssh.clone(),
                    user: user
                        .clone()
                        .unwrap_or_else(|| layout::names::COPIER_USER.to_owned()),
                    host: host.clone(),
                    port: *port,
                    identity: PathBuf::from(target.identity.clone().unwrap_or_default()),
                    host_key: target
                        .host_key
                        .as_ref()
                        .map(|k| k.as_str().to_owned())
                        .unwrap_or_default(),
                    known_hosts_dir,
                    label: target.name.to_string(),
                }
            }
            Place::S3 {
                host,
                port,
                bucket,
                prefix,
            } => {
                let path = seal_config.credentials.as_deref().ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotConfigured,
                        format!(
                            "target {} names no credentials file (seal.credentials)",
                            target.name
                        ),
                    )
                })?;
                let c = credentials::read(std::path::Path::new(path)).map_err(|r| match r {
                    credentials::Refused::Unsafe(m) => Error::new(ErrorKind::KeyUnsafe, m),
                    credentials::Refused::Unusable(m) => Error::new(ErrorKind::NotConfigured, m),
                })?;
                StorePlace::S3 {
                    host: host.clone(),
                    port: *port,
                    bucket: bucket.clone(),
                    prefix: prefix.clone(),
                    region: seal_config.region.clone(),
                    credentials: seal::S3Credentials {
                        access_key_id: c.access_key_id,
                        secret_access_key: c.secret_access_key,
                    },
                    allow_http: seal_config.http,
                    connect_timeout: None,
                    request_timeout: None,
                }
            }
        };
        seal::open_store(&place, self.runtime.clone()).map_err(|e| error_of(e.into()))
    }

    /// Remove the parts no manifest names and the store's temporaries, once older than
    /// seal::CLEAN_GRACE (a copy cut short, a delete cut short, a put a power cut stopped).
    /// No part is removed while the listing lacks a copy this machine stored and did not
    /// delete: such a listing (an unreadable or emptied directory, a wrong prefix) would make
    /// every copy's parts look orphaned.
    fn clean(&self, target: &Target, store: &dyn Store, key: &SealKey) -> Result<(), Error> {
        let mut known = self.generations().of(target.name.as_str());
        if known.sealed.is_none() && !known.copies.is_empty() {
            // A record from before stored copies were kept: learn them from the listing,
            // and clean nothing if it shows none of the copies this machine wrote.
            self.learn(target, &seal::copies(store, key).map_err(error_of)?);
            known = self.generations().of(target.name.as_str());
            if known.sealed.is_none() {
                tracing::warn!(
                    target = %target.name,
                    "not cleaned: the target lists none of the {} copies this machine wrote there",
                    known.copies.len()
                );
                return Ok(());
            }
        }
        let expected = known.stored().into_keys().collect();
        let report =
            seal::clean_expecting(store, key, seal::CLEAN_GRACE, &expected).map_err(error_of)?;
        match &report.refused {
            Some(why) => tracing::warn!(target = %target.name, "not cleaned: {why}"),
            None => tracing::debug!(target = %target.name, ?report, "cleaned"),
        }
        Ok(())
    }

    /// Finish the deletes this machine began on `target` and that did not return (a store
    /// that failed, a power cut): each copy still there under its tombstone's generation is
    /// deleted, and its tombstone made final.
    fn finish_deletes(
        &self,
        target: &Target,
        store: &dyn Store,
        key: &SealKey,
    ) -> Result<(), Error> {
        let pending: Vec<(String, u64)> = self
            .generations()
            .of(target.name.as_str())
            .deleted
            .into_iter()
            .filter(|(_, d)| d.deleting)
            .map(|(n, d)| (n, d.generation))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let listed = seal::copies(store, key).map_err(error_of)?;
        for (name, generation) in pending {
            let Ok(parsed) = SnapshotName::parse(&name) else {
                continue;
            };
            let there = listed.iter().find_map(|l| match l {
                Listed::Good(m)
                | Listed::Bad {
                    manifest: Some(m), ..
                } if m.name == parsed => Some(m.generation),
                // A manifest that does not authenticate is not the copy being deleted.
                _ => None,
            });
            match there {
                // A newer copy of the name (another writer's): not the one being deleted.
                Some(g) if g > generation => {}
                Some(_) => match seal::delete_copy(store, key, &parsed) {
                    Ok(()) | Err(SealError::NotFound(_)) => {}
                    Err(e) => return Err(error_of(e)),
                },
                None => {}
            }
            if there.is_none_or(|g| g <= generation) {
                self.generations()
                    .buried(target.name.as_str(), &name)
                    .map_err(failed)?;
                tracing::info!(target = %target.name, "finished deleting {name}");
            }
        }
        Ok(())
    }

    /// Learn which listed copies are this machine's, stored whole; a failure to write
    /// that down is logged (the next listing learns it again).
    fn learn(&self, target: &Target, listed: &[Listed]) {
        let found: Vec<(String, u64)> = listed
            .iter()
            .filter_map(|l| match l {
                Listed::Good(m) => Some((m.name.to_string(), m.generation)),
                _ => None,
            })
            .collect();
        if let Err(e) = self.generations().learn(target.name.as_str(), &found) {
            tracing::warn!(target = %target.name, "cannot remember the copies listed: {e}");
        }
    }

    /// `Err` (Untrusted) when a manifest of `chain` is older than this machine wrote for its
    /// name, or of a copy this machine deleted.
    fn not_stale(&self, target: &Target, chain: &[seal::Manifest]) -> Result<(), Error> {
        let generations = self.generations();
        for m in chain {
            generations
                .check(target.name.as_str(), &m.name.to_string(), m.generation)
                .map_err(|stale| Error::new(ErrorKind::Untrusted, stale.to_string()))?;
        }
        Ok(())
    }

    /// The generation this machine gave each copy name on `target`.
    fn remembered(&self, target: &Target) -> std::collections::BTreeMap<String, u64> {
        self.generations().of(target.name.as_str()).copies
    }

    #[allow(clippy::too_many_arguments)]
    fn seal(
        &self,
        target: &Target,
        store: &dyn Store,
        key: &SealKey,
        turn: &Turn,
        name: SnapshotName,
        uuid: Uuid,
        parent: Option<(SnapshotName, Uuid)>,
        from: OwnedFd,
    ) -> Result<Sealed, Error> {
        let listed = seal::copies(store, key).map_err(error_of)?;
        let mut highest_listed = 0;
        for l in &listed {
            if let Listed::Bad {
                manifest: Some(m), ..
            } = l
            {
                highest_listed = highest_listed.max(m.generation);
            }
            match l {
                Listed::Good(m) => {
                    highest_listed = highest_listed.max(m.generation);
                    if m.name == name {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            format!(
                                "target {} holds a copy of {name} already; nothing was sealed",
                                target.name
                            ),
                        ));
                    }
                }
                Listed::Bad {
                    name: bad, problem, ..
                } if *bad == name.to_string() => {
                    return Err(Error::new(
                        ErrorKind::Untrusted,
                        format!(
                            "target {} holds a manifest of {name} that is not good ({problem}); \
                             delete that copy before sealing it again",
                            target.name
                        ),
                    ));
                }
                Listed::Bad { .. } => {}
            }
        }
        if let Some((parent_name, parent_uuid)) = &parent {
            let found = listed.iter().find_map(|l| match l {
                Listed::Good(m) if m.name == *parent_name && m.uuid == *parent_uuid => Some(m),
                _ => None,
            });
            // A parent this machine knows is older than it wrote, or deleted: a chain on it
            // would restore from a copy put back.
            if let Some(m) = found {
                self.not_stale(target, std::slice::from_ref(m))
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::Untrusted,
                            format!("{}; {name} was not sealed on it", e.message()),
                        )
                    })?;
            }
            if found.is_none() {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "target {} holds no good copy of {parent_name} (uuid {parent_uuid}) to seal {name} against; seal a full copy",
                        target.name
                    ),
                ));
            }
        }
        let generation = {
            let mut generations = self.generations();
            let generation = generations
                .of(target.name.as_str())
                .highest
                .max(highest_listed)
                + 1;
            // Remembered before a byte is stored: a copy cut short leaves a generation
            // unused, never one given twice.
            generations
                .remember(target.name.as_str(), &name.to_string(), generation)
                .map_err(failed)?;
            generation
        };
        let meta = seal::CopyMeta { name, uuid, parent };
        let mut stream = Trailered {
            frames: FrameReader::new(Bounded::new(from, self.paths.stall)),
            uuid,
            parent_uuid: parent.as_ref().map(|p| p.1),
            data_bytes: 0,
        };
        match seal::seal(store, key, meta, generation, &mut stream, turn.moved()) {
            Ok(m) => {
                // Read back whole: from now on a listing without it has lost it.
                if let Err(e) = self.generations().sealed(
                    target.name.as_str(),
                    &m.name.to_string(),
                    m.generation,
                ) {
                    tracing::warn!(target = %target.name, "{e}: a listing that loses {} is not caught", m.name);
                }
                Ok(Sealed {
                    name: m.name.to_string(),
                    generation: m.generation,
                    parts: m.parts.len() as u32,
                    plain_bytes: m.plain_bytes,
                    stored_bytes: m.stored_bytes,
                    depth: m.depth,
                })
            }
            // The seal removed the parts of the copy cut short; what it could not, a
            // writing act removes once older than seal::CLEAN_GRACE.
            Err(e) => Err(error_of(e)),
        }
    }
}

/// The stem's frames, whose END must name the snapshot the call named: only then does the
/// stream end (and the manifest get written); any other END is an error.
struct Trailered<R: Read> {
    frames: FrameReader<R>,
    uuid: Uuid,
    parent_uuid: Option<Uuid>,
    data_bytes: u64,
}

impl<R: Read> Read for Trailered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.frames.read(buf)?;
        if n > 0 {
            self.data_bytes += n as u64;
            return Ok(n);
        }
        // Nothing may follow the END: a writer that goes on is not the stem's send.
        self.frames.expect_eof()?;
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let trailer = self.frames.trailer().ok_or_else(|| {
            bad("the stream ended without its END frame; nothing was kept".into())
        })?;
        let t: SendTrailer = serde_json::from_slice(trailer).map_err(|e| {
            bad(format!(
                "the stream's END frame is not the stem's trailer ({e}); nothing was kept"
            ))
        })?;
        if t.uuid != self.uuid || t.parent_uuid != self.parent_uuid {
            return Err(bad(format!(
                "the stream's END says snapshot {} against {}, not {} against {} as asked; nothing was kept",
                t.uuid,
                t.parent_uuid.map(|u| u.to_string()).unwrap_or_else(|| "nothing (full)".into()),
                self.uuid,
                self.parent_uuid.map(|u| u.to_string()).unwrap_or_else(|| "nothing (full)".into()),
            )));
        }
        if t.bytes != self.data_bytes {
            return Err(bad(format!(
                "the stream's END says {} bytes were sent, but {} arrived; nothing was kept",
                t.bytes, self.data_bytes
            )));
        }
        Ok(0)
    }
}

/// The copy `m` on `target` as the interface says it: `problem` when not good, else what
/// this machine's memory of generations finds wrong with it (an older or deleted copy).
fn copy_of(
    generations: &Generations,
    target: &Target,
    m: &seal::Manifest,
    problem: String,
) -> SealedCopy {
    let problem = if problem.is_empty() {
        generations
            .check(target.name.as_str(), &m.name.to_string(), m.generation)
            .err()
            .map(|o| o.to_string())
            .unwrap_or_default()
    } else {
        problem
    };
    SealedCopy {
        name: m.name.to_string(),
        uuid: m.uuid.hyphenated().to_string(),
        parent_uuid: m
            .parent_uuid
            .map(|u| u.hyphenated().to_string())
            .unwrap_or_default(),
        depth: m.depth,
        generation: m.generation,
        plain_bytes: m.plain_bytes,
        stored_bytes: m.stored_bytes,
        created_micros: m.created_micros,
        problem,
    }
}

/// The recovery key. A key file the copier cannot even open because it is another user's
/// is said to be that, with the fix, rather than as a failure to read.
fn load_key(path: &std::path::Path) -> Result<SealKey, Error> {
    use std::os::unix::fs::MetadataExt as _;
    SealKey::load(path).map_err(|e| {
        let euid = rustix::process::geteuid().as_raw();
        match (&e, std::fs::symlink_metadata(path)) {
            (SealError::Io(_), Ok(meta)) if meta.uid() != euid => Error::new(
                ErrorKind::KeyUnsafe,
                format!(
                    "the recovery key at {shown} belongs to uid {}, not to the copier (uid {euid}), \
                     which cannot read it; fix it: chown {euid} {shown} && chmod 0400 {shown}",
                    meta.uid(),
                    shown = path.display()
                ),
            ),
            _ => error_of(e),
        }
    })
}

/// `dir`, made 0700 when missing.
fn ensure_private_dir(dir: &std::path::Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt as _;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(failed(format!("cannot make {}: {e}", dir.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const STREAM: &[u8] = b"btrfs-stream\0 and what follows";

    fn framed(trailer: Option<serde_json::Value>, after: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = FrameWriter::new(&mut out);
        w.write_all(STREAM).expect("write");
        match trailer {
            Some(t) => {
                w.end(&t).expect("end");
            }
            // The writer died: its data frames, no END.
            None => w.flush().expect("flush"),
        }
        out.extend_from_slice(after);
        out
    }

    fn read(bytes: Vec<u8>, uuid: u128, parent: Option<u128>) -> Result<Vec<u8>, String> {
        let mut t = Trailered {
            frames: FrameReader::new(&bytes[..]),
            uuid: Uuid::from_u128(uuid),
            parent_uuid: parent.map(Uuid::from_u128),
            data_bytes: 0,
        };
        let mut out = Vec::new();
        t.read_to_end(&mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn trailer(uuid: u128, parent: Option<u128>, bytes: usize) -> serde_json::Value {
        serde_json::json!({
            "uuid": Uuid::from_u128(uuid),
            "parent_uuid": parent.map(Uuid::from_u128),
            "bytes": bytes,
        })
    }

    #[test]
    fn the_stream_ends_only_at_an_end_that_names_the_call() {
        let good = framed(Some(trailer(1, Some(2), STREAM.len())), b"");
        assert_eq!(read(good, 1, Some(2)).as_deref(), Ok(STREAM));
        let other = framed(Some(trailer(3, Some(2), STREAM.len())), b"");
        let e = read(other, 1, Some(2)).expect_err("another snapshot");
        assert!(
            e.contains("not 00000000-0000-0000-0000-000000000001"),
            "{e}"
        );
        let full = framed(Some(trailer(1, None, STREAM.len())), b"");
        assert!(read(full, 1, Some(2))
            .expect_err("a full send")
            .contains("nothing (full)"));
        let short = framed(Some(trailer(1, Some(2), STREAM.len() + 1)), b"");
        assert!(read(short, 1, Some(2))
            .expect_err("bytes")
            .contains("bytes were sent"));
        let cut = framed(None, b"");
        assert!(read(cut, 1, Some(2)).is_err(), "EOF without END");
        let more = framed(Some(trailer(1, Some(2), STREAM.len())), b"D");
        assert!(read(more, 1, Some(2))
            .expect_err("data after END")
            .contains("after"));
        let not_json = framed(Some(serde_json::json!("done")), b"");
        assert!(read(not_json, 1, Some(2))
            .expect_err("not a trailer")
            .contains("trailer"));
    }
}
