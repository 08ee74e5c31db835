//! The hostile tier, words: what an ordinary user names files (any bytes but NUL and `/`)
//! cannot forge what an approver reads before consenting (adr/0017). Real parts:
//! a loop Btrfs, the stem as root, the keeper as its user on a private bus, a real
//! unprivileged user making the files, and the approver's `tacid` reading them.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it hostile_words::`.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{World, APPROVER, STRANGER};

/// The names the stranger makes, raw, and how an approver must see each (written out
/// here, not computed with the escaper under test).
const NAMES: &[(&[u8], &str)] = &[
    (b"esc\x1b[31mRED", r"esc\x1B[31mRED"),
    (b"new\nline", r"new\x0Aline"),
    (b"carriage\rreturn", r"carriage\x0Dreturn"),
    // Cursor up one line, erase it: would hide the line above.
    (b"up\x1b[1A\x1b[2Khidden", r"up\x1B[1A\x1B[2Khidden"),
    (b"bad\xff\xfeutf8", r"bad\xFF\xFEutf8"),
    // RIGHT-TO-LEFT OVERRIDE: "evil<RLO>txt.exe" would read as "evilexe.txt".
    ("evil\u{202e}txt.exe".as_bytes(), r"evil\xE2\x80\xAEtxt.exe"),
    // A C1 control (CSI as a character) and a backslash.
    ("c1\u{9b}2J".as_bytes(), r"c1\xC2\x9B2J"),
    (br"back\slash", r"back\\slash"),
];
/// A directory with a newline in its name, and in it a file whose name sets the
/// terminal's title (OSC 0 ... BEL).
const DIR: (&[u8], &str) = (b"dir\nname", r"dir\x0Aname");
const INNER: (&[u8], &str) = (b"title\x1b]0;pwned\x07", r"title\x1B]0;pwned\x07");

/// Run `program args...` as `user` in `dir` (entered as root before setpriv drops to
/// the user, so the root-only mount point above it need not be traversable).
fn as_user(user: &str, dir: &Path, program: &str, args: &[&OsStr]) {
    let out = Command::new("/usr/bin/setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
            "--",
            program,
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("setpriv runs");
    assert!(
        out.status.success(),
        "{program} as {user}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The CLI as `user`, its output as bytes (a lossy conversion would hide what is tested).
fn tacid_raw(w: &World, user: &str, args: &[&str]) -> Output {
    w.spawn_tacid(user, args)
        .wait_with_output()
        .expect("tacid runs")
}

/// Text a terminal shows as it is: UTF-8, and no control character but the line ends,
/// and none of the characters that reorder or hide text.
fn assert_inert(what: &str, out: &[u8]) -> String {
    let text = String::from_utf8(out.to_vec()).unwrap_or_else(|e| {
        panic!(
            "{what}: not UTF-8 ({e}): {:?}",
            String::from_utf8_lossy(out)
        )
    });
    for c in text.chars() {
        let control = c.is_control() && c != '\n';
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}');
        assert!(
            !control && !invisible,
            "{what}: {c:?} reaches the terminal:\n{text}"
        );
    }
    text
}

#[test]
fn hostile_file_names_are_shown_escaped_one_per_line_and_decode_to_their_bytes() {
    let Some(w) = World::start() else { return };
    let home = w.top().join("@home").join(STRANGER);
    std::fs::create_dir(&home).expect("a home for the stranger");
    let owner = format!("{STRANGER}:{STRANGER}");
    let chown = Command::new("chown")
        .arg(&owner)
        .arg(&home)
        .status()
        .expect("chown");
    assert!(chown.success());

    // An approver snapshots /home, with a reason that carries a bidi override too.
    let out = tacid_raw(
        &w,
        APPROVER,
        &[
            "data",
            "snapshot",
            "/home",
            "--reason",
            "before \u{202e}edargpu",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let set: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let name = set["snapshots"][0]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    assert_eq!(set["snapshots"][0]["reason"], r"before \xE2\x80\xAEedargpu");

    // The stranger names files as a hostile user would.
    let names: Vec<&OsStr> = NAMES
        .iter()
        .map(|(raw, _)| OsStr::from_bytes(raw))
        .collect();
    let mut touch: Vec<&OsStr> = vec![OsStr::new("--")];
    touch.extend(&names);
    as_user(STRANGER, &home, "/usr/bin/touch", &touch);
    as_user(
        STRANGER,
        &home,
        "/usr/bin/mkdir",
        &[OsStr::new("--"), OsStr::from_bytes(DIR.0)],
    );
    let inner: Vec<u8> = [DIR.0, b"/", INNER.0].concat();
    as_user(
        STRANGER,
        &home,
        "/usr/bin/touch",
        &[OsStr::new("--"), OsStr::from_bytes(&inner)],
    );

    let base = format!("/home/{STRANGER}/");
    let mut shown_added: BTreeSet<String> = NAMES
        .iter()
        .map(|(_, shown)| format!("{base}{shown}"))
        .collect();
    shown_added.insert(format!("{base}{}/", DIR.1));
    shown_added.insert(format!("{base}{}/{}", DIR.1, INNER.1));

    // Text: every name escaped, each on a line of its own under its heading.
    let out = tacid_raw(&w, APPROVER, &["data", "restore", &name, "--details"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = assert_inert("--details", &out.stdout);
    eprintln!("$ tacid data restore {name} --details\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    let deleted = lines
        .iter()
        .position(|l| *l == "Deleted by the restore (added since):")
        .unwrap_or_else(|| panic!("no list of what is deleted:\n{text}"));
    let listed: BTreeSet<String> = lines[deleted + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l[2..].to_owned())
        .collect();
    assert_eq!(
        listed, shown_added,
        "the added paths, one per line:\n{text}"
    );
    assert!(
        lines.contains(&"Put back as they were (changed since):")
            && lines.contains(&format!("  {base}").as_str()),
        "the stranger's directory is modified:\n{text}"
    );

    // JSON: the same visible form, and it decodes back to the exact bytes.
    let out = tacid_raw(
        &w,
        APPROVER,
        &["data", "restore", &name, "--details", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let paths = json["details"]["paths"].as_array().expect("paths");
    let mut decoded_added: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut shown_in_json: BTreeSet<String> = BTreeSet::new();
    for p in paths.iter().filter(|p| p["change"] == "added") {
        let shown = p["path"].as_str().expect("a string");
        assert_inert("a JSON path", shown.as_bytes());
        let slash = if p["directory"] == true { "/" } else { "" };
        shown_in_json.insert(format!("{shown}{slash}"));
        decoded_added.insert(layout::escape::unescape(shown).expect("the visible form"));
    }
    assert_eq!(
        shown_in_json, shown_added,
        "JSON and text show the same form"
    );
    let mut raw_added: BTreeSet<Vec<u8>> = NAMES
        .iter()
        .map(|(raw, _)| [base.as_bytes(), raw].concat())
        .collect();
    raw_added.insert([base.as_bytes(), DIR.0].concat());
    raw_added.insert([base.as_bytes(), &inner].concat());
    assert_eq!(
        decoded_added, raw_added,
        "the JSON gives back the exact bytes"
    );

    // The reason, where every user reads it.
    let out = tacid_raw(&w, STRANGER, &["data", "list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = assert_inert("list", &out.stdout);
    assert!(
        text.contains(r"    why    asked by tacid-approver (uid ")
            && text.contains(r": before \xE2\x80\xAEedargpu"),
        "{text}"
    );
}
