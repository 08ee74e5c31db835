//! The fuzzers start from the committed seeds; a seed that no longer parses would start them
//! from nothing. Each seed named like a good request or outcome must parse and be canonical.

use std::path::Path;

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).expect("a readable seed"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_request_seeds_parse_a_set_among_them() {
    let mut members = Vec::new();
    for (name, bytes) in seeds("restore_request") {
        let parsed = layout::RestoreRequest::parse(&bytes);
        if name == "nix" {
            assert!(parsed.is_err(), "{name}: @nix is never restorable");
            continue;
        }
        let request = parsed.unwrap_or_else(|e| panic!("seed {name}: {e}"));
        members.push(request.members().len());
    }
    assert!(
        members.contains(&3),
        "no seed of a set of three: {members:?}"
    );
}

#[test]
fn the_outcome_seeds_parse_a_set_among_them() {
    let mut members = Vec::new();
    for (name, bytes) in seeds("outcome") {
        let outcome = layout::Outcome::parse(&bytes).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        members.push(outcome.request.map_or(0, |r| r.members().len()));
    }
    assert!(
        members.contains(&3),
        "no seed of a set of three: {members:?}"
    );
}
