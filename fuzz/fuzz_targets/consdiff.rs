//! Consensus diffs: applying arbitrary diffs, and making diffs between
//! arbitrary documents (each must then apply).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_dir::fuzzing::consdiff(data));
