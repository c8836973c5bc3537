//! CREATE2 answering (ntor, ntor-v3) and the keyed circuit half on arbitrary
//! relay cells.
#![no_main]
mod common;
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_proto::fuzzing::circuit_half(&common::keys().handshake, data)
});
