//! The HTTP response parser used for directory fetches and uploads.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_dir::fuzzing::http_response(data));
