//! The test machine's parts, from Debian's packages, cached by their inputs.
//!
//! - the kernel: the image package `linux-image-cloud-amd64` depends on, extracted, with
//!   `depmod` run on its modules;
//! - `busybox` from `busybox-static`: the guest's whole userland;
//! - `tacid-initrd`, built static with the `test-hooks` feature into its own target dir;
//! - a dracut systemd initrd with that binary and the unit files of `initrd/systemd/`,
//!   byte for byte, plus one test-only mount unit for the store;
//! - a laid-out disk image, copied for every machine.
//!
//! Each lands in `checks/boot/cache/` under a name that carries a hash of its inputs, so a
//! second run reuses it and a change of any input builds it again.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::env::{cache_dir, tools};
use crate::{run, run_stdout, shown, Error, IoContext as _, Result};

/// The metapackage whose dependency is the kernel we boot.
pub const KERNEL_METAPACKAGE: &str = "linux-image-cloud-amd64";
/// The package that has a static busybox.
pub const BUSYBOX_PACKAGE: &str = "busybox-static";
/// The target `tacid-initrd` is built for (explicit, so `+crt-static` skips proc macros).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The feature that makes `tacid-initrd` honour `tacid.test_pause_after=N` (or `N.k`).
pub const TEST_FEATURE: &str = "test-hooks";

/// dracut modules and drivers of the test initrd: systemd's own initrd, as NixOS's stage 1
/// is, with no dracut hook services (their shell scripts cost ~3 s of a TCG boot): the root
/// is `sysroot.mount`, made by systemd-fstab-generator from `root=` (adr/0008).
const DRACUT_MODULES: &str = "systemd systemd-initrd udev-rules btrfs base";
const DRACUT_DRIVERS: &str = "virtio_pci virtio_blk btrfs";
/// Bump when the way a part is made changes without any input changing.
const RECIPE: u32 = 1;

/// The extracted kernel.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// `boot/vmlinuz-<release>`.
    pub vmlinuz: PathBuf,
    /// What qemu boots: the uncompressed ELF started at its PVH entry point when the kernel
    /// has one ([`pvh_image`]), else `vmlinuz`.
    pub boot_image: PathBuf,
    /// `uname -r` of the kernel.
    pub release: String,
    /// The extracted package's root (holds `lib/modules/<release>`).
    pub root: PathBuf,
}

/// What goes into the initrd from this repository.
#[derive(Debug, Clone)]
pub struct InitrdInputs {
    /// The static `tacid-initrd` binary.
    pub binary: PathBuf,
    /// The directory of unit files (`initrd/systemd/`), installed unchanged.
    pub unit_dir: PathBuf,
    /// Unit files of `unit_dir` left out of the initrd, by file name (each must be there):
    /// a machine that keeps its root has no wipe unit.
    pub left_out: Vec<String>,
}

/// Everything needed to boot test machines.
#[derive(Debug, Clone)]
pub struct Parts {
    pub kernel: Kernel,
    pub initrd: PathBuf,
    /// What the initrd was made of.
    pub inputs: InitrdInputs,
    /// The laid-out disk; never booted itself, only copied.
    pub disk: PathBuf,
    /// How long each part took this time (cached parts take almost nothing).
    pub timings: Vec<(&'static str, Duration)>,
}

impl Parts {
    /// Build (or reuse) every part, with `tacid-initrd` and its units from this repository.
    pub fn for_workspace() -> Result<Parts> {
        let started = Instant::now();
        let binary = build_tacid_initrd()?;
        let built = started.elapsed();
        let inputs = InitrdInputs {
            binary,
            unit_dir: crate::workspace_root().join("initrd/systemd"),
            left_out: Vec::new(),
        };
        let mut parts = Parts::build(&inputs)?;
        parts
            .timings
            .insert(0, ("tacid-initrd (cargo build)", built));
        Ok(parts)
    }

