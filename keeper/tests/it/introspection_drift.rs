//! The committed introspection XML is what the keeper serves, and its names are the
//! layout's; a change to the interface shows up in review as a change to the XML.

use std::path::Path;
use std::sync::Arc;

use keeper::authority::Authority;
use keeper::journal::Journal;
use keeper::keeper1::{interface_name, introspection_xml};
use keeper::service::Keeper;
use keeper::wire::Keeper1Proxy;

fn generated() -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = Journal::open(&dir.path().join("j.sqlite")).expect("journal opens");
    introspection_xml(Arc::new(Keeper::new(journal, Authority::new("root"))))
}

#[test]
fn committed_introspection_matches_the_interface() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../keeper-interface/org.tacid.Keeper1.xml");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = generated();
    assert!(
        committed == generated,
        "{} has drifted from keeper/src/keeper1.rs. Regenerate it with\n    \
         cargo run -p keeper --bin tacid-keeper -- --print-introspection > keeper-interface/org.tacid.Keeper1.xml\n\
         and review the diff: a changed signature is a new interface version (org.tacid.Keeper2).\n--- generated ---\n{generated}",
        path.display()
    );
}

#[test]
fn names_are_the_layouts() {
    assert_eq!(interface_name(), layout::names::KEEPER_BUS_NAME);
    // The proxy's defaults are literals in a macro; check them against the layout here.
    let src = include_str!("../../../keeper-interface/src/lib.rs");
    assert!(src.contains(&format!(
        "default_service = \"{}\"",
        layout::names::KEEPER_BUS_NAME
    )));
    assert!(src.contains(&format!(
        "default_path = \"{}\"",
        layout::names::KEEPER_OBJECT_PATH
    )));
    let _ = std::marker::PhantomData::<Keeper1Proxy<'static>>;
}
