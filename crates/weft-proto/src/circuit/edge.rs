//! What a relay that is not an exit answers to the stream commands addressed
//! to it (the last hop of a circuit), exactly as C Tor 0.4.9 does — clients
//! rely on it: a path-bias probe is a BEGIN to `0.x.y.z:25` on a circuit
//! that ends at a middle relay, and the client counts the circuit as
//! working only if the END carries EXITPOLICY with that address.
//! [C connection_edge.c connection_exit_begin_conn(), begin_cell_parse(),
//! connection_exit_connect(), connection_edge_end(); dns.c dns_resolve(),
//! send_resolved_cell(); circpathbias.c pathbias_check_probe_response()]

use std::net::IpAddr;

use crate::relay::end_reason;

/// BEGIN flag: the client does not want IPv4. [tor-spec §6.2]
pub const BEGIN_FLAG_IPV4_NOT_OK: u32 = 1 << 1;
/// The TTL C Tor gives an IP-literal address (`DEFAULT_DNS_TTL`).
pub const DEFAULT_DNS_TTL: u32 = 30 * 60;
/// The TTL of every RESOLVED cell C Tor 0.4.9 sends (`RESOLVED_CLIPPED_TTL`).
pub const RESOLVED_TTL: u32 = 60;

/// The END body (reason, then address and TTL for EXITPOLICY) a non-exit
/// relay answers a BEGIN with. `data` is the BEGIN's relay data;
/// `prev_is_client`: the circuit came from an unauthenticated peer (a
/// client using us as a one-hop proxy).
pub fn end_for_begin(data: &[u8], prev_is_client: bool) -> Vec<u8> {
    let Some(nul) = data.iter().position(|&b| b == 0) else {
        return vec![end_reason::TORPROTOCOL];
    };
    let Some((address, port)) = split_addr_port(&data[..nul]) else {
        return vec![end_reason::TORPROTOCOL];
    };
    if port == 0 {
        return vec![end_reason::TORPROTOCOL];
    }
    let flags = match data.get(nul + 1..nul + 5) {
        Some(f) if data.len() > nul + 4 => u32::from_be_bytes([f[0], f[1], f[2], f[3]]),
        _ => 0,
    };
    // "Don't let clients use us as a single-hop proxy."
    if prev_is_client {
        return vec![end_reason::TORPROTOCOL];
    }
    // No IPv6 exit: a client that does not want IPv4 cannot be helped.
    if flags & BEGIN_FLAG_IPV4_NOT_OK != 0 {
        return vec![end_reason::EXITPOLICY];
    }
    match std::str::from_utf8(address).ok().and_then(parse_ip) {
        // An address we "resolve" at once; our exit policy (reject *:*)
        // refuses it, and the END tells which address and for how long.
        Some(ip) => {
            let mut b = vec![end_reason::EXITPOLICY];
            match ip {
                IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
                IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
            }
            b.extend_from_slice(&DEFAULT_DNS_TTL.to_be_bytes());
            b
        }
        // A non-exit does no DNS lookups.
        None => vec![end_reason::RESOLVEFAILED],
    }
}

/// The RESOLVED body a non-exit relay answers a RESOLVE with: always an
/// error (type 0xF1) with C Tor's message and TTL.
pub fn resolved_error() -> Vec<u8> {
    const MSG: &[u8] = b"Error resolving hostname";
    let mut b = vec![0xF1, MSG.len() as u8];
    b.extend_from_slice(MSG);
    b.extend_from_slice(&RESOLVED_TTL.to_be_bytes());
    b
}

/// `host:port` as C Tor splits it (bytes, as C does): a bare IPv6 address
/// has no port (0); otherwise at the last colon, the port a decimal
/// 1–65535 (None if not).
pub(crate) fn split_addr_port(s: &[u8]) -> Option<(&[u8], u16)> {
    if std::str::from_utf8(s).is_ok_and(|t| t.parse::<std::net::Ipv6Addr>().is_ok()) {
        return Some((s, 0));
    }
    match s.iter().rposition(|&b| b == b':') {
        Some(i) => {
            let p = &s[i + 1..];
            if p.is_empty() || !p.iter().all(u8::is_ascii_digit) {
                return None;
            }
            // Leading zeros are fine ("00080"); anything past 65535 fails.
            let n = p
                .iter()
                .fold(0u32, |n, d| (n * 10 + u32::from(d - b'0')).min(1 << 20));
            (1..=65535).contains(&n).then_some((&s[..i], n as u16))
        }
        None => Some((s, 0)),
    }
}

/// An IP literal as C Tor's `tor_addr_parse` takes it (IPv6 with or without
/// brackets).
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_bias_probe_gets_its_address_back() {
        // pathbias_send_usable_probe: "%s:25" with a 24-bit nonce.
        let end = end_for_begin(b"0.18.52.86:25\0", false);
        assert_eq!(end[0], end_reason::EXITPOLICY);
        assert_eq!(&end[1..5], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(u32::from_be_bytes(end[5..9].try_into().unwrap()), 1800);
        assert_eq!(end.len(), 9, "reason + IPv4 + TTL: what the client checks");
    }

    #[test]
    fn begins_answered_as_c_tor_answers() {
        let v6 = end_for_begin(b"[2001:db8::1]:443\0", false);
        assert_eq!((v6[0], v6.len()), (end_reason::EXITPOLICY, 21));
        assert_eq!(
            end_for_begin(b"example.com:80\0", false),
            [end_reason::RESOLVEFAILED]
        );
        assert_eq!(
            end_for_begin(b"example.com:80", false),
            [end_reason::TORPROTOCOL]
        );
        assert_eq!(
            end_for_begin(b"example.com\0", false),
            [end_reason::TORPROTOCOL]
        );
        assert_eq!(
            end_for_begin(b"example.com:0\0", false),
            [end_reason::TORPROTOCOL]
        );
        assert_eq!(
            end_for_begin(b"example.com:70000\0", false),
            [end_reason::TORPROTOCOL]
        );
        assert_eq!(
            end_for_begin(b"example.com:8x\0", false),
            [end_reason::TORPROTOCOL]
        );
        assert_eq!(
            end_for_begin(b"::1\0", false),
            [end_reason::TORPROTOCOL],
            "no port"
        );
        assert_eq!(
            end_for_begin(b"1.2.3.4:80\0", true),
            [end_reason::TORPROTOCOL],
            "one-hop"
        );
        let mut v6only = b"1.2.3.4:80\0".to_vec();
        v6only.extend_from_slice(&BEGIN_FLAG_IPV4_NOT_OK.to_be_bytes());
        assert_eq!(end_for_begin(&v6only, false), [end_reason::EXITPOLICY]);
        assert_eq!(end_for_begin(b"", false), [end_reason::TORPROTOCOL]);
        assert_eq!(
            end_for_begin(b"\xff\xfe:80\0", false),
            [end_reason::RESOLVEFAILED]
        );
    }

    #[test]
    fn resolve_is_always_an_error() {
        let r = resolved_error();
        assert_eq!(r[0], 0xF1);
        assert_eq!(usize::from(r[1]), r.len() - 6);
        assert_eq!(&r[r.len() - 4..], &60u32.to_be_bytes());
    }
}