    /// Build (or reuse) every part around the given `tacid-initrd` and unit files.
    pub fn build(inputs: &InitrdInputs) -> Result<Parts> {
        let cache = cache_dir();
        std::fs::create_dir_all(&cache).context(|| format!("creating {}", shown(&cache)))?;
        let mut timings = Vec::new();
        let t = Instant::now();
        let kernel = kernel(&cache)?;
        timings.push(("kernel", t.elapsed()));
        let t = Instant::now();
        let busybox = busybox(&cache)?;
        timings.push(("busybox", t.elapsed()));
        let t = Instant::now();
        let initrd = initrd(&cache, &kernel, inputs)?;
        timings.push(("initrd (dracut)", t.elapsed()));
        let t = Instant::now();
        let disk = disk(&cache, &busybox)?;
        timings.push(("disk image", t.elapsed()));
        Ok(Parts {
            kernel,
            initrd,
            inputs: inputs.clone(),
            disk,
            timings,
        })
    }

    /// These parts for a machine that keeps its root (`services.tacid.ephemeralRoot =
    /// false`): the initrd without the wipe unit, the disk without `@root-blank`.
    pub fn keeping_root(&self) -> Result<Parts> {
        let cache = cache_dir();
        let mut timings = Vec::new();
        let mut inputs = self.inputs.clone();
        inputs
            .left_out
            .push(layout::names::INITRD_WIPE_ROOT_UNIT.to_owned());
        let t = Instant::now();
        let initrd = initrd(&cache, &self.kernel, &inputs)?;
        timings.push(("initrd without the wipe", t.elapsed()));
        let t = Instant::now();
        let disk = disk_without_blank(&cache, &self.disk)?;
        timings.push(("disk without @root-blank", t.elapsed()));
        Ok(Parts {
            kernel: self.kernel.clone(),
            initrd,
            inputs,
            disk,
            timings,
        })
    }
}

/// `cargo build` the static, test-hooked `tacid-initrd` into `target/boot-tier`, apart from
/// the shared target dir so it neither waits for nor disturbs other builds.
pub fn build_tacid_initrd() -> Result<PathBuf> {
    let root = crate::workspace_root();
    let target_dir = root.join("target/boot-tier");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "initrd",
            "--bin",
            "tacid-initrd",
            "--features",
            TEST_FEATURE,
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        // CARGO_ENCODED_RUSTFLAGS would win over RUSTFLAGS.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", "-C target-feature=+crt-static");
    run("building tacid-initrd (static, test-hooks)", &mut cmd)?;
    Ok(target_dir.join(TARGET).join("release/tacid-initrd"))
}

fn hash_hex(f: impl FnOnce(&mut DefaultHasher)) -> String {
    let mut h = DefaultHasher::new();
    RECIPE.hash(&mut h);
    f(&mut h);
    format!("{:016x}", h.finish())
}

/// The package a metapackage depends on, and the candidate version of a package, from
/// apt's local lists (no download).
fn dependency_of(metapackage: &str) -> Result<String> {
    match dependency_of_once(metapackage) {
        Ok(dep) => Ok(dep),
        // A fresh machine may have no package lists yet.
        Err(_) => {
            crate::env::apt_update().map_err(Error::Other)?;
            dependency_of_once(metapackage)
        }
    }
}

fn dependency_of_once(metapackage: &str) -> Result<String> {
    let out = run_stdout(
        "apt-cache depends",
        Command::new(tools::APT_CACHE).args(["depends", metapackage]),
    )?;
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Depends: "))
        .map(|s| s.trim().to_owned())
        .ok_or_else(|| {
            Error::Other(format!(
                "apt knows no dependency of {metapackage}; run `apt-get update` first"
            ))
        })
}

fn candidate_version(package: &str) -> Result<String> {
    let out = run_stdout(
        "apt-cache show",
        Command::new(tools::APT_CACHE).args(["show", "--no-all-versions", package]),
    )?;
    out.lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .map(|s| s.trim().to_owned())
        .ok_or_else(|| {
            Error::Other(format!(
                "apt knows no version of {package}; run `apt-get update` first"
            ))
        })
}

/// Download `package` and extract it into a fresh directory, returned.
fn download_and_extract(cache: &Path, package: &str) -> Result<tempfile::TempDir> {
    let work = tempfile::Builder::new()
        .prefix(".tmp.")
        .tempdir_in(cache)
        .context(|| format!("making a work directory in {}", shown(cache)))?;
    run(
        &format!("apt-get download {package}"),
        Command::new(tools::APT_GET)
            .current_dir(work.path())
            .args(["download", "-q", package]),
    )?;
    let deb = std::fs::read_dir(work.path())
        .context(|| "listing the download".into())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| Error::Other(format!("apt-get download {package} left no .deb")))?;
    run(
        "dpkg-deb -x",
        Command::new(tools::DPKG_DEB)
            .arg("-x")
            .arg(&deb)
            .arg(work.path().join("root")),
    )?;
    Ok(work)
}

