//! What an exit does with a BEGIN before any socket exists, as C Tor
//! 0.4.9 does it: parse it, refuse single-hop use, honour the address
//! family flags, take an IP literal at once or ask for a lookup, check
//! the destination against the exit policy (again after every lookup),
//! and pick the address of a lookup that found both families. The
//! answers' bodies (END with its address and TTL, CONNECTED) are built
//! here too. Not wired yet: weft refuses exit configurations until the
//! stream room exists (docs/architecture.md, "Exit streams").
//! [C connection_edge.c begin_cell_parse(), connection_exit_begin_conn(),
//! connection_exit_connect(), connection_edge_end(),
//! connected_cell_format_payload(), clip_dns_ttl(); dns.c
//! dns_resolve_impl(), set_exitconn_info_from_resolve();
//! addressmap.c address_is_invalid_destination()]

use std::net::{IpAddr, SocketAddr};

use super::edge::{parse_ip, split_addr_port, DEFAULT_DNS_TTL};
use crate::relay::end_reason;

/// BEGIN flag: IPv6 addresses are fine.
pub const BEGIN_FLAG_IPV6_OK: u32 = 1 << 0;
/// BEGIN flag: IPv4 addresses are not.
pub const BEGIN_FLAG_IPV4_NOT_OK: u32 = 1 << 1;
/// BEGIN flag: IPv6 is preferred.
pub const BEGIN_FLAG_IPV6_PREFERRED: u32 = 1 << 2;
/// END reason HIBERNATING.
pub const END_HIBERNATING: u8 = 9;
/// C Tor's two DNS TTLs (`clip_dns_ttl`): below 5 minutes becomes 5
/// minutes, anything else an hour.
pub const MIN_DNS_TTL: u32 = 5 * 60;
/// See [`MIN_DNS_TTL`].
pub const MAX_DNS_TTL: u32 = 60 * 60;
/// How far an exit moves each clipped TTL, up or down, uniformly at random
/// (C Tor's `FUZZY_DNS_TTL`): the lowest TTL an exit gives is one minute.
pub const FUZZY_DNS_TTL: u32 = 4 * 60;

/// A parsed BEGIN: host (as sent), port (1–65535), flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginRequest {
    /// Host name or IP literal, lower-cased.
    pub host: String,
    /// Destination port.
    pub port: u16,
    /// The flags word (0 if absent).
    pub flags: u32,
}

impl BeginRequest {
    /// Parse a BEGIN's data (`host:port\0[flags]`); Err is the END reason.
    pub fn parse(data: &[u8]) -> Result<BeginRequest, u8> {
        let nul = data
            .iter()
            .position(|&b| b == 0)
            .ok_or(end_reason::TORPROTOCOL)?;
        let (host, port) = split_addr_port(&data[..nul]).ok_or(end_reason::TORPROTOCOL)?;
        if port == 0 {
            return Err(end_reason::TORPROTOCOL);
        }
        let flags = match data.get(nul + 1..nul + 5) {
            Some(f) => u32::from_be_bytes([f[0], f[1], f[2], f[3]]),
            None => 0,
        };
        Ok(BeginRequest {
            host: String::from_utf8_lossy(host).to_ascii_lowercase(),
            port,
            flags,
        })
    }
}

/// What the exit knows when a BEGIN arrives.
pub struct ExitContext<'a> {
    /// The circuit came from a client (not a relay): a one-hop proxy.
    pub prev_is_client: bool,
    /// The previous hop is a relay in our consensus.
    pub prev_is_known_relay: bool,
    /// The consensus's `refuseunknownexits` (default on).
    pub refuse_unknown_exits: bool,
    /// `IPv6Exit`.
    pub ipv6_exit: bool,
    /// Hibernating or shutting down.
    pub hibernating: bool,
    /// `ServerDNSAllowNonRFC953Hostnames`.
    pub allow_non_rfc953: bool,
    /// The exit policy: may a stream connect to this address and port?
    pub allows: &'a dyn Fn(IpAddr, u16) -> bool,
}

