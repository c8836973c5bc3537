//! The `ORPort` and `Address` lines: one IPv4 ORPort (required, as C Tor:
//! a public relay must listen on IPv4) and at most one IPv6 ORPort, each
//! `PORT`, `IP:PORT` or `[IPv6]:PORT`; at most one `Address` per address
//! family (an IP address or a host name). The advertised IPv4 address is
//! the IPv4 `Address` (a host name looked up), else the ORPort's own,
//! else what [`crate::find_address`] finds as C's `find_my_address` does
//! (the interface toward the Internet, the host's name), public addresses
//! only unless custom authorities allow an explicit private one. An IPv6
//! ORPort is advertised at the IPv6 `Address` or its own address (weft does
//! not look for an IPv6 address). A bare-port ORPort with an IPv6
//! `Address` also listens on `[::]` at that port, as C Tor does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::find_address::{self, FindAddress, Method};

/// An IPv6 ORPort: where weft listens and what it advertises
/// (`or-address` in the descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6OrPort {
    /// Listening address.
    pub listen: SocketAddr,
    /// Advertised address.
    pub advertised: SocketAddrV6,
}

/// What the lines say, once all are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrPorts {
    /// IPv4 listening address.
    pub listen: SocketAddr,
    /// IPv4 advertised address.
    pub advertised: SocketAddr,
    /// The IPv6 ORPort, if any.
    pub ipv6: Option<Ipv6OrPort>,
    /// How the IPv4 address was found.
    pub method: Method,
    /// What C would warn about (a private address with the default
    /// authorities: C runs but does not publish it).
    pub warnings: Vec<String>,
    /// An `Address` that cannot be used on this host (a name that does
    /// not resolve, or resolves to a private address with the default
    /// authorities): weft does not start (C runs and does not publish);
    /// `advertised` is 0.0.0.0 then.
    pub unresolved: Option<String>,
    /// No `Address`, and nothing usable found on this host (behind NAT):
    /// weft starts, learns its address from the authorities and
    /// publishes nothing until then (C's `relay_addr_learn_from_dirauth`);
    /// `advertised` is 0.0.0.0 until then.
    pub undiscovered: Option<String>,
}

/// What the `Address` lines give: an IPv4 address and how it was found,
/// an IPv6 address.
type Configured = (Option<(Ipv4Addr, Method)>, Option<Ipv6Addr>);

/// The lines as they come.
#[derive(Debug, Default, Clone)]
pub(crate) struct OrPortLines {
    v4: Option<(Option<Ipv4Addr>, u16)>,
    v6: Option<(Ipv6Addr, u16)>,
    addr_v4: Option<Ipv4Addr>,
    addr_v6: Option<Ipv6Addr>,
    /// `Address` lines that are not IP addresses (looked up at the end).
    hosts: Vec<String>,
}

impl OrPortLines {
    /// One `ORPort` line.
    pub(crate) fn or_port(&mut self, v: &str) -> Result<(), String> {
        let mut toks = v.split_whitespace();
        let first = toks.next().ok_or("missing port")?;
        if let Some(flag) = toks.next() {
            return Err(format!("ORPort flag '{flag}' is not supported yet"));
        }
        let (ip, port) = match first.parse::<u16>() {
            Ok(p) => (None, p),
            Err(_) => {
                let sa: SocketAddr = first.parse().map_err(|_| format!("bad ORPort '{first}'"))?;
                (Some(sa.ip()), sa.port())
            }
        };
        if port == 0 {
            return Err("ORPort 0 (no ORPort) cannot run a relay".into());
        }
        match ip {
            Some(IpAddr::V6(a)) => {
                if self.v6.replace((a, port)).is_some() {
                    return Err("more than one IPv6 ORPort is not supported".into());
                }
            }
            Some(IpAddr::V4(a)) => {
                if self.v4.replace((Some(a), port)).is_some() {
                    return Err("more than one IPv4 ORPort is not supported".into());
                }
            }
            None => {
                if self.v4.replace((None, port)).is_some() {
                    return Err("more than one IPv4 ORPort is not supported".into());
                }
            }
        }
        Ok(())
    }

