//! A world with sealed targets: the copier started as its own user on the world's bus, its
//! key made by `tacid-copier key init`, a sealed directory target `vault` the copier owns.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use layout::names;

use super::{bin, ok, World};

/// The copier, killed on drop.
pub struct Copier {
    child: Child,
    pub log: PathBuf,
    /// The sealed directory target's place.
    pub vault: PathBuf,
    /// Its copies configuration.
    pub config: PathBuf,
}

impl Drop for Copier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Copier {
    /// Every file under the vault (relative paths), sorted.
    pub fn objects(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.vault, &mut out);
        out.sort();
        out
    }

    /// Kill the copier now (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A world whose copies configuration has `vault` (a sealed directory the copier owns,
/// keeping the newest copy of each subvolume, a chain at most 2 copies long) and `extra`
/// targets (JSON members, "" for none); the stem, the keeper and a copier told of it.
pub fn world_with_vault(extra: &str) -> Option<(World, Copier)> {
    let mut w = World::start()?;
    let copier = start_copier_as(&w, names::COPIER_USER, "", extra);
    configure_daemons(&mut w, &copier.config);
    Some((w, copier))
}

/// The stem and the keeper restarted with the copies configuration `config`.
pub fn configure_daemons(w: &mut World, config: &Path) {
    let config_arg = config.to_str().expect("utf-8").to_owned();
    w.stem_args
        .extend(["--copies-config".to_owned(), config_arg.clone()]);
    w.kill_stem();
    w.start_stem();
    w.stop_keeper_and_set_args(&[
        "--copies-config",
        config_arg.as_str(),
        "--free-floor-bytes",
        "0",
    ]);
    w.start_keeper(None);
}

/// A copier started on `w`'s bus as `user` (made if missing), serving the keeper's user,
/// with its own key, state, log and copies configuration (`vault` and `extra`), their
/// names in `w.dir` prefixed with `tag`.
pub fn start_copier_as(w: &World, user: &str, tag: &str, extra: &str) -> Copier {
    let (cuid, cgid) = testbed::users::ensure_system_user(user);
    let owned = |p: &Path| {
        fs::create_dir_all(p).expect("mkdir");
        std::os::unix::fs::chown(p, Some(cuid), Some(cgid)).expect("chown");
    };
    let vault = w.dir.join(format!("{tag}vault"));
    owned(&vault);
    let state = w.dir.join(format!("{tag}copier-state"));
    owned(&state);
    fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
    let key = state.join("recovery.key");
    let keep = r#"{"latest": 1, "daily": 0, "weekly": 0, "monthly": 0}"#;
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    let config = w.dir.join(format!("{tag}copies.json"));
    fs::write(
        &config,
        format!(
            r#"{{"targets": {{"vault": {{"place": {:?}, "keep": {keep}, "seal": {{"full_every": 2}}}}{extra}}}}}"#,
            vault.display().to_string()
        ),
    )
    .expect("config");
    fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).expect("chmod");
    let config_arg = config.to_str().expect("utf-8").to_owned();
    ok(
        bin("tacid-copier").to_str().expect("utf-8"),
        &[
            "key",
            "init",
            "--key",
            key.to_str().expect("utf-8"),
            "--user",
            user,
        ],
    );
    let log = w.dir.join(format!("{tag}copier.log"));
    let log_file = fs::File::create(&log).expect("log");
    let child = Command::new("/usr/bin/setpriv")
        .arg(format!("--reuid={cuid}"))
        .arg(format!("--regid={cgid}"))
        .arg("--clear-groups")
        .arg(bin("tacid-copier"))
        .args(["--bus", &w.address, "--keeper-user", names::KEEPER_USER])
        .args(["--copies-config", &config_arg])
        .arg("--key")
        .arg(&key)
        .arg("--state-dir")
        .arg(&state)
        .env("RUST_LOG", "debug")
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .stdin(Stdio::null())
        .spawn()
        .expect("tacid-copier starts");
    let copier = Copier {
        child,
        log: log.clone(),
        vault,
        config,
    };
    w.wait_owner(names::COPIER_BUS_NAME, true, &log);
    copier
}
