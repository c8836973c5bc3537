//! Where outbound connections come from: `OutboundBindAddress`,
//! `OutboundBindAddressOR` (connections to relays) and
//! `OutboundBindAddressExit` (exit streams), each at most once per IP
//! version, the specific one winning over the general one, and none for
//! loopback destinations — C Tor's rules. The connect itself is
//! non-blocking, as the workers' event loops need.

use std::io;
use std::net::{IpAddr, SocketAddr};

/// What an outbound connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// To a relay (extends, self-tests).
    Or,
    /// An exit stream.
    Exit,
}

/// The outbound source addresses, each `[IPv4, IPv6]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboundBind {
    /// OutboundBindAddress.
    pub any: [Option<IpAddr>; 2],
    /// OutboundBindAddressOR.
    pub or: [Option<IpAddr>; 2],
    /// OutboundBindAddressExit.
    pub exit: [Option<IpAddr>; 2],
}

impl OutboundBind {
    /// Whether no address is configured.
    pub fn is_empty(&self) -> bool {
        *self == OutboundBind::default()
    }

    /// Record one option's address (`which`: the option's lower-case
    /// name). An address of the same IP version given twice is an error,
    /// as in C Tor.
    pub fn set(&mut self, which: &str, ip: IpAddr) -> Result<(), String> {
        let slot = match which {
            "outboundbindaddress" => &mut self.any,
            "outboundbindaddressor" => &mut self.or,
            "outboundbindaddressexit" => &mut self.exit,
            _ => return Err(format!("not an outbound bind option: {which}")),
        };
        let i = usize::from(ip.is_ipv6());
        if slot[i].is_some() {
            return Err(format!(
                "Multiple {} outbound bind addresses configured",
                if ip.is_ipv6() { "IPv6" } else { "IPv4" }
            ));
        }
        slot[i] = Some(ip);
        Ok(())
    }

    /// The source address for a connection to `dest`, if one is set.
    pub fn source_for(&self, purpose: Purpose, dest: &SocketAddr) -> Option<IpAddr> {
        if dest.ip().is_loopback() {
            return None;
        }
        let i = usize::from(dest.is_ipv6());
        let specific = match purpose {
            Purpose::Or => self.or[i],
            Purpose::Exit => self.exit[i],
        };
        specific.or(self.any[i])
    }
}

/// Start a non-blocking connect to `dest`, from `source` when given.
pub fn connect(dest: SocketAddr, source: Option<IpAddr>) -> io::Result<mio::net::TcpStream> {
    let Some(src) = source else {
        return mio::net::TcpStream::connect(dest);
    };
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(dest), Type::STREAM, Some(Protocol::TCP))?;
    s.set_nonblocking(true)?;
    s.bind(&SocketAddr::new(src, 0).into())?;
    match s.connect(&dest.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(mio::net::TcpStream::from_std(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_as_c_tor() {
        let mut b = OutboundBind::default();
        b.set("outboundbindaddress", "192.0.2.1".parse().unwrap())
            .unwrap();
        b.set("outboundbindaddressexit", "192.0.2.9".parse().unwrap())
            .unwrap();
        b.set("outboundbindaddress", "2001:db8::1".parse().unwrap())
            .unwrap();
        assert!(b
            .set("outboundbindaddress", "192.0.2.2".parse().unwrap())
            .is_err());
        let web: SocketAddr = "198.51.100.7:443".parse().unwrap();
        let web6: SocketAddr = "[2001:db8::7]:443".parse().unwrap();
        assert_eq!(
            b.source_for(Purpose::Exit, &web),
            Some("192.0.2.9".parse().unwrap())
        );
        assert_eq!(
            b.source_for(Purpose::Or, &web),
            Some("192.0.2.1".parse().unwrap())
        );
        assert_eq!(
            b.source_for(Purpose::Exit, &web6),
            Some("2001:db8::1".parse().unwrap())
        );
        assert_eq!(
            b.source_for(Purpose::Or, &"127.0.0.5:9001".parse().unwrap()),
            None
        );
        assert_eq!(OutboundBind::default().source_for(Purpose::Or, &web), None);
    }

    #[test]
    fn connect_from_a_source_address() {
        // 127.0.0.2 is on the loopback interface: connect from it to a
        // listener on 127.0.0.1 and see it as the peer.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dest = l.local_addr().unwrap();
        let _c = connect(dest, Some("127.0.0.2".parse().unwrap())).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer.ip(), "127.0.0.2".parse::<IpAddr>().unwrap());
        let _d = connect(dest, None).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer.ip(), "127.0.0.1".parse::<IpAddr>().unwrap());
    }
}
