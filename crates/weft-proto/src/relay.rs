//! Relay-cell headers (format v0) and the relay messages a middle relay
//! parses or builds: EXTEND2, EXTENDED2, TRUNCATE/TRUNCATED, END, RESOLVED,
//! and the CREATE2/CREATED2 bodies they carry. [tor-spec §5.1, §6.1]
//!
//! Contract: every parser takes an untrusted byte slice, checks lengths once
//! and returns a typed error; none of them can panic.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use crate::cell::BODY_LEN;

/// Relay commands. [tor-spec §6.1]
#[allow(missing_docs)]
pub mod relay_cmd {
    pub const BEGIN: u8 = 1;
    pub const DATA: u8 = 2;
    pub const END: u8 = 3;
    pub const CONNECTED: u8 = 4;
    pub const SENDME: u8 = 5;
    pub const EXTEND: u8 = 6;
    pub const EXTENDED: u8 = 7;
    pub const TRUNCATE: u8 = 8;
    pub const TRUNCATED: u8 = 9;
    pub const DROP: u8 = 10;
    pub const RESOLVE: u8 = 11;
    pub const RESOLVED: u8 = 12;
    pub const BEGIN_DIR: u8 = 13;
    pub const EXTEND2: u8 = 14;
    pub const EXTENDED2: u8 = 15;
    /// Stream flow control with congestion control (proposal 324 §4).
    pub const XOFF: u8 = 43;
    /// See [`XOFF`].
    pub const XON: u8 = 44;
}

/// END reasons used here. [tor-spec §6.3]
#[allow(missing_docs)]
pub mod end_reason {
    pub const MISC: u8 = 1;
    pub const RESOLVEFAILED: u8 = 2;
    pub const CONNECTREFUSED: u8 = 3;
    pub const EXITPOLICY: u8 = 4;
    pub const DESTROY: u8 = 5;
    pub const DONE: u8 = 6;
    pub const TIMEOUT: u8 = 7;
    pub const NOROUTE: u8 = 8;
    pub const RESOURCELIMIT: u8 = 11;
    pub const CONNRESET: u8 = 12;
    pub const TORPROTOCOL: u8 = 13;
    pub const NOTDIRECTORY: u8 = 14;
}

/// Offset of the data in a v0 relay body.
pub const RELAY_HEADER_LEN: usize = 11;
/// Maximum data in one v0 relay cell.
pub const RELAY_DATA_MAX: usize = BODY_LEN - RELAY_HEADER_LEN;

/// Header fields of a decrypted, recognized relay cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayHeader {
    /// Relay command.
    pub command: u8,
    /// Stream ID (0 for circuit-level messages).
    pub stream_id: u16,
    /// Declared data length (at most [`RELAY_DATA_MAX`]; two bytes, as on
    /// the wire, so a message that carries its header is no bigger).
    pub length: u16,
}

impl RelayHeader {
    /// The message's data in `body` (the cell this header was parsed from).
    pub fn data<'a>(&self, body: &'a [u8; BODY_LEN]) -> &'a [u8] {
        data(body, self)
    }
}

/// A decrypted relay message whose header was parsed and checked — once,
/// by the keyed half that decrypted it ([`crate::circuit::ForwardAction`])
/// — carried as its cell body from there (to a conflux set's home, into
/// its out-of-order queue): the type says the header is valid, so its
/// fields are read where they sit, with no second parse and no error
/// path. No bigger than the body (a ring slot that carries one does not
/// grow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayMsg {
    body: [u8; BODY_LEN],
}

impl RelayMsg {
    /// The message in `body`, whose header `parse_header` returned as
    /// `header`.
    pub fn parsed(header: &RelayHeader, body: &[u8; BODY_LEN]) -> RelayMsg {
        debug_assert_eq!(
            (header.command, header.stream_id, header.length),
            (
                body[0],
                u16::from_be_bytes([body[3], body[4]]),
                u16::from_be_bytes([body[9], body[10]])
            )
        );
        let _ = header;
        RelayMsg { body: *body }
    }

    /// Its header (checked when it was parsed).
    pub fn header(&self) -> RelayHeader {
        let b = &self.body;
        RelayHeader {
            command: b[0],
            stream_id: u16::from_be_bytes([b[3], b[4]]),
            length: u16::from_be_bytes([b[9], b[10]]),
        }
    }

    /// Its data.
    pub fn data(&self) -> &[u8] {
        data(&self.body, &self.header())
    }

    /// The whole cell body (header bytes included).
    pub fn body(&self) -> &[u8; BODY_LEN] {
        &self.body
    }

    /// The whole cell body, to be read in place.
    pub fn body_mut(&mut self) -> &mut [u8; BODY_LEN] {
        &mut self.body
    }
}

