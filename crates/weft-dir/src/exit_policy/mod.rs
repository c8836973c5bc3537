//! The relay's exit policy, as C Tor builds, enforces and publishes it
//! [C policies.c, policy_parse.c, router.c]: the torrc forms of
//! `ExitPolicy` (accept/reject/accept6/reject6; `*`, `*4`, `*6`,
//! `private`; masks as bits or dotted quads; optional ports and ranges;
//! comma lists over several lines), the rules C Tor puts around them
//! (`IPv6Exit`, `ExitPolicyRejectPrivate` with the relay's own addresses,
//! `ExitPolicyRejectLocalInterfaces`, the default and the reduced
//! policy), its redundancy removal, the check before a connect
//! ([`ExitPolicy::allows`]), and the descriptor's `accept`/`reject` lines
//! and `ipv6-policy` summary ([`summary`]). Sans-IO: the relay's
//! addresses come in as arguments.

pub mod summary;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Networks `private` stands for; also left out of policy summaries.
/// [C policies.c `private_nets`]
pub const PRIVATE_NETS: [&str; 12] = [
    "0.0.0.0/8",
    "169.254.0.0/16",
    "127.0.0.0/8",
    "192.168.0.0/16",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "[::]/8",
    "[fc00::]/7",
    "[fe80::]/10",
    "[fec0::]/10",
    "[ff00::]/8",
    "[::]/127",
];

/// C Tor's default exit policy, appended after the operator's lines.
pub const DEFAULT_EXIT_POLICY: &str = "reject *:25,reject *:119,reject *:135-139,reject *:445,\
reject *:563,reject *:1214,reject *:4661-4666,reject *:6346-6429,reject *:6699,\
reject *:6881-6999,accept *:*";

/// C Tor's `ReducedExitPolicy` (0.4.9: with Monero's 18080-18081 and
/// 18089): the ports it accepts, then `reject *:*`.
pub const REDUCED_EXIT_POLICY: &str = "accept *:20-23,accept *:43,accept *:53,accept *:79-81,\
accept *:88,accept *:110,accept *:143,accept *:194,accept *:220,accept *:389,accept *:443,\
accept *:464,accept *:465,accept *:531,accept *:543-544,accept *:554,accept *:563,\
accept *:587,accept *:636,accept *:706,accept *:749,accept *:873,accept *:902-904,\
accept *:981,accept *:989-995,accept *:1194,accept *:1220,accept *:1293,accept *:1500,\
accept *:1533,accept *:1677,accept *:1723,accept *:1755,accept *:1863,accept *:2082-2083,\
accept *:2086-2087,accept *:2095-2096,accept *:2102-2104,accept *:3128,accept *:3389,\
accept *:3690,accept *:4321,accept *:4643,accept *:5050,accept *:5190,accept *:5222-5223,\
accept *:5228,accept *:5900,accept *:6660-6669,accept *:6679,accept *:6697,accept *:8000,\
accept *:8008,accept *:8074,accept *:8080,accept *:8082,accept *:8087-8088,\
accept *:8232-8233,accept *:8332-8333,accept *:8443,accept *:8888,accept *:9418,\
accept *:9999,accept *:10000,accept *:11371,accept *:18080-18081,accept *:18089,\
accept *:19294,accept *:19638,accept *:50002,\
accept *:64738,reject *:*";

/// Longest address pattern C Tor parses (address, brackets, mask, ports).
const MAX_PATTERN_LEN: usize = 46 + 2 + 17 + 12 + 1;

/// An exit policy entry that could not be parsed: the whole policy is
/// refused, as C Tor refuses it ("Malformed policy … Discarding entire
/// policy list").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed exit policy entry {entry:?}: {reason}")]
pub struct PolicyError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// One rule: accept or reject an address prefix and a port range.
/// `net` keeps the address as written (C Tor publishes `1.2.3.4/8` as
/// `1.2.3.4/8`); matching uses its first `prefix_len` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Accept (true) or reject.
    pub accept: bool,
    /// Address and prefix length.
    pub net: IpNet,
    /// Lowest port (≥ 1).
    pub port_min: u16,
    /// Highest port (below `port_min` only for C Tor's `:0`, which
    /// matches nothing).
    pub port_max: u16,
}

