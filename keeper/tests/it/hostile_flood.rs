//! The hostile tier, the keeper's share: a stranger floods the keeper with calls carrying
//! huge names, and an approver's snapshot must still go through; every string a caller sends
//! is capped before it is journalled, logged or parsed (adr/0016).
//!
//! Real parts: a loop Btrfs, a private dbus-daemon with the shipped policies, the stem as
//! root, the keeper as its own user, the stranger and the approver as real users (their own
//! bus connections, see `common::hostile`). Run alone (root):
//! `cargo test -p keeper --test it hostile_flood:: -- --nocapture` (figures on stderr).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::hostile::{
    as_user, journal_bytes, median, ms, pipelined, wait_until, watch_daemons,
};
use crate::common::{copies, json, uid_of, World, APPROVER, STRANGER};
use keeper::caps::{
    max_only_names, max_set_names, MAX_NAME_BYTES, MAX_PATH_BYTES, MAX_REASON_BYTES,
    MAX_WORDS_BYTES,
};
use keeper::journal::State;
use keeper::refusals::OWN_ROWS_PER_CALLER;
use keeper::wire::KeeperError;

/// The acts the flood calls, each counted in a row of its own past the allowance.
const FLOODED_ACTS: usize = 4;
/// What 10 000 refusals may add to the journal's files: the stranger's rows (at most
/// OWN_ROWS_PER_CALLER + FLOODED_ACTS, each under 1.2 KiB), one WAL frame a second for the
/// counts, and the approver's six snapshots.
const MAX_JOURNAL_GROWTH: u64 = 1 << 20;

