//! Relay-message and handshake-body parsers (EXTEND2 with a round trip,
//! CREATE2, NETINFO, CERTS, VERSIONS, relay header).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_proto::fuzzing::relay_msgs(data));
