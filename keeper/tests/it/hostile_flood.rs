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
use crate::common::{uid_of, World, APPROVER, STRANGER};
use keeper::caps::{MAX_NAME_BYTES, MAX_WORDS_BYTES};
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

/// Each method of `org.tacid.Keeper1` and the types of its in-arguments, as the keeper itself
/// says (`tacid-keeper --print-introspection`): a method added later is in this list.
fn methods_and_in_arguments() -> Vec<(String, Vec<String>)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tacid-keeper"))
        .arg("--print-introspection")
        .output()
        .expect("tacid-keeper --print-introspection runs");
    assert!(out.status.success(), "--print-introspection: {out:?}");
    let xml = String::from_utf8(out.stdout).expect("the introspection is UTF-8");
    xml.split("<method name=\"")
        .skip(1)
        .map(|rest| {
            let name = rest.split('"').next().expect("a closing quote").to_owned();
            let body = rest.split("</method>").next().expect("a method's body");
            let args = body
                .split("<arg ")
                .skip(1)
                .filter(|arg| arg.contains("direction=\"in\""))
                .map(|arg| {
                    let ty = arg.split("type=\"").nth(1).expect("an argument's type");
                    ty.split('"').next().expect("a closing quote").to_owned()
                })
                .collect();
            (name, args)
        })
        .collect()
}

/// The arguments of a call of a method whose in-arguments are `types`: the `huge` one at
/// `at`, every other one empty (or false).
fn arguments(types: &[String], at: usize, huge: &str) -> zbus::Structure<'static> {
    let mut args = zbus::Structure::builder();
    for (i, ty) in types.iter().enumerate() {
        let big = i == at;
        args = match ty.as_str() {
            "s" => args.add_field(if big { huge.to_owned() } else { String::new() }),
            "as" => args.add_field(if big { vec![huge.to_owned()] } else { vec![] }),
            "ay" => args.add_field(if big {
                huge.as_bytes().to_vec()
            } else {
                vec![]
            }),
            "b" => args.add_field(false),
            other => panic!("an in-argument of type {other}: teach this test to make one"),
        };
    }
    args.build().expect("the arguments")
}

#[test]
fn hostile_every_string_argument_of_every_method_is_refused_over_its_cap() {
    let Some(mut w) = World::start() else { return };
    // One over-cap call per string argument of every method, as the keeper's interface lists
    // them: a method added with a string argument is called here without a word of this test.
    let huge = "B".repeat(HUGE);
    let calls: Vec<(String, Vec<String>, usize)> = methods_and_in_arguments()
        .into_iter()
        .flat_map(|(method, types)| {
            let strings: Vec<usize> = (0..types.len())
                .filter(|&i| matches!(types[i].as_str(), "s" | "as" | "ay"))
                .collect();
            strings
                .into_iter()
                .map(move |i| (method.clone(), types.clone(), i))
        })
        .collect();
    let called: Vec<&str> = calls.iter().map(|(m, _, _)| m.as_str()).collect();
    for expected in [
        "Snapshot",
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
    let answers = {
        let (huge, calls) = (huge.clone(), calls.clone());
        as_user(&w, APPROVER, move |keeper| async move {
            let connection = keeper.inner().connection().clone();
            let mut answers = Vec::new();
            for (method, types, at) in &calls {
                let reply = connection
                    .call_method(
                        Some(layout::names::KEEPER_BUS_NAME),
                        layout::names::KEEPER_OBJECT_PATH,
                        Some(layout::names::KEEPER_BUS_NAME),
                        method.as_str(),
                        &arguments(types, *at, &huge),
                    )
                    .await;
                answers.push((format!("{method} argument {at}"), reply));
            }
            answers
        })
        .join()
        .expect("the approver's thread")
    };
    for (call, reply) in &answers {
        match reply {
            Err(zbus::Error::MethodError(name, message, _)) => {
                let message = message.as_deref().unwrap_or("");
                assert!(
                    message.len() < 1024 && !message.contains(&huge),
                    "{call}: {name}: {} bytes",
                    message.len()
                );
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
    let log = std::fs::read_to_string(w.keeper_log()).expect("the keeper's log");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest < 2048 && !log.contains(&huge),
        "a log line of {longest} bytes"
    );
}
