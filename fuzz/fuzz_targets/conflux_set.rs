//! A conflux set under arbitrary LINKs, messages, SWITCHes, leg states,
//! sends and leg closes: no panic, the out-of-order queue under its cap.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_proto::fuzzing::conflux_set(data));