/// Errors in relay messages; each closes the circuit with PROTOCOL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayMsgError {
    /// The length field exceeds the cell.
    #[error("relay length {0} exceeds {RELAY_DATA_MAX}")]
    BadLength(usize),
    /// A message body was truncated or malformed.
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Read the header of a recognized relay body.
pub fn parse_header(body: &[u8; BODY_LEN]) -> Result<RelayHeader, RelayMsgError> {
    #[cfg(feature = "parse-count")]
    HEADERS_PARSED.with(|n| n.set(n.get() + 1));
    let length = usize::from(u16::from_be_bytes([body[9], body[10]]));
    if length > RELAY_DATA_MAX {
        return Err(RelayMsgError::BadLength(length));
    }
    Ok(RelayHeader {
        command: body[0],
        stream_id: u16::from_be_bytes([body[3], body[4]]),
        length: length as u16,
    })
}

#[cfg(feature = "parse-count")]
thread_local! {
    static HEADERS_PARSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Relay headers parsed on this thread so far (feature `parse-count`,
/// for tests that show a message's header is parsed once).
#[cfg(feature = "parse-count")]
pub fn headers_parsed() -> u64 {
    HEADERS_PARSED.with(|n| n.get())
}

/// The data of a recognized relay cell whose header parsed.
pub fn data<'a>(body: &'a [u8; BODY_LEN], h: &RelayHeader) -> &'a [u8] {
    &body[RELAY_HEADER_LEN..RELAY_HEADER_LEN + usize::from(h.length).min(RELAY_DATA_MAX)]
}

/// Fill `body` with a relay message (digest field zero; the crypto layer sets
/// it): command, recognized 0, stream ID, length, data, four zero bytes, then
/// random padding. [tor-spec §6.1]
pub fn build(body: &mut [u8; BODY_LEN], command: u8, stream_id: u16, data: &[u8]) {
    let n = data.len().min(RELAY_DATA_MAX);
    body[0] = command;
    body[1..3].fill(0);
    body[3..5].copy_from_slice(&stream_id.to_be_bytes());
    body[5..9].fill(0);
    body[9..11].copy_from_slice(&(n as u16).to_be_bytes());
    body[RELAY_HEADER_LEN..RELAY_HEADER_LEN + n].copy_from_slice(&data[..n]);
    let pad_start = (RELAY_HEADER_LEN + n + 4).min(BODY_LEN);
    body[RELAY_HEADER_LEN + n..pad_start].fill(0);
    weft_crypto::random_bytes(&mut body[pad_start..]);
}

/// A CREATE2 body: HTYPE(2) | HLEN(2) | HDATA. [tor-spec §5.1]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Create2<'a> {
    /// Handshake type (2 = ntor, 3 = ntor-v3).
    pub htype: u16,
    /// Handshake data.
    pub hdata: &'a [u8],
}

/// Parse a CREATE2 body (the cell body, or the tail of an EXTEND2).
pub fn parse_create2(b: &[u8]) -> Result<Create2<'_>, RelayMsgError> {
    if b.len() < 4 {
        return Err(RelayMsgError::Malformed("CREATE2"));
    }
    let htype = u16::from_be_bytes([b[0], b[1]]);
    let hlen = usize::from(u16::from_be_bytes([b[2], b[3]]));
    let hdata = b
        .get(4..4 + hlen)
        .ok_or(RelayMsgError::Malformed("CREATE2 handshake length"))?;
    if 4 + hlen > BODY_LEN {
        return Err(RelayMsgError::Malformed("CREATE2 handshake length"));
    }
    Ok(Create2 { htype, hdata })
}

/// Build a CREATED2 body: HLEN(2) | HDATA.
pub fn created2_body(hdata: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 + hdata.len());
    v.extend_from_slice(&(hdata.len() as u16).to_be_bytes());
    v.extend_from_slice(hdata);
    v
}

/// A parsed EXTEND2 request. [tor-spec §5.1.2; C onion.c check_extend_cell()]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extend2 {
    /// First IPv4 link specifier.
    pub ipv4: Option<SocketAddrV4>,
    /// First IPv6 link specifier.
    pub ipv6: Option<SocketAddrV6>,
    /// RSA identity of the next hop (required, nonzero).
    pub rsa_id: [u8; 20],
    /// Ed25519 identity, if given.
    pub ed_id: Option<[u8; 32]>,
    /// The CREATE2 body to send to the next hop (HTYPE|HLEN|HDATA).
    pub create2: Vec<u8>,
}

