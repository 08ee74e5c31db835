//! The committed introspection XML is what the code serves; a change to the interface
//! must show up as a change to `copier-interface/org.tacid.Copier1.xml` in review.

use std::path::Path;

#[test]
fn committed_introspection_matches_the_interface() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../copier-interface/org.tacid.Copier1.xml");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = copier::copier1::introspection_xml();
    assert!(
        committed == generated,
        "{} has drifted from the interface in copier/src/copier1.rs (the proxy in\n\
         copier-interface/src/lib.rs must follow it).\n\
         Regenerate it with:\n    cargo run -p copier --bin tacid-copier -- --print-introspection > copier-interface/org.tacid.Copier1.xml\n\
         and review the diff: a changed signature is a new interface version (org.tacid.Copier2).\n\
         --- generated ---\n{generated}",
        path.display()
    );
}
