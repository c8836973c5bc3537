//! The cell framer on any byte stream, both circuit-ID widths.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_proto::fuzzing::cell_frames(data));
