//! The boot tier: a real kernel and a systemd initrd carrying `tacid-initrd`, booted in
//! qemu on a real Btrfs disk, rebooted, and cut off at every step of the swap.
//!
//! The test machine is built from Debian's packages ([`parts`]): a cloud kernel, a dracut
//! initrd holding the static `tacid-initrd` and its unit files exactly as `initrd/systemd/`
//! ships them, and a disk laid out from the `layout` crate ([`image`]). Its root is
//! ephemeral, as on a tacid NixOS machine, so its whole userland (a static busybox and an
//! init script, [`guest`]) lives in `@nix`. [`machine`] boots it and reads back what the
//! guest reports on its second serial port, and can log every write the guest makes to its
//! disk ([`write_log`]) so that every crash state can be replayed on the host.
//!
//! Everything slow is cached under `checks/boot/cache/`, keyed by its inputs (adr/0008).

pub mod env;
pub mod guest;
pub mod image;
pub mod machine;
pub mod parts;
pub mod write_log;

use std::path::PathBuf;
use std::process::{Command, Output};

/// What went wrong while building or booting the test machine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed ({status}): {command}\n{stderr}")]
    Command {
        what: String,
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{0}")]
    Other(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Attach what was being done to an I/O error.
pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            what: what(),
            source,
        })
    }
}

/// Run `cmd`, failing with its stderr when it does not succeed.
pub(crate) fn run(what: &str, cmd: &mut Command) -> Result<Output> {
    let command = format!("{cmd:?}");
    let out = cmd
        .output()
        .context(|| format!("{what}: could not start {command}"))?;
    if !out.status.success() {
        return Err(Error::Command {
            what: what.to_owned(),
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout),
        });
    }
    Ok(out)
}

/// Run `cmd` and return its stdout as text.
pub(crate) fn run_stdout(what: &str, cmd: &mut Command) -> Result<String> {
    let out = run(what, cmd)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A path for messages.
pub(crate) fn shown(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// Paths of the repository this crate lives in.
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // checks/boot-tier → the workspace root, two levels up.
    manifest
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| manifest.join("../.."))
}