/// The flood: this many calls (TACID_HOSTILE_CALLS overrides, for figures of other sizes).
fn flood_calls() -> usize {
    std::env::var("TACID_HOSTILE_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// A huge name: 100 KB (TACID_HOSTILE_NAME_BYTES overrides the flood's, up to the bus's
/// 32 MiB message limit).
const HUGE: usize = 100_000;

/// Calls in flight on each of the stranger's connections (TACID_HOSTILE_IN_FLIGHT).
fn flood_in_flight() -> usize {
    std::env::var("TACID_HOSTILE_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn flood_name_bytes() -> usize {
    std::env::var("TACID_HOSTILE_NAME_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(HUGE)
}

#[test]
fn hostile_a_strangers_flood_of_huge_names_grows_the_journal_by_a_bounded_amount() {
    let Some(w) = World::start() else { return };
    let name = w.snapshot_home();
    let calls = flood_calls();
    let name_bytes = flood_name_bytes();
    let in_flight = flood_in_flight();
    let journal_before = journal_bytes(&w);
    let daemons = watch_daemons(&w);

    // Four connections of the stranger's, 32 calls in flight on each, every call with a
    // name of 100 KB: Delete, Keep, RestoreDetails and RestoreConfirm in turn (each is
    // checked for permission, and refused, before the name could be parsed).
    let answered = Arc::new(AtomicUsize::new(0));
    let connections = 4;
    let started = Instant::now();
    let floods: Vec<_> = (0..connections)
        .map(|c| {
            let answered = answered.clone();
            let share = calls / connections + usize::from(c < calls % connections);
            as_user(&w, STRANGER, move |keeper| async move {
                pipelined(share, in_flight, move |i| {
                    let keeper = keeper.clone();
                    let answered = answered.clone();
                    async move {
                        let huge = format!("{}{i}", "A".repeat(name_bytes));
                        let result = match i % 4 {
                            0 => keeper.delete(&huge).await.map(drop),
                            1 => keeper.keep(&huge, true).await.map(drop),
                            2 => keeper.restore_details(&huge).await.map(drop),
                            _ => keeper.restore_confirm(&huge, &huge).await.map(drop),
                        };
                        answered.fetch_add(1, Ordering::Relaxed);
                        result
                    }
                })
                .await
            })
        })
        .collect();

    // While it runs, the approver takes snapshots, timed end to end (the CLI's process too).
    let mut during = Vec::new();
    for k in 1..=3 {
        assert!(
            wait_until(Duration::from_secs(600), || answered
                .load(Ordering::Relaxed)
                >= calls * k / 5),
            "the flood stalled at {} of {calls}",
            answered.load(Ordering::Relaxed)
        );
        let t = Instant::now();
        let (code, _, err) = w.tacid(APPROVER, &["data", "snapshot", "/home"]);
        during.push(t.elapsed());
        assert_eq!(
            code, 0,
            "the approver's snapshot during the flood failed: {err}"
        );
    }
    let results: Vec<Result<(), KeeperError>> = floods
        .into_iter()
        .flat_map(|f| f.join().expect("a flood thread"))
        .collect();
    let flood_took = started.elapsed();
    let peaks = daemons.finish();

    let mut after = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(w.tacid(APPROVER, &["data", "snapshot", "/home"]).0, 0);
        after.push(t.elapsed());
    }
    let journal_after = journal_bytes(&w);
    eprintln!(
        "FIGURE flood: {calls} stranger calls with {name_bytes}-byte names in {:.1} s; journal \
         {journal_before} -> {journal_after} bytes (+{}); approver's snapshot during the \
         flood {:?} ms (median {:.1}), after it {:.1} ms (median); {peaks}",
        flood_took.as_secs_f64(),
        journal_after.saturating_sub(journal_before),
        during.iter().map(|d| ms(*d).round()).collect::<Vec<_>>(),
        ms(median(during.clone())),
        ms(median(after)),
    );

    peaks.assert_within_unit_limits();
    // Every call was refused as not authorized: nothing was deleted, kept or staged.
    assert_eq!(results.len(), calls);
    let not_refused: Vec<_> = results
        .iter()
        .filter(|r| !matches!(r, Err(KeeperError::NotAuthorized(_))))
        .take(3)
        .collect();
    assert!(not_refused.is_empty(), "{not_refused:?}");
    assert!(w.request_file().is_none());
    let (on_disk, _) = w.disk_snapshots();
    assert!(on_disk.contains(&name), "{on_disk:?}");
    // The approver's snapshots went through, each in well under the flood's time.
    for d in &during {
        assert!(*d < Duration::from_secs(10), "{during:?}");
    }

    // The journal: bounded growth, a few rows for the stranger, and every call counted.
    assert!(
        journal_after - journal_before <= MAX_JOURNAL_GROWTH,
        "the journal grew by {} bytes",
        journal_after - journal_before
    );
    let mut w = w;
    w.stop_keeper(); // it writes the last counts as it stops
    let (requests, _) = w.journal_rows();
    let strangers: Vec<_> = requests
        .iter()
        .filter(|r| r.uid == uid_of(STRANGER))
        .collect();
    assert!(strangers.iter().all(|r| r.state == State::Refused));
    assert!(
        strangers.len() <= OWN_ROWS_PER_CALLER as usize + FLOODED_ACTS,
        "{} rows for the stranger",
        strangers.len()
    );
    assert_eq!(
        strangers.iter().map(|r| r.calls).sum::<u64>(),
        calls as u64,
        "every refusal is counted"
    );
    for r in &strangers {
        assert!(
            r.subject.len() <= MAX_NAME_BYTES + 32,
            "{}",
            r.subject.len()
        );
        assert!(r.subject.ends_with(" bytes)"), "a cut subject says so");
        assert!(r.words_shown.len() <= MAX_WORDS_BYTES + 32);
    }
    eprintln!(
        "FIGURE flood journal: {} rows for the stranger (calls {:?})",
        strangers.len(),
        strangers.iter().map(|r| r.calls).collect::<Vec<_>>()
    );
    // Logged capped, and not once per call.
    let log = std::fs::read_to_string(w.keeper_log()).expect("the keeper's log");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 2048, "a log line of {longest} bytes");
    let refused_lines = log.lines().filter(|l| l.contains("refused")).count();
    assert!(
        refused_lines <= OWN_ROWS_PER_CALLER as usize + FLOODED_ACTS,
        "{refused_lines} log lines of refusals"
    );
}

/// The message of a keeper error.
fn message(e: &KeeperError) -> String {
    e.message()
}

#[test]
fn hostile_huge_strings_are_capped_before_they_are_parsed_journalled_logged_or_echoed() {
    let Some(mut w) = World::start() else { return };
    let name = w.snapshot_home();
    let huge = "A".repeat(HUGE);
    let huge_words = format!("This puts /home back to {}", "x".repeat(HUGE));

    // The stranger: a preview of a huge name is refused as not a name, and the answer shows
    // the name cut, saying how long it was; a delete is refused before the name is parsed.
    let from_stranger = {
        let huge = huge.clone();
        as_user(&w, STRANGER, move |keeper| async move {
            (
                keeper.restore_preview(&huge).await,
                keeper.delete(&huge).await,
            )
        })
        .join()
        .expect("the stranger's thread")
    };
    match &from_stranger.0 {
        Err(KeeperError::InvalidArgument(m)) => {
            assert!(m.len() < 512 && m.contains("(100000 bytes)"), "{m}")
        }
        other => panic!("a huge preview: {other:?}"),
    }
    match &from_stranger.1 {
        Err(KeeperError::NotAuthorized(m)) => assert!(m.len() < 512, "{m}"),
        other => panic!("a stranger's huge delete: {other:?}"),
    }

    // The approver: every string is checked against its cap first, and the error says the cap.
    let from_approver = {
        let (huge, huge_words, name) = (huge.clone(), huge_words.clone(), name.clone());
        as_user(&w, APPROVER, move |keeper| async move {
            vec![
                keeper
                    .snapshot(vec![huge.clone()], "", false)
                    .await
                    .map(drop),
                keeper
                    .snapshot(vec!["/home".into(); 100], "", false)
                    .await
                    .map(drop),
                keeper.snapshot(vec![], &huge, false).await.map(drop),
                keeper.delete(&huge).await.map(drop),
                keeper.keep(&huge, true).await.map(drop),
                keeper.restore_details(&huge).await.map(drop),
                keeper.restore_confirm(&huge, "").await.map(drop),
                keeper.restore_confirm(&name, &huge_words).await.map(drop),
            ]
        })
        .join()
        .expect("the approver's thread")
    };
    let said: Vec<(String, String)> = from_approver
        .iter()
        .map(|r| match r {
            Err(e @ KeeperError::InvalidArgument(_)) => ("InvalidArgument".into(), message(e)),
            Err(e @ KeeperError::WordsNotShown(_)) => ("WordsNotShown".into(), message(e)),
            other => panic!("a huge string from the approver was not refused: {other:?}"),
        })
        .collect();
    for (error, m) in &said {
        assert!(m.len() < 1024, "{error}: {} bytes: {m}", m.len());
    }
    assert!(said[0].1.contains("(100000 bytes)"), "{said:?}");
    assert!(said[1].1.contains("at most"), "{said:?}");
    assert!(
        said[2]
            .1
            .contains("at most 500 bytes, what the journal keeps"),
        "{said:?}"
    );
    assert_eq!(said[7].0, "WordsNotShown");
    assert!(w.request_file().is_none());

    // Journalled capped: the stranger's delete, and the approver's huge words.
    w.stop_keeper();
    let (requests, _) = w.journal_rows();
    let delete = requests
        .iter()
        .find(|r| r.uid == uid_of(STRANGER) && r.action == "delete")
        .expect("the stranger's delete is journalled");
    assert_eq!(
        delete.subject,
        format!("{}… (100000 bytes)", &huge[..MAX_NAME_BYTES])
    );
    let confirm = requests
        .iter()
        .find(|r| r.uid == uid_of(APPROVER) && r.action == "restore" && r.subject == name)
        .expect("the approver's confirmation is journalled");
    assert_eq!(confirm.state, State::Refused);
    assert!(
        confirm.words_shown.len() <= MAX_WORDS_BYTES + 32
            && confirm
                .words_shown
                .ends_with(&format!("({} bytes)", huge_words.len())),
        "{} bytes journalled",
        confirm.words_shown.len()
    );
    let log = std::fs::read_to_string(w.keeper_log()).expect("the keeper's log");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 2048, "a log line of {longest} bytes");
}

/// An in-argument of a method, as the keeper's introspection names it.
#[derive(Clone, Debug)]
struct InArgument {
    name: String,
    ty: String,
}

/// Each method of `org.tacid.Keeper1` and its in-arguments, as the keeper itself says
/// (`tacid-keeper --print-introspection`): a method added later is in this list.
fn methods_and_in_arguments() -> Vec<(String, Vec<InArgument>)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tacid-keeper"))
        .arg("--print-introspection")
        .output()
        .expect("tacid-keeper --print-introspection runs");
    assert!(out.status.success(), "--print-introspection: {out:?}");
    let xml = String::from_utf8(out.stdout).expect("the introspection is UTF-8");
    let attribute = |arg: &str, key: &str| -> String {
        let value = arg
            .split(&format!("{key}=\""))
            .nth(1)
            .unwrap_or_else(|| panic!("an in-argument without a {key}: {arg}"));
        value.split('"').next().expect("a closing quote").to_owned()
    };
    xml.split("<method name=\"")
        .skip(1)
        .map(|rest| {
            let name = rest.split('"').next().expect("a closing quote").to_owned();
            let body = rest.split("</method>").next().expect("a method's body");
            let args = body
                .split("<arg ")
                .skip(1)
                .filter(|arg| arg.contains("direction=\"in\""))
                .map(|arg| InArgument {
                    name: attribute(arg, "name"),
                    ty: attribute(arg, "type"),
                })
                .collect();
            (name, args)
        })
        .collect()
}

