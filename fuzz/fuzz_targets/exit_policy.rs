//! The exit policy parser and builder (torrc ExitPolicy values), matching,
//! descriptor lines and summaries.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_dir::fuzzing::exit_policy(data));