/// Parse an EXTEND2 body.
pub fn parse_extend2(b: &[u8]) -> Result<Extend2, RelayMsgError> {
    let m = RelayMsgError::Malformed;
    let (&n, mut rest) = b.split_first().ok_or(m("EXTEND2"))?;
    let (mut ipv4, mut ipv6, mut rsa, mut ed) = (None, None, None, None);
    for _ in 0..n {
        if rest.len() < 2 {
            return Err(m("EXTEND2 link specifier"));
        }
        let (t, len) = (rest[0], usize::from(rest[1]));
        let v = rest.get(2..2 + len).ok_or(m("EXTEND2 link specifier"))?;
        match (t, len) {
            (0, 6) if ipv4.is_none() => {
                let a = Ipv4Addr::new(v[0], v[1], v[2], v[3]);
                ipv4 = Some(SocketAddrV4::new(a, u16::from_be_bytes([v[4], v[5]])));
            }
            (1, 18) if ipv6.is_none() => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&v[..16]);
                let port = u16::from_be_bytes([v[16], v[17]]);
                ipv6 = Some(SocketAddrV6::new(Ipv6Addr::from(o), port, 0, 0));
            }
            (2, 20) => {
                if rsa.is_some() {
                    return Err(m("EXTEND2 duplicate RSA identity"));
                }
                let mut id = [0u8; 20];
                id.copy_from_slice(v);
                rsa = Some(id);
            }
            (3, 32) => {
                if ed.is_some() {
                    return Err(m("EXTEND2 duplicate Ed25519 identity"));
                }
                let mut id = [0u8; 32];
                id.copy_from_slice(v);
                ed = Some(id);
            }
            (0..=3, _) => return Err(m("EXTEND2 link specifier length")),
            _ => {} // Unknown types are ignored. [tor-spec §5.1.2]
        }
        rest = &rest[2 + len..];
    }
    let create = parse_create2(rest)?;
    let rsa_id = rsa.ok_or(m("EXTEND2 without RSA identity"))?;
    if rsa_id == [0u8; 20] {
        return Err(m("EXTEND2 with zero RSA identity"));
    }
    if ipv4.is_none() && ipv6.is_none() {
        return Err(m("EXTEND2 without address"));
    }
    let clen = 4 + create.hdata.len();
    Ok(Extend2 {
        ipv4,
        ipv6,
        rsa_id,
        ed_id: ed,
        create2: rest[..clen].to_vec(),
    })
}

/// Encode an EXTEND2 body (used by tests and load generators).
pub fn encode_extend2(e: &Extend2) -> Vec<u8> {
    let mut v = Vec::new();
    let mut n = 1u8;
    let mut specs = Vec::new();
    if let Some(a) = e.ipv4 {
        specs.push(0u8);
        specs.push(6);
        specs.extend_from_slice(&a.ip().octets());
        specs.extend_from_slice(&a.port().to_be_bytes());
        n += 1;
    }
    specs.push(2);
    specs.push(20);
    specs.extend_from_slice(&e.rsa_id);
    if let Some(ed) = e.ed_id {
        specs.push(3);
        specs.push(32);
        specs.extend_from_slice(&ed);
        n += 1;
    }
    if let Some(a) = e.ipv6 {
        specs.push(1);
        specs.push(18);
        specs.extend_from_slice(&a.ip().octets());
        specs.extend_from_slice(&a.port().to_be_bytes());
        n += 1;
    }
    v.push(n);
    v.extend_from_slice(&specs);
    v.extend_from_slice(&e.create2);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend2_round_trip_and_rejects() {
        let mut create2 = vec![0, 2, 0, 84];
        create2.extend_from_slice(&[9u8; 84]);
        let e = Extend2 {
            ipv4: Some("127.0.0.1:5000".parse().unwrap()),
            ipv6: None,
            rsa_id: [1; 20],
            ed_id: Some([2; 32]),
            create2,
        };
        let enc = encode_extend2(&e);
        assert_eq!(parse_extend2(&enc).unwrap(), e);
        for cut in 0..enc.len() {
            assert!(parse_extend2(&enc[..cut]).is_err(), "cut {cut}");
        }
        let mut zero = e.clone();
        zero.rsa_id = [0; 20];
        assert!(parse_extend2(&encode_extend2(&zero)).is_err());
        let mut noaddr = e.clone();
        noaddr.ipv4 = None;
        assert!(parse_extend2(&encode_extend2(&noaddr)).is_err());
    }

    #[test]
    fn relay_build_and_parse() {
        let mut b = [0u8; BODY_LEN];
        build(&mut b, relay_cmd::EXTENDED2, 0, &[0, 2, 7, 7]);
        let h = parse_header(&b).unwrap();
        assert_eq!(h.command, relay_cmd::EXTENDED2);
        assert_eq!(data(&b, &h), &[0, 2, 7, 7]);
        assert_eq!(&b[15..19], &[0, 0, 0, 0]);
        b[9] = 0xff;
        assert!(parse_header(&b).is_err());
    }
}
