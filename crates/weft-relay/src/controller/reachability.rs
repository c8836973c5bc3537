//! Our ORPorts' reachability, as C Tor's relays test it (`selftest.c`:
//! `router_do_reachability_checks`, `router_orport_found_reachable`;
//! `circuitbuild_relay.c`'s check in `onionskin_answer`): a testing
//! circuit through two relays ends at our own ORPort, so the relay before
//! us must connect to it. Any CREATE answered on an inbound connection
//! whose NETINFO gives our published address of that family proves it,
//! whoever built the circuit; a worker reports the first one of each such
//! connection (`ControllerMsg::CreateReachedUs`).
//!
//! IPv4 ([`Ipv4Reachability`]): until the ORPort is proven no descriptor
//! is published (C's `decide_if_publishable_server`), and after C's 20
//! minutes without proof the operator is warned, every 20 minutes.
//! IPv6 ([`Ipv6Reachability`]): the circuit's last EXTEND2 names only our
//! IPv6 address, so the relay before us (one that can initiate IPv6
//! extends: an IPv6 ORPort and `Relay=3`) must connect over IPv6; until
//! then the descriptor leaves out its `or-address`, the way C does for an
//! address it cannot vouch for (C's `omit_ipv6_on_publish`; for a
//! configured IPv6 ORPort C withholds the whole descriptor).
//! `AssumeReachable 1`, `AssumeReachableIPv6 1` or the consensus's
//! `assume-reachable` / `assume-reachable-ipv6` publish untested. The
//! decisions here are sans-IO; the directory state launches the circuits.

use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::str::FromStr;
use std::time::{Duration, Instant};

use tor_protover::{ProtoKind, Protocols};
use tracing::info;
use weft_dir::consensus::{ConsensusSummary, NetParams, RelayEntry};

/// C's `PROTOVER_RELAY_EXTEND_IPV6`.
const RELAY_EXTEND_IPV6: u8 = 3;

/// The state of our IPv6 ORPort's self-test.
#[derive(Debug)]
pub struct Ipv6Reachability {
    /// Our advertised IPv6 ORPort, if we have one.
    addr: Option<SocketAddrV6>,
    /// AssumeReachable.
    assume: bool,
    /// AssumeReachableIPv6 (None: auto).
    assume_v6: Option<bool>,
    /// A CREATE came in over IPv6 to our published address.
    reachable: bool,
    /// "Now checking whether..." was said.
    informed: bool,
    last_launch: Option<Instant>,
    /// When the state was made (the bandwidth test's wait counts from
    /// here, so a network with no relay to test through holds it no
    /// longer than that).
    created: Instant,
    testing: bool,
}

impl Ipv6Reachability {
    /// The state for our configuration.
    pub fn new(
        addr: Option<SocketAddrV6>,
        assume: bool,
        assume_v6: Option<bool>,
        testing: bool,
    ) -> Self {
        Ipv6Reachability {
            addr,
            assume,
            assume_v6,
            reachable: false,
            informed: false,
            last_launch: None,
            created: Instant::now(),
            testing,
        }
    }

    /// C's `router_orport_seems_reachable(AF_INET6)`: no test is needed
    /// (tested, assumed, or no IPv6 ORPort).
    pub fn seems_reachable(&self) -> bool {
        self.addr.is_none() || self.reachable || self.assume || self.assume_v6 == Some(true)
    }

    /// The IPv6 ORPort the descriptor carries now: tested, or published
    /// untested as C's `publish_even_when_ipv6_orport_unreachable`
    /// (AssumeReachable, or the consensus's `assume-reachable` /
    /// `assume-reachable-ipv6`).
    pub fn published(&self, params: &NetParams) -> Option<SocketAddrV6> {
        let param = |n: &str| params.get_clamped(n, 0, 0, 1) == 1;
        let publish =
            self.seems_reachable() || param("assume-reachable") || param("assume-reachable-ipv6");
        self.addr.filter(|_| publish)
    }

