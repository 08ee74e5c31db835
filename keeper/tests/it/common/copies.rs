//! A world with copy targets, and what the tests read back from the daemons' logs.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use super::World;

/// Root's copies configuration: `usb` on the target Btrfs (keeping the newest copy of each
/// subvolume), `plain` in a directory that is not on Btrfs.
pub fn write_config(path: &Path, usb: &Path, plain: &Path) {
    let keep = r#"{"latest": 1, "daily": 0, "weekly": 0, "monthly": 0}"#;
    let text = format!(
        r#"{{"targets": {{"usb": {{"place": {:?}, "keep": {keep}}}, "plain": {{"place": {:?}}}}}}}"#,
        usb.display().to_string(),
        plain.display().to_string()
    );
    fs::write(path, text).expect("config");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

/// A world with the target Btrfs `usb` and `plain` (as [`write_config`]), the stem and the
/// keeper told of them, the keeper started with `keeper_args` too. The target's loop
/// filesystem and its directory.
pub fn world_with_usb(keeper_args: &[&str]) -> Option<(World, testbed::LoopFs, PathBuf)> {
    let mut w = World::start()?;
    let target = testbed::LoopFs::new(512 << 20).expect("the target Btrfs")?;
    let usb = target.top().join("tacid");
    fs::create_dir(&usb).expect("target dir");
    let plain = w.dir.join("plain");
    fs::create_dir(&plain).expect("plain dir");
    let config = w.dir.join("copies.json");
    write_config(&config, &usb, &plain);
    let config_arg = config.to_str().expect("utf-8").to_owned();
    w.stem_args
        .extend(["--copies-config".to_owned(), config_arg.clone()]);
    w.kill_stem();
    w.start_stem();
    let mut args = vec!["--copies-config", config_arg.as_str()];
    args.extend_from_slice(keeper_args);
    w.stop_keeper_and_set_args(&args);
    w.start_keeper(None);
    Some((w, target, usb))
}

/// Lines at INFO, WARN or ERROR in a log (the tests run the daemons at debug).
pub fn logged_lines(path: &Path) -> usize {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| {
            let plain: String = strip_ansi(l);
            [" INFO ", " WARN ", " ERROR "]
                .iter()
                .any(|level| plain.contains(level))
        })
        .count()
}

/// A log line without its terminal colours.
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
