//! The responder side of the link handshake on arbitrary cell streams (the
//! first thing any host can reach on the ORPort).
#![no_main]
mod common;
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_proto::fuzzing::link_responder(&common::keys().link, data)
});
