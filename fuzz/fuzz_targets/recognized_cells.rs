//! The relay commands a keyed circuit half recognizes (EXTEND2, TRUNCATE,
//! BEGIN, RESOLVE, the onion-service cells...), reached through real
//! encryption.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_proto::fuzzing::recognized_cells(data));
