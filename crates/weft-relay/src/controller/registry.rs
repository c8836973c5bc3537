//! The controller's registry of relay connections and extend routing: for an
//! EXTEND2, find the canonical connection to the next relay or open one
//! (deduplicating concurrent opens), on the least loaded worker or the
//! extending half's own, and hand the circuit to the worker that owns it.
//! Also the bandwidth self-test circuits' first hop. Facts about
//! connections only (worker, identity, canonical, age), never the objects.
//! [tor-spec §5.3.1; protocol-notes §6.1]

use super::directory::SelfTest;
use std::net::{IpAddr, SocketAddr};

use tracing::{debug, info};
use weft_proto::cell::destroy_reason;
use weft_proto::link::PeerKind;
use weft_proto::origin::HopTarget;
use weft_proto::relay::Extend2;

use super::{Controller, PendingConnect, Waiter};
use crate::messages::{ConnId, HalfRef};
use crate::worker::{CoreMsg, WorkerMsg};

impl Controller {
    /// Count and log where the two halves of an extended circuit live.
    pub(super) fn note_link(&mut self, from: &HalfRef, next_worker: usize) {
        if usize::from(from.worker) == next_worker {
            self.extends_same_worker += 1;
            debug!(
                "extend: half {} linked on worker {next_worker} (same-worker)",
                from.slot
            );
        } else {
            self.extends_cross_worker += 1;
            debug!(
                "extend: half {} linked across workers {} -> {next_worker} (cross-worker)",
                from.slot, from.worker
            );
        }
    }

    pub(super) fn fail_extend(&self, from: &HalfRef, reason: u8, why: String) {
        if let Some(w) = self.workers.get(usize::from(from.worker)) {
            w.send(CoreMsg::ExtendFailed {
                half: *from,
                reason,
                why,
            });
        }
    }

    /// Find or open the connection for an EXTEND2. [tor-spec §5.3.1;
    /// protocol-notes §6.1]
    pub(super) fn on_extend(&mut self, from: HalfRef, from_conn: ConnId, req: Extend2) {
        if let Some(f) = self.conns.get(&from_conn) {
            if let PeerKind::Relay { rsa_fp, ed_id } = &f.peer {
                if *rsa_fp == req.rsa_id || Some(*ed_id) == req.ed_id {
                    return self.fail_extend(
                        &from,
                        destroy_reason::PROTOCOL,
                        "extend back to the previous hop".into(),
                    );
                }
            }
        }
        if req.rsa_id == self.keys.fingerprint {
            return self.fail_extend(
                &from,
                destroy_reason::PROTOCOL,
                "extend to ourselves".into(),
            );
        }
        // C's circuit_extend_add_ipv4_helper / _ipv6_helper: a relay we
        // know from the consensus gets the addresses the extend left out.
        let (mut ipv4, mut ipv6) = (req.ipv4, req.ipv6);
        if let Some(&(v4, v6)) = self.relay_book.get(&req.rsa_id) {
            ipv4 = ipv4.or(Some(v4));
            ipv6 = ipv6.or(v6);
        }
        let have_v6 = self.cfg.ipv6_or_port.is_some();
        let addr = match extend_addr(ipv4, ipv6, have_v6, rand::random::<bool>()) {
            Some(a) => a,
            None => {
                return self.fail_extend(
                    &from,
                    destroy_reason::CONNECTFAILED,
                    match (ipv4, ipv6) {
                        (None, Some(_)) => "IPv6-only extend; no IPv6 ORPort".into(),
                        _ => "extend to port 0 or an unspecified address".into(),
                    },
                );
            }
        };
        if !self.cfg.extend_allow_private && is_private(addr.ip()) {
            return self.fail_extend(
                &from,
                destroy_reason::CONNECTFAILED,
                format!("extend to private address {addr} refused"),
            );
        }
        // TestingCrossWorkerExtends: the next hop's connection must be on
        // another worker than the keyed half (reuse one there, or open one).
        let avoid = (self.cfg.testing_cross_worker && self.workers.len() > 1)
            .then_some(usize::from(from.worker));
        self.with_connection(
            req.rsa_id,
            req.ed_id,
            addr,
            avoid,
            Waiter::Extend(from, req.create2),
        );
    }

