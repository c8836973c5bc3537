//! Entry points for the cargo-fuzz targets in `fuzz/` that reach this
//! crate's parsers of network input (HTTP responses from directory servers,
//! consensus documents, authority certificates). Compiled on stable so the
//! committed corpora are replayed by unit tests. None may panic.

use std::time::SystemTime;

use crate::consensus::{verify_consensus, AuthorityCerts, ConsensusFlavor};

/// The bounded HTTP/1.0 response parser.
pub fn http_response(data: &[u8]) {
    if let Ok(r) = crate::http::parse_response(data) {
        let _ = r.header("Content-Encoding");
    }
}

/// Consensus and authority-certificate parsing and verification on
/// arbitrary text (the first byte picks the flavor).
pub fn directory_documents(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let now = SystemTime::now();
    let trusted = [[0x11u8; 20], [0x22; 20]];
    let certs = AuthorityCerts::parse(text, &trusted, now).unwrap_or_default();
    let flavor = if first & 1 == 0 {
        ConsensusFlavor::Microdesc
    } else {
        ConsensusFlavor::Plain
    };
    let _ = verify_consensus(text, flavor, &certs, &trusted, now);
    let _ = crate::consensus::parse_microdescs(text);
}
