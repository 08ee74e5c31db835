//! What the boot tier needs from the host, and what it does when something is missing.

use std::path::{Path, PathBuf};

/// External programs, by absolute path (never `$PATH`), with the Debian package that has
/// each. Debian 12 has merged /usr, so these are where the packages' files resolve.
pub mod tools {
    pub const QEMU: &str = "/usr/bin/qemu-system-x86_64";
    pub const DRACUT: &str = "/usr/bin/dracut";
    pub const MKFS_BTRFS: &str = "/usr/sbin/mkfs.btrfs";
    pub const BTRFS: &str = "/usr/bin/btrfs";
    pub const DEPMOD: &str = "/usr/sbin/depmod";
    pub const APT_GET: &str = "/usr/bin/apt-get";
    pub const APT_CACHE: &str = "/usr/bin/apt-cache";
    pub const DPKG_DEB: &str = "/usr/bin/dpkg-deb";
    pub const DPKG_QUERY: &str = "/usr/bin/dpkg-query";
    pub const MOUNT: &str = "/usr/bin/mount";
    pub const UMOUNT: &str = "/usr/bin/umount";
    pub const CP: &str = "/usr/bin/cp";
    /// Undo the kernel's compression (Debian's is LZ4) for a PVH boot; the others are tried
    /// when there.
    pub const LZ4: &str = "/usr/bin/lz4";
    pub const ZSTD: &str = "/usr/bin/zstd";
    pub const XZ: &str = "/usr/bin/xz";
    pub const GZIP: &str = "/usr/bin/gzip";
    /// Runs `tacid-initrd` on the host at the pid the guest's run had (the write-level replay).
    pub const UNSHARE: &str = "/usr/bin/unshare";

    /// Each tool with the package that provides it, for the "install this" message.
    pub const ALL: [(&str, &str); 14] = [
        (QEMU, "qemu-system-x86"),
        (DRACUT, "dracut"),
        (MKFS_BTRFS, "btrfs-progs"),
        (BTRFS, "btrfs-progs"),
        (DEPMOD, "kmod"),
        (APT_GET, "apt"),
        (APT_CACHE, "apt"),
        (DPKG_DEB, "dpkg"),
        (DPKG_QUERY, "dpkg"),
        (MOUNT, "mount"),
        (UMOUNT, "mount"),
        (CP, "coreutils"),
        (LZ4, "lz4"),
        (UNSHARE, "util-linux"),
    ];
}

/// The Debian packages the boot tier installs on a fresh machine (the README's list).
pub const HOST_PACKAGES: &str =
    "qemu-system-x86 dracut dracut-core btrfs-progs kmod cpio systemd udev lz4";

/// Where slow parts are cached (gitignored).
pub fn cache_dir() -> PathBuf {
    crate::workspace_root().join("checks/boot/cache")
}

/// Why this machine cannot run the boot tier, or `None` when it can. As root, installs
/// the Debian packages it needs first ([`install_missing_packages`]).
pub fn missing_prerequisite() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("the boot tier needs root (loop devices, mounting the disk image)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control: loop devices are unavailable".into());
    }
    if let Err(why) = install_missing_packages() {
        return Some(why);
    }
    let missing: Vec<String> = tools::ALL
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(path, package)| format!("{path} (package {package})"))
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "missing {}; install with: apt-get install -y {HOST_PACKAGES}",
            missing.join(", ")
        ));
    }
    None
}

fn installed(package: &str) -> bool {
    std::process::Command::new(tools::DPKG_QUERY)
        .args(["-W", "-f", "${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// `apt-get update`, once per process (the kernel and busybox are looked up in apt's lists).
pub fn apt_update() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let status = std::process::Command::new(tools::APT_GET)
            .args(["update", "-qq"])
            .status()
            .map_err(|e| format!("apt-get update: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("apt-get update failed ({status})"))
        }
    })
    .clone()
}

/// Install whichever of [`HOST_PACKAGES`] is missing (a fresh machine needs them all).
pub fn install_missing_packages() -> Result<(), String> {
    if !Path::new(tools::DPKG_QUERY).exists() || !Path::new(tools::APT_GET).exists() {
        return Err("not a Debian machine (no dpkg-query or apt-get)".into());
    }
    let missing: Vec<&str> = HOST_PACKAGES
        .split_whitespace()
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    apt_update()?;
    let status = std::process::Command::new(tools::APT_GET)
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| format!("apt-get install: {e}"))?;
    if !status.success() {
        return Err(format!(
            "apt-get install {} failed ({status})",
            missing.join(" ")
        ));
    }
    Ok(())
}

/// True when running in CI, where skipping is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Say loudly that `what` did not run and why; under `CI=true`, fail instead.
pub fn skip_or_fail(what: &str, why: &str) {
    let line = "=".repeat(78);
    if in_ci() {
        panic!("{what}: cannot run under CI=true: {why}");
    }
    // Straight to the stderr handle: the test harness captures eprintln!, not this, so
    // the line shows even when the test passes.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}\nSKIPPED {what}: {why}\n{line}");
}

/// `Some(())` when the boot tier can run here; otherwise reports (or fails under CI) and
/// returns `None`.
pub fn require(what: &str) -> Option<()> {
    match missing_prerequisite() {
        None => Some(()),
        Some(why) => {
            skip_or_fail(what, &why);
            None
        }
    }
}