/// The newest cached part named `prefix*` that is complete, for when apt cannot answer.
fn cached_fallback(cache: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .filter(|p| p.join(".complete").exists())
        .collect();
    found.sort();
    found.pop()
}

/// A directory part, made once: `make` fills a work directory, which is renamed into place.
fn cached_dir(cache: &Path, name: &str, make: impl FnOnce(&Path) -> Result<()>) -> Result<PathBuf> {
    let dir = cache.join(name);
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    let work = tempfile::Builder::new()
        .prefix(".tmp.")
        .tempdir_in(cache)
        .context(|| format!("making a work directory in {}", shown(cache)))?;
    make(work.path())?;
    std::fs::write(work.path().join(".complete"), b"")
        .context(|| "marking a part complete".into())?;
    let _ = std::fs::remove_dir_all(&dir);
    let work = work.keep();
    std::fs::rename(&work, &dir).context(|| format!("moving a part to {}", shown(&dir)))?;
    Ok(dir)
}

fn kernel(cache: &Path) -> Result<Kernel> {
    let dir = match dependency_of(KERNEL_METAPACKAGE)
        .and_then(|pkg| candidate_version(&pkg).map(|v| (pkg, v)))
    {
        Ok((pkg, version)) => cached_dir(cache, &format!("kernel-{pkg}_{version}"), |out| {
            let work = download_and_extract(cache, &pkg)?;
            let root = work.path().join("root");
            let release = only_entry(&root.join("lib/modules"))?;
            run(
                "depmod",
                Command::new(tools::DEPMOD)
                    .arg("-b")
                    .arg(&root)
                    .arg(&release),
            )?;
            std::fs::rename(&root, out.join("root")).context(|| "moving the kernel tree".into())
        })?,
        Err(e) => cached_fallback(cache, "kernel-").ok_or(e)?,
    };
    let root = dir.join("root");
    let release = only_entry(&root.join("lib/modules"))?;
    let vmlinuz = root.join(format!("boot/vmlinuz-{release}"));
    if !vmlinuz.exists() {
        return Err(Error::Other(format!("{} is missing", shown(&vmlinuz))));
    }
    let boot_image =
        pvh_image(cache, &root, &release, &vmlinuz)?.unwrap_or_else(|| vmlinuz.clone());
    Ok(Kernel {
        vmlinuz,
        boot_image,
        release,
        root,
    })
}

