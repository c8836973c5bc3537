//! The initiator side of the link handshake (what a relay we extend to can
//! answer).
#![no_main]
mod common;
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let k = common::keys();
    weft_proto::fuzzing::link_initiator(&k.link, &k.tls_cert, data)
});
