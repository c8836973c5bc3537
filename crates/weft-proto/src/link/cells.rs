//! The wire formats of the link handshake's cells: VERSIONS, CERTS,
//! AUTH_CHALLENGE and NETINFO (the AUTHENTICATE body is built and checked
//! with the handshake's transcript, in [`super`]). Every parser takes an
//! untrusted slice and returns a typed error; none can panic.
//! [tor-spec §4.1–§4.5]

use std::net::IpAddr;

use super::{LinkError, AUTH_METHOD_ED25519, SUPPORTED_LINK_VERSIONS};
use crate::cell::{cmd, encode_var};

/// Our VERSIONS cell (2-byte circuit ID framing). [tor-spec §4.1]
pub fn versions_cell() -> Vec<u8> {
    let mut b = Vec::with_capacity(4);
    for v in SUPPORTED_LINK_VERSIONS {
        b.extend_from_slice(&v.to_be_bytes());
    }
    encode_var(0, 2, cmd::VERSIONS, &b)
}

/// Pick the highest common link version from a VERSIONS body.
pub fn pick_version(body: &[u8]) -> Result<u16, LinkError> {
    if !body.len().is_multiple_of(2) {
        return Err(LinkError::Versions("odd length"));
    }
    body.chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .filter(|v| SUPPORTED_LINK_VERSIONS.contains(v))
        .max()
        .ok_or(LinkError::Versions("no common link version"))
}

pub(super) fn certs_body(certs: &[(u8, &Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![certs.len() as u8];
    for (t, c) in certs {
        b.push(*t);
        b.extend_from_slice(&(c.len() as u16).to_be_bytes());
        b.extend_from_slice(c);
    }
    b
}

/// Split a CERTS body into (type, bytes); duplicate types are an error.
pub fn parse_certs(body: &[u8]) -> Result<Vec<(u8, &[u8])>, LinkError> {
    let bad = |s: &str| LinkError::Certs(s.to_string());
    let (&n, mut rest) = body.split_first().ok_or_else(|| bad("empty"))?;
    let mut v: Vec<(u8, &[u8])> = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        if rest.len() < 3 {
            return Err(bad("truncated"));
        }
        let t = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        if rest.len() < 3 + len {
            return Err(bad("truncated certificate"));
        }
        if v.iter().any(|(ty, _)| *ty == t) {
            return Err(bad("duplicate certificate type"));
        }
        v.push((t, &rest[3..3 + len]));
        rest = &rest[3 + len..];
    }
    Ok(v)
}

pub(super) fn parse_auth_challenge(body: &[u8]) -> Result<(), LinkError> {
    if body.len() < 34 {
        return Err(LinkError::AuthChallenge("truncated"));
    }
    let n = usize::from(u16::from_be_bytes([body[32], body[33]]));
    let methods = body
        .get(34..34 + 2 * n)
        .ok_or(LinkError::AuthChallenge("truncated method list"))?;
    if methods
        .chunks_exact(2)
        .any(|m| u16::from_be_bytes([m[0], m[1]]) == AUTH_METHOD_ED25519)
    {
        Ok(())
    } else {
        Err(LinkError::AuthChallenge("no supported method"))
    }
}

/// A parsed NETINFO body. [tor-spec §4.5]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netinfo {
    /// Sender's clock (0 from clients).
    pub time: u32,
    /// Our address as the sender sees it.
    pub other_addr: Option<IpAddr>,
    /// The sender's own addresses.
    pub my_addrs: Vec<IpAddr>,
}

pub(super) fn push_addr(b: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(v4) => {
            b.push(4);
            b.push(4);
            b.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            b.push(6);
            b.push(16);
            b.extend_from_slice(&v6.octets());
        }
    }
}

fn read_addr(b: &[u8]) -> Result<(Option<IpAddr>, &[u8]), LinkError> {
    if b.len() < 2 {
        return Err(LinkError::Netinfo("truncated address"));
    }
    let (t, len) = (b[0], usize::from(b[1]));
    let v = b
        .get(2..2 + len)
        .ok_or(LinkError::Netinfo("truncated address"))?;
    let addr = match (t, len) {
        (4, 4) => Some(IpAddr::from([v[0], v[1], v[2], v[3]])),
        (6, 16) => {
            let mut o = [0u8; 16];
            o.copy_from_slice(v);
            Some(IpAddr::from(o))
        }
        _ => None,
    };
    Ok((addr, &b[2 + len..]))
}

/// Parse a NETINFO body.
pub fn parse_netinfo(body: &[u8]) -> Result<Netinfo, LinkError> {
    if body.len() < 4 {
        return Err(LinkError::Netinfo("truncated"));
    }
    let time = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let (other_addr, rest) = read_addr(&body[4..])?;
    let (&n, mut rest) = rest
        .split_first()
        .ok_or(LinkError::Netinfo("missing address count"))?;
    let mut my_addrs = Vec::new();
    for _ in 0..n {
        let (a, r) = read_addr(rest)?;
        if let Some(a) = a {
            my_addrs.push(a);
        }
        rest = r;
    }
    Ok(Netinfo {
        time,
        other_addr,
        my_addrs,
    })
}