/// One in-argument's value.
#[derive(Clone, Debug)]
enum Value {
    S(String),
    As(Vec<String>),
    Ay(Vec<u8>),
    B(bool),
}

/// What the world holds for the arguments that are not over their cap: the approver's
/// snapshot of /home, the set it is the one member of, and a configured copy target.
struct Valid {
    snapshot: String,
    set: String,
    target: &'static str,
}

/// A value of `arg` of `method` that the keeper accepts (as far as the arguments' shapes go),
/// so that the one over its cap is the one it refuses.
fn valid_value(method: &str, arg: &InArgument, valid: &Valid) -> Value {
    match (arg.name.as_str(), arg.ty.as_str()) {
        ("name" | "snapshot", "s") => Value::S(valid.snapshot.clone()),
        ("target", "s") => Value::S(valid.target.to_owned()),
        ("set", "s") => Value::S(valid.set.clone()),
        // No member named: every member of the set.
        ("only", "as") => Value::As(vec![]),
        ("subvolumes", "as") => Value::As(vec!["/home".to_owned()]),
        // A restore of snapshots named: one, that is there.
        ("names", "as") if method.starts_with("NamedRestore") => {
            Value::As(vec![valid.snapshot.clone()])
        }
        // No copy named: every copy.
        ("names", "as") => Value::As(vec![]),
        ("reason", "s") => Value::S("before the test".to_owned()),
        // The whole of the caller's part.
        ("path", "ay") => Value::Ay(vec![]),
        // The right words cannot be given without a preview first, and no call here needs
        // them: the words are compared last, after every other argument is checked, so
        // empty words let the argument over its cap be the one refused. The right words are
        // covered by bus_set_restore's consent tests
        // (bus_a_sets_consent_is_for_exactly_the_members_shown and others).
        ("words_shown", "s") => Value::S(String::new()),
        (_, "b") => Value::B(false),
        (name, ty) => panic!(
            "{method}: an in-argument {name} of type {ty}: teach this test a valid value of it \
             and what the keeper says when it is over its cap"
        ),
    }
}