impl Rule {
    fn new(accept: bool, addr: IpAddr, bits: u8, ports: (u16, u16)) -> Rule {
        // Callers keep `bits` within the family's length.
        let net = IpNet::new(addr, bits).unwrap_or_else(|_| IpNet::from(addr));
        Rule {
            accept,
            net,
            port_min: ports.0,
            port_max: ports.1,
        }
    }

    fn reject_addr(addr: IpAddr) -> Rule {
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        Rule::new(false, addr, bits, (1, 65535))
    }

    /// True for an IPv6 rule.
    pub fn is_ipv6(&self) -> bool {
        matches!(self.net, IpNet::V6(_))
    }

    /// True if the rule covers every address of its family and every port.
    pub fn is_catch_all(&self) -> bool {
        self.net.prefix_len() == 0 && self.port_min <= 1 && self.port_max == 65535
    }

    /// True if `addr:port` falls under this rule (an IPv4-mapped IPv6
    /// address counts as its IPv4 address).
    pub fn matches(&self, addr: IpAddr, port: u16) -> bool {
        self.port_min <= port
            && port <= self.port_max
            && same_prefix(self.net.addr(), addr.to_canonical(), self.net.prefix_len())
    }

    /// True if every address and port of `b` is also under `self`.
    /// [C `addr_policy_covers`]
    fn covers(&self, b: &Rule) -> bool {
        self.is_ipv6() == b.is_ipv6()
            && self.net.prefix_len() <= b.net.prefix_len()
            && same_prefix(self.net.addr(), b.net.addr(), self.net.prefix_len())
            && self.port_min <= b.port_min
            && self.port_max >= b.port_max
    }

    /// True if some address and port is under both. [C
    /// `addr_policy_intersects`]
    fn intersects(&self, b: &Rule) -> bool {
        let bits = self.net.prefix_len().min(b.net.prefix_len());
        self.is_ipv6() == b.is_ipv6()
            && same_prefix(self.net.addr(), b.net.addr(), bits)
            && !(self.port_max < b.port_min || b.port_max < self.port_min)
    }

    /// The rule as a server descriptor writes it (`accept *:80`,
    /// `reject 10.0.0.0/8:*`, `accept6 [2001:db8::]/32:443`). [C
    /// `policy_write_item`, format_for_desc]
    pub fn descriptor_line(&self) -> String {
        self.write(true)
    }

    fn write(&self, for_desc: bool) -> String {
        let kind = if self.accept { "accept" } else { "reject" };
        let six = if self.is_ipv6() && for_desc { "6" } else { "" };
        let bits = self.net.prefix_len();
        let addr = match (bits, self.net.addr()) {
            (0, _) if for_desc => "*".to_string(),
            (0, IpAddr::V4(_)) => "*4".to_string(),
            (0, IpAddr::V6(_)) => "*6".to_string(),
            (_, IpAddr::V4(a)) => a.to_string(),
            (_, IpAddr::V6(a)) => format!("[{a}]"),
        };
        let mask = if bits > 0 && bits < self.net.max_prefix_len() {
            format!("/{bits}")
        } else {
            String::new()
        };
        let ports = if self.port_min <= 1 && self.port_max == 65535 {
            "*".to_string()
        } else if self.port_min == self.port_max {
            self.port_min.to_string()
        } else {
            format!("{}-{}", self.port_min, self.port_max)
        };
        format!("{kind}{six} {addr}{mask}:{ports}")
    }
}

impl fmt::Display for Rule {
    /// The torrc form (`reject *4:*`, `accept [::1]:80`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.write(false))
    }
}

/// True if `a` and `b` are of one family and agree in their first `bits`
/// bits.
fn same_prefix(a: IpAddr, b: IpAddr, bits: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(bits.min(32)))
                .unwrap_or(0);
            (u32::from(a) ^ u32::from(b)) & mask == 0
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(bits.min(128)))
                .unwrap_or(0);
            (u128::from(a) ^ u128::from(b)) & mask == 0
        }
        _ => false,
    }
}

/// Parse one `ExitPolicy` value (a comma list) into rules, expanding
/// `private` and `*` as C Tor does. Entries C Tor ignores with a warning
/// (an IPv4 address after accept6/reject6) are left out and their
/// warnings returned; any malformed entry fails the whole value.
pub fn parse_policy(value: &str) -> Result<(Vec<Rule>, Vec<String>), PolicyError> {
    let mut rules = Vec::new();
    let mut warnings = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        parse_entry(entry, &mut rules, &mut warnings)?;
    }
    Ok((rules, warnings))
}

