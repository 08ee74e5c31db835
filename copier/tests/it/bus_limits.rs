//! What the copier needs with 8 acts at once (one per target, the most its turns allow
//! with 8 sealed targets), each sealing a stream of more than two parts zstd cannot
//! shrink into a directory target: its threads, open files and peak resident memory, from
//! `/proc`, hold at most half of each limit its unit sets (TasksMax, LimitNOFILE,
//! MemoryHigh), as the stem's and the keeper's do.

use std::os::unix::fs::PermissionsExt as _;

use crate::common::{self, incompressible, CopierDaemon, Ending, Places, PrivateBus, FULL, USB};

/// The sealed targets besides `usb`.
const OTHERS: usize = 7;

#[test]
fn eight_seals_at_once_need_at_most_half_the_units_limits() {
    if !common::require() {
        return;
    }
    let (cuid, cgid) = common::copier_user();
    let others_dir = tempfile::Builder::new()
        .prefix("tacid-copier-limits-")
        .tempdir()
        .expect("a temporary directory");
    std::fs::set_permissions(others_dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let others: Vec<String> = (1..=OTHERS).map(|i| format!("t{i}")).collect();
    let extra: Vec<String> = others
        .iter()
        .map(|t| {
            let dir = others_dir.path().join(t);
            std::fs::create_dir(&dir).expect("mkdir");
            common::chown(&dir, cuid, cgid);
            format!(
                r#""{t}": {{"place": "{}", "seal": {{}}}}"#,
                dir.join("tacid").display()
            )
        })
        .collect();
    let places = Places::new(&extra.join(", "));
    let bus = PrivateBus::start();
    let copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(2 * layout::defaults::SEAL_PART_BYTES + (1 << 20));
    let targets: Vec<String> = std::iter::once(USB.to_owned()).chain(others).collect();
    let watched = testbed::peaks::watch(copier.pid());
    std::thread::scope(|s| {
        let sealing: Vec<_> = targets
            .iter()
            .enumerate()
            .map(|(i, target)| {
                let (bus, stream) = (&bus, &stream);
                s.spawn(move || {
                    let uuid = uuid::Uuid::from_u128(0x800 + i as u128);
                    common::seal_to(bus, target, FULL, uuid, None, stream, Ending::End)
                        .map(|sealed| (target, sealed.parts))
                })
            })
            .collect();
        for t in sealing {
            let (target, parts) = t.join().expect("a sealing thread").expect("sealed");
            assert!(parts >= 3, "{target}: {parts} parts");
        }
    });
    let peaks = watched.finish();
    eprintln!("the copier, 8 seals at once: {peaks}");
    testbed::peaks::assert_within_unit_limits(
        "the copier",
        peaks,
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/tacid-copier.service"),
    );
}
