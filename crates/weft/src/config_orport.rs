//! The `ORPort` and `Address` lines: one IPv4 ORPort (required, as C Tor:
//! a public relay must listen on IPv4) and at most one IPv6 ORPort, each
//! `PORT`, `IP:PORT` or `[IPv6]:PORT`; at most one `Address` per address
//! family. weft does not guess addresses: the advertised IPv4 address is
//! the IPv4 `Address` or the ORPort's own; an IPv6 ORPort is advertised at
//! the IPv6 `Address` or its own address. A bare-port ORPort with an IPv6
//! `Address` also listens on `[::]` at that port, as C Tor does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrPorts {
    /// IPv4 listening address.
    pub listen: SocketAddr,
    /// IPv4 advertised address.
    pub advertised: SocketAddr,
    /// The IPv6 ORPort, if any.
    pub ipv6: Option<Ipv6OrPort>,
}

/// The lines as they come.
#[derive(Debug, Default)]
pub(crate) struct OrPortLines {
    v4: Option<(Option<Ipv4Addr>, u16)>,
    v6: Option<(Ipv6Addr, u16)>,
    addr_v4: Option<Ipv4Addr>,
    addr_v6: Option<Ipv6Addr>,
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

    /// One `Address` line.
    pub(crate) fn address(&mut self, v: &str) -> Result<(), String> {
        let ip = v.parse::<IpAddr>().map_err(|_| {
            format!("Address must be an IP address (got '{v}'); host names are not supported yet")
        })?;
        let dup = match ip {
            IpAddr::V4(a) => self.addr_v4.replace(a).is_some(),
            IpAddr::V6(a) => self.addr_v6.replace(a).is_some(),
        };
        if dup {
            return Err("more than one Address of the same address family".into());
        }
        Ok(())
    }

    /// The ports and addresses, or what is missing.
    pub(crate) fn finish(self) -> Result<OrPorts, String> {
        let (bind4, port4) = match self.v4 {
            Some(v) => v,
            None if self.v6.is_some() => {
                return Err("Configured public relay to listen only on an IPv6 address. weft needs to listen on an IPv4 address too.".into())
            }
            None => return Err("ORPort is required".into()),
        };
        let adv4 = self
            .addr_v4
            .or(bind4.filter(|a| !a.is_unspecified()))
            .ok_or("Address is required (weft does not guess its address yet)")?;
        let listen = SocketAddr::new(IpAddr::V4(bind4.unwrap_or(Ipv4Addr::UNSPECIFIED)), port4);
        let ipv6 = match (self.v6, self.addr_v6) {
            (Some((ip, port)), adv) => {
                let adv = adv.or((!ip.is_unspecified()).then_some(ip)).ok_or(
                    "an IPv6 ORPort on [::] needs an IPv6 Address (weft does not guess its address yet)",
                )?;
                Some(Ipv6OrPort {
                    listen: SocketAddr::new(IpAddr::V6(ip), port),
                    advertised: SocketAddrV6::new(adv, port, 0, 0),
                })
            }
            // `ORPort PORT` with an IPv6 Address: [::]:PORT too, as C.
            (None, Some(adv)) if bind4.is_none() => Some(Ipv6OrPort {
                listen: SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port4),
                advertised: SocketAddrV6::new(adv, port4, 0, 0),
            }),
            (None, Some(_)) => {
                return Err("an IPv6 Address needs an IPv6 ORPort (or a bare ORPort port)".into())
            }
            (None, None) => None,
        };
        Ok(OrPorts {
            listen,
            advertised: SocketAddr::new(IpAddr::V4(adv4), port4),
            ipv6,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(lines: &[(&str, &str)]) -> Result<OrPorts, String> {
        let mut o = OrPortLines::default();
        for (k, v) in lines {
            match *k {
                "ORPort" => o.or_port(v)?,
                _ => o.address(v)?,
            }
        }
        o.finish()
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
            (&[("ORPort", "9001")][..], "Address is required"),
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
            (&[("Address", "relay.example")][..], "host names"),
        ] {
            let e = read(lines).unwrap_err();
            assert!(e.contains(why), "{lines:?}: {e}");
        }
    }
}
