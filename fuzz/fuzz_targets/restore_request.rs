//! `RestoreRequest::parse` on any bytes: never panics, and whatever parses is the canonical
//! form, byte for byte (so one request has exactly one spelling).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = layout::RestoreRequest::parse(data) {
        let rendered = request.render();
        assert_eq!(rendered.as_bytes(), data, "a non-canonical request parsed");
        assert_eq!(layout::RestoreRequest::parse(rendered.as_bytes()), Ok(request));
    }
});