/// What to do with a BEGIN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Answer with END and this body.
    End(Vec<u8>),
    /// Connect now (an IP literal the policy allows).
    Connect {
        /// Where.
        addr: SocketAddr,
        /// The TTL to put in CONNECTED.
        ttl: u32,
    },
    /// Look the name up, then [`check_destination`] the answer.
    Resolve {
        /// Lower-cased host name.
        host: String,
        /// Port.
        port: u16,
        /// The flags, with IPv6-preferred cleared without IPv6Exit.
        flags: u32,
    },
}

/// Decide what a BEGIN's data leads to.
pub fn admit_begin(data: &[u8], ctx: &ExitContext<'_>) -> Admission {
    let mut req = match BeginRequest::parse(data) {
        Ok(r) => r,
        Err(reason) => return Admission::End(vec![reason]),
    };
    // "Don't let clients use us as a single-hop proxy."
    if ctx.prev_is_client {
        return Admission::End(vec![end_reason::TORPROTOCOL]);
    }
    if !ctx.prev_is_known_relay && ctx.refuse_unknown_exits {
        return Admission::End(vec![end_reason::MISC]);
    }
    if !ctx.ipv6_exit {
        req.flags &= !BEGIN_FLAG_IPV6_PREFERRED;
        if req.flags & BEGIN_FLAG_IPV4_NOT_OK != 0 {
            return Admission::End(vec![end_reason::EXITPOLICY]);
        }
    }
    if ctx.hibernating {
        return Admission::End(vec![END_HIBERNATING]);
    }
    if let Some(ip) = parse_ip(&req.host) {
        return match check_destination(ip, req.port, DEFAULT_DNS_TTL, ctx) {
            Ok(addr) => Admission::Connect {
                addr,
                ttl: DEFAULT_DNS_TTL,
            },
            Err(end) => Admission::End(end),
        };
    }
    let reverse = req.host.ends_with(".in-addr.arpa") || req.host.ends_with(".ip6.arpa");
    if reverse || (!ctx.allow_non_rfc953 && !is_rfc953_name(&req.host)) {
        return Admission::End(vec![end_reason::RESOLVEFAILED]);
    }
    Admission::Resolve {
        host: req.host,
        port: req.port,
        flags: req.flags,
    }
}

/// What C's `tor_addr_parse_PTR_name(…, AF_UNSPEC, 0)` makes of a
/// (lower-cased) name: a reverse-lookup name (`4.3.2.1.in-addr.arpa`, or
/// the 32 nybbles of an `ip6.arpa` name) gives the address it asks
/// about; a name that ends so but is not well formed is malformed; any
/// other name (`example.arpa` too) is an ordinary one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtrName {
    /// An ordinary name.
    NotReverse,
    /// Ends in `.in-addr.arpa` or `.ip6.arpa` but is not well formed.
    Malformed,
    /// A reverse lookup of this address.
    Reverse(IpAddr),
}

/// See [`PtrName`]. [C address.c tor_addr_parse_PTR_name(),
/// inaddr.c tor_inet_aton()]
pub fn parse_ptr_name(host: &str) -> PtrName {
    if let Some(v4) = host.strip_suffix(".in-addr.arpa") {
        // C copies it into a 16-byte buffer (INET_NTOA_BUF_LEN) first.
        if v4.len() >= 16 {
            return PtrName::Malformed;
        }
        // tor_inet_aton: four dotted decimals of 1-3 digits, no leading
        // zero, each at most 255.
        let octets: Vec<&str> = v4.split('.').collect();
        let ok = |o: &&str| {
            (1..=3).contains(&o.len())
                && o.bytes().all(|b| b.is_ascii_digit())
                && !(o.len() > 1 && o.starts_with('0'))
        };
        if octets.len() != 4 || !octets.iter().all(ok) {
            return PtrName::Malformed;
        }
        let mut b = [0u8; 4];
        for (i, o) in octets.iter().enumerate() {
            match o.parse::<u8>() {
                // The name lists the octets in reverse.
                Ok(v) => b[3 - i] = v,
                Err(_) => return PtrName::Malformed,
            }
        }
        return PtrName::Reverse(IpAddr::from(b));
    }
    if host.ends_with(".ip6.arpa") {
        // Sixteen bytes, low nybble first, each nybble and its dot, from
        // the last byte to the first; then "ip6.arpa".
        let s = host.as_bytes();
        if s.len() != 16 * 4 + "ip6.arpa".len() {
            return PtrName::Malformed;
        }
        let nybble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let mut a = [0u8; 16];
        for i in 0..16 {
            let q = &s[i * 4..i * 4 + 4];
            match (nybble(q[0]), q[1], nybble(q[2]), q[3]) {
                (Some(lo), b'.', Some(hi), b'.') => a[15 - i] = lo | (hi << 4),
                _ => return PtrName::Malformed,
            }
        }
        return PtrName::Reverse(IpAddr::from(a));
    }
    PtrName::NotReverse
}

