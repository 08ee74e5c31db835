//! `Outcome::parse` on any bytes: never panics, and whatever parses is the canonical form.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(outcome) = layout::Outcome::parse(data) {
        let rendered = outcome.render();
        assert_eq!(rendered.as_bytes(), data, "a non-canonical outcome parsed");
        assert_eq!(layout::Outcome::parse(rendered.as_bytes()), Ok(outcome));
    }
});
