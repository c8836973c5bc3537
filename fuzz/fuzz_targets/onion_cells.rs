//! The onion-service cell parsers (ESTABLISH_INTRO with its signature and
//! MAC check, INTRODUCE1) and a non-exit's answer to BEGIN.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_proto::fuzzing::onion_cells(data));
