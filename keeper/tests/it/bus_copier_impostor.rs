//! Bus tier: a process that is not the copier's user but owns `org.tacid.Copier1` (a bus
//! policy installed wrong lets it) is refused by the keeper before anything is handed to
//! it. The impostor is the real copier binary, running as another user, which would
//! gladly seal whatever pipe it is given: it is never called, and no copy lands in its
//! place. The same copy, once the real copier (as its own user) owns the name, is made.

use std::time::Duration;

use crate::common::sealed::{configure_daemons, start_copier_as};
use crate::common::{json, World, APPROVER, STRANGER};
use layout::names;

#[test]
fn bus_a_copier_name_owned_by_another_user_is_refused_and_gets_no_pipe() {
    let Some(mut w) = World::start() else {
        return;
    };
    // The copier's user exists (the keeper compares the owner's uid with it).
    testbed::users::ensure_system_user(names::COPIER_USER);
    // The mistake: a policy that lets the stranger own the copier's name.
    w.add_bus_policy(
        "impostor.conf",
        &format!(
            r#"<policy user="{STRANGER}"><allow own="{}"/></policy>"#,
            names::COPIER_BUS_NAME
        ),
    );
    let mut impostor = start_copier_as(&w, STRANGER, "impostor-", "");
    configure_daemons(&mut w, &impostor.config);
    let s1 = w.snapshot_home();

    // Copy, list, verify, fetch: each refused with words naming the owner's uid and the
    // copier's user, exit 14 (the copier cannot act).
    let stranger_uid = crate::common::uid_of(STRANGER);
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s1, "--to", "vault", "--json"]);
    assert_eq!(code, 14, "{out} {err}");
    let e = json(&out);
    assert_eq!(e["error"], "CopierFailed", "{e}");
    let message = e["message"].as_str().expect("a message");
    assert!(
        message.contains(&format!(
            "runs as uid {stranger_uid}, not as the copier's user {}",
            names::COPIER_USER
        )) && message.contains("refused to hand it anything"),
        "{message}"
    );
    for args in [
        vec!["data", "copies", "vault"],
        vec!["data", "verify", "--target", "vault"],
        vec!["data", "fetch", &s1, "--from", "vault"],
    ] {
        let (code, out, err) = w.tacid(APPROVER, &args);
        assert_eq!(code, 14, "{args:?}: {out} {err}");
        assert!(err.contains("not as the copier's user"), "{args:?}: {err}");
    }

    // The impostor was never called (it logs every call it admits), and holds nothing.
    std::thread::sleep(Duration::from_millis(200));
    let log = std::fs::read_to_string(&impostor.log).expect("the impostor's log");
    assert!(log.contains("serving"), "the impostor did run: {log}");
    assert!(!log.contains("call admitted"), "{log}");
    assert!(!log.contains("call refused"), "{log}");
    assert!(impostor.objects().is_empty(), "{:?}", impostor.objects());

    // The real copier, as its own user, owns the name now: the same copy is made.
    impostor.kill();
    let real = start_copier_as(&w, names::COPIER_USER, "", "");
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s1, "--to", "vault", "--json"]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(json(&out)["copied"][0]["name"], s1.as_str());
    assert!(!real.objects().is_empty());
    assert!(impostor.objects().is_empty());
}
