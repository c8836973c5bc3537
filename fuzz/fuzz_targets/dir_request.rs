//! The directory cache's request parser and answers (BEGIN_DIR streams),
//! and the splitting of fetched documents.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_dir::fuzzing::dir_request(data));
