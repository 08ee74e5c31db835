//! Which snapshot holds the disk (`Space`, adr/0029): the stem measures, the keeper decides
//! who sees what. Anybody may ask; somebody who may only look sees the snapshots of /home in
//! their subvolume's total only, never one by one (a person's home, snapshot by snapshot,
//! would show what they wrote day by day).

use std::time::Duration;

use layout::SnapshotName;

use crate::handles::Handles;
use crate::stem_client::stem_error;
use crate::wire::space::{SnapshotSpace, SpaceReport, SubvolumeSpace};
use crate::wire::KeeperError;

/// How long the stem may measure for one question (inside the bus's reply timeout). What it
/// measured before the time ran out is kept, so asking again gets further.
pub const SPACE_LIMIT: Duration = Duration::from_secs(15);

/// The most snapshots one question names.
pub const MAX_SPACE_NAMES: usize = 4096;

/// The space service.
#[derive(Debug, Clone)]
pub struct Space {
    h: Handles,
}

impl Space {
    pub fn new(h: Handles) -> Space {
        Space { h }
    }

    /// The space of the snapshots `names` (empty: all), as `uid` may see it.
    pub async fn report(&self, uid: u32, names: &[String]) -> Result<SpaceReport, KeeperError> {
        if names.len() > MAX_SPACE_NAMES {
            return Err(KeeperError::InvalidArgument(format!(
                "{} names; ask about at most {MAX_SPACE_NAMES} snapshots at a time (none: all)",
                names.len()
            )));
        }
        let mut parsed: Vec<SnapshotName> = Vec::with_capacity(names.len());
        for name in names {
            let n = SnapshotName::parse(name).map_err(|e| {
                KeeperError::InvalidArgument(format!(
                    "{:?} is not a snapshot name ({e}); see `tacid data list`",
                    layout::human::cap(name, 128)
                ))
            })?;
            if !parsed.contains(&n) {
                parsed.push(n);
            }
        }
        let may_see_all = self.h.may_change(uid);
        let _turn = self.h.looker_turn(may_see_all).await;
        let asked: Vec<String> = parsed.iter().map(ToString::to_string).collect();
        let info = self
            .h
            .stem
            .space(asked, SPACE_LIMIT)
            .await
            .map_err(stem_error)?;
        Ok(shown(info, may_see_all))
    }
}

/// The stem's answer as the caller may see it.
fn shown(info: stem_interface::SpaceReportInfo, may_see_all: bool) -> SpaceReport {
    let homes = layout::homes_subvolume();
    let mut hidden = 0u32;
    let snapshots = info
        .snapshots
        .into_iter()
        .filter_map(|s| {
            // The stem answers canonical names; one that does not parse is not shown.
            let name = SnapshotName::parse(&s.name).ok()?;
            if !may_see_all && name.subvolume() == homes {
                hidden += 1;
                return None;
            }
            Some(SnapshotSpace {
                of: name.subvolume().display_path().to_owned(),
                taken_micros: name.taken_unix_micros(),
                name: s.name,
                exclusive_bytes: s.exclusive_bytes,
                shared_bytes: s.shared_bytes,
                new_bytes: s.new_bytes,
                has_previous: s.has_previous,
            })
        })
        .collect();
    let subvolumes = info
        .subvolumes
        .into_iter()
        .map(|v| SubvolumeSpace {
            subvolume: layout::SubvolumeName::parse(&v.subvolume)
                .map(|n| n.display_path().to_owned())
                .unwrap_or(v.subvolume),
            snapshots: v.snapshots,
            snapshots_exclusive_bytes: v.snapshots_exclusive_bytes,
            live_bytes: v.live_bytes,
            live_exclusive_bytes: v.live_exclusive_bytes,
            growth_bytes_per_day: v.growth_bytes_per_day,
            has_growth: v.has_growth,
        })
        .collect();
    SpaceReport {
        snapshots,
        subvolumes,
        store_bytes: info.store_bytes,
        total_bytes: info.total_bytes,
        complete: info.complete,
        hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stem_interface::{SnapshotSpaceInfo, SpaceReportInfo, SubvolumeSpaceInfo};

    fn answer() -> SpaceReportInfo {
        let snap = |name: &str, exclusive| SnapshotSpaceInfo {
            name: name.into(),
            exclusive_bytes: exclusive,
            shared_bytes: 10,
            new_bytes: 0,
            has_previous: false,
        };
        SpaceReportInfo {
            snapshots: vec![
                snap("@home.2026-12-01T140200.123456Z", 5),
                snap("@persist.2026-12-01T140200.123456Z", 7),
            ],
            subvolumes: vec![SubvolumeSpaceInfo {
                subvolume: "@home".into(),
                snapshots: 1,
                snapshots_exclusive_bytes: 5,
                live_bytes: 100,
                live_exclusive_bytes: 50,
                growth_bytes_per_day: 0,
                has_growth: false,
            }],
            store_bytes: 12,
            total_bytes: 200,
            complete: true,
            walked: 3,
        }
    }

    #[test]
    fn lookers_see_home_snapshots_in_total_only() {
        let looker = shown(answer(), false);
        assert_eq!(looker.hidden, 1);
        assert_eq!(looker.snapshots.len(), 1);
        assert_eq!(looker.snapshots[0].of, "/persist");
        assert_eq!(
            looker.subvolumes[0].snapshots_exclusive_bytes, 5,
            "the total stays"
        );
        assert_eq!(looker.subvolumes[0].subvolume, "/home");
        let approver = shown(answer(), true);
        assert_eq!((approver.hidden, approver.snapshots.len()), (0, 2));
        assert_eq!(approver.snapshots[0].of, "/home");
    }
}
