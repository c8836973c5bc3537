//! The torrc-style configuration parser.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = weft::config::parse(text, std::path::Path::new("fuzz-torrc"));
    }
});