    /// One `Address` line: an IP address, or a host name (looked up in
    /// [`OrPortLines::finish`]).
    pub(crate) fn address(&mut self, v: &str) -> Result<(), String> {
        let Ok(ip) = v.parse::<IpAddr>() else {
            let host = v.trim();
            if host.is_empty() || host.split_whitespace().count() != 1 {
                return Err(format!("bad Address '{v}'"));
            }
            self.hosts.push(host.to_string());
            return Ok(());
        };
        let dup = match ip {
            IpAddr::V4(a) => self.addr_v4.replace(a).is_some(),
            IpAddr::V6(a) => self.addr_v6.replace(a).is_some(),
        };
        if dup {
            return Err("more than one Address of the same address family".into());
        }
        Ok(())
    }

    /// The IPv4 and IPv6 addresses of the `Address` lines, host names
    /// looked up (C's `get_address_from_config`: at most one per family);
    /// a name that does not resolve goes into `unresolved`.
    fn configured(
        &self,
        find: &dyn FindAddress,
        unresolved: &mut Option<String>,
    ) -> Result<Configured, String> {
        let mut v4 = self.addr_v4.map(|a| (a, Method::Configured));
        let mut v6 = self.addr_v6;
        for h in &self.hosts {
            let a4 = find.resolve(h, false);
            let a6 = find.resolve(h, true);
            if a4.is_none() && a6.is_none() {
                *unresolved = Some(format!("Could not resolve local Address '{h}'. Failing."));
                continue;
            }
            if let Some(IpAddr::V4(a)) = a4 {
                if v4.replace((a, Method::Resolved)).is_some() {
                    return Err("more than one Address of the same address family".into());
                }
            }
            // An IPv6 answer is used only if nothing else gives IPv6.
            if let (Some(IpAddr::V6(a)), None) = (a6, v6) {
                v6 = Some(a);
            }
        }
        Ok((v4, v6))
    }