    /// Whether to launch a testing circuit now: untested, and the last
    /// launch is a while ago (C tests every minute until it succeeds;
    /// 20 s on a testing network). Notes the launch.
    pub fn launch_due(&mut self, now: Instant) -> Option<SocketAddrV6> {
        let again = Duration::from_secs(if self.testing { 20 } else { 60 });
        if self.seems_reachable() || self.last_launch.is_some_and(|t| now - t < again) {
            return None;
        }
        let addr = self.addr?;
        self.last_launch = Some(now);
        if !self.informed {
            self.informed = true;
            info!(
                "Now checking whether IPv6 ORPort {addr} is reachable... (this may take up to 20 minutes -- look for log messages indicating success)"
            );
        }
        Some(addr)
    }

    /// C runs the bandwidth test only once every ORPort seems reachable
    /// (`circuit_testing_opened`); weft waits for the IPv6 test at most
    /// C's 20 minutes from start until it complains of unreachability (2
    /// on a testing network), then runs it anyway for the IPv4 ORPort it
    /// publishes (also when no relay could carry an IPv6 test).
    pub fn holds_bandwidth_test(&self, now: Instant) -> bool {
        let wait = Duration::from_secs(if self.testing { 120 } else { 20 * 60 });
        !self.seems_reachable() && now.saturating_duration_since(self.created) < wait
    }

    /// A worker answered a CREATE on an inbound connection from `peer`
    /// whose NETINFO gave our IPv6 address: C's check in
    /// `onionskin_answer` (a local peer counts only with
    /// ExtendAllowPrivateAddresses). Returns true when this makes the
    /// IPv6 ORPort reachable (republish with it).
    pub fn on_create_over_ipv6(&mut self, peer: SocketAddr, allow_private: bool) -> bool {
        if self.reachable || !peer.is_ipv6() {
            return false;
        }
        if super::registry::is_private(peer.ip()) && !allow_private {
            return false;
        }
        let Some(addr) = self.addr else { return false };
        self.reachable = true;
        tracing::debug!("a CREATE from {peer} over IPv6 reached our IPv6 ORPort");
        info!(
            "Self-testing indicates your ORPort {addr} is reachable from the outside. Excellent."
        );
        true
    }
}

use crate::context::REACHABILITY_WARN_AFTER as COMPLAIN_AFTER;

/// The state of our IPv4 ORPort's self-test.
#[derive(Debug)]
pub struct Ipv4Reachability {
    /// The IPv4 ORPort we would publish.
    addr: SocketAddrV4,
    /// AssumeReachable.
    assume: bool,
    /// A CREATE came in over IPv4 to our published address.
    reachable: bool,
    /// "Now checking whether..." was said for this address.
    informed: bool,
    last_launch: Option<Instant>,
    /// Start, or the last change of address (C resets its uptime and
    /// its reachability then).
    since: Instant,
    /// When to warn that the ORPort is still unproven (C's 20 minutes;
    /// TestingReachabilityWarnAfter), and every that long after.
    complain_after: Duration,
    last_complaint: Option<Instant>,
    testing: bool,
}

impl Ipv4Reachability {
    /// The state for our configuration.
    pub fn new(
        addr: SocketAddrV4,
        assume: bool,
        complain_after: Duration,
        testing: bool,
        now: Instant,
    ) -> Self {
        Ipv4Reachability {
            addr,
            assume,
            reachable: false,
            informed: false,
            last_launch: None,
            since: now,
            complain_after,
            last_complaint: None,
            testing,
        }
    }

    /// The ORPort under test.
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// C's `router_orport_seems_reachable(AF_INET)`: tested or assumed.
    pub fn seems_reachable(&self) -> bool {
        self.reachable || self.assume
    }

