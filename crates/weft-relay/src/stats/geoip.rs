//! GeoIP databases in C Tor's formats, for the directory-request
//! statistics ([`super::dirreq`]): the IPv4 file's `INTIPLOW,INTIPHIGH,CC`
//! lines (or the older quoted `"LOW","HIGH","CC",…` form), the IPv6 file's
//! `IPV6LOW,IPV6HIGH,CC` lines, `#` comments; country codes lower-cased;
//! an address in no range is `??`. The `geoip-db-digest` of a file is the
//! SHA-1 of its bytes, upper-case hex. [C geoip.c geoip_load_file(),
//! geoip_parse_entry(), geoip_add_entry(), geoip_get_country_by_ipv4()]
//!
//! Sans-IO: text in (the caller reads the file), lookups out.

use std::net::{IpAddr, Ipv6Addr};

/// The code of an address in no range (C's `geoip_unresolved`).
pub const UNKNOWN: &str = "??";

/// One family's ranges, sorted, with the file's digest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GeoIpTable<A> {
    /// (low, high, country code), sorted by `low`.
    ranges: Vec<(A, A, [u8; 2])>,
    /// SHA-1 of the file, upper-case hex.
    pub digest: String,
}

/// The IPv4 and IPv6 databases (either may be missing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GeoIp {
    /// The IPv4 file (`GeoIPFile`).
    pub v4: Option<GeoIpTable<u32>>,
    /// The IPv6 file (`GeoIPv6File`).
    pub v6: Option<GeoIpTable<u128>>,
}

fn code(s: &str) -> Option<[u8; 2]> {
    let b = s.as_bytes();
    (b.len() == 2 && b.iter().all(|c| c.is_ascii_graphic()))
        .then(|| [b[0].to_ascii_lowercase(), b[1].to_ascii_lowercase()])
}

fn digest(text: &str) -> String {
    hex::encode_upper(openssl::sha::sha1(text.as_bytes()))
}

impl<A: Ord + Copy> GeoIpTable<A> {
    fn from_entries(mut ranges: Vec<(A, A, [u8; 2])>, digest: String) -> Self {
        ranges.sort_by_key(|r| r.0);
        GeoIpTable { ranges, digest }
    }

    /// The country of `a` (lower-case), if a range holds it.
    fn lookup(&self, a: A) -> Option<&str> {
        let i = self.ranges.partition_point(|r| r.0 <= a).checked_sub(1)?;
        let (_, high, cc) = &self.ranges[i];
        (a <= *high).then(|| std::str::from_utf8(cc).ok()).flatten()
    }

    /// Ranges loaded.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True without ranges.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// The entries of a GeoIP file's text, each line read by `line` (low,
/// high, country); comments and blank lines passed over, lines that do
/// not parse (or whose range is backwards) skipped and counted, as C
/// logs and skips them.
fn parse_lines<A: Ord + Copy>(
    text: &str,
    line: impl Fn(&str) -> Option<(A, A, [u8; 2])>,
) -> (GeoIpTable<A>, usize) {
    let mut bad = 0;
    let mut v = Vec::new();
    for l in text.lines() {
        let l = l.trim_start();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        match line(l) {
            Some((lo, hi, cc)) if lo <= hi => v.push((lo, hi, cc)),
            _ => bad += 1,
        }
    }
    (GeoIpTable::from_entries(v, digest(text)), bad)
}

impl GeoIpTable<u32> {
    /// The IPv4 file's text (`"lo","hi","CC"` as integers). Lines that do
    /// not parse are skipped (C logs and skips them); the number skipped
    /// is returned too.
    pub fn parse_v4(text: &str) -> (Self, usize) {
        parse_lines(text, |l| {
            let f: Vec<&str> = l.split(',').map(|f| f.trim().trim_matches('"')).collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                code(f.get(2)?)?,
            ))
        })
    }
}

impl GeoIpTable<u128> {
    /// The IPv6 file's text (`lo,hi,CC` as addresses; see
    /// [`GeoIpTable::parse_v4`]).
    pub fn parse_v6(text: &str) -> (Self, usize) {
        parse_lines(text, |l| {
            let mut f = l.splitn(3, ',');
            let lo: Ipv6Addr = f.next()?.parse().ok()?;
            let hi: Ipv6Addr = f.next()?.parse().ok()?;
            Some((lo.into(), hi.into(), code(f.next()?.trim_end())?))
        })
    }
}

