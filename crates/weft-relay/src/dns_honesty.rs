//! Whether the exit's name servers tell the truth, as C Tor's dns.c checks
//! it (`ServerDNSDetectHijacking`, on by default): now and then the exit
//! asks for names that cannot exist (random ones under `.invalid`,
//! `.test`, no top-level domain, `.com`, `.org`, `.net`, for A and AAAA);
//! an address given for more than five of them, once more than ten checks
//! came back, is a provider's "search page" and is treated as "not found"
//! in every later answer. If the well-known names of
//! `ServerDNSTestAddresses` are answered with such an address too — more
//! than half of them — DNS is useless: the exit stops being one (its
//! descriptor says `reject *:*`) until a reload reads a changed
//! name-server file. Sans-IO: the resolver thread (`resolver/thread.rs`)
//! asks and feeds the answers in.
//! [C dns.c dns_launch_wildcard_checks(), wildcard_increment_answer(),
//! add_wildcarded_test_address(), answer_is_wildcarded(),
//! evdns_callback(); relay_periodic.c check_dns_honesty_callback()]

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use rand::Rng;

/// C's default `ServerDNSTestAddresses`.
pub const DEFAULT_TEST_ADDRESSES: [&str; 4] = [
    "www.google.com",
    "www.mit.edu",
    "www.yahoo.com",
    "www.slashdot.org",
];

/// Bogus names per suffix and family (C's `N_WILDCARD_CHECKS`).
const CHECKS_PER_SUFFIX: usize = 2;

/// What the checks learned (see the module docs).
#[derive(Debug, Default)]
pub struct DnsHonesty {
    /// Answers given for names that must not exist, by address.
    counts: HashMap<IpAddr, u32>,
    /// Checks answered (found or not).
    checks_answered: u32,
    /// Addresses treated as "not found".
    wildcarded: HashSet<IpAddr>,
    /// `ServerDNSTestAddresses`, lower case.
    test_addresses: Vec<String>,
    /// Test addresses answered with a wildcarded address.
    test_wildcarded: HashSet<String>,
    /// DNS is useless: stop being an exit.
    broken: bool,
}

/// What an answer taught, for the log and the exit's descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing new.
    Nothing,
    /// An address is now treated as "not found" (C: "Apparently they are
    /// hijacking DNS failures").
    Wildcarded(IpAddr),
    /// Most test addresses are redirected: DNS is useless (C: "I'm going
    /// to stop being an exit node for now").
    Broken,
}

impl DnsHonesty {
    /// Checks against `test_addresses` (`ServerDNSTestAddresses`).
    pub fn new(test_addresses: &[String]) -> DnsHonesty {
        DnsHonesty {
            test_addresses: test_addresses
                .iter()
                .map(|a| a.to_ascii_lowercase())
                .collect(),
            ..DnsHonesty::default()
        }
    }

    /// The bogus names of one round of checks, each with "ask for AAAA":
    /// per family, twice each of a random 2–16-letter name under
    /// `.invalid` and `.test`, an 8–16-letter one with no top-level
    /// domain and under `.com`, `.org`, `.net` (C's
    /// `crypto_random_hostname`: lower-case base32 letters).
    pub fn bogus_names(rng: &mut impl Rng) -> Vec<(String, bool)> {
        let mut v = Vec::new();
        for ipv6 in [false, true] {
            for _ in 0..CHECKS_PER_SUFFIX {
                for (min, max, suffix) in [
                    (2, 16, ".invalid"),
                    (2, 16, ".test"),
                    (8, 16, ""),
                    (8, 16, ".com"),
                    (8, 16, ".org"),
                    (8, 16, ".net"),
                ] {
                    v.push((random_hostname(rng, min, max, suffix), ipv6));
                }
            }
        }
        v
    }

    /// What a check for a bogus name counts of a lookup's addresses: of
    /// an AAAA probe only the IPv6 answers, of an A probe only the IPv4
    /// ones (C asks evdns for one type, `evdns_base_resolve_ipv6` or
    /// `_ipv4`, and sees nothing else; a lookup here may bring both).
    pub fn probe_answers(addrs: impl IntoIterator<Item = IpAddr>, ipv6: bool) -> Vec<IpAddr> {
        addrs.into_iter().filter(|a| a.is_ipv6() == ipv6).collect()
    }

    /// A check for a bogus name came back with `addrs` (empty: not found,
    /// as it should).
    pub fn check_answered(&mut self, addrs: &[IpAddr]) -> Vec<Verdict> {
        self.checks_answered += 1;
        let mut v = Vec::new();
        for &a in addrs {
            let n = self.counts.entry(a).or_insert(0);
            *n += 1;
            if *n > 5 && self.checks_answered > 10 && self.wildcarded.insert(a) {
                v.push(Verdict::Wildcarded(a));
            }
        }
        v
    }

    /// True if `addr` is a provider's answer for names that do not exist.
    pub fn is_wildcarded(&self, addr: &IpAddr) -> bool {
        self.wildcarded.contains(addr)
    }