/// What the keeper answers to a call with one argument over its cap: the error and words
/// its message must hold, which name the argument or its cap.
struct Refusal {
    error: &'static str,
    says: Vec<String>,
}

/// The refusal of `arg` of `method` given as `huge` (one string of HUGE bytes, or a list of
/// one such string).
fn refusal_of_huge(method: &str, arg: &InArgument) -> Refusal {
    let capped = format!("… ({HUGE} bytes)");
    let (error, says) = match arg.name.as_str() {
        "name" | "snapshot" | "names" => (
            "InvalidArgument",
            vec!["is not a snapshot name".into(), capped],
        ),
        "target" => ("NoSuchTarget", vec!["is not a target name".into(), capped]),
        "set" => ("InvalidArgument", vec!["is not a set".into(), capped]),
        "only" => (
            "InvalidArgument",
            vec!["is not a member of a set".into(), capped],
        ),
        "subvolumes" => (
            "InvalidArgument",
            vec!["is not a subvolume of the tacid layout".into(), capped],
        ),
        "reason" => (
            "InvalidArgument",
            vec![format!(
                "at most {MAX_REASON_BYTES} bytes, what the journal keeps (this one: {HUGE} bytes)"
            )],
        ),
        "path" => (
            "InvalidArgument",
            vec![format!(
                "a path is at most {MAX_PATH_BYTES} bytes (this one: {HUGE} bytes)"
            )],
        ),
        // Words over their cap are not compared; the refusal names what they were for (so
        // the other arguments were taken), and the journal keeps them capped (checked below).
        "words_shown" => (
            "WordsNotShown",
            vec!["these are not the words the keeper showed you for".into()],
        ),
        other => panic!("{method}: teach this test what the keeper says of {other} over its cap"),
    };
    Refusal { error, says }
}