/// The kernel as an uncompressed ELF that qemu starts at its PVH entry point: no firmware
/// and no decompression under emulation (~0.4 s of a boot's CPU, adr/0008). `None` when the
/// kernel was built without PVH or this host cannot undo its compression.
fn pvh_image(cache: &Path, root: &Path, release: &str, vmlinuz: &Path) -> Result<Option<PathBuf>> {
    let config =
        std::fs::read_to_string(root.join(format!("boot/config-{release}"))).unwrap_or_default();
    if !config.lines().any(|l| l == "CONFIG_PVH=y") {
        return Ok(None);
    }
    let bz = std::fs::read(vmlinuz).context(|| format!("reading {}", shown(vmlinuz)))?;
    let out = cache.join(format!("vmlinux-{}", hash_hex(|h| bz.hash(h))));
    if out.exists() {
        return Ok(Some(out));
    }
    let Some((tool, payload, size)) = compressed_payload(&bz) else {
        return Ok(None);
    };
    if !Path::new(tool).exists() {
        return Ok(None);
    }
    let tmp = tempfile::NamedTempFile::new_in(cache).context(|| "a temporary file".into())?;
    let mut child = Command::new(tool)
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(
            tmp.reopen()
                .context(|| "reopening a temporary file".into())?,
        )
        .stderr(std::process::Stdio::null())
        .spawn()
        .context(|| format!("starting {tool}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        // The kernel's payload ends with its size, which some tools call trailing garbage
        // (and so exit non-zero): the length and the ELF magic below are the check.
        let _ = stdin.write_all(payload);
    }
    let _ = child.wait().context(|| format!("waiting for {tool}"))?;
    let elf = std::fs::read(tmp.path()).context(|| "reading the uncompressed kernel".into())?;
    if elf.len() != size || !elf.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    tmp.persist(&out)
        .map_err(|e| e.error)
        .context(|| format!("moving the kernel to {}", shown(&out)))?;
    Ok(Some(out))
}

/// The compressed kernel inside a bzImage (where its setup header says), the tool that
/// undoes its compression, and its uncompressed size (the payload's last four bytes).
pub fn compressed_payload(bz: &[u8]) -> Option<(&'static str, &[u8], usize)> {
    if bz.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let u32_at = |b: &[u8], at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let setup_sects = match *bz.get(0x1f1)? {
        0 => 4,
        n => usize::from(n),
    };
    let start = (setup_sects + 1) * 512 + u32_at(bz, 0x248)?;
    let payload = bz.get(start..start.checked_add(u32_at(bz, 0x24c)?)?)?;
    let size = u32_at(payload, payload.len().checked_sub(4)?)?;
    let tools: [(&[u8], &'static str); 4] = [
        (b"\x02\x21\x4c\x18", tools::LZ4),
        (b"\x28\xb5\x2f\xfd", tools::ZSTD),
        (b"\xfd7zXZ\0", tools::XZ),
        (b"\x1f\x8b", tools::GZIP),
    ];
    let (_, tool) = tools.iter().find(|(magic, _)| payload.starts_with(magic))?;
    Some((tool, payload, size))
}

fn only_entry(dir: &Path) -> Result<String> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .context(|| format!("listing {}", shown(dir)))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    match &names[..] {
        [one] => Ok(one.clone()),
        _ => Err(Error::Other(format!(
            "expected one entry in {}, found {names:?}",
            shown(dir)
        ))),
    }
}

fn busybox(cache: &Path) -> Result<PathBuf> {
    let dir = match candidate_version(BUSYBOX_PACKAGE) {
        Ok(version) => cached_dir(cache, &format!("busybox-{version}"), |out| {
            let work = download_and_extract(cache, BUSYBOX_PACKAGE)?;
            std::fs::rename(work.path().join("root/bin/busybox"), out.join("busybox"))
                .context(|| "moving busybox".into())
        })?,
        Err(e) => cached_fallback(cache, "busybox-").ok_or(e)?,
    };
    Ok(dir.join("busybox"))
}

/// A test-only mount unit: the store at `/sysroot/nix`, as NixOS's initrd mounts `/nix`.
pub fn store_mount_unit() -> (String, String) {
    let mp = format!("/sysroot{}", crate::guest::STORE_MOUNT_POINT);
    let name = format!("{}.mount", mp.trim_start_matches('/').replace('/', "-"));
    let text = format!(
        "# Test image only (boot tier): the test machine's userland lives in the store, as\n\
         # NixOS's does, so the initrd mounts it beside the root, as NixOS's initrd does.\n\
         [Unit]\nDescription=The store for the boot tier's test machine\n\
         DefaultDependencies=no\nRequires=sysroot.mount\nAfter=sysroot.mount\nBefore=initrd-fs.target\n\n\
         [Mount]\nWhat={}\nWhere={mp}\nType=btrfs\nOptions=subvol={}\n",
        layout::names::DEFAULT_DEVICE,
        crate::guest::store_subvolume(),
    );
    (name, text)
}

/// A test-only `emergency.service` (systemd's `emergency.target` requires one; dracut's
/// hooks, no longer in, brought theirs): a boot that fails powers off at once instead of
/// failing to reach an emergency shell and idling until the boot timeout, as dracut's
/// `rd.emergency=poweroff` did.
pub fn emergency_poweroff_unit() -> (String, String) {
    (
        "emergency.service".into(),
        "# Test image only (boot tier): a failed boot powers off at once.\n\
         [Unit]\nDescription=The boot tier's test machine failed to boot: power off\n\
         DefaultDependencies=no\nSuccessAction=poweroff-force\nFailureAction=poweroff-force\n\n\
         [Service]\nType=oneshot\nExecStart=/usr/bin/true\n"
            .into(),
    )
}

/// The targets a unit's `[Install]` section names: `(target, "wants" | "requires")`.
pub fn install_links(unit_text: &str) -> Vec<(String, &'static str)> {
    let mut in_install = false;
    let mut links = Vec::new();
    for line in unit_text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_install = line == "[Install]";
            continue;
        }
        if !in_install {
            continue;
        }
        let (kind, value) = if let Some(v) = line.strip_prefix("WantedBy=") {
            ("wants", v)
        } else if let Some(v) = line.strip_prefix("RequiredBy=") {
            ("requires", v)
        } else {
            continue;
        };
        links.extend(value.split_whitespace().map(|t| (t.to_owned(), kind)));
    }
    links
}

