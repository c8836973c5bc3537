//! What an ntor-v3 client asks for in its extension list, and what a
//! relay grants: congestion control (type 1, proposal 324) and the
//! subprotocol request (type 3, proposal 346, subprotocol Relay=5), by
//! which a client asks for CGO relay crypto (Relay=6) with relay cell
//! format V1. As tor 0.4.9's `negotiate_v3_ntor_server_circ_params` and
//! `relay_process_subproto_ext` decide:
//! - a malformed list, or a subprotocol request of odd length, fails the
//!   handshake;
//! - only the first subprotocol request counts; each of its entries must
//!   be a capability the relay grants through it (today, Relay=6 when the
//!   relay runs CGO), anything else fails the handshake: a client that
//!   asked has already switched to what it asked for, so a relay that
//!   ignored the request would leave it a circuit that cannot work;
//! - the entries must be in strictly ascending order, as arti requires (C
//!   means to and does not check: stock clients send one entry);
//! - CGO (relay cell format V1, which has no stream-level SENDME) without
//!   congestion control fails the handshake (C since 0.4.9.9);
//! - unknown extension types are ignored. The reply names congestion
//!   control only (built by [`super::congestion::server_reply`]).

use super::congestion::EXT_CC_REQUEST;

/// Extension type of the subprotocol request. [proposal 346]
pub const EXT_SUBPROTO_REQUEST: u8 = 3;
/// Protocol ID of "Relay" in a subprotocol request (C's `PRT_RELAY`).
pub const PROTO_RELAY: u8 = 2;
/// Relay=6: CGO relay crypto (C's `PROTOVER_RELAY_CRYPT_CGO`).
pub const RELAY_CRYPT_CGO: u8 = 6;

/// A client's ntor-v3 extension list, read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientExtensions {
    /// It asks for congestion control.
    pub cc: bool,
    /// It asks for CGO (Relay=6) in its subprotocol request.
    pub cgo: bool,
}

/// What a relay grants a client's extension list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Granted {
    /// Congestion control runs on the circuit.
    pub cc: bool,
    /// The hop uses CGO and relay cell format V1.
    pub cgo: bool,
}

/// Read a client's extension list. `cgo_supported`: whether this relay
/// grants Relay=6 (else a request for it fails, like any unknown
/// capability). Err: the handshake fails (the circuit gets DESTROY).
pub fn read_client_extensions(
    msg: &[u8],
    cgo_supported: bool,
) -> Result<ClientExtensions, &'static str> {
    let (&n, mut rest) = msg.split_first().ok_or("empty extension list")?;
    let mut out = ClientExtensions::default();
    let mut seen_subproto = false;
    for _ in 0..n {
        let [ty, len, tail @ ..] = rest else {
            return Err("truncated extension");
        };
        let len = usize::from(*len);
        let body = tail.get(..len).ok_or("truncated extension body")?;
        rest = &tail[len..];
        match *ty {
            EXT_CC_REQUEST => out.cc = true,
            EXT_SUBPROTO_REQUEST if !seen_subproto => {
                seen_subproto = true;
                out.cgo = read_subproto_request(body, cgo_supported)?;
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A subprotocol request's entries: (protocol ID, capability) pairs.
/// Ok(true) if it asks for CGO.
fn read_subproto_request(body: &[u8], cgo_supported: bool) -> Result<bool, &'static str> {
    if !body.len().is_multiple_of(2) {
        return Err("subprotocol request of odd length");
    }
    let mut cgo = false;
    let mut prev: Option<(u8, u8)> = None;
    for e in body.chunks_exact(2) {
        let entry = (e[0], e[1]);
        if prev.is_some_and(|p| p >= entry) {
            return Err("subprotocol request not in ascending order");
        }
        prev = Some(entry);
        match entry {
            (PROTO_RELAY, RELAY_CRYPT_CGO) if cgo_supported => cgo = true,
            _ => return Err("subprotocol request for a capability we do not grant"),
        }
    }
    Ok(cgo)
}

impl ClientExtensions {
    /// What the relay grants: congestion control if asked for and enabled
    /// by the consensus (`cc_enabled`); CGO if asked for, which needs
    /// congestion control. Err: the handshake fails.
    pub fn grant(self, cc_enabled: bool) -> Result<Granted, &'static str> {
        let cc = self.cc && cc_enabled;
        if self.cgo && !cc {
            return Err("CGO (relay cell format V1) without congestion control");
        }
        Ok(Granted { cc, cgo: self.cgo })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(hex: &str, cgo: bool) -> Result<ClientExtensions, &'static str> {
        read_client_extensions(&hex::decode(hex).unwrap(), cgo)
    }

    #[test]
    fn a_stock_clients_lists_are_read() {
        // What tor 0.4.9.11's client sends: neither, CC, CC and CGO.
        assert_eq!(read("00", true), Ok(ClientExtensions::default()));
        let cc = ClientExtensions {
            cc: true,
            cgo: false,
        };
        assert_eq!(read("010100", true), Ok(cc));
        let both = ClientExtensions {
            cc: true,
            cgo: true,
        };
        assert_eq!(read("02010003020206", true), Ok(both));
        assert_eq!(
            both.grant(true),
            Ok(Granted {
                cc: true,
                cgo: true
            })
        );
        assert_eq!(cc.grant(false), Ok(Granted::default()));
    }

    #[test]
    fn what_c_refuses_is_refused() {
        // CGO asked of a relay that does not grant it.
        assert!(read("02010003020206", false).is_err());
        // Anything but Relay=6, Relay=5 itself and FlowCtrl=2 included.
        assert!(read("0103020205", true).is_err());
        assert!(read("0103020b02", true).is_err());
        // Odd length.
        assert!(read("010303020602", true).is_err());
        // Duplicates or out of order (arti's rule).
        assert!(read("01030402060206", true).is_err());
        // CGO without congestion control, asked or granted.
        let cgo_only = read("0103020206", true).unwrap();
        assert!(cgo_only.grant(true).is_err());
        let both = read("02010003020206", true).unwrap();
        assert!(both.grant(false).is_err());
        // A truncated list.
        assert!(read("020100", true).is_err());
        assert!(read("", true).is_err());
    }

    #[test]
    fn an_empty_request_a_second_request_and_unknown_types_change_nothing() {
        assert_eq!(read("010300", true), Ok(ClientExtensions::default()));
        // Only the first request counts (C's `trn_extension_find`).
        assert_eq!(read("020302020603020205", true).map(|e| e.cgo), Ok(true));
        assert_eq!(
            read("02630101030000", true),
            Ok(ClientExtensions::default())
        );
    }
}