/// What C does with a RESOLVE for `name` (lower-cased, not an IP
/// literal) before any lookup: `Err` why it refuses it (an empty name, one
/// `address_is_invalid_destination()` refuses, a malformed reverse-lookup
/// name, a reverse lookup of an address `is_internal` says is internal),
/// else `Ok` with the address of a reverse (PTR) lookup, or `None` for
/// an ordinary lookup. [C dns.c dns_resolve_impl()]
pub fn resolve_refusal(
    name: &str,
    is_internal: impl Fn(IpAddr) -> bool,
) -> Result<Option<IpAddr>, &'static str> {
    if name.is_empty() {
        return Err("an empty name");
    }
    if !is_rfc953_name(name) {
        return Err("an invalid destination name");
    }
    match parse_ptr_name(name) {
        PtrName::NotReverse => Ok(None),
        PtrName::Malformed => Err("a malformed reverse-lookup name"),
        PtrName::Reverse(ip) if is_internal(ip) => Err("a reverse lookup of an internal address"),
        PtrName::Reverse(ip) => Ok(Some(ip)),
    }
}

/// Letters, digits, `-`, `.` and `_` only (`address_is_invalid_destination`).
pub fn is_rfc953_name(h: &str) -> bool {
    h.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// The policy check before a connect (`connection_exit_connect`): Ok with
/// the socket address, or the END body (EXITPOLICY with the address and
/// `ttl`, as `connection_edge_end` writes it).
pub fn check_destination(
    ip: IpAddr,
    port: u16,
    ttl: u32,
    ctx: &ExitContext<'_>,
) -> Result<SocketAddr, Vec<u8>> {
    // As `my_exit_policy_rejects`: no IPv6 socket without IPv6Exit, not
    // even for an IPv4-mapped address.
    let v6_refused = ip.is_ipv6() && !ctx.ipv6_exit;
    if v6_refused || !(ctx.allows)(ip, port) {
        let mut b = vec![end_reason::EXITPOLICY];
        match ip {
            IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
        }
        b.extend_from_slice(&ttl.to_be_bytes());
        return Err(b);
    }
    Ok(SocketAddr::new(ip, port))
}

/// A lookup's answer for one family: the address and its TTL, or whether
/// the failure is transient.
pub type FamilyAnswer<A> = Result<(A, u32), bool>;

/// Which address of a lookup a BEGIN connects to
/// (`set_exitconn_info_from_resolve`): the families the client accepts
/// and we exit to; of two, the one the policy allows, else the client's
/// preference. Err(transient) if the chosen family failed.
pub fn choose_address(
    v4: FamilyAnswer<std::net::Ipv4Addr>,
    v6: FamilyAnswer<std::net::Ipv6Addr>,
    port: u16,
    flags: u32,
    ctx: &ExitContext<'_>,
) -> Result<(IpAddr, u32), bool> {
    let ipv4_ok = v4.is_ok() && flags & BEGIN_FLAG_IPV4_NOT_OK == 0;
    let ipv6_ok = v6.is_ok() && flags & BEGIN_FLAG_IPV6_OK != 0 && ctx.ipv6_exit;
    let prefer_v4 = flags & BEGIN_FLAG_IPV6_PREFERRED == 0;
    let use_v4 = match (ipv4_ok, ipv6_ok, v4, v6) {
        (true, true, Ok((a4, _)), Ok((a6, _))) => {
            let ok4 = (ctx.allows)(IpAddr::V4(a4), port);
            let ok6 = (ctx.allows)(IpAddr::V6(a6), port);
            if ok4 != ok6 {
                ok4
            } else {
                prefer_v4
            }
        }
        (true, _, _, _) => true,
        (false, true, _, _) => false,
        _ => prefer_v4,
    };
    if use_v4 {
        v4.map(|(a, t)| (IpAddr::V4(a), t))
    } else {
        v6.map(|(a, t)| (IpAddr::V6(a), t))
    }
}

/// C Tor's `clip_dns_ttl`: two values only (a defence against DNS-based
/// traffic confirmation).
pub fn clip_dns_ttl(ttl: u32) -> u32 {
    if ttl < MIN_DNS_TTL {
        MIN_DNS_TTL
    } else {
        MAX_DNS_TTL
    }
}

/// C Tor's `clip_dns_fuzzy_ttl`: the clipped TTL moved by a uniform
/// amount in [-FUZZY_DNS_TTL, FUZZY_DNS_TTL], drawn from `rand` (the
/// caller's random number, so that the choice is testable). An exit
/// caches an answer for this long and gives every client this same
/// value, so neither the TTL nor a cache hit tells when the name was
/// last looked up (TROVE-2021-009).
pub fn clip_dns_fuzzy_ttl(ttl: u32, rand: u32) -> u32 {
    // FUZZY_DNS_TTL < MIN_DNS_TTL: no underflow.
    clip_dns_ttl(ttl) + rand % (2 * FUZZY_DNS_TTL + 1) - FUZZY_DNS_TTL
}

/// A CONNECTED body: IPv4 address and TTL, or four zero bytes, 6, the
/// IPv6 address and TTL (`connected_cell_format_payload`).
pub fn connected_body(addr: IpAddr, ttl: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(25);
    match addr {
        IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => {
            b.extend_from_slice(&[0, 0, 0, 0, 6]);
            b.extend_from_slice(&a.octets());
        }
    }
    b.extend_from_slice(&ttl.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ctx(allows: &dyn Fn(IpAddr, u16) -> bool) -> ExitContext<'_> {
        ExitContext {
            prev_is_client: false,
            prev_is_known_relay: true,
            refuse_unknown_exits: true,
            ipv6_exit: false,
            hibernating: false,
            allow_non_rfc953: false,
            allows,
        }
    }

    fn web_only(a: IpAddr, p: u16) -> bool {
        p == 443 && !a.is_loopback()
    }

    #[test]
    fn a_begin_is_parsed_as_c_tor_parses_it() {
        let r = BeginRequest::parse(b"Example.COM:443\0\0\0\0\x05").unwrap();
        assert_eq!((r.host.as_str(), r.port, r.flags), ("example.com", 443, 5));
        assert_eq!(BeginRequest::parse(b"a.b:1\0").unwrap().flags, 0);
        assert_eq!(
            BeginRequest::parse(b"a.b:1\0\0\0").unwrap().flags,
            0,
            "short flags"
        );
        for bad in [
            &b"a.b:80"[..],
            b"a.b\0",
            b"a.b:0\0",
            b"a.b:65536\0",
            b":\0",
            b"",
        ] {
            assert_eq!(
                BeginRequest::parse(bad),
                Err(end_reason::TORPROTOCOL),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn literals_are_checked_at_once_names_are_looked_up() {
        let c = ctx(&web_only);
        assert_eq!(
            admit_begin(b"93.184.216.34:443\0", &c),
            Admission::Connect {
                addr: "93.184.216.34:443".parse().unwrap(),
                ttl: DEFAULT_DNS_TTL
            }
        );
        let mut end = vec![end_reason::EXITPOLICY, 93, 184, 216, 34];
        end.extend_from_slice(&DEFAULT_DNS_TTL.to_be_bytes());
        assert_eq!(admit_begin(b"93.184.216.34:80\0", &c), Admission::End(end));
        assert_eq!(
            admit_begin(b"WWW.Example.com:443\0", &c),
            Admission::Resolve {
                host: "www.example.com".into(),
                port: 443,
                flags: 0
            }
        );
        // No IPv6 exit: an IPv6 literal is refused by policy, with its address.
        let Admission::End(e) = admit_begin(b"[2001:db8::1]:443\0", &c) else {
            panic!("an IPv6 literal without IPv6Exit")
        };
        assert_eq!((e[0], e.len()), (end_reason::EXITPOLICY, 21));
    }

    #[test]
    fn refusals_carry_c_tors_reasons() {
        let c = ctx(&web_only);
        let one_hop = ExitContext {
            prev_is_client: true,
            ..ctx(&web_only)
        };
        assert_eq!(
            admit_begin(b"1.2.3.4:443\0", &one_hop),
            Admission::End(vec![end_reason::TORPROTOCOL])
        );
        let unknown = ExitContext {
            prev_is_known_relay: false,
            ..ctx(&web_only)
        };
        assert_eq!(
            admit_begin(b"1.2.3.4:443\0", &unknown),
            Admission::End(vec![end_reason::MISC])
        );
        let mut v6only = b"a.b:443\0".to_vec();
        v6only.extend_from_slice(&BEGIN_FLAG_IPV4_NOT_OK.to_be_bytes());
        assert_eq!(
            admit_begin(&v6only, &c),
            Admission::End(vec![end_reason::EXITPOLICY])
        );
        let asleep = ExitContext {
            hibernating: true,
            ..ctx(&web_only)
        };
        assert_eq!(
            admit_begin(b"a.b:443\0", &asleep),
            Admission::End(vec![END_HIBERNATING])
        );
        for name in [
            &b"4.3.2.1.in-addr.arpa:443\0"[..],
            b"bad name!:443\0",
            b"a/b:443\0",
        ] {
            assert_eq!(
                admit_begin(name, &c),
                Admission::End(vec![end_reason::RESOLVEFAILED]),
                "{name:?}"
            );
        }
        let lax = ExitContext {
            allow_non_rfc953: true,
            ..ctx(&web_only)
        };
        assert!(matches!(
            admit_begin(b"bad name!:443\0", &lax),
            Admission::Resolve { .. }
        ));
    }

    #[test]
    fn a_name_that_resolves_to_a_refused_address_is_refused_with_it() {
        let c = ctx(&web_only);
        let e = check_destination(IpAddr::V4(Ipv4Addr::LOCALHOST), 443, 300, &c).unwrap_err();
        assert_eq!(e, [end_reason::EXITPOLICY, 127, 0, 0, 1, 0, 0, 1, 44]);
        assert!(check_destination("8.8.8.8".parse().unwrap(), 443, 300, &c).is_ok());
    }

    #[test]
    fn the_address_of_a_lookup_follows_flags_and_policy() {
        let v6_exit = |allows: &'static dyn Fn(IpAddr, u16) -> bool| ExitContext {
            ipv6_exit: true,
            ..ctx(allows)
        };
        let a4 = Ipv4Addr::new(8, 8, 8, 8);
        let a6: Ipv6Addr = "2001:db8::8".parse().unwrap();
        let all: &'static dyn Fn(IpAddr, u16) -> bool = &|_, _| true;
        let only6: &'static dyn Fn(IpAddr, u16) -> bool = &|a, _| a.is_ipv6();
        let c = v6_exit(all);
        let both =
            |flags, c: &ExitContext<'_>| choose_address(Ok((a4, 60)), Ok((a6, 90)), 443, flags, c);
        assert_eq!(
            both(0, &c),
            Ok((IpAddr::V4(a4), 60)),
            "IPv6 not ok for the client"
        );
        assert_eq!(both(BEGIN_FLAG_IPV6_OK, &c), Ok((IpAddr::V4(a4), 60)));
        assert_eq!(
            both(BEGIN_FLAG_IPV6_OK | BEGIN_FLAG_IPV6_PREFERRED, &c),
            Ok((IpAddr::V6(a6), 90))
        );
        assert_eq!(
            both(BEGIN_FLAG_IPV6_OK, &v6_exit(only6)),
            Ok((IpAddr::V6(a6), 90)),
            "the policy decides between two"
        );
        // Without IPv6Exit, IPv6 is never chosen.
        let no6 = ctx(all);
        assert_eq!(
            both(BEGIN_FLAG_IPV6_OK | BEGIN_FLAG_IPV6_PREFERRED, &no6),
            Ok((IpAddr::V4(a4), 60))
        );
        // Only IPv6 resolved but the client wants IPv4 only: its error.
        assert_eq!(
            choose_address(Err(true), Ok((a6, 90)), 443, 0, &c),
            Err(true)
        );
    }

    #[test]
    fn ttls_and_connected_bodies() {
        assert_eq!(clip_dns_ttl(0), 300);
        assert_eq!(clip_dns_ttl(299), 300);
        assert_eq!(clip_dns_ttl(300), 3600);
        assert_eq!(clip_dns_ttl(u32::MAX), 3600);
        // C Tor's test_dns.c: the fuzzy TTL stays within the clip ± 4 min.
        for rand in [0, 1, 239, 240, 241, 480, 481, u32::MAX, 0x1234_5678] {
            let low = clip_dns_fuzzy_ttl(MIN_DNS_TTL - 1, rand);
            assert!((MIN_DNS_TTL - FUZZY_DNS_TTL..=MIN_DNS_TTL + FUZZY_DNS_TTL).contains(&low));
            let high = clip_dns_fuzzy_ttl(MAX_DNS_TTL + 1, rand);
            assert!((MAX_DNS_TTL - FUZZY_DNS_TTL..=MAX_DNS_TTL + FUZZY_DNS_TTL).contains(&high));
        }
        assert_eq!(clip_dns_fuzzy_ttl(0, 0), 60, "the lowest: one minute");
        assert_eq!(clip_dns_fuzzy_ttl(0, 480), 540);
        assert_eq!(clip_dns_fuzzy_ttl(7200, 240), 3600);
        assert_eq!(
            connected_body("1.2.3.4".parse().unwrap(), 300),
            [1, 2, 3, 4, 0, 0, 1, 44]
        );
        let b = connected_body("2001:db8::1".parse().unwrap(), 3600);
        assert_eq!(b.len(), 25);
        assert_eq!(&b[..5], &[0, 0, 0, 0, 6]);
        assert_eq!(&b[21..], &3600u32.to_be_bytes());
    }

    #[test]
    fn reverse_lookup_names_are_parsed_as_c_tor_parses_them() {
        use PtrName::*;
        assert_eq!(
            parse_ptr_name("4.3.2.1.in-addr.arpa"),
            Reverse(IpAddr::from([1, 2, 3, 4]))
        );
        assert_eq!(
            parse_ptr_name("1.0.0.127.in-addr.arpa"),
            Reverse(IpAddr::from([127, 0, 0, 1]))
        );
        for bad in [
            "4.3.2.in-addr.arpa",
            "4.3.2.1.0.in-addr.arpa",
            "04.3.2.1.in-addr.arpa",
            "256.3.2.1.in-addr.arpa",
            "1234.3.2.1.in-addr.arpa",
            "a.3.2.1.in-addr.arpa",
            "+4.3.2.1.in-addr.arpa",
            ".in-addr.arpa",
            "x.ip6.arpa",
            "1.ip6.arpa",
        ] {
            assert_eq!(parse_ptr_name(bad), Malformed, "{bad}");
        }
        // 2001:db8::567:89ab, nybbles reversed.
        let v6 = "b.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa";
        assert_eq!(
            parse_ptr_name(v6),
            Reverse("2001:db8::567:89ab".parse().unwrap())
        );
        assert_eq!(parse_ptr_name(&v6.replace("b.a.9", "g.a.9")), Malformed);
        assert_eq!(parse_ptr_name(&v6[4..]), Malformed);
        for plain in ["example.com", "example.arpa", "in-addr.arpa", "arpa"] {
            assert_eq!(parse_ptr_name(plain), NotReverse, "{plain}");
        }
    }

    #[test]
    fn resolve_names_refused_before_a_lookup_and_reverse_lookups() {
        let internal = |ip: IpAddr| ip.is_loopback();
        assert_eq!(resolve_refusal("example.com", internal), Ok(None));
        assert_eq!(resolve_refusal("under_score.example", internal), Ok(None));
        // A public address's reverse name: a PTR lookup, as C's.
        assert_eq!(
            resolve_refusal("4.3.2.1.in-addr.arpa", internal),
            Ok(Some(IpAddr::from([1, 2, 3, 4])))
        );
        for (name, why) in [
            ("", "an empty name"),
            ("bad name.example", "an invalid destination name"),
            ("a;b", "an invalid destination name"),
            ("1.2.3.04.in-addr.arpa", "a malformed reverse-lookup name"),
            (
                "1.0.0.127.in-addr.arpa",
                "a reverse lookup of an internal address",
            ),
        ] {
            assert_eq!(resolve_refusal(name, internal), Err(why), "{name:?}");
        }
    }
}