/// Lay out the tree dracut `--include`s: the binary, the units, their links.
fn include_tree(dest: &Path, inputs: &InitrdInputs) -> Result<Vec<(String, Vec<u8>)>> {
    use std::os::unix::fs::{symlink, PermissionsExt as _};
    let bin = dest.join("bin");
    let units = dest.join("etc/systemd/system");
    std::fs::create_dir_all(&bin).context(|| "making the include tree".into())?;
    std::fs::create_dir_all(&units).context(|| "making the include tree".into())?;
    let binary = dest.join("bin/tacid-initrd");
    std::fs::copy(&inputs.binary, &binary)
        .context(|| format!("copying {} (was it built?)", shown(&inputs.binary)))?;
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))
        .context(|| "chmod".into())?;

    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&inputs.unit_dir)
        .context(|| format!("reading the unit files in {}", shown(&inputs.unit_dir)))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(Error::Other(format!(
            "no unit files in {}",
            shown(&inputs.unit_dir)
        )));
    }
    for unit in &inputs.left_out {
        if !names
            .iter()
            .any(|p| p.file_name() == Some(std::ffi::OsStr::new(unit)))
        {
            return Err(Error::Other(format!(
                "{unit}, to be left out of the initrd, is not among the unit files in {}",
                shown(&inputs.unit_dir)
            )));
        }
    }
    names.retain(|p| {
        !inputs
            .left_out
            .iter()
            .any(|u| p.file_name() == Some(std::ffi::OsStr::new(u)))
    });
    for path in names {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read(&path).context(|| format!("reading {}", shown(&path)))?;
        files.push((name, text));
    }
    for (name, text) in [store_mount_unit(), emergency_poweroff_unit()] {
        files.push((name, text.into_bytes()));
    }
    for (name, text) in &files {
        std::fs::write(units.join(name), text).context(|| format!("writing unit {name}"))?;
        let links = install_links(&String::from_utf8_lossy(text));
        let links = if links.is_empty() && name.ends_with(".mount") {
            vec![("initrd-fs.target".to_owned(), "requires")]
        } else {
            links
        };
        for (target, kind) in links {
            let dir = units.join(format!("{target}.{kind}"));
            std::fs::create_dir_all(&dir).context(|| format!("making {}", shown(&dir)))?;
            symlink(format!("../{name}"), dir.join(name))
                .context(|| format!("linking {name} into {target}"))?;
        }
    }
    Ok(files)
}

