//! How weft finds the address to publish when the torrc does not give one,
//! as C Tor's `find_my_address` (`app/config/resolve_addr.c`): the
//! `Address` line (an IP address, or a host name looked up), else the
//! address of the interface that routes to the Internet, else the host's
//! own name looked up. An address found by lookup or on an interface is
//! used only if it is public; an explicit private one (`Address 10.0.0.5`,
//! `ORPort 127.0.0.1:9001`) is meant for a test network with custom
//! `DirAuthority` lines, as C's `address_can_be_used` says (with the default
//! authorities weft warns and runs, as C runs without publishing).
//!
//! The rules are pure ([`crate::config_orport`] applies them); the lookups
//! are behind [`FindAddress`] so tests can give their own answers, and
//! [`SystemAddresses`] asks the host.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

/// The lookups address discovery needs from the host.
pub trait FindAddress {
    /// The first address of the wanted family that `host` resolves to.
    fn resolve(&self, host: &str, v6: bool) -> Option<IpAddr>;
    /// The address of the interface that routes toward the Internet.
    fn interface(&self, v6: bool) -> Option<IpAddr>;
    /// The host's name.
    fn hostname(&self) -> Option<String>;
}

/// The host's answers: the system resolver, the routing table (a UDP
/// socket connected toward a public address, which sends nothing: C's
/// `get_interface_address6_via_udp_socket_hack`) and the kernel's host name.
pub struct SystemAddresses;

impl FindAddress for SystemAddresses {
    fn resolve(&self, host: &str, v6: bool) -> Option<IpAddr> {
        (host, 0)
            .to_socket_addrs()
            .ok()?
            .map(|a| a.ip())
            .find(|ip| ip.is_ipv6() == v6)
    }

    fn interface(&self, v6: bool) -> Option<IpAddr> {
        let (bind, toward): (SocketAddr, SocketAddr) = if v6 {
            ("[::]:0".parse().ok()?, "[2002::]:9".parse().ok()?)
        } else {
            ("0.0.0.0:0".parse().ok()?, "18.0.0.1:9".parse().ok()?)
        };
        let s = UdpSocket::bind(bind).ok()?;
        s.connect(toward).ok()?;
        Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_unspecified())
    }

    fn hostname(&self) -> Option<String> {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
        Some(name.trim().to_string()).filter(|n| !n.is_empty())
    }
}

/// C's `tor_addr_is_internal`.
pub fn is_internal(ip: IpAddr) -> bool {
    weft_dir::exit_policy::is_internal(ip)
}

/// Where a found address came from (C's `METHOD=` of `EXTERNAL_ADDRESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// An `Address` IP, or the ORPort's own address.
    Configured,
    /// An `Address` host name, looked up.
    Resolved,
    /// The interface toward the Internet.
    Interface,
    /// The host's name, looked up.
    Hostname,
}

impl Method {
    /// As C logs it.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Configured => "CONFIGURED",
            Method::Resolved => "RESOLVED",
            Method::Interface => "INTERFACE",
            Method::Hostname => "GETHOSTNAME",
        }
    }
}

/// C's `address_can_be_used`: a public address always; a private one only
/// with custom directory authorities, and then only if it was given
/// explicitly (not looked up or found on an interface).
pub fn can_be_used(ip: IpAddr, custom_authorities: bool, explicit: bool) -> Result<(), String> {
    if !is_internal(ip) {
        return Ok(());
    }
    if !custom_authorities {
        return Err(format!(
            "Address '{ip}' is a private IP address. Tor relays that use the default DirAuthorities must have public IP addresses."
        ));
    }
    if !explicit {
        return Err(format!(
            "Address {ip} was resolved and thus not explicitly set. Even if DirAuthorities are custom, this is not allowed."
        ));
    }
    Ok(())
}

/// An address the torrc names (`explicit`: an IP address written in it;
/// else a host name it gave, looked up): `Err` where C stops looking
/// (a looked-up private address), a warning where C runs on but does not
/// publish (an explicit private address with the default authorities).
pub fn explicit_or_usable(
    ip: IpAddr,
    custom_authorities: bool,
    explicit: bool,
) -> Result<Option<String>, String> {
    match can_be_used(ip, custom_authorities, explicit) {
        Ok(()) => Ok(None),
        Err(why) if explicit => Ok(Some(format!(
            "{why} weft runs, but the authorities will not list it."
        ))),
        Err(why) => Err(why),
    }
}

/// The IPv4 address to publish when neither `Address` nor the ORPort
/// gives one: the interface's if public, else the host name's if it
/// resolves to a public one. With custom authorities a host name that
/// resolves to a private address stops the search, as in C.
pub fn discover_v4(
    find: &dyn FindAddress,
    custom_authorities: bool,
) -> Result<(IpAddr, Method), String> {
    let mut tried = Vec::new();
    match find.interface(false) {
        Some(ip) if can_be_used(ip, custom_authorities, false).is_ok() => {
            return Ok((ip, Method::Interface))
        }
        Some(ip) => tried.push(format!(
            "the interface toward the Internet has {ip}, a private address"
        )),
        None => tried.push("no interface routes toward the Internet".to_string()),
    }
    match find.hostname() {
        None => tried.push("the host has no name".to_string()),
        Some(name) => match find.resolve(&name, false) {
            None => tried.push(format!(
                "the host name '{name}' does not resolve to an IPv4 address"
            )),
            Some(ip) => match can_be_used(ip, custom_authorities, false) {
                Ok(()) => return Ok((ip, Method::Hostname)),
                Err(_) => tried.push(format!(
                    "the host name '{name}' resolves to {ip}, a private address"
                )),
            },
        },
    }
    Err(format!(
        "Unable to find our IP address: no Address line, {}. Set Address (an IP address or a host name) to the public IPv4 address this relay is reached at",
        tried.join(", ")
    ))
}

/// The IPv6 address to publish for a bare `ORPort PORT` when no `Address`
/// gives one (C's `find_my_address(AF_INET6)`): the interface toward the
/// Internet's, else the host name's AAAA, if public (a found address is
/// never private, custom authorities or not, as C's
/// `address_can_be_used` for what was not written). None: IPv4 only.
pub fn discover_v6(
    find: &dyn FindAddress,
    custom_authorities: bool,
) -> Option<(std::net::Ipv6Addr, Method)> {
    let usable = |ip: Option<IpAddr>| match ip {
        Some(IpAddr::V6(a)) if can_be_used(IpAddr::V6(a), custom_authorities, false).is_ok() => {
            Some(a)
        }
        _ => None,
    };
    if let Some(a) = usable(find.interface(true)) {
        return Some((a, Method::Interface));
    }
    let a = usable(find.resolve(&find.hostname()?, true))?;
    Some((a, Method::Hostname))
}