    /// Hand `waiter` to the open connection `conn_id` on worker `worker`.
    pub(super) fn dispatch(&mut self, waiter: Waiter, worker: usize, conn_id: ConnId) {
        match waiter {
            Waiter::Extend(from, create2) => {
                self.note_link(&from, worker);
                self.workers[worker].send(CoreMsg::CreateOutbound {
                    conn_id,
                    prev: from,
                    create2,
                });
            }
            Waiter::SelfTest(first, rest) => self.workers[worker].send(CoreMsg::SelfTest {
                conn_id,
                first,
                rest,
                cells: crate::selftest::TOTAL_CELLS / crate::selftest::CIRCUITS as u32,
            }),
            Waiter::LearnAddress => {
                debug!("connection {conn_id} to an authority open: its NETINFO names our address")
            }
        }
    }

    /// Keep the consensus's ORPorts for [`Self::on_extend`].
    pub(super) fn note_relays(&mut self, c: Option<&weft_dir::consensus::ConsensusSummary>) {
        self.relay_book.clear();
        for r in c.map(|c| &c.relays[..]).unwrap_or_default() {
            let v6 = r.other_addresses.iter().find_map(|a| match a {
                SocketAddr::V6(a) => Some(*a),
                SocketAddr::V4(_) => None,
            });
            let v4 = std::net::SocketAddrV4::new(r.address, r.or_port);
            self.relay_book.insert(r.rsa_identity, (v4, v6));
        }
    }

    /// Whether a connection with relay `rsa_id` is open (either way).
    pub(super) fn connected_to(&self, rsa_id: &[u8; 20]) -> bool {
        self.by_identity
            .get(rsa_id)
            .is_some_and(|ids| !ids.is_empty())
    }

    /// Find the connection to use for relay `rsa_id` (ed), or open one
    /// (deduplicating concurrent opens), and give it `waiter`. Reuse rule as
    /// C Tor's `channel_get_for_extend`: canonical first, then one to the
    /// requested address; the oldest. [protocol-notes §6.1]
    pub(super) fn with_connection(
        &mut self,
        rsa_id: [u8; 20],
        ed: Option<[u8; 32]>,
        addr: SocketAddr,
        avoid_worker: Option<usize>,
        waiter: Waiter,
    ) {
        let best = self.by_identity.get(&rsa_id).and_then(|ids| {
            ids.iter()
                .filter_map(|id| self.conns.get(id))
                .filter(|f| Some(f.worker) != avoid_worker)
                .filter(|f| match (&f.peer, ed) {
                    (PeerKind::Relay { ed_id, .. }, Some(want)) => *ed_id == want,
                    _ => true,
                })
                .filter(|f| f.canonical || f.addr == addr)
                .min_by_key(|f| (!f.canonical, f.opened))
                .map(|f| (f.worker, f.conn_id))
        });
        if let Some((w, conn_id)) = best {
            return self.dispatch(waiter, w, conn_id);
        }
        let key = (rsa_id, avoid_worker);
        if let Some(p) = self.pending.get_mut(&key) {
            p.waiters.push(waiter);
            return;
        }
        if !self.limits.outbound_opening() {
            let why = "too many connections open (ConnLimit, file descriptors)".to_string();
            match waiter {
                Waiter::Extend(from, _) => {
                    self.fail_extend(&from, destroy_reason::RESOURCELIMIT, why)
                }
                Waiter::SelfTest(..) => info!("bandwidth self-test: {why}"),
                Waiter::LearnAddress => info!("cannot learn our address now: {why}"),
            }
            return;
        }
        let conn_id = self.new_conn_id();
        let w = match (avoid_worker, &waiter) {
            (Some(a), _) => (a + 1) % self.workers.len(),
            // An extend's new connection goes to the extending half's worker
            // unless that worker is clearly busier than the idlest: then the
            // circuit's cells stay on one worker (no hand-off, no wake-up),
            // and the balancer still moves connections when load skews.
            (None, Waiter::Extend(from, _))
                if self.cfg.testing_place_on_worker.is_none()
                    && self.load_gap(usize::from(from.worker)) < 0.2 =>
            {
                usize::from(from.worker)
            }
            _ => self.pick_worker(),
        };
        self.worker_load[w].connections += 1;
        self.conn_stats.or_created[1][usize::from(addr.is_ipv6())] += 1;
        debug!(
            "opening connection {conn_id} to {addr} ({}) on worker {w}",
            hex::encode_upper(rsa_id)
        );
        self.workers[w].send(WorkerMsg::Connect {
            conn_id,
            addr,
            rsa_id,
            ed_id: ed,
        });
        self.pending.insert(
            key,
            PendingConnect {
                conn_id,
                waiters: vec![waiter],
            },
        );
    }