fn initrd(cache: &Path, kernel: &Kernel, inputs: &InitrdInputs) -> Result<PathBuf> {
    let tree = tempfile::Builder::new()
        .prefix(".tmp.")
        .tempdir_in(cache)
        .context(|| "include tree".into())?;
    let files = include_tree(tree.path(), inputs)?;
    let binary =
        std::fs::read(&inputs.binary).context(|| format!("reading {}", shown(&inputs.binary)))?;
    let dracut_version = run_stdout(
        "dpkg-query",
        Command::new(tools::DPKG_QUERY).args(["-W", "-f", "${Version}", "dracut-core"]),
    )
    .unwrap_or_default();
    let key = hash_hex(|h| {
        kernel.root.hash(h);
        dracut_version.hash(h);
        binary.hash(h);
        files.hash(h);
        (DRACUT_MODULES, DRACUT_DRIVERS).hash(h);
    });
    // Each set of units is its own kind of part, pruned apart from the others.
    let kind = if inputs.left_out.is_empty() {
        "initrd-".to_owned()
    } else {
        format!("initrd-without-{}-", inputs.left_out.join("+"))
    };
    let out = cache.join(format!("{kind}{key}.img"));
    if out.exists() {
        return Ok(out);
    }
    let tmp = cache.join(format!(".tmp.{kind}{key}.img"));
    let kmoddir = kernel.root.join("lib/modules").join(&kernel.release);
    run(
        "dracut",
        Command::new(tools::DRACUT)
            .args([
                "--force",
                "--quiet",
                "--no-hostonly",
                "--no-hostonly-cmdline",
                "--no-early-microcode",
            ])
            .args(["--no-compress", "--reproducible", "--kver", &kernel.release])
            .arg("--kmoddir")
            .arg(&kmoddir)
            .args(["--modules", DRACUT_MODULES, "--drivers", DRACUT_DRIVERS])
            .arg("--include")
            .arg(tree.path())
            .arg("/")
            .arg(&tmp),
    )?;
    prune(cache, &kind);
    std::fs::rename(&tmp, &out).context(|| format!("moving the initrd to {}", shown(&out)))?;
    Ok(out)
}

fn disk(cache: &Path, busybox: &Path) -> Result<PathBuf> {
    let busybox_bytes = std::fs::read(busybox).context(|| format!("reading {}", shown(busybox)))?;
    let key = hash_hex(|h| {
        busybox_bytes.hash(h);
        crate::guest::init_script().hash(h);
        layout::Contract::get().to_json().hash(h);
        crate::image::IMAGE_BYTES.hash(h);
    });
    let out = cache.join(format!("disk-{key}.img"));
    if out.exists() {
        return Ok(out);
    }
    let tmp = cache.join(format!(".tmp.disk-{key}.img"));
    crate::image::make_disk(&tmp, busybox)?;
    prune(cache, "disk-");
    std::fs::rename(&tmp, &out).context(|| format!("moving the disk to {}", shown(&out)))?;
    Ok(out)
}

/// The laid-out disk without `@root-blank`, for a machine that keeps its root.
fn disk_without_blank(cache: &Path, base: &Path) -> Result<PathBuf> {
    let key = hash_hex(|h| base.file_name().hash(h));
    let kind = "disk-without-blank-";
    let out = cache.join(format!("{kind}{key}.img"));
    if out.exists() {
        return Ok(out);
    }
    let tmp = cache.join(format!(".tmp.{kind}{key}.img"));
    crate::image::copy_disk(base, &tmp)?;
    let top = crate::image::Mounted::top(&tmp)?;
    run(
        "deleting @root-blank",
        Command::new(tools::BTRFS)
            .args(["-q", "subvolume", "delete"])
            .arg(top.path().join(layout::ROOT_BLANK_SUBVOLUME)),
    )?;
    top.unmount()?;
    prune(cache, kind);
    std::fs::rename(&tmp, &out).context(|| format!("moving the disk to {}", shown(&out)))?;
    Ok(out)
}