/// How many small elements a list argument's element flood carries.
const FLOOD_ELEMENTS: usize = 10_000;

/// The refusal of the list `arg` of `method` given as FLOOD_ELEMENTS small elements, each
/// valid on its own: the keeper caps how many a list may hold.
fn refusal_of_many(method: &str, arg: &InArgument) -> Refusal {
    let says = match arg.name.as_str() {
        "subvolumes" => format!(
            "a snapshot set names at most {} subvolumes (this one: {FLOOD_ELEMENTS})",
            max_set_names()
        ),
        "only" => format!(
            "{FLOOD_ELEMENTS} members named to put back; a set has at most {}",
            max_only_names()
        ),
        "names" if method.starts_with("NamedRestore") => format!(
            "{FLOOD_ELEMENTS} snapshots named to put back; a restore puts back at most one \
             snapshot of each of"
        ),
        "names" if method == "Space" => format!(
            "{FLOOD_ELEMENTS} names; ask about at most {} snapshots at a time",
            keeper::space::MAX_SPACE_NAMES
        ),
        "names" => format!(
            "{FLOOD_ELEMENTS} copies named; at most {} at once",
            keeper::copies::MAX_VERIFY_NAMES
        ),
        other => panic!("{method}: teach this test how many elements {other} may hold"),
    };
    Refusal {
        error: "InvalidArgument",
        says: vec![says],
    }
}

/// The arguments of a call, as a structure for the bus.
fn arguments(values: &[Value]) -> zbus::Structure<'static> {
    let mut args = zbus::Structure::builder();
    for v in values {
        args = match v.clone() {
            Value::S(s) => args.add_field(s),
            Value::As(a) => args.add_field(a),
            Value::Ay(a) => args.add_field(a),
            Value::B(b) => args.add_field(b),
        };
    }
    args.build().expect("the arguments")
}

/// One call with one argument over its cap, every other one valid.
struct OverCap {
    call: String,
    method: String,
    values: Vec<Value>,
    refusal: Refusal,
}