    /// Whether a descriptor may be published (C's
    /// `decide_if_publishable_server` for IPv4: reachable, or the
    /// consensus's `assume-reachable`).
    pub fn publishable(&self, params: &NetParams) -> bool {
        self.known()
            && (self.seems_reachable() || params.get_clamped("assume-reachable", 0, 0, 1) == 1)
    }

    /// Whether we know our address (not before the authorities told us,
    /// on a host that could not find it: `address_change.rs`).
    fn known(&self) -> bool {
        !self.addr.ip().is_unspecified()
    }

    /// Whether to launch a testing circuit now: untested, and the last
    /// launch a while ago (C every minute; 20 s on a testing network).
    /// The first launch for an address says so at notice, as C's
    /// `inform_testing_reachability`.
    pub fn launch_due(&mut self, now: Instant) -> Option<SocketAddrV4> {
        let again = Duration::from_secs(if self.testing { 20 } else { 60 });
        if !self.known()
            || self.seems_reachable()
            || self.last_launch.is_some_and(|t| now - t < again)
        {
            return None;
        }
        self.last_launch = Some(now);
        if !self.informed {
            self.informed = true;
            info!(
                "Now checking whether IPv4 ORPort {} is reachable... (this may take up to {} minutes -- look for log messages indicating success)",
                self.addr,
                COMPLAIN_AFTER.as_secs() / 60
            );
        }
        Some(self.addr)
    }

    /// A worker answered a CREATE on an inbound IPv4 connection whose
    /// NETINFO gave our address (a private peer counts only with
    /// ExtendAllowPrivateAddresses, as C's `channel_is_local`). True
    /// when this makes the ORPort reachable (publish now).
    pub fn on_create_over_ipv4(&mut self, peer: SocketAddr, allow_private: bool) -> bool {
        if self.reachable || !peer.is_ipv4() {
            return false;
        }
        if super::registry::is_private(peer.ip()) && !allow_private {
            return false;
        }
        self.reachable = true;
        tracing::debug!("a CREATE from {peer} over IPv4 reached our IPv4 ORPort");
        true
    }

    /// The 20-minute warning, if due (C's `reachability_warnings_callback`:
    /// first after that long, then every that long while unproven).
    pub fn complaint_due(&mut self, now: Instant) -> Option<String> {
        if !self.known() || self.seems_reachable() {
            return None;
        }
        let from = self.last_complaint.unwrap_or(self.since);
        if now.saturating_duration_since(from) < self.complain_after {
            return None;
        }
        self.last_complaint = Some(now);
        Some(format!(
            "Your server has not managed to confirm reachability for its ORPort(s) at {}. Relays do not publish descriptors until their ORPort and DirPort are reachable. Please check your firewalls, ports, address, /etc/hosts file, etc.",
            self.addr
        ))
    }

    /// AssumeReachable reloaded; true if it changed.
    pub fn set_assume(&mut self, assume: bool) -> bool {
        std::mem::replace(&mut self.assume, assume) != assume
    }

    /// Our address changed: test again from the start (C's
    /// `router_reset_reachability` and uptime reset in
    /// `ip_address_changed`).
    pub fn set_addr(&mut self, addr: SocketAddrV4, now: Instant) {
        if addr != self.addr {
            *self =
                Ipv4Reachability::new(addr, self.assume, self.complain_after, self.testing, now);
        }
    }
}

/// Whether a consensus entry can initiate an IPv6 extend (C's
/// `node_supports_initiating_ipv6_extends`): it lists an IPv6 ORPort and
/// supports `Relay=3`.
fn initiates_ipv6_extends(r: &RelayEntry) -> bool {
    r.other_addresses
        .iter()
        .any(|a| matches!(a.ip(), IpAddr::V6(_)))
        && Protocols::from_str(&r.protocols)
            .is_ok_and(|p| p.supports_known_subver(ProtoKind::Relay, RELAY_EXTEND_IPV6))
}