impl GeoIp {
    /// The country code of `ip`, lower-case, or [`UNKNOWN`].
    pub fn country(&self, ip: IpAddr) -> &str {
        let found = match ip {
            IpAddr::V4(a) => self.v4.as_ref().and_then(|t| t.lookup(u32::from(a))),
            IpAddr::V6(a) => self.v6.as_ref().and_then(|t| t.lookup(u128::from(a))),
        };
        found.unwrap_or(UNKNOWN)
    }

    /// True when the IPv4 file is loaded (C collects directory-request
    /// statistics only then: `options_act_relay_stats`).
    pub fn has_v4(&self) -> bool {
        self.v4.is_some()
    }

    /// The extra-info's `geoip-db-digest` and `geoip6-db-digest` lines of
    /// the files loaded.
    pub fn digest_lines(&self) -> String {
        let mut s = String::new();
        if let Some(t) = &self.v4 {
            s.push_str(&format!("geoip-db-digest {}\n", t.digest));
        }
        if let Some(t) = &self.v6 {
            s.push_str(&format!("geoip6-db-digest {}\n", t.digest));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: &str = "# Last updated based on …\n\
                      16777216,16777471,AU\n\
                      \"16777472\",\"16778239\",\"CN\",\"CHN\",\"China\"\n\
                      16778240,16779263,AU\n\
                      3232235520,3232301055,ZZ\n\
                      bad line\n";

    #[test]
    fn ipv4_ranges_and_digest_as_c_reads_them() {
        let (t, bad) = GeoIpTable::parse_v4(V4);
        assert_eq!((t.len(), bad), (4, 1));
        assert_eq!(
            t.digest,
            hex::encode_upper(openssl::sha::sha1(V4.as_bytes()))
        );
        let g = GeoIp {
            v4: Some(t),
            v6: None,
        };
        let c = |s: &str| g.country(s.parse().unwrap()).to_string();
        assert_eq!(c("1.0.0.0"), "au");
        assert_eq!(c("1.0.0.255"), "au");
        assert_eq!(c("1.0.1.0"), "cn");
        assert_eq!(c("1.0.4.255"), "au");
        assert_eq!(c("1.0.8.0"), UNKNOWN);
        assert_eq!(c("192.168.1.1"), "zz");
        assert_eq!(c("0.0.0.1"), UNKNOWN);
        assert_eq!(c("::1"), UNKNOWN, "no IPv6 file");
        assert!(g.digest_lines().starts_with("geoip-db-digest "));
        assert!(!g.digest_lines().contains("geoip6"));
    }

    #[test]
    fn ipv6_ranges() {
        let text = "# comment\n2001:200::,2001:200:ffff:ffff:ffff:ffff:ffff:ffff,JP\n\
                    2001:db8::,2001:db8::ff,de\n2001:db8::100,x,DE\n";
        let (t, bad) = GeoIpTable::parse_v6(text);
        assert_eq!((t.len(), bad), (2, 1));
        let g = GeoIp {
            v4: None,
            v6: Some(t),
        };
        assert_eq!(g.country("2001:200::1".parse().unwrap()), "jp");
        assert_eq!(g.country("2001:db8::ff".parse().unwrap()), "de");
        assert_eq!(g.country("2001:db8::100".parse().unwrap()), UNKNOWN);
        assert_eq!(g.country("1.2.3.4".parse().unwrap()), UNKNOWN);
        assert!(!g.has_v4());
    }

    /// Debian's tor-geoipdb files, as C reads them (the CI machine has
    /// them: stock tor's package depends on tor-geoipdb).
    #[test]
    fn debians_files_parse_whole() {
        let (Ok(v4), Ok(v6)) = (
            std::fs::read_to_string("/usr/share/tor/geoip"),
            std::fs::read_to_string("/usr/share/tor/geoip6"),
        ) else {
            panic!("tor-geoipdb is not installed (apt-get install -y tor)");
        };
        let (t4, bad4) = GeoIpTable::parse_v4(&v4);
        let (t6, bad6) = GeoIpTable::parse_v6(&v6);
        assert_eq!((bad4, bad6), (0, 0));
        assert!(t4.len() > 10_000 && t6.len() > 10_000);
        let g = GeoIp {
            v4: Some(t4),
            v6: Some(t6),
        };
        assert_eq!(g.country("127.0.0.1".parse().unwrap()), UNKNOWN);
        assert_ne!(g.country("8.8.8.8".parse().unwrap()), UNKNOWN);
        assert_ne!(g.country("2001:4860:4860::8888".parse().unwrap()), UNKNOWN);
    }
}
