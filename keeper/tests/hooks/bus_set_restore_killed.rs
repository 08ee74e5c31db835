//! The keeper SIGKILLed while a set restore is with the stem (a `test-hooks` build stops
//! there first): the restart settles the consent row from what the disk says is staged.

use crate::common::{a_set_and_changes_since, json, World, APPROVER, STRANGER};
use keeper::journal::State;

/// SIGKILL while a set restore is with the stem (a `test-hooks` build stops there first):
/// the restart settles the consent row from what the disk says is staged.
#[test]
fn bus_the_keeper_killed_mid_set_restore_settles_its_consent_from_the_disk() {
    let Some(mut w) = World::start() else { return };
    let set = a_set_and_changes_since(&w);
    let id = set.id.as_str();
    for (point, staged) in [("restore-pending", false), ("restore-staged", true)] {
        let last = w.kill_keeper_mid_restore(point, id);
        assert_eq!(
            (last.state, last.subject.as_str()),
            (
                if staged { State::Staged } else { State::Failed },
                format!("set {id}: {}", set.names().join(" ")).as_str()
            ),
            "after {point}: {last:?}"
        );
        assert_eq!(
            w.request_file().map(|r| r.lines().count()),
            staged.then_some(3),
            "after {point}"
        );
        let (_, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
        let by = json(&out)["staged_by"].as_str().map(str::to_owned);
        assert_eq!(by.as_deref(), staged.then_some(APPROVER));
    }
}