/// Remove older parts of one kind (`<kind><hex key>.img`), so the cache does not grow
/// without end; a part of another kind whose name starts alike is not one of them.
fn prune(cache: &Path, kind: &str) {
    if let Ok(entries) = std::fs::read_dir(cache) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let of_kind = name
                .strip_prefix(kind)
                .and_then(|rest| rest.strip_suffix(".img"))
                .is_some_and(|key| !key.is_empty() && key.bytes().all(|b| b.is_ascii_hexdigit()));
            if of_kind {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bzImage's bytes: setup header fields where the boot protocol puts them.
    fn bz_image(setup_sects: u8, payload: &[u8]) -> Vec<u8> {
        let mut bz = vec![0u8; (usize::from(setup_sects.max(4)) + 1) * 512 + 64];
        bz[0x1f1] = setup_sects;
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        bz[0x248..0x24c].copy_from_slice(&64u32.to_le_bytes());
        bz[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        bz.extend_from_slice(payload);
        bz.extend_from_slice(b"trailing");
        bz
    }

    #[test]
    fn the_kernels_payload_is_found_by_its_setup_header() {
        let payload = [&b"\x02\x21\x4c\x18lz4 data"[..], &1234u32.to_le_bytes()].concat();
        let bz = bz_image(27, &payload);
        let (tool, found, size) = compressed_payload(&bz).expect("an LZ4 payload");
        assert_eq!((tool, found, size), (tools::LZ4, &payload[..], 1234));
        // setup_sects 0 means 4.
        let bz = bz_image(0, &payload);
        assert_eq!(
            compressed_payload(&bz).map(|(_, p, _)| p),
            Some(&payload[..])
        );
        let mut not_bz = bz.clone();
        not_bz[0x202] = b'X';
        assert!(compressed_payload(&not_bz).is_none());
        let unknown = bz_image(27, b"\x00\x01\x02\x03abcd");
        assert!(compressed_payload(&unknown).is_none());
    }

    #[test]
    fn install_sections_give_links() {
        let unit = "[Unit]\nWantedBy=not-this.target\n[Install]\nWantedBy=initrd.target other.target\nRequiredBy=x.target\n";
        assert_eq!(
            install_links(unit),
            [
                ("initrd.target".to_owned(), "wants"),
                ("other.target".to_owned(), "wants"),
                ("x.target".to_owned(), "requires")
            ]
        );
    }

    #[test]
    fn pruning_one_kind_of_part_leaves_the_kinds_whose_names_start_alike() {
        let cache = tempfile::tempdir().expect("tempdir");
        let names = [
            "initrd-0123456789abcdef.img",
            "initrd-without-tacid-wipe-root.service-0123456789abcdef.img",
            "disk-00ff.img",
            "disk-without-blank-00ff.img",
            "initrd-notes.txt",
        ];
        for n in names {
            std::fs::write(cache.path().join(n), "").expect("write");
        }
        prune(cache.path(), "initrd-");
        prune(cache.path(), "disk-without-blank-");
        let mut left: Vec<String> = std::fs::read_dir(cache.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "disk-00ff.img",
                "initrd-notes.txt",
                "initrd-without-tacid-wipe-root.service-0123456789abcdef.img",
            ]
        );
    }

    #[test]
    fn the_store_unit_is_named_after_its_mount_point() {
        let (name, text) = store_mount_unit();
        assert_eq!(name, "sysroot-nix.mount");
        assert!(text.contains("Where=/sysroot/nix\n"));
        assert!(text.contains(&format!(
            "Options=subvol={}\n",
            crate::guest::store_subvolume()
        )));
    }
}