#[test]
fn hostile_every_string_argument_of_every_method_is_refused_over_its_cap() {
    // A world with a configured copy target, so that a copy's or a fetch's target is valid
    // and its snapshot name is the argument checked.
    let Some((mut w, _target, _usb)) = copies::world_with_usb(&[]) else {
        return;
    };
    // The approver's snapshot of /home, alone in its set: the valid name and set.
    let (code, out, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "snapshot",
            "/home",
            "--reason",
            "before the test",
            "--json",
        ],
    );
    assert_eq!(code, 0, "the approver's snapshot: {err}");
    let taken = json(&out);
    let valid = Valid {
        snapshot: taken["snapshots"][0]["name"]
            .as_str()
            .expect("a snapshot's name")
            .to_owned(),
        set: taken["set_id"].as_i64().expect("a set id").to_string(),
        target: "usb",
    };

    // One over-cap call per string argument of every method, as the keeper's interface lists
    // them, each other argument valid: a method added with a string argument is called here,
    // and one with an argument this test does not know fails it until it is taught.
    let huge = "B".repeat(HUGE);
    let methods = methods_and_in_arguments();
    let mut calls: Vec<OverCap> = Vec::new();
    for (method, args) in &methods {
        for (at, arg) in args.iter().enumerate() {
            let over: Vec<(String, Value, Refusal)> = match arg.ty.as_str() {
                "s" => vec![(
                    "huge".into(),
                    Value::S(huge.clone()),
                    refusal_of_huge(method, arg),
                )],
                "ay" => vec![(
                    "huge".into(),
                    Value::Ay(huge.as_bytes().to_vec()),
                    refusal_of_huge(method, arg),
                )],
                "as" => vec![
                    (
                        "one huge element".into(),
                        Value::As(vec![huge.clone()]),
                        refusal_of_huge(method, arg),
                    ),
                    (
                        format!("{FLOOD_ELEMENTS} small elements"),
                        Value::As(vec!["/home".to_owned(); FLOOD_ELEMENTS]),
                        refusal_of_many(method, arg),
                    ),
                ],
                _ => vec![],
            };
            for (how, value, refusal) in over {
                let values = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        if i == at {
                            value.clone()
                        } else {
                            valid_value(method, a, &valid)
                        }
                    })
                    .collect();
                calls.push(OverCap {
                    call: format!("{method}: {} ({how})", arg.name),
                    method: method.clone(),
                    values,
                    refusal,
                });
            }
        }
    }
    let called: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
    for expected in [
        "Snapshot",
        "RestoreConfirm",
        "Copy",
        "Fetch",
        "Open",
        "Diff",
        "SetRestorePreview",
        "SetRestoreConfirm",
    ] {
        assert!(
            called.contains(&expected),
            "{expected} has string arguments: {called:?}"
        );
    }
    let words_calls = calls
        .iter()
        .filter(|c| c.refusal.error == "WordsNotShown")
        .count();
    assert!(
        words_calls >= 2,
        "RestoreConfirm's and SetRestoreConfirm's words"
    );

    let answers = {
        let to_send: Vec<(String, Vec<Value>)> = calls
            .iter()
            .map(|c| (c.method.clone(), c.values.clone()))
            .collect();
        as_user(&w, APPROVER, move |keeper| async move {
            let connection = keeper.inner().connection().clone();
            let mut answers = Vec::new();
            for (method, values) in &to_send {
                let reply = connection
                    .call_method(
                        Some(layout::names::KEEPER_BUS_NAME),
                        layout::names::KEEPER_OBJECT_PATH,
                        Some(layout::names::KEEPER_BUS_NAME),
                        method.as_str(),
                        &arguments(values),
                    )
                    .await;
                answers.push(reply.map(drop));
            }
            answers
        })
        .join()
        .expect("the approver's thread")
    };
    for (c, reply) in calls.iter().zip(&answers) {
        let call = &c.call;
        match reply {
            Err(zbus::Error::MethodError(name, message, _)) => {
                let message = message.as_deref().unwrap_or("");
                assert!(
                    message.len() < 1024 && !message.contains(&huge),
                    "{call}: {name}: {} bytes",
                    message.len()
                );
                // Refused for the argument over its cap, not for another one.
                assert_eq!(
                    name.as_str(),
                    format!("org.tacid.Keeper1.Error.{}", c.refusal.error),
                    "{call}: {message}"
                );
                for says in &c.refusal.says {
                    assert!(
                        message.contains(says.as_str()),
                        "{call}: {name}: {message:?} does not say {says:?}"
                    );
                }
            }
            other => panic!("{call} over its cap was not refused: {other:?}"),
        }
    }

    // Neither journalled nor logged whole.
    w.stop_keeper();
    let (requests, snapshots) = w.journal_rows();
    for row in &requests {
        let shown = format!("{row:?}");
        assert!(
            !shown.contains(&huge) && shown.len() < 16 << 10,
            "a request row of {} bytes",
            shown.len()
        );
    }
    for row in &snapshots {
        assert!(!format!("{row:?}").contains(&huge), "a snapshot row");
    }
    // The words over their cap: each refusal journalled, of the valid snapshot (alone or as
    // its set's member), with the words capped and saying how long they were.
    let words_refused: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.uid == uid_of(APPROVER)
                && r.action == "restore"
                && r.state == State::Refused
                && r.subject.contains(&valid.snapshot)
        })
        .collect();
    assert_eq!(words_refused.len(), words_calls, "{words_refused:?}");
    for r in &words_refused {
        assert!(
            r.words_shown.len() <= MAX_WORDS_BYTES + 32
                && r.words_shown.ends_with(&format!("… ({HUGE} bytes)")),
            "{} bytes journalled of {}",
            r.words_shown.len(),
            r.subject
        );
    }
    let log = std::fs::read_to_string(w.keeper_log()).expect("the keeper's log");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest < 2048 && !log.contains(&huge),
        "a log line of {longest} bytes"
    );
}
