//! The directory state's self-tests, which end at our own ORPorts (C's
//! `selftest.c`): the IPv4 and IPv6 reachability tests
//! ([`super::super::reachability`]), of which the IPv4 one holds back
//! every descriptor until it succeeds, and the bandwidth test
//! ([`crate::selftest`]) once we are listed Running. Each picks two relays
//! from the consensus and fetches their microdescriptors from an
//! authority; the keys come back as [`DirEvent::SelfTestKeys`] and the
//! controller launches the circuit (`registry.rs` `launch_selftest`).

use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use weft_dir::consensus::{fetch_microdescs, RelayEntry};

use super::{DirEvent, DirState, SelfTest, SELFTEST_BELOW};

impl DirState {
    /// Start the bandwidth self-test if the consensus lists us Running, our
    /// observed bandwidth is still low, and none ran recently: pick two
    /// relays and fetch their microdescriptors (the outcome comes back as
    /// [`DirEvent::SelfTestKeys`]).
    /// `connected` says whether a connection with a relay is open (the
    /// IPv6 test prefers a second hop without one: it would reuse it).
    pub fn maybe_selftest(&mut self, observed: u64, connected: &dyn Fn(&[u8; 20]) -> bool) {
        let now = Instant::now();
        if !self.selftest_busy {
            self.maybe_test_ipv4(now);
        }
        if !self.selftest_busy {
            self.maybe_test_ipv6(connected);
        }
        if self.consensus.is_some() {
            // C warns once it has completed a circuit; weft once it has
            // a consensus (the network answers, our ORPort does not).
            if let Some(w) = self.ipv4.complaint_due(now) {
                warn!("{w}");
                self.reachability_failed = Some(self.ipv4.addr());
            }
        }
        // C runs the bandwidth test once every ORPort is reachable.
        if !self.ipv4.seems_reachable() || self.ipv6.holds_bandwidth_test(now) {
            return;
        }
        let again = if self.testing {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(30 * 60)
        };
        if self.selftest_busy
            || observed >= SELFTEST_BELOW
            || self.selftest_last.is_some_and(|t| t.elapsed() < again)
        {
            return;
        }
        let Some(c) = self.consensus.as_deref() else {
            return;
        };
        if !c
            .find_relay(&self.our_fp)
            .is_some_and(|me| me.has_flag("Running"))
        {
            return;
        }
        let Some((a, b)) = crate::selftest::pick_relays(c, &self.our_fp) else {
            return;
        };
        let (a, b) = (Box::new(a.clone()), Box::new(b.clone()));
        if self.fetch_selftest_keys(a, b, SelfTest::Bandwidth) {
            self.selftest_last = Some(Instant::now());
        }
    }

    /// Launch an IPv4 reachability circuit if one is due (C's
    /// `router_do_reachability_checks`: us → a → b → our IPv4 ORPort;
    /// any consensus will do, we need not be listed).
    fn maybe_test_ipv4(&mut self, now: Instant) {
        let Some(c) = self.consensus.as_deref() else {
            return;
        };
        let Some((a, b)) = crate::selftest::pick_relays(c, &self.our_fp) else {
            return;
        };
        let (a, b) = (Box::new(a.clone()), Box::new(b.clone()));
        if let Some(me) = self.ipv4.launch_due(now) {
            self.fetch_selftest_keys(a, b, SelfTest::Ipv4(me));
        }
    }

    /// Launch an IPv6 reachability circuit if one is due (C's
    /// `router_do_reachability_checks`; any consensus will do, we need
    /// not be listed).
    fn maybe_test_ipv6(&mut self, connected: &dyn Fn(&[u8; 20]) -> bool) {
        let Some(c) = self.consensus.as_deref() else {
            return;
        };
        let Some((a, b)) = super::super::reachability::pick_relays(c, &self.our_fp, connected)
        else {
            return;
        };
        let (a, b) = (Box::new(a.clone()), Box::new(b.clone()));
        if let Some(me) = self.ipv6.launch_due(Instant::now()) {
            self.fetch_selftest_keys(a, b, SelfTest::Ipv6(me));
        }
    }

