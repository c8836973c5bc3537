//! Consensus (both flavors) and authority-certificate parsing/verification.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_dir::fuzzing::directory_documents(data));
