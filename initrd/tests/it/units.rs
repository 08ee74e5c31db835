//! The initrd unit files: `systemd-analyze verify` passes on them with empty stderr, and they
//! say what the boot tier and the NixOS module rely on.
//!
//! `verify` resolves `ExecStart=` binaries, so it runs with `--root` on a scratch tree that
//! holds the real `tacid-initrd` at `/bin` (where both initrds put it) and the units in
//! `/etc/systemd/system`. Without `systemd-analyze` the test says so loudly, and fails under
//! `CI=true`.
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use layout::names::{INITRD_RESTORE_UNIT, INITRD_WIPE_ROOT_UNIT};

const BIN: &str = env!("CARGO_BIN_EXE_tacid-initrd");

fn unit_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("systemd")
        .join(name)
}

fn unit(name: &str) -> String {
    fs::read_to_string(unit_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The values of `key=` in the unit, split on whitespace.
fn values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .flat_map(|v| v.split_whitespace().map(str::to_owned))
        .collect()
}

fn systemd_analyze() -> Option<PathBuf> {
    let found = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but systemd-analyze is missing: apt-get install systemd");
        }
        eprintln!(
            "\n*** SKIPPED: systemd-analyze is missing; the unit files were NOT verified ***\n"
        );
    }
    found
}

/// A root with the binary at /bin/tacid-initrd and `units` (name, text) installed.
fn scratch_root(units: &[(&str, String)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    fs::create_dir_all(root.path().join("bin")).unwrap();
    fs::copy(BIN, root.path().join("bin/tacid-initrd")).unwrap();
    let dir = root.path().join("etc/systemd/system");
    fs::create_dir_all(&dir).unwrap();
    for (name, text) in units {
        fs::write(dir.join(name), text).unwrap();
    }
    root
}

fn verify(analyze: &Path, root: &Path, names: &[&str]) -> (bool, String) {
    let out = Command::new(analyze)
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(names)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn systemd_analyze_verify_passes_with_empty_stderr() {
    let Some(analyze) = systemd_analyze() else {
        return;
    };
    let units = [INITRD_RESTORE_UNIT, INITRD_WIPE_ROOT_UNIT].map(|n| (n, unit(n)));
    let root = scratch_root(&units);
    let (ok, stderr) = verify(
        &analyze,
        root.path(),
        &[INITRD_RESTORE_UNIT, INITRD_WIPE_ROOT_UNIT],
    );
    assert!(ok && stderr.is_empty(), "systemd-analyze verify:\n{stderr}");

    // The check can fail: a unit with an unknown key is reported on stderr.
    let broken = unit(INITRD_WIPE_ROOT_UNIT).replace("Type=oneshot", "Type=oneshot\nNoSuchKey=1");
    let root = scratch_root(&[("broken.service", broken)]);
    let (_, stderr) = verify(&analyze, root.path(), &["broken.service"]);
    assert!(stderr.contains("NoSuchKey"), "{stderr}");
}

#[test]
fn units_run_the_binary_in_the_initrd_before_the_root_is_mounted() {
    for (name, job) in [
        (INITRD_RESTORE_UNIT, "restore-data"),
        (INITRD_WIPE_ROOT_UNIT, "wipe-root"),
    ] {
        let text = unit(name);
        assert_eq!(
            values(&text, "ExecStart"),
            ["/bin/tacid-initrd", job],
            "{name}"
        );
        assert_eq!(values(&text, "Type"), ["oneshot"], "{name}");
        assert_eq!(values(&text, "DefaultDependencies"), ["no"], "{name}");
        assert_eq!(values(&text, "WantedBy"), ["initrd.target"], "{name}");
        assert_eq!(
            values(&text, "ConditionPathExists"),
            ["/etc/initrd-release"],
            "{name}"
        );
        let after = values(&text, "After");
        for unit in [
            "initrd-root-device.target",
            "local-fs-pre.target",
            "systemd-hibernate-resume.service",
        ] {
            assert!(
                after.iter().any(|a| a == unit),
                "{name} is not After={unit}"
            );
        }
        let before = values(&text, "Before");
        for unit in ["sysroot.mount", "initrd-root-fs.target"] {
            assert!(
                before.iter().any(|b| b == unit),
                "{name} is not Before={unit}"
            );
        }
        // Ordering only: nothing here may stop the boot (adr/0007).
        for key in [
            "Requires",
            "Requisite",
            "BindsTo",
            "RequiredBy",
            "OnFailure",
            "FailureAction",
        ] {
            assert!(values(&text, key).is_empty(), "{name} has {key}=");
        }
        // The subcommand exists in the binary.
        let help = Command::new(BIN).args([job, "--help"]).output().unwrap();
        assert!(help.status.success(), "tacid-initrd {job} --help");
    }
    // One job at a time on the disk: the restore first.
    assert!(values(&unit(INITRD_WIPE_ROOT_UNIT), "After").contains(&INITRD_RESTORE_UNIT.to_owned()));
}