    /// The ports and addresses, or what is missing. `custom_authorities`:
    /// the torrc has `DirAuthority` lines (a test network may then publish
    /// an explicit private address); `find` looks up what the lines leave
    /// open.
    pub(crate) fn finish(
        self,
        custom_authorities: bool,
        find: &dyn FindAddress,
    ) -> Result<OrPorts, String> {
        // What only this host's names and interfaces decide (a name that
        // does not resolve, no public address found): not an error in the
        // torrc (tor's --verify-config passes it) but a refusal to start.
        let mut unresolved = None;
        let mut undiscovered = None;
        let (conf_v4, conf_v6) = self.configured(find, &mut unresolved)?;
        let mut warnings = Vec::new();
        let (bind4, port4) = match self.v4 {
            Some(v) => v,
            None if self.v6.is_some() => {
                return Err("Configured public relay to listen only on an IPv6 address. weft needs to listen on an IPv4 address too.".into())
            }
            None => return Err("ORPort is required".into()),
        };
        let own = bind4
            .filter(|a| !a.is_unspecified())
            .map(|a| (a, Method::Configured));
        let (adv4, method) = match conf_v4.or(own) {
            Some((a, m)) => {
                match find_address::explicit_or_usable(
                    IpAddr::V4(a),
                    custom_authorities,
                    m == Method::Configured,
                ) {
                    Ok(w) => warnings.extend(w),
                    Err(e) => unresolved = Some(e),
                }
                (a, m)
            }
            None if unresolved.is_some() => (Ipv4Addr::UNSPECIFIED, Method::Configured),
            None if self.hosts.is_empty() && self.addr_v6.is_none() => {
                match find_address::discover_v4(find, custom_authorities) {
                    Ok((IpAddr::V4(a), m)) => (a, m),
                    Ok((IpAddr::V6(_), _)) => return Err("Unable to find our IPv4 address".into()),
                    Err(e) => {
                        undiscovered = Some(e);
                        (Ipv4Addr::UNSPECIFIED, Method::Configured)
                    }
                }
            }
            // `Address` lines, none of them IPv4: C stops here too.
            None => return Err("No Address option found for family IPv4 in configuration.".into()),
        };
        let listen = SocketAddr::new(IpAddr::V4(bind4.unwrap_or(Ipv4Addr::UNSPECIFIED)), port4);
        let ipv6 = match (self.v6, conf_v6) {
            (Some((ip, port)), adv) => {
                let adv = adv.or((!ip.is_unspecified()).then_some(ip)).ok_or(
                    "an IPv6 ORPort on [::] needs an IPv6 Address (weft does not look for an IPv6 address)",
                )?;
                warnings.extend(find_address::explicit_or_usable(
                    IpAddr::V6(adv),
                    custom_authorities,
                    true,
                )?);
                Some(Ipv6OrPort {
                    listen: SocketAddr::new(IpAddr::V6(ip), port),
                    advertised: SocketAddrV6::new(adv, port, 0, 0),
                })
            }
            // `ORPort PORT` with an IPv6 Address: [::]:PORT too, as C.
            (None, Some(adv)) if bind4.is_none() => {
                warnings.extend(find_address::explicit_or_usable(
                    IpAddr::V6(adv),
                    custom_authorities,
                    true,
                )?);
                Some(Ipv6OrPort {
                    listen: SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port4),
                    advertised: SocketAddrV6::new(adv, port4, 0, 0),
                })
            }
            (None, Some(_)) => {
                return Err("an IPv6 Address needs an IPv6 ORPort (or a bare ORPort port)".into())
            }
            // A bare `ORPort PORT`: IPv6 too if this host has a public
            // IPv6 address (C makes both listeners and publishes the IPv6
            // one it finds; weft listens on [::] only then).
            (None, None) if bind4.is_none() && self.hosts.is_empty() => {
                find_address::discover_v6(find, custom_authorities).map(|(adv, _)| Ipv6OrPort {
                    listen: SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port4),
                    advertised: SocketAddrV6::new(adv, port4, 0, 0),
                })
            }
            (None, None) => None,
        };
        Ok(OrPorts {
            listen,
            advertised: SocketAddr::new(IpAddr::V4(adv4), port4),
            ipv6,
            method,
            warnings,
            unresolved,
            undiscovered,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host as a test describes it.
    #[derive(Default)]
    struct Host {
        names: Vec<(&'static str, &'static str)>,
        interface: Option<&'static str>,
        interface6: Option<&'static str>,
        hostname: Option<&'static str>,
    }

    impl FindAddress for Host {
        fn resolve(&self, host: &str, v6: bool) -> Option<IpAddr> {
            self.names
                .iter()
                .filter(|(n, _)| *n == host)
                .map(|(_, ip)| ip.parse::<IpAddr>().unwrap())
                .find(|ip| ip.is_ipv6() == v6)
        }
        fn interface(&self, v6: bool) -> Option<IpAddr> {
            if v6 { self.interface6 } else { self.interface }
                .map(|a| a.parse::<IpAddr>().unwrap())
                .filter(|ip| ip.is_ipv6() == v6)
        }
        fn hostname(&self) -> Option<String> {
            self.hostname.map(str::to_string)
        }
    }

    fn read_on(lines: &[(&str, &str)], custom: bool, host: &Host) -> Result<OrPorts, String> {
        let mut o = OrPortLines::default();
        for (k, v) in lines {
            match *k {
                "ORPort" => o.or_port(v)?,
                _ => o.address(v)?,
            }
        }
        let o = o.finish(custom, host)?;
        match o.unresolved.as_ref().or(o.undiscovered.as_ref()) {
            Some(e) => Err(e.clone()),
            None => Ok(o),
        }
    }

    /// A test network (custom authorities) on a host with nothing to find.
    fn read(lines: &[(&str, &str)]) -> Result<OrPorts, String> {
        read_on(lines, true, &Host::default())
    }

    #[test]
    fn the_address_is_found_as_c_finds_it() {
        let public = Host {
            names: vec![
                ("relay.example", "198.51.100.9"),
                ("relay.example", "2001:db8::9"),
                ("box", "203.0.113.77"),
                ("private.example", "10.1.2.3"),
            ],
            interface: Some("203.0.113.5"),
            interface6: None,
            hostname: Some("box"),
        };
        // The typical torrc: a bare ORPort, no Address: the interface's.
        let o = read_on(&[("ORPort", "9001")], false, &public).unwrap();
        assert_eq!(o.advertised, "203.0.113.5:9001".parse().unwrap());
        assert_eq!(
            (o.method, o.listen),
            (Method::Interface, "0.0.0.0:9001".parse().unwrap())
        );
        assert!(o.ipv6.is_none(), "no IPv6 unless configured");
        // Behind NAT: the interface is private; the host name resolves.
        let nat = Host {
            names: public.names.clone(),
            interface: Some("192.168.1.20"),
            interface6: None,
            hostname: public.hostname,
        };
        let o = read_on(&[("ORPort", "9001")], false, &nat).unwrap();
        assert_eq!(
            (o.advertised.ip().to_string(), o.method),
            ("203.0.113.77".into(), Method::Hostname)
        );
        // Address as a host name: looked up, both families.
        let o = read_on(
            &[("ORPort", "9001"), ("Address", "relay.example")],
            false,
            &nat,
        )
        .unwrap();
        assert_eq!(
            (o.advertised.ip().to_string(), o.method),
            ("198.51.100.9".into(), Method::Resolved)
        );
        assert_eq!(
            o.ipv6.unwrap().advertised,
            "[2001:db8::9]:9001".parse().unwrap()
        );
        // An IP Address wins over the interface.
        let o = read_on(
            &[("ORPort", "9001"), ("Address", "198.51.100.1")],
            false,
            &public,
        )
        .unwrap();
        assert_eq!(
            (o.advertised.ip().to_string(), o.method),
            ("198.51.100.1".into(), Method::Configured)
        );
        // Nothing public anywhere: a clear error.
        let none = Host {
            names: vec![("private.example", "10.1.2.3")],
            interface: Some("10.0.0.2"),
            interface6: None,
            hostname: Some("private.example"),
        };
        let e = read_on(&[("ORPort", "9001")], false, &none).unwrap_err();
        assert!(
            e.contains("Unable to find our IP address") && e.contains("Set Address"),
            "{e}"
        );
        // ... which is not a refusal: weft starts and asks the authorities.
        let mut lines = OrPortLines::default();
        lines.or_port("9001").unwrap();
        let o = lines.finish(false, &none).unwrap();
        assert!(o.unresolved.is_none() && o.undiscovered.is_some());
        assert!(o.advertised.ip().is_unspecified());
        // A private address: only explicit, and only with custom authorities
        // (with the default ones C runs but never publishes it: a warning).
        let o = read_on(&[("ORPort", "9001"), ("Address", "10.0.0.2")], false, &none).unwrap();
        assert!(o.warnings[0].contains("default DirAuthorities must have public IP addresses"));
        let o = read_on(&[("ORPort", "9001"), ("Address", "10.0.0.2")], true, &none).unwrap();
        assert!(o.warnings.is_empty());
        let o = read_on(&[("ORPort", "127.0.0.1:9001")], false, &none).unwrap();
        assert!(o.warnings[0].contains("private IP address"));
        for custom in [false, true] {
            let e = read_on(
                &[("ORPort", "9001"), ("Address", "private.example")],
                custom,
                &none,
            )
            .unwrap_err();
            assert!(
                e.contains("private IP address") || e.contains("not explicitly set"),
                "{e}"
            );
        }
        // A name that does not resolve, or a second IPv4 Address.
        let e = read_on(
            &[("ORPort", "9001"), ("Address", "nowhere.example")],
            false,
            &public,
        )
        .unwrap_err();
        assert!(
            e.contains("Could not resolve local Address 'nowhere.example'"),
            "{e}"
        );
        let e = read_on(
            &[
                ("ORPort", "9001"),
                ("Address", "198.51.100.1"),
                ("Address", "relay.example"),
            ],
            false,
            &public,
        )
        .unwrap_err();
        assert!(e.contains("more than one Address"), "{e}");
        // Only an IPv6 Address: no IPv4 address is guessed (as C).
        let e = read_on(
            &[("ORPort", "9001"), ("Address", "2001:db8::5")],
            false,
            &public,
        )
        .unwrap_err();
        assert!(e.contains("No Address option found for family IPv4"), "{e}");
    }

    #[test]
    fn the_hosts_own_lookups_answer() {
        let h = crate::find_address::SystemAddresses;
        // Whatever this machine has: no panic, the right families.
        assert!(h.interface(false).is_none_or(|ip| ip.is_ipv4()));
        assert!(h.interface(true).is_none_or(|ip| ip.is_ipv6()));
        assert_eq!(
            h.resolve("127.0.0.1", false),
            Some("127.0.0.1".parse().unwrap())
        );
        assert_eq!(h.resolve("127.0.0.1", true), None);
        assert!(h.hostname().is_some_and(|n| !n.is_empty()));
    }

    #[test]
    fn dual_stack_as_c_tor_reads_it() {
        let o = read(&[("ORPort", "127.0.0.1:9001"), ("ORPort", "[::1]:9002")]).unwrap();
        assert_eq!(o.advertised, "127.0.0.1:9001".parse().unwrap());
        let v6 = o.ipv6.unwrap();
        assert_eq!(v6.listen, "[::1]:9002".parse().unwrap());
        assert_eq!(v6.advertised, "[::1]:9002".parse().unwrap());
        // A bare port and both Addresses: both families on that port.
        let o = read(&[
            ("ORPort", "9001"),
            ("Address", "203.0.113.5"),
            ("Address", "2001:db8::5"),
        ])
        .unwrap();
        assert_eq!(o.listen, "0.0.0.0:9001".parse().unwrap());
        assert_eq!(o.advertised, "203.0.113.5:9001".parse().unwrap());
        assert_eq!(o.ipv6.unwrap().listen, "[::]:9001".parse().unwrap());
        assert_eq!(
            o.ipv6.unwrap().advertised,
            "[2001:db8::5]:9001".parse().unwrap()
        );
        // [::] with an IPv6 Address.
        let o = read(&[
            ("ORPort", "127.0.0.1:9001"),
            ("ORPort", "[::]:9002"),
            ("Address", "2001:db8::5"),
        ])
        .unwrap();
        assert_eq!(
            o.ipv6.unwrap().advertised,
            "[2001:db8::5]:9002".parse().unwrap()
        );
    }

    #[test]
    fn what_cannot_run_is_refused() {
        for (lines, why) in [
            (&[("ORPort", "[::1]:9002")][..], "IPv4 address too"),
            (&[("ORPort", "9001")][..], "Unable to find our IP address"),
            (
                &[("ORPort", "127.0.0.1:9001"), ("ORPort", "[::]:9002")][..],
                "needs an IPv6 Address",
            ),
            (
                &[("ORPort", "127.0.0.1:9001"), ("ORPort", "127.0.0.1:9002")][..],
                "more than one IPv4 ORPort",
            ),
            (
                &[("ORPort", "[::1]:9001"), ("ORPort", "[::1]:9002")][..],
                "more than one IPv6 ORPort",
            ),
            (
                &[("ORPort", "127.0.0.1:9001"), ("Address", "2001:db8::5")][..],
                "needs an IPv6 ORPort",
            ),
            (&[("ORPort", "[::1]:0")][..], "ORPort 0"),
            (&[("Address", "two words")][..], "bad Address"),
        ] {
            let e = read(lines).unwrap_err();
            assert!(e.contains(why), "{lines:?}: {e}");
        }
    }

    /// A bare ORPort on a host with a public IPv6 address: listened on
    /// and published, as C's `find_my_address(AF_INET6)`; a private one
    /// (custom authorities or not) or an ORPort with an address: IPv4 only.
    #[test]
    fn a_bare_orport_finds_a_public_ipv6_address_too() {
        let host = Host {
            names: vec![("box", "203.0.113.77"), ("box", "2001:db8::77")],
            interface: Some("203.0.113.5"),
            interface6: Some("2001:db8::5"),
            hostname: Some("box"),
        };
        let o = read_on(&[("ORPort", "9001")], false, &host).unwrap();
        let v6 = o.ipv6.expect("IPv6 found");
        assert_eq!(v6.listen, "[::]:9001".parse().unwrap());
        assert_eq!(v6.advertised, "[2001:db8::5]:9001".parse().unwrap());
        // The interface's is private: the host name's AAAA.
        let h2 = Host {
            interface6: Some("fd00::5"),
            names: host.names.clone(),
            ..Host::default()
        };
        let h2 = Host {
            hostname: Some("box"),
            interface: Some("203.0.113.5"),
            ..h2
        };
        let o = read_on(&[("ORPort", "9001")], true, &h2).unwrap();
        assert_eq!(
            o.ipv6.unwrap().advertised,
            "[2001:db8::77]:9001".parse().unwrap()
        );
        // Nothing public: IPv4 only.
        let h3 = Host {
            interface: Some("203.0.113.5"),
            interface6: Some("fe80::1"),
            ..Host::default()
        };
        assert!(read_on(&[("ORPort", "9001")], false, &h3)
            .unwrap()
            .ipv6
            .is_none());
        // An ORPort with its own IPv4 address stays IPv4 only.
        let o = read_on(&[("ORPort", "127.0.0.1:9001")], true, &host).unwrap();
        assert!(o.ipv6.is_none());
    }
}