fn parse_entry(
    entry: &str,
    out: &mut Vec<Rule>,
    warnings: &mut Vec<String>,
) -> Result<(), PolicyError> {
    let bad = |reason| PolicyError {
        entry: entry.to_string(),
        reason,
    };
    let mut words = entry.split_ascii_whitespace();
    let (keyword, arg) = match (words.next(), words.next(), words.next()) {
        (Some(k), Some(a), None) => (k, a),
        (Some(_), None, _) | (None, ..) => {
            return Err(bad("expected 'accept PATTERN' or 'reject PATTERN'"))
        }
        _ => return Err(bad("more than one pattern")),
    };
    let (accept, six) = match keyword {
        "accept" => (true, false),
        "reject" => (false, false),
        "accept6" => (true, true),
        "reject6" => (false, true),
        _ => return Err(bad("expected 'accept' or 'reject'")),
    };
    if let Some(rest) = arg.strip_prefix("private") {
        let ports = rest
            .strip_prefix(':')
            .ok_or_else(|| bad("'private' needs a port (private:*)"))
            .and_then(|p| parse_ports(Some(p)).map_err(bad))?;
        if six {
            warnings.push(format!(
                "'{entry}' expands into rules which apply to all private IPv4 and IPv6 addresses (use accept/reject private:* for IPv4 and IPv6)"
            ));
        }
        for net in PRIVATE_NETS {
            let (addr, bits, _) = parse_pattern(net, false).map_err(bad)?;
            if let Pattern::Addr(a) = addr {
                out.push(Rule::new(accept, a, bits, ports));
            }
        }
        return Ok(());
    }
    let (addr, bits, ports) = parse_pattern(arg, six).map_err(bad)?;
    match addr {
        Pattern::Any => {
            out.push(Rule::new(accept, Ipv4Addr::UNSPECIFIED.into(), 0, ports));
            out.push(Rule::new(accept, Ipv6Addr::UNSPECIFIED.into(), 0, ports));
        }
        Pattern::Addr(a) if six && a.is_ipv4() => warnings.push(format!(
            "IPv4 address in '{entry}' with accept6/reject6: ignored, the rest of the policy is used (use accept/reject with IPv4 addresses)"
        )),
        Pattern::Addr(a) => out.push(Rule::new(accept, a, bits, ports)),
    }
    Ok(())
}

/// An address pattern's address: a family-neutral `*`, or an address
/// (`*4` and `*6` are 0.0.0.0/0 and [::]/0).
enum Pattern {
    Any,
    Addr(IpAddr),
}

/// `ADDR[/MASK][:PORTS]` as C Tor's `tor_addr_parse_mask_ports` reads it
/// with extended stars; `star_is_v6` for accept6/reject6.
fn parse_pattern(s: &str, star_is_v6: bool) -> Result<(Pattern, u8, (u16, u16)), &'static str> {
    if s.len() > MAX_PATTERN_LEN {
        return Err("impossibly long address pattern");
    }
    let (address, rest) = if let Some(inner) = s.strip_prefix('[') {
        let close = inner.find(']').ok_or("no closing IPv6 bracket")?;
        (&inner[..close], &inner[close + 1..])
    } else {
        let end = s.find(['/', ':']).unwrap_or(s.len());
        (&s[..end], &s[end..])
    };
    let (mask, port) = match rest.find('/') {
        Some(slash) => {
            let after = &rest[slash + 1..];
            match after.find(':') {
                Some(c) => (Some(&after[..c]), Some(&after[c + 1..])),
                None => (Some(after), None),
            }
        }
        None => (None, rest.find(':').map(|c| &rest[c + 1..])),
    };
    let (pattern, wildcard) = match address {
        "*" if star_is_v6 => (Pattern::Addr(Ipv6Addr::UNSPECIFIED.into()), true),
        "*" => (Pattern::Any, true),
        "*4" => (Pattern::Addr(Ipv4Addr::UNSPECIFIED.into()), true),
        "*6" => (Pattern::Addr(Ipv6Addr::UNSPECIFIED.into()), true),
        a => {
            let ip = a
                .parse::<Ipv6Addr>()
                .map(IpAddr::V6)
                .or_else(|_| a.parse::<Ipv4Addr>().map(IpAddr::V4))
                .map_err(|_| "malformed IP address")?;
            (Pattern::Addr(ip), false)
        }
    };
    let v6 = matches!(pattern, Pattern::Addr(IpAddr::V6(_)));
    let mapped = matches!(pattern, Pattern::Addr(IpAddr::V6(a)) if a.to_ipv4_mapped().is_some());
    let bits = match mask {
        Some(_) if wildcard => return Err("bit prefix with a wildcard address"),
        Some(m) => {
            let mut bits = if let Ok(b) = m.parse::<u8>() {
                if b > 128 || (!v6 && b > 32) {
                    return Err("bad number of mask bits");
                }
                b
            } else if let (false, Ok(q)) = (v6, m.parse::<Ipv4Addr>()) {
                let q = u32::from(q);
                if q.leading_ones() + q.trailing_zeros() != 32 && q != 0 {
                    return Err("IPv4-style mask is not a prefix");
                }
                q.leading_ones() as u8
            } else {
                return Err("malformed mask");
            };
            if mapped {
                if bits > 32 && bits < 96 {
                    return Err("bad mask bits for a v4-mapped IPv6 address");
                }
                bits = 96 + bits % 32;
            }
            bits
        }
        None if wildcard => 0,
        None if v6 => 128,
        None => 32,
    };
    Ok((pattern, bits, parse_ports(port)?))
}

