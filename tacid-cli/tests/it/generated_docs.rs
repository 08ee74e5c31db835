//! The committed man pages and completions are exactly what the clap definitions render.
//! Regenerate with `cargo run -p tacid-cli --bin tacid-gen-docs -- tacid-cli`.

use std::path::Path;

#[test]
fn committed_man_pages_and_completions_match_the_command_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (path, text) in tacid_cli::docs::generated() {
        let committed = std::fs::read(root.join(path)).unwrap_or_else(|e| {
            panic!("tacid-cli/{path} is missing ({e}); run `cargo run -p tacid-cli --bin tacid-gen-docs -- tacid-cli`")
        });
        assert!(
            committed == text,
            "tacid-cli/{path} differs from what the command line renders; run \
             `cargo run -p tacid-cli --bin tacid-gen-docs -- tacid-cli` and commit the result"
        );
    }
}

#[test]
fn the_man_page_documents_exit_codes_and_boundaries() {
    let man = String::from_utf8(tacid_cli::docs::generated().remove(0).1).expect("text");
    assert!(
        man.contains("restore without \\-\\-yes: the cost was shown; nothing changed"),
        "{man}"
    );
    assert!(man.contains("no backup against a dead"), "{man}");
}
