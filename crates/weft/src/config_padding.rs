//! The padding options, as a relay takes them (C's
//! `options_validate_relay_padding`): `ConnectionPadding` must be `auto`
//! (a relay pads as the consensus says), `ReducedConnectionPadding` cannot
//! be set, and neither can `CircuitPadding 0` nor `ReducedCircuitPadding 1`
//! (a relay that says `Padding=2` runs whatever machines its clients
//! negotiate).

/// What the padding options decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaddingOptions {
    /// `CircuitPadding` (default 1).
    pub circuit_padding: bool,
}

impl Default for PaddingOptions {
    fn default() -> Self {
        PaddingOptions {
            circuit_padding: true,
        }
    }
}

impl PaddingOptions {
    /// Take `key` (lower case) if it is a padding option: `None` if it is
    /// not one, else whether `val` is acceptable.
    pub fn take(
        &mut self,
        key: &str,
        val: &str,
        parse_bool: impl Fn(&str) -> Result<bool, String>,
    ) -> Option<Result<(), String>> {
        let r = match key {
            "connectionpadding" if !val.eq_ignore_ascii_case("auto") => {
                Err("Relays must use 'auto' for the ConnectionPadding setting.".into())
            }
            "connectionpadding" => Ok(()),
            "circuitpadding" => match parse_bool(val) {
                Ok(false) => Err("Relays cannot set CircuitPadding to 0.".into()),
                r => r.map(|b| self.circuit_padding = b),
            },
            "reducedcircuitpadding" => match parse_bool(val) {
                Ok(true) => Err("Relays cannot set ReducedCircuitPadding.".into()),
                r => r.map(|_| ()),
            },
            "reducedconnectionpadding" => match parse_bool(val) {
                Ok(true) => Err("Relays cannot set ReducedConnectionPadding.".into()),
                r => r.map(|_| ()),
            },
            _ => return None,
        };
        Some(r)
    }
}
