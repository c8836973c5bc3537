//! The ControlPort's command parser and session (before and after
//! authentication).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_relay::control::fuzz_commands(data);
});
