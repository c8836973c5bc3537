//! The HSDir's parsers: v3 onion-service descriptor uploads (outer layer,
//! certificate, signature; stored and cleaned) and the `/tor/hs/3/`
//! requests.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_dir::fuzzing::hs_descriptor(data));