/// The two relays of an IPv6 reachability circuit (us → a → b → us over
/// IPv6), among `crate::selftest::usable_relays`; `b`
/// initiates IPv6 extends (C's `CRN_INITIATE_IPV6_EXTEND` for the
/// second-last hop). Random among those, but a `b` with no connection to
/// us (`connected`) first: it would send the CREATE over that one, as C's
/// `channel_get_for_extend` reuses a canonical connection whatever the
/// extend's address, and prove nothing (C picks at random and tries
/// again).
pub fn pick_relays<'a>(
    c: &'a ConsensusSummary,
    me: &[u8; 20],
    connected: &dyn Fn(&[u8; 20]) -> bool,
) -> Option<(&'a RelayEntry, &'a RelayEntry)> {
    let usable = crate::selftest::usable_relays(c, me);
    let mut last: Vec<&RelayEntry> = usable
        .iter()
        .copied()
        .filter(|r| initiates_ipv6_extends(r))
        .collect();
    if last.iter().any(|r| !connected(&r.rsa_identity)) {
        last.retain(|r| !connected(&r.rsa_identity));
    }
    let b = *last.get(rand::random_range(0..last.len().max(1)))?;
    let first: Vec<&RelayEntry> = usable
        .into_iter()
        .filter(|r| r.rsa_identity != b.rsa_identity)
        .collect();
    let a = *first.get(rand::random_range(0..first.len().max(1)))?;
    Some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6() -> SocketAddrV6 {
        "[2001:db8::1]:9001".parse().unwrap()
    }

    fn peer() -> SocketAddr {
        "[2001:db8::2]:40000".parse().unwrap()
    }

    #[test]
    fn untested_ipv6_is_left_out_until_a_create_comes_over_ipv6() {
        let mut r = Ipv6Reachability::new(Some(v6()), false, None, false);
        let params = NetParams::default();
        assert_eq!(r.published(&params), None);
        let t0 = Instant::now();
        assert_eq!(r.launch_due(t0), Some(v6()));
        assert_eq!(r.launch_due(t0 + Duration::from_secs(30)), None);
        assert_eq!(r.launch_due(t0 + Duration::from_secs(61)), Some(v6()));
        // An IPv4 peer proves nothing; neither does a private one.
        assert!(!r.on_create_over_ipv6("192.0.2.1:1".parse().unwrap(), false));
        assert!(!r.on_create_over_ipv6("[::1]:1".parse().unwrap(), false));
        assert!(r.on_create_over_ipv6(peer(), false));
        assert!(!r.on_create_over_ipv6(peer(), false), "said once");
        assert_eq!(r.published(&params), Some(v6()));
        assert_eq!(r.launch_due(t0 + Duration::from_secs(600)), None);
    }

    fn relay(n: u8, v6: bool, proto: &str) -> RelayEntry {
        RelayEntry {
            nickname: format!("r{n}"),
            rsa_identity: [n; 20],
            address: [127, 0, 0, 1].into(),
            or_port: 9000 + u16::from(n),
            other_addresses: if v6 {
                vec![format!("[::1]:{}", 9100 + u16::from(n)).parse().unwrap()]
            } else {
                vec![]
            },
            flags: vec!["Running", "Valid"],
            bandwidth: 100,
            bandwidth_measured: false,
            protocols: proto.into(),
            descriptor_digest: None,
            md_digest: Some([n; 32]),
        }
    }

    fn consensus(relays: Vec<RelayEntry>) -> ConsensusSummary {
        let t = std::time::SystemTime::now();
        ConsensusSummary {
            flavor: weft_dir::consensus::ConsensusFlavor::Microdesc,
            valid_after: t,
            fresh_until: t,
            valid_until: t,
            params: NetParams::default(),
            required_relay_protocols: String::new(),
            recommended_relay_protocols: String::new(),
            signed_by: vec![],
            relays,
        }
    }

    /// The second hop initiates IPv6 extends (an IPv6 ORPort and
    /// Relay=3), and one with no connection to us goes first.
    #[test]
    fn the_second_hop_can_extend_over_ipv6_and_is_not_connected_to_us() {
        let c = consensus(vec![
            relay(1, false, "Relay=2-6"),
            relay(2, true, "Relay=2"),
            relay(3, true, "Relay=2-4"),
            relay(4, true, "Relay=2-6"),
            relay(9, true, "Relay=2-6"),
        ]);
        let me = [9; 20];
        for _ in 0..50 {
            let (a, b) = pick_relays(&c, &me, &|_| false).unwrap();
            assert!([3, 4].contains(&b.rsa_identity[0]), "{b:?}");
            assert_ne!(a.rsa_identity, b.rsa_identity);
            assert_ne!(a.rsa_identity, me);
            let (_, b) = pick_relays(&c, &me, &|fp| fp[0] == 3).unwrap();
            assert_eq!(b.rsa_identity[0], 4);
        }
        // Every candidate connected: one of them anyway.
        assert!(pick_relays(&c, &me, &|_| true).is_some());
        // None can extend over IPv6: no test.
        let c = consensus(vec![
            relay(1, false, "Relay=2-6"),
            relay(2, true, "Relay=2"),
        ]);
        assert!(pick_relays(&c, &me, &|_| false).is_none());
    }

    #[test]
    fn the_bandwidth_test_waits_for_the_ipv6_test_a_while() {
        let mut r = Ipv6Reachability::new(Some(v6()), false, None, true);
        let t0 = Instant::now();
        assert!(r.holds_bandwidth_test(t0));
        // Counted from the start, whether a test could be launched or not.
        assert!(r.holds_bandwidth_test(t0 + Duration::from_secs(119)));
        assert!(!r.holds_bandwidth_test(t0 + Duration::from_secs(121)));
        r.on_create_over_ipv6("[::1]:1".parse().unwrap(), true);
        assert!(!r.holds_bandwidth_test(t0));
        let r = Ipv6Reachability::new(None, false, None, false);
        assert!(!r.holds_bandwidth_test(t0));
    }

    #[test]
    fn loopback_counts_with_extend_allow_private() {
        let mut r = Ipv6Reachability::new(Some(v6()), false, None, true);
        assert!(r.on_create_over_ipv6("[::1]:1".parse().unwrap(), true));
    }

    #[test]
    fn assumed_reachable_publishes_untested() {
        let params = NetParams::default();
        for (assume, v6opt) in [(true, None), (false, Some(true)), (true, Some(false))] {
            let mut r = Ipv6Reachability::new(Some(v6()), assume, v6opt, false);
            assert_eq!(r.published(&params), Some(v6()));
            assert_eq!(r.launch_due(Instant::now()), None);
        }
        let r = Ipv6Reachability::new(Some(v6()), false, Some(false), false);
        assert_eq!(r.published(&params), None);
        let p = NetParams::parse_line("assume-reachable-ipv6=1");
        assert_eq!(r.published(&p), Some(v6()));
        let p = NetParams::parse_line("assume-reachable=1");
        assert_eq!(r.published(&p), Some(v6()));
        // No IPv6 ORPort: nothing to test or publish.
        let mut r = Ipv6Reachability::new(None, false, None, false);
        assert!(r.seems_reachable());
        assert_eq!(r.launch_due(Instant::now()), None);
    }

    fn v4() -> SocketAddrV4 {
        "192.0.2.7:9001".parse().unwrap()
    }

    /// No descriptor before a CREATE over IPv4 proves the ORPort; tests
    /// every minute (20 s on a testing network) until then.
    #[test]
    fn ipv4_unproven_holds_the_descriptor_until_a_create_comes() {
        let t0 = Instant::now();
        let mut r = Ipv4Reachability::new(v4(), false, COMPLAIN_AFTER, false, t0);
        let params = NetParams::default();
        assert!(!r.publishable(&params));
        assert_eq!(r.launch_due(t0), Some(v4()));
        assert_eq!(r.launch_due(t0 + Duration::from_secs(59)), None);
        assert_eq!(r.launch_due(t0 + Duration::from_secs(61)), Some(v4()));
        // IPv6 peers and (without ExtendAllowPrivateAddresses) private
        // ones prove nothing.
        assert!(!r.on_create_over_ipv4(peer(), false));
        assert!(!r.on_create_over_ipv4("10.1.2.3:5".parse().unwrap(), false));
        assert!(!r.publishable(&params));
        assert!(r.on_create_over_ipv4("198.51.100.1:443".parse().unwrap(), false));
        assert!(
            !r.on_create_over_ipv4("198.51.100.1:443".parse().unwrap(), false),
            "once"
        );
        assert!(r.publishable(&params));
        assert_eq!(r.launch_due(t0 + Duration::from_secs(600)), None);
        let mut t = Ipv4Reachability::new(v4(), false, COMPLAIN_AFTER, true, t0);
        assert!(t.launch_due(t0).is_some());
        assert!(t.launch_due(t0 + Duration::from_secs(21)).is_some());
        assert!(t.on_create_over_ipv4("127.0.0.1:1".parse().unwrap(), true));
    }

    /// C's `assume-reachable` consensus parameter and AssumeReachable
    /// publish untested; nothing is launched with AssumeReachable.
    #[test]
    fn ipv4_assumed_reachable_publishes_untested() {
        let t0 = Instant::now();
        let mut r = Ipv4Reachability::new(v4(), true, COMPLAIN_AFTER, false, t0);
        assert!(r.publishable(&NetParams::default()));
        assert_eq!(r.launch_due(t0), None);
        assert_eq!(r.complaint_due(t0 + COMPLAIN_AFTER * 2), None);
        let r = Ipv4Reachability::new(v4(), false, COMPLAIN_AFTER, false, t0);
        assert!(r.publishable(&NetParams::parse_line("assume-reachable=1")));
        assert!(!r.publishable(&NetParams::parse_line("assume-reachable-ipv6=1")));
    }

    /// C's warning after 20 minutes unproven, then every 20 minutes; none
    /// once proven; an address change starts the test and the clock anew.
    #[test]
    fn ipv4_warns_every_twenty_minutes_while_unproven() {
        let t0 = Instant::now();
        let mut r = Ipv4Reachability::new(v4(), false, COMPLAIN_AFTER, false, t0);
        assert_eq!(r.complaint_due(t0 + Duration::from_secs(1199)), None);
        let w = r.complaint_due(t0 + COMPLAIN_AFTER).unwrap();
        assert!(
            w.starts_with("Your server has not managed to confirm reachability for its ORPort(s) at 192.0.2.7:9001."),
            "{w}"
        );
        assert_eq!(
            r.complaint_due(t0 + COMPLAIN_AFTER + Duration::from_secs(60)),
            None
        );
        assert!(r.complaint_due(t0 + COMPLAIN_AFTER * 2).is_some());
        let moved: SocketAddrV4 = "192.0.2.8:9001".parse().unwrap();
        let t1 = t0 + COMPLAIN_AFTER * 2;
        r.set_addr(moved, t1);
        assert_eq!(r.addr(), moved);
        assert_eq!(r.complaint_due(t1 + Duration::from_secs(60)), None);
        assert_eq!(r.launch_due(t1), Some(moved));
        assert!(r.on_create_over_ipv4("198.51.100.1:443".parse().unwrap(), false));
        assert_eq!(r.complaint_due(t1 + COMPLAIN_AFTER * 3), None);
        // Proven, then moved: unproven again.
        r.set_addr(v4(), t1);
        assert!(!r.seems_reachable());
    }
}