    /// Launch the bandwidth self-test circuits: us → a → b → us.
    /// Launch self-test circuits: us → a → b → us. The bandwidth test
    /// builds C's several circuits to our advertised ORPort; the IPv6
    /// reachability test one whose last EXTEND2 names only our IPv6
    /// ORPort (C's `CIRCLAUNCH_IS_IPV6_SELFTEST`).
    pub(super) fn launch_selftest(&mut self, a: HopTarget, b: HopTarget, purpose: SelfTest) {
        let (addr, circuits) = match purpose {
            SelfTest::Bandwidth => (self.cfg.advertised, crate::selftest::CIRCUITS),
            SelfTest::Ipv4(v4) => (SocketAddr::V4(v4), 1),
            SelfTest::Ipv6(v6) => (SocketAddr::V6(v6), 1),
        };
        let me = HopTarget {
            rsa_id: self.keys.fingerprint,
            ed_id: Some(self.keys.ed_id),
            ntor_key: self.keys.onion.ntor.public,
            addr,
        };
        info!(
            "{purpose:?} self-test: {circuits} circuits through {} and {} to {addr}",
            hex::encode_upper(a.rsa_id),
            hex::encode_upper(b.rsa_id)
        );
        for _ in 0..circuits {
            let addr = a.addr;
            self.with_connection(
                a.rsa_id,
                a.ed_id,
                addr,
                None,
                Waiter::SelfTest(a.clone(), vec![b.clone(), me.clone()]),
            );
        }
    }
}

/// A consensus relay's IPv4 ORPort and its IPv6 one, if listed.
pub(super) type BookEntry = (std::net::SocketAddrV4, Option<std::net::SocketAddrV6>);

/// RFC 1918, loopback, link-local and other internal addresses.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || a.octets()[0] == 0
        }
        IpAddr::V6(a) => {
            a.is_loopback()
                || a.is_unspecified()
                || (a.segments()[0] & 0xfe00) == 0xfc00
                || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Where an extend connects, as C's `circuit_choose_ip_ap_for_extend()`:
/// IPv6 only when we have an IPv6 ORPort (C's proxy for IPv6
/// connectivity); with both addresses usable, `coin` picks; a port 0 or an
/// unspecified address is not usable.
fn extend_addr(
    v4: Option<std::net::SocketAddrV4>,
    v6: Option<std::net::SocketAddrV6>,
    have_v6: bool,
    coin: bool,
) -> Option<SocketAddr> {
    let usable = |a: &SocketAddr| a.port() != 0 && !a.ip().is_unspecified();
    let v4 = v4.map(SocketAddr::V4).filter(usable);
    let v6 = v6.map(SocketAddr::V6).filter(|a| have_v6 && usable(a));
    match (v4, v6) {
        (Some(a), Some(b)) => Some(if coin { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extends_choose_an_address_as_c_tor() {
        let v4 = Some("203.0.113.1:9001".parse().unwrap());
        let v6 = Some("[2001:db8::1]:9001".parse().unwrap());
        let a4: SocketAddr = "203.0.113.1:9001".parse().unwrap();
        let a6: SocketAddr = "[2001:db8::1]:9001".parse().unwrap();
        // Without an IPv6 ORPort of our own, IPv4 only.
        assert_eq!(extend_addr(v4, v6, false, false), Some(a4));
        assert_eq!(extend_addr(None, v6, false, true), None);
        // With one, either at random; IPv6 alone when that is all.
        assert_eq!(extend_addr(v4, v6, true, true), Some(a4));
        assert_eq!(extend_addr(v4, v6, true, false), Some(a6));
        assert_eq!(extend_addr(None, v6, true, true), Some(a6));
        // Port 0 and unspecified addresses are not usable.
        let zero = Some("[2001:db8::1]:0".parse().unwrap());
        assert_eq!(extend_addr(None, zero, true, true), None);
        let unspec = Some("0.0.0.0:9001".parse().unwrap());
        assert_eq!(extend_addr(unspec, v6, true, true), Some(a6));
        assert_eq!(extend_addr(None, None, true, true), None);
    }

    #[test]
    pub(super) fn private_addresses() {
        assert!(is_private("127.0.0.1".parse().unwrap()));
        assert!(is_private("10.1.2.3".parse().unwrap()));
        assert!(is_private("192.168.1.1".parse().unwrap()));
        assert!(!is_private("8.8.8.8".parse().unwrap()));
        assert!(is_private("::1".parse().unwrap()));
    }
}