    /// `host`'s answer was `addr`, wildcarded: if `host` is a test
    /// address, note it; more than half of them redirected breaks DNS.
    pub fn test_address_redirected(&mut self, host: &str) -> Verdict {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if !self.test_addresses.contains(&host) || !self.test_wildcarded.insert(host) {
            return Verdict::Nothing;
        }
        if self.test_wildcarded.len() > self.test_addresses.len() / 2 && !self.broken {
            self.broken = true;
            return Verdict::Broken;
        }
        Verdict::Nothing
    }

    /// DNS is useless (C's `dns_seems_to_be_broken`).
    pub fn seems_broken(&self) -> bool {
        self.broken
    }

    /// The test addresses to look up after a round of checks.
    pub fn test_addresses(&self) -> &[String] {
        &self.test_addresses
    }
}

/// When the first round of checks runs after the start (C: 60 to 180 s,
/// not right away), and the wait between rounds (12 to 24 hours).
pub fn first_check_delay(rng: &mut impl Rng) -> Duration {
    Duration::from_secs(rng.random_range(60..180))
}

/// See [`first_check_delay`].
pub fn next_check_delay(rng: &mut impl Rng) -> Duration {
    Duration::from_secs(12 * 3600 + rng.random_range(0..12 * 3600))
}

/// The test addresses are asked this long after the bogus names, so the
/// checks' answers are in (C: 30 s).
pub const TEST_ADDRESS_DELAY: Duration = Duration::from_secs(30);

/// A random host name: `min`..=`max` lower-case base32 letters, then
/// `suffix`.
fn random_hostname(rng: &mut impl Rng, min: usize, max: usize, suffix: &str) -> String {
    const B32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let n = rng.random_range(min..=max);
    let mut s: String = (0..n)
        .map(|_| char::from(B32[rng.random_range(0..32)]))
        .collect();
    s.push_str(suffix);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_aaaa_probe_counts_only_aaaa_answers() {
        let both = [ip("198.51.100.80"), ip("2001:db8::80")];
        assert_eq!(DnsHonesty::probe_answers(both, true), [ip("2001:db8::80")]);
        assert_eq!(
            DnsHonesty::probe_answers(both, false),
            [ip("198.51.100.80")]
        );
        // A provider that answers AAAA probes with its A record only is not
        // counted on them.
        let mut h = DnsHonesty::new(&[]);
        for _ in 0..20 {
            let a = DnsHonesty::probe_answers([ip("198.51.100.80")], true);
            assert!(h.check_answered(&a).is_empty());
        }
        assert!(!h.is_wildcarded(&ip("198.51.100.80")));
    }

    #[test]
    fn bogus_names_are_c_tors_shapes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let names = DnsHonesty::bogus_names(&mut rng);
        assert_eq!(names.len(), 24, "2 families x 2 x 6 suffixes");
        assert_eq!(names.iter().filter(|n| n.1).count(), 12);
        for (n, _) in &names {
            let (label, _) = n.split_once('.').unwrap_or((n, ""));
            assert!((2..=16).contains(&label.len()), "{n}");
            assert!(label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)));
        }
        assert!(
            names.iter().any(|n| !n.0.contains('.')),
            "no top-level domain"
        );
        assert!(names.iter().any(|n| n.0.ends_with(".invalid")));
    }

    #[test]
    fn an_address_given_for_six_bogus_names_after_ten_checks_is_not_found() {
        let mut h = DnsHonesty::new(&[]);
        let search = ip("198.51.100.80");
        // Five answers: not yet.
        for _ in 0..5 {
            assert!(h.check_answered(&[search]).is_empty());
        }
        // The sixth, but only six checks answered: not yet (C wants more
        // than ten).
        assert!(h.check_answered(&[search]).is_empty());
        for _ in 0..4 {
            h.check_answered(&[]);
        }
        assert_eq!(
            h.check_answered(&[search]),
            vec![Verdict::Wildcarded(search)]
        );
        assert!(h.is_wildcarded(&search));
        assert!(h.check_answered(&[search]).is_empty(), "once");
        assert!(!h.is_wildcarded(&ip("192.0.2.1")));
    }

    #[test]
    fn most_test_addresses_redirected_breaks_dns_once() {
        let tests: Vec<String> = DEFAULT_TEST_ADDRESSES
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut h = DnsHonesty::new(&tests);
        assert_eq!(h.test_address_redirected("example.com"), Verdict::Nothing);
        assert_eq!(
            h.test_address_redirected("www.google.com."),
            Verdict::Nothing
        );
        assert_eq!(
            h.test_address_redirected("WWW.GOOGLE.COM"),
            Verdict::Nothing,
            "counted once"
        );
        assert_eq!(
            h.test_address_redirected("www.mit.edu"),
            Verdict::Nothing,
            "2 of 4: half"
        );
        assert!(!h.seems_broken());
        assert_eq!(h.test_address_redirected("www.yahoo.com"), Verdict::Broken);
        assert!(h.seems_broken());
        assert_eq!(
            h.test_address_redirected("www.slashdot.org"),
            Verdict::Nothing
        );
    }

    #[test]
    fn the_first_round_waits_one_to_three_minutes_then_half_a_day_or_more() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let d = first_check_delay(&mut rng).as_secs();
            assert!((60..180).contains(&d));
            let d = next_check_delay(&mut rng).as_secs();
            assert!((12 * 3600..24 * 3600).contains(&d));
        }
    }
}
