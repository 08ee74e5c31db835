//! A target on another host, reached over SSH with a pinned host key; the far side is the
//! forced command `tacid-copy-target` (`super::far_side`), which cleans at every verb.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicU64;

use layout::copies::{Place, Target as Configured};
use layout::SnapshotName;
use uuid::Uuid;

use super::process::{capped, run_fed, run_piped, run_plain, Sink};
use super::target::{receive_into_store, received_into_store, transfer_failed, OpenTarget, Stream};
use super::{failed, far_side, CopyError, CopyOnTarget, Programs};

/// An SSH target.
pub struct Ssh<'t> {
    target: &'t Configured,
    programs: &'t Programs,
}

impl<'t> Ssh<'t> {
    pub fn new(target: &'t Configured, programs: &'t Programs) -> Ssh<'t> {
        Ssh { target, programs }
    }

    /// The ssh command for `args` on this target, with the pinned host key written out.
    fn command(&self, args: &[&str]) -> Result<Command, CopyError> {
        let target = self.target;
        let Place::Ssh { port, .. } = &target.place else {
            return Err(CopyError::Failed("not an ssh target".into()));
        };
        let (Some(identity), Some(line), Some(destination)) = (
            target.identity.as_ref(),
            target.known_hosts_line(),
            target.place.ssh_destination(),
        ) else {
            return Err(CopyError::Failed("the ssh target lacks its keys".into()));
        };
        let known_hosts = self
            .programs
            .runtime_dir
            .join(format!("known_hosts.{}", target.name));
        write_private(&known_hosts, line.as_bytes())
            .map_err(|e| failed(&format!("write {}", known_hosts.display()), e))?;
        let mut cmd = Command::new(&self.programs.ssh);
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.args(["-F", "/dev/null", "-i"])
            .arg(identity)
            .args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-o", "GlobalKnownHostsFile=/dev/null"])
            .args(["-o", "ConnectTimeout=10"])
            .args(["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"])
            .arg("-p")
            .arg(port.to_string())
            .arg("--")
            .arg(destination)
            .args(args);
        Ok(cmd)
    }
}

impl OpenTarget for Ssh<'_> {
    /// Nothing here: the far side cleans at every verb.
    fn clean(&self) {}

    fn list_verified(&self) -> Result<Vec<CopyOnTarget>, CopyError> {
        Err(CopyError::Failed("not a local target".into()))
    }

    fn list(&self) -> Result<Vec<CopyOnTarget>, CopyError> {
        let ran = run_plain(self.command(&["list"])?, self.programs.stall)?;
        let ran = far_side::result(&self.target.name, ran, None)?;
        far_side::parse_list(&ran.stdout).map_err(|reason| CopyError::TransferFailed {
            target: self.target.name.clone(),
            name: SnapshotName::parse("@home.1970-01-01T000000.000000Z").expect("a valid name"),
            reason,
        })
    }

    fn delete(&self, name: SnapshotName) -> Result<(), CopyError> {
        let n = name.to_string();
        let ran = run_plain(self.command(&["delete", &n])?, self.programs.stall)?;
        far_side::result(&self.target.name, ran, Some(name)).map(drop)
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
        let n = name.to_string();
        let cmd = self.command(&["receive", &n])?;
        let (ran, sent) = run_fed(Sink::Child(cmd), send, moved, self.programs.stall)?;
        if let Err(e) = &sent {
            // The sender's failure is the cause unless the receiver stopped first (EPIPE).
            if ran.ok() {
                return Err(transfer_failed(format!("sending: {e}")));
            }
        }
        let ran = far_side::result(&target.name, ran, Some(name))?;
        if let Err(e) = sent {
            return Err(transfer_failed(format!("sending: {e}")));
        }
        if !far_side::confirms_receipt(&ran.stdout, name, identity) {
            return Err(transfer_failed(format!(
                "the far side did not confirm the copy: {:?}",
                capped(&ran.stdout)
            )));
        }
        Ok(identity)
    }

    fn send_into(&self, name: SnapshotName, moved: &AtomicU64) -> Result<(), CopyError> {
        let receive = receive_into_store(self.programs);
        let n = name.to_string();
        let far = self.command(&["send", &n])?;
        let (ran, far_ran) = run_piped(far, receive, moved, self.programs.stall)?;
        far_side::result(&self.target.name, far_ran, Some(name))?;
        received_into_store(self.target, name, ran, Ok(()))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}
