//! A target that is a directory on another Btrfs filesystem of this machine (a USB disk).

use std::os::fd::AsFd as _;
use std::path::Path;
use std::sync::atomic::AtomicU64;

use btrfs::Dir;
use layout::copies::Target as Configured;
use layout::SnapshotName;
use uuid::Uuid;

use super::process::{run_fed, Sink};
use super::target::{
    receive_failure, receive_into_store, received_into_store, transfer_failed, OpenTarget, Stream,
};
use super::{failed, CopyError, CopyOnTarget, Programs, MAX_COPIES_LISTED};
use crate::receive_protocol::Where;

/// A local target, its directory open.
pub struct Local<'t> {
    target: &'t Configured,
    programs: &'t Programs,
    dir: Dir,
}

impl<'t> Local<'t> {
    /// Open the directory `path` of `target`: on Btrfs, and not on the tacid filesystem
    /// (whose top is mounted for the stem at `top_path`).
    pub fn open(
        target: &'t Configured,
        path: &str,
        programs: &'t Programs,
        top_path: &Path,
    ) -> Result<Local<'t>, CopyError> {
        let dir =
            Dir::open_configured(Path::new(path)).map_err(|e| CopyError::TargetUnreachable {
                target: target.name.clone(),
                reason: format!("{path}: {e} (is the disk mounted?)"),
            })?;
        let on_btrfs = dir
            .is_on_btrfs()
            .map_err(|e| failed("statfs the target", e))?;
        if !on_btrfs {
            return Err(CopyError::TargetNotBtrfs {
                target: target.name.clone(),
                reason: format!("{path} is on another kind of filesystem"),
            });
        }
        // A copy on the tacid disk itself dies with it: no backup at all.
        let top =
            Dir::open_configured(top_path).map_err(|e| failed("open the tacid filesystem", e))?;
        let same = dir
            .filesystem_uuid()
            .and_then(|t| Ok(t == top.filesystem_uuid()?))
            .map_err(|e| failed("compare the target's filesystem with tacid's", e))?;
        if same {
            return Err(CopyError::OnTheTacidDisk {
                target: target.name.clone(),
                path: path.to_owned(),
            });
        }
        Ok(Local {
            target,
            programs,
            dir,
        })
    }
}

impl OpenTarget for Local<'_> {
    /// Delete every subvolume with a snapshot's name that is not a verified copy: transfers
    /// that died.
    fn clean(&self) {
        let dir = &self.dir;
        let Ok(names) = dir.entry_names() else { return };
        for entry in names {
            let Some(Ok(_)) = entry.to_str().map(SnapshotName::parse) else {
                continue;
            };
            let Ok(sub) = dir.open_dir(&entry) else {
                continue;
            };
            if !sub.is_subvolume_root().unwrap_or(false) {
                continue;
            }
            let verified = sub
                .subvolume_info()
                .is_ok_and(|i| i.readonly && i.received_uuid.is_some());
            drop(sub);
            if !verified {
                match dir.remove_all(&entry) {
                    Ok(_) => tracing::info!(
                        target = %self.target.name,
                        "removed a half-received {} (a transfer that died)",
                        entry.to_string_lossy()
                    ),
                    Err(e) => {
                        tracing::warn!(target = %self.target.name, "cannot remove a half-received subvolume: {e}")
                    }
                }
            }
        }
        let _ = dir.commit();
    }

    fn list_verified(&self) -> Result<Vec<CopyOnTarget>, CopyError> {
        let dir = &self.dir;
        let mut out = Vec::new();
        for entry in dir
            .entry_names()
            .map_err(|e| failed("read the target", e))?
        {
            let Some(Ok(name)) = entry.to_str().map(SnapshotName::parse) else {
                continue;
            };
            let Ok(sub) = dir.open_dir(&entry) else {
                continue;
            };
            if !sub.is_subvolume_root().unwrap_or(false) {
                continue;
            }
            let Ok(info) = sub.subvolume_info() else {
                continue;
            };
            if let (true, Some(received_uuid)) = (info.readonly, info.received_uuid) {
                out.push(CopyOnTarget {
                    name,
                    uuid: info.uuid,
                    received_uuid,
                });
            }
            if out.len() >= MAX_COPIES_LISTED {
                break;
            }
        }
        out.sort_by_key(|c| std::cmp::Reverse(c.name));
        Ok(out)
    }

    fn list(&self) -> Result<Vec<CopyOnTarget>, CopyError> {
        self.clean();
        self.list_verified()
    }

    fn delete(&self, name: SnapshotName) -> Result<(), CopyError> {
        self.clean();
        let held = self.list_verified()?;
        if !held.iter().any(|c| c.name == name) {
            return Err(CopyError::NoSuchCopy {
                target: self.target.name.clone(),
                name,
            });
        }
        self.dir
            .remove_all(name.to_string())
            .map_err(|e| failed("delete the copy", e))?;
        self.dir
            .commit()
            .map_err(|e| failed("commit the target", e))?;
        Ok(())
    }

    fn receive(
        &self,
        name: SnapshotName,
        identity: Uuid,
        send: Stream,
        moved: &AtomicU64,
    ) -> Result<Uuid, CopyError> {
        let target = self.target;
        let transfer_failed = |reason: String| transfer_failed(target, name, reason);
        // By the receiver, which finds the target's directory in root's configuration itself.
        let sink = Sink::Receiver {
            socket: &self.programs.receiver,
            place: Where::Target(target.name.clone()),
        };
        let (ran, sent) = run_fed(sink, send, moved, self.programs.stall)?;
        if let Err(e) = &sent {
            // The sender's failure is the cause unless the receiver stopped first (EPIPE).
            if ran.ok() {
                return Err(transfer_failed(format!("sending: {e}")));
            }
        }
        let dir = &self.dir;
        if !ran.ok() {
            let full =
                ran.stderr.contains("No space left") || dir.free_bytes().is_ok_and(|b| b < 1 << 20);
            let reason = receive_failure(&ran.stderr);
            return Err(if full {
                CopyError::TargetFull {
                    target: target.name.clone(),
                    reason,
                }
            } else {
                transfer_failed(reason)
            });
        }
        if let Err(e) = sent {
            return Err(transfer_failed(format!("sending: {e}")));
        }
        let sub = dir
            .open_dir(name.to_string())
            .map_err(|e| transfer_failed(format!("the received copy: {e}")))?;
        let info = sub
            .subvolume_info()
            .map_err(|e| transfer_failed(format!("the received copy: {e}")))?;
        if !sub.is_subvolume_root().unwrap_or(false)
            || !info.readonly
            || info.received_uuid != Some(identity)
        {
            return Err(transfer_failed(format!(
                "the received copy does not check out (read-only: {}, received UUID {:?}, expected {identity})",
                info.readonly, info.received_uuid
            )));
        }
        dir.commit().map_err(|e| failed("commit the target", e))?;
        Ok(identity)
    }

    fn send_into(&self, name: SnapshotName, moved: &AtomicU64) -> Result<(), CopyError> {
        let receive = receive_into_store(self.programs);
        let copy = self
            .dir
            .open_dir(name.to_string())
            .map_err(|e| failed("open the copy", e))?;
        let (ran, sent) = run_fed(
            receive,
            move |out| copy.send(out.as_fd(), None),
            moved,
            self.programs.stall,
        )?;
        received_into_store(self.target, name, ran, sent)
    }
}