    /// Fetch the microdescriptors of `a` and `b` from an authority for a
    /// self-test; the outcome comes back as [`DirEvent::SelfTestKeys`].
    fn fetch_selftest_keys(
        &mut self,
        a: Box<RelayEntry>,
        b: Box<RelayEntry>,
        purpose: SelfTest,
    ) -> bool {
        let (Some(da), Some(db)) = (a.md_digest, b.md_digest) else {
            return false;
        };
        if self.authorities.is_empty() {
            return false;
        }
        let auth = &self.authorities[rand::random_range(0..self.authorities.len())];
        let (addr, tx) = (auth.dir_addr, self.tx.clone());
        self.selftest_busy = true;
        tokio::task::spawn_local(async move {
            let r = fetch_microdescs(addr, &[da, db], Duration::from_secs(30))
                .await
                .map_err(|e| e.to_string());
            let _ = tx.send(DirEvent::SelfTestKeys {
                purpose,
                a,
                b,
                outcome: r,
            });
        });
        true
    }

    /// A worker answered a CREATE on an inbound connection that names
    /// our address of its family ([`super::reachability`]): the IPv4
    /// ORPort proven lets us publish (C's `router_orport_found_reachable`),
    /// the IPv6 one goes into the descriptor.
    pub fn on_create_reached_us(&mut self, peer: SocketAddr, allow_private: bool) {
        if self.ipv4.on_create_over_ipv4(peer, allow_private) {
            let publishing = if self.dirty && self.publishable() {
                " Publishing server descriptor."
            } else {
                ""
            };
            info!(
                "Self-testing indicates your ORPort {} is reachable from the outside. Excellent.{publishing}",
                self.ipv4.addr()
            );
            self.reachability_failed = None;
            self.dirty = true;
            if self.testing {
                // C uploads at once in a testing network.
                self.last_publish = None;
            }
        }
        if self.ipv6.on_create_over_ipv6(peer, allow_private) {
            self.update_ipv6_address("ORPort found reachable");
        }
    }

    /// Ask the authority at DirPort `dirport` what address it sees us at
    /// (its `X-Your-Address-Is`); the answer comes back as
    /// [`DirEvent::YourAddress`] (`address_change.rs`).
    pub fn ask_our_address(&self, dirport: SocketAddr) {
        let tx = self.tx.clone();
        tokio::task::spawn_local(async move {
            match weft_dir::dirport::fetch_your_address(dirport, Duration::from_secs(30)).await {
                Ok(Some(seen)) => {
                    let _ = tx.send(DirEvent::YourAddress {
                        authority: dirport,
                        seen,
                    });
                }
                Ok(None) => tracing::debug!("{dirport} did not say our address"),
                Err(e) => tracing::debug!("asking {dirport} for our address: {e}"),
            }
        });
    }

    /// Our IPv4 address changed ([`super::super::address_change`]): it goes
    /// into the next descriptor, after the ORPort is tested again (C's
    /// `router_reset_reachability` and `mark_my_descriptor_dirty`).
    pub fn set_address(&mut self, a: std::net::Ipv4Addr) {
        self.desc.address = a;
        self.ipv4
            .set_addr(SocketAddrV4::new(a, self.desc.or_port), Instant::now());
        self.reachability_failed = None;
        self.dirty = true;
        if self.testing {
            // C uploads at once in a testing network.
            self.last_publish = None;
        }
    }

    /// Whether a descriptor may go out now (C's
    /// `decide_if_publishable_server`: the IPv4 ORPort reachable or
    /// assumed so; an unproven IPv6 ORPort is only left out).
    pub(super) fn publishable(&self) -> bool {
        self.ipv4.publishable(&self.params)
    }

    /// C's `GETINFO status/reachability-succeeded/or`: every ORPort we
    /// have seems reachable.
    pub fn orports_seem_reachable(&self) -> bool {
        self.ipv4.seems_reachable() && self.ipv6.seems_reachable()
    }

    /// The IPv4 ORPort the last 20-minute warning named, until it is
    /// proven (the MetricsPort's and ControlPort's view).
    pub fn reachability_failed(&self) -> Option<SocketAddrV4> {
        self.reachability_failed
    }

    /// Put the IPv6 ORPort in the descriptor or take it out, as the
    /// self-test and the consensus say; republish on a change.
    pub(super) fn update_ipv6_address(&mut self, why: &str) {
        let now = self.ipv6.published(&self.params);
        if now != self.desc.or_address_v6 {
            info!(
                "IPv6 ORPort {} the descriptor: {why}",
                if now.is_some() { "in" } else { "out of" }
            );
            self.desc.or_address_v6 = now;
            self.dirty = true;
            if self.testing {
                // C uploads at once in a testing network.
                self.last_publish = None;
            }
        }
    }
}