/// `*`, `PORT` or `MIN-MAX` (none: all ports), as C Tor's
/// `parse_port_range`: a minimum of 0 counts as 1.
fn parse_ports(s: Option<&str>) -> Result<(u16, u16), &'static str> {
    let s = match s {
        None | Some("") | Some("*") => return Ok((1, 65535)),
        Some(s) => s,
    };
    let num = |t: &str, min: u16| -> Result<u16, &'static str> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err("malformed port");
        }
        t.parse::<u16>()
            .ok()
            .filter(|p| *p >= min)
            .ok_or("malformed port")
    };
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (num(a, 0)?, num(b, 1)?),
        None => {
            let p = num(s, 0)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err("insane port range");
    }
    Ok((lo.max(1), hi))
}

/// Drop rules that can never decide anything. [C
/// `exit_policy_remove_redundancies`]
fn remove_redundancies(rules: &mut Vec<Rule>) {
    // Everything of a family after that family's catch-all.
    let (mut dead_v4, mut dead_v6) = (false, false);
    rules.retain(|r| {
        let dead = if r.is_ipv6() { dead_v6 } else { dead_v4 };
        if !dead && r.is_catch_all() {
            if r.is_ipv6() {
                dead_v6 = true;
            } else {
                dead_v4 = true;
            }
        }
        !dead
    });
    // A later rule covered by an earlier one.
    let mut i = 0;
    while i + 1 < rules.len() {
        let mut j = i + 1;
        while j < rules.len() {
            if rules[i].covers(&rules[j]) {
                rules.remove(j);
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    // An earlier rule covered by a later one of the same kind, with no
    // rule of the other kind between them that touches it.
    let mut i = 0;
    while i + 1 < rules.len() {
        let a = rules[i];
        let mut removed = false;
        for b in &rules[i + 1..] {
            if a.accept != b.accept {
                if a.intersects(b) {
                    break;
                }
            } else if b.covers(&a) {
                removed = true;
                break;
            }
        }
        if removed {
            rules.remove(i);
        } else {
            i += 1;
        }
    }
}

/// The torrc options behind the exit policy (C Tor's names and defaults).
#[derive(Debug, Clone)]
pub struct ExitPolicyOptions {
    /// `ExitRelay`: None for auto (an exit only if some other exit option
    /// is set).
    pub exit_relay: Option<bool>,
    /// The values of the `ExitPolicy` lines, in order.
    pub exit_policy: Vec<String>,
    /// `ExitPolicyRejectPrivate` (default true).
    pub reject_private: bool,
    /// `ExitPolicyRejectLocalInterfaces` (default false).
    pub reject_local_interfaces: bool,
    /// `ReducedExitPolicy` (default false).
    pub reduced: bool,
    /// `IPv6Exit` (default false).
    pub ipv6_exit: bool,
}

impl Default for ExitPolicyOptions {
    fn default() -> Self {
        ExitPolicyOptions {
            exit_relay: None,
            exit_policy: Vec::new(),
            reject_private: true,
            reject_local_interfaces: false,
            reduced: false,
            ipv6_exit: false,
        }
    }
}

impl ExitPolicyOptions {
    /// True if these options make an exit: `ExitRelay 1`, or `ExitRelay`
    /// auto with an exit policy, `ReducedExitPolicy` or `IPv6Exit` set.
    /// [C `policy_using_default_exit_options`]
    pub fn is_exit(&self) -> bool {
        match self.exit_relay {
            Some(e) => e,
            None => !self.exit_policy.is_empty() || self.reduced || self.ipv6_exit,
        }
    }
}

/// The relay's addresses that `ExitPolicyRejectPrivate` and
/// `ExitPolicyRejectLocalInterfaces` reject (only public ones count).
#[derive(Debug, Clone, Default)]
pub struct OwnAddresses {
    /// The advertised IPv4 and IPv6 addresses.
    pub advertised: Vec<IpAddr>,
    /// `OutboundBindAddress*` (with RejectLocalInterfaces).
    pub outbound: Vec<IpAddr>,
    /// Addresses of configured ports (with RejectLocalInterfaces).
    pub ports: Vec<IpAddr>,
    /// Addresses of the machine's interfaces (with RejectLocalInterfaces).
    pub interfaces: Vec<IpAddr>,
}

/// True for an address C Tor rejects as one of the relay's own: not
/// unspecified, internal (private, loopback, link-local, ULA, 100.64/10)
/// or multicast. [C `tor_addr_is_public_for_reject`]
pub fn is_public_for_reject(addr: IpAddr) -> bool {
    !addr.is_unspecified() && !is_internal(addr) && !addr.is_multicast()
}

/// C Tor's `tor_addr_is_internal` (not for listening).
pub fn is_internal(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(a) => {
            let a = u32::from(a);
            [
                (0x0a00_0000, 8),
                (0, 8),
                (0x7f00_0000, 8),
                (0x6440_0000, 10),
                (0xa9fe_0000, 16),
                (0xac10_0000, 12),
                (0xc0a8_0000, 16),
            ]
            .iter()
            .any(|&(net, bits)| (a ^ net) >> (32 - bits) == 0)
        }
        IpAddr::V6(a) => {
            let hi = (u128::from(a) >> 96) as u32;
            hi & 0xfe00_0000 == 0xfc00_0000
                || hi & 0xffc0_0000 == 0xfe80_0000
                || hi & 0xffc0_0000 == 0xfec0_0000
                || u128::from(a) >> 1 == 0
        }
    }
}

/// A built exit policy: ordered rules, first match decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitPolicy {
    rules: Vec<Rule>,
    ipv6_exit: bool,
}

impl ExitPolicy {
    /// A non-exit's policy: `reject *4:*`, `reject *6:*`.
    pub fn reject_all() -> ExitPolicy {
        let mut rules = Vec::new();
        let mut w = Vec::new();
        for e in ["reject *4:*", "reject *6:*"] {
            // Constant entries; they parse.
            let _ = parse_entry(e, &mut rules, &mut w);
        }
        ExitPolicy {
            rules,
            ipv6_exit: false,
        }
    }

    /// The policy C Tor builds from these options and addresses, with the
    /// warnings it logs. [C `policies_parse_exit_policy_from_options`]
    pub fn from_options(
        o: &ExitPolicyOptions,
        own: &OwnAddresses,
    ) -> Result<(ExitPolicy, Vec<String>), PolicyError> {
        let mut warnings = Vec::new();
        if !o.is_exit() {
            // As C Tor: a non-exit's ExitPolicy lines are not even parsed
            // (`tor --verify-config` accepts a malformed one with
            // ExitRelay 0); the caller may warn about them.
            return Ok((ExitPolicy::reject_all(), warnings));
        }
        let mut rules = Vec::new();
        let add = |s: &str, rules: &mut Vec<Rule>, w: &mut Vec<String>| {
            parse_policy(s).map(|(mut r, mut ws)| {
                rules.append(&mut r);
                w.append(&mut ws);
            })
        };
        if !o.ipv6_exit {
            add("reject *6:*", &mut rules, &mut warnings)?;
        }
        if o.reject_private {
            add("reject private:*", &mut rules, &mut warnings)?;
        }
        let mut own_rules: Vec<Rule> = Vec::new();
        let mut reject = |addrs: &[IpAddr], v6: bool| {
            for &a in addrs {
                if is_public_for_reject(a) && (a.is_ipv4() || v6) {
                    own_rules.push(Rule::reject_addr(a));
                }
            }
        };
        if o.reject_private {
            reject(&own.advertised, o.ipv6_exit);
        }
        if o.reject_local_interfaces {
            reject(&own.outbound, o.ipv6_exit);
            reject(&own.ports, o.ipv6_exit);
            reject(&own.interfaces, o.ipv6_exit);
        }
        rules.append(&mut own_rules);
        remove_redundancies(&mut rules);
        for v in &o.exit_policy {
            add(v, &mut rules, &mut warnings)?;
        }
        if let Some(w) = first_redundant_entry(&rules) {
            warnings.push(format!(
                "exit policy '{w}' and all following entries are redundant, as they follow accept/reject *:* rules for both IPv4 and IPv6; they are removed (use accept/reject *:* as the last entry of an exit policy)"
            ));
        }
        if o.reduced {
            add(REDUCED_EXIT_POLICY, &mut rules, &mut warnings)?;
        } else {
            add(DEFAULT_EXIT_POLICY, &mut rules, &mut warnings)?;
        }
        remove_redundancies(&mut rules);
        Ok((
            ExitPolicy {
                rules,
                ipv6_exit: o.ipv6_exit,
            },
            warnings,
        ))
    }

    /// The rules in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// True if a stream may connect to `addr:port` (the first matching
    /// rule decides; no match rejects). The unspecified address is always
    /// refused, as in C Tor's `router_compare_to_my_exit_policy`. An
    /// IPv4-mapped IPv6 address is checked as its IPv4 address (C Tor
    /// checks it against the IPv6 rules only, which do not cover
    /// `::ffff:0:0/96`: with IPv6Exit it would reach private IPv4 space).
    pub fn allows(&self, addr: IpAddr, port: u16) -> bool {
        if addr.to_canonical().is_unspecified() {
            return false;
        }
        self.rules
            .iter()
            .find(|r| r.matches(addr, port))
            .is_some_and(|r| r.accept)
    }

    /// True if the policy certainly rejects every address of the family.
    /// [C `policy_is_reject_star`, default reject]
    pub fn rejects_all_of(&self, ipv6: bool) -> bool {
        for r in self.rules.iter().filter(|r| r.is_ipv6() == ipv6) {
            if r.accept {
                return false;
            }
            if r.is_catch_all() {
                return true;
            }
        }
        true
    }

    /// True if the policy rejects everything (a non-exit).
    pub fn is_reject_star(&self) -> bool {
        self.rejects_all_of(false) && self.rejects_all_of(true)
    }

    /// The server descriptor's policy lines: the IPv4 rules, or `reject
    /// *:*` for a policy that rejects everything. [C
    /// `router_dump_exit_policy_to_string`]
    pub fn descriptor_lines(&self) -> Vec<String> {
        if self.is_reject_star() {
            return vec!["reject *:*".to_string()];
        }
        self.rules
            .iter()
            .filter(|r| !r.is_ipv6())
            .map(Rule::descriptor_line)
            .collect()
    }

    /// The descriptor's `ipv6-policy` value, if it has one (IPv6Exit set
    /// and some IPv6 port accepted).
    pub fn ipv6_policy_line(&self) -> Option<String> {
        if !self.ipv6_exit {
            return None;
        }
        let s = summary::summarize(&self.rules, true);
        (s != "reject 1-65535").then_some(s)
    }
}

/// The first entry after catch-alls for both families, if any. [C
/// `policies_log_first_redundant_entry`]
fn first_redundant_entry(rules: &[Rule]) -> Option<Rule> {
    let (mut v4, mut v6) = (false, false);
    for (i, r) in rules.iter().enumerate() {
        if r.is_catch_all() {
            if r.is_ipv6() {
                v6 = true;
            } else {
                v4 = true;
            }
        }
        if v4 && v6 {
            return rules.get(i + 1).copied();
        }
    }
    None
}
