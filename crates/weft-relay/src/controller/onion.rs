//! Where the two circuits of an introduction or a rendezvous meet: the
//! controller's tables of introduction circuits by the service's auth key
//! and of waiting rendezvous circuits by cookie (references, never the
//! circuits). Only the onion-service handshake cells pass here (one
//! INTRODUCE1, one ESTABLISH_RENDEZVOUS, one RENDEZVOUS1 per connection to
//! a service); the cells of a joined rendezvous go worker to worker like
//! any other. The tables hold what C Tor's hs circuitmap holds and follow
//! its rules: a new introduction circuit for an auth key replaces (and
//! closes, FINISHED) the old one; a cookie in use is refused; an unknown
//! cookie closes the RENDEZVOUS1 circuit. [C hs_circuitmap.c,
//! hs_intropoint.c, rendmid.c]

use std::collections::HashMap;

use tracing::debug;
use weft_proto::cell::destroy_reason;
use weft_proto::onion::ack_status;

use crate::messages::{ControllerMsg, HalfRef};
use crate::worker::CoreMsg;

/// The controller's onion-service tables. Sans-IO: a message from a
/// worker goes in ([`OnionTables::on_msg`]), the messages for workers come
/// out through the caller's `send` (worker index, message); the controller
/// puts them in inboxes, the worker tests in their in-memory ones.
#[derive(Default)]
pub(crate) struct OnionTables {
    /// Introduction circuits by auth key.
    intro: HashMap<[u8; 32], HalfRef>,
    /// Rendezvous circuits waiting for their service, by cookie.
    rend: HashMap<[u8; 20], HalfRef>,
    /// INTRODUCE1 for an auth key nobody registered here.
    pub(super) unknown_service: u64,
    /// RENDEZVOUS1 for a cookie nobody waits on.
    pub(super) unknown_cookie: u64,
}

impl OnionTables {
    /// Introduction circuits and waiting rendezvous circuits now.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.intro.len(), self.rend.len())
    }

    /// The introduction circuit registered for `auth_key`.
    #[cfg(test)]
    pub(crate) fn intro_circuit(&self, auth_key: &[u8; 32]) -> Option<HalfRef> {
        self.intro.get(auth_key).copied()
    }

    /// Handle `m` if it is an onion-service message from a worker (it is
    /// taken; what it causes goes to `out` as (worker, message)); anything
    /// else is left in place.
    pub(crate) fn on_msg(
        &mut self,
        m: &mut Option<ControllerMsg>,
        out: &mut impl FnMut(usize, CoreMsg),
    ) {
        let mut send = |h: &HalfRef, msg: CoreMsg| out(usize::from(h.worker), msg);
        match m.take() {
            Some(ControllerMsg::IntroEstablished { half, auth_key }) => {
                if let Some(old) = self.intro.insert(auth_key, half) {
                    if old != half {
                        // New introduction circuits take precedence.
                        send(
                            &old,
                            CoreMsg::Destroy {
                                half: old,
                                reason: destroy_reason::FINISHED,
                            },
                        );
                    }
                }
            }
            Some(ControllerMsg::IntroMoved { auth_key, old, new }) => {
                if self.intro.get(&auth_key) == Some(&old) {
                    self.intro.insert(auth_key, new);
                }
            }
            Some(ControllerMsg::IntroGone { half, auth_key }) => {
                if self.intro.get(&auth_key) == Some(&half) {
                    self.intro.remove(&auth_key);
                }
            }
            Some(ControllerMsg::Introduce1 {
                from,
                auth_key,
                payload,
            }) => match self.intro.get(&auth_key) {
                Some(&to) => {
                    debug!("INTRODUCE1 for auth key {}…: to {to:?}", hex4(&auth_key));
                    send(&to, CoreMsg::Introduce2 { to, from, payload })
                }
                None => {
                    self.unknown_service += 1;
                    debug!("INTRODUCE1 for an unknown service; answering UNKNOWN_ID");
                    send(
                        &from,
                        CoreMsg::IntroduceAck {
                            to: from,
                            status: ack_status::UNKNOWN_ID,
                        },
                    );
                }
            },
            Some(ControllerMsg::EstablishRendezvous { half, cookie }) => {
                let ok = !self.rend.contains_key(&cookie);
                debug!(
                    "ESTABLISH_RENDEZVOUS cookie {}… on {half:?}: {}",
                    hex4(&cookie),
                    if ok { "registered" } else { "in use" }
                );
                if ok {
                    self.rend.insert(cookie, half);
                }
                send(&half, CoreMsg::RendezvousEstablished { half, ok });
            }
            Some(ControllerMsg::RendezvousGone { half, cookie }) => {
                if self.rend.get(&cookie) == Some(&half) {
                    self.rend.remove(&cookie);
                }
            }
            Some(ControllerMsg::Rendezvous1 {
                half,
                cookie,
                payload,
            }) => match self.rend.remove(&cookie) {
                Some(waiting) => {
                    debug!(
                        "RENDEZVOUS1 cookie {}…: splicing {half:?} with {waiting:?}",
                        hex4(&cookie)
                    );
                    // The service's side first: cells from the client side
                    // can only follow the client's splice.
                    send(
                        &half,
                        CoreMsg::Splice {
                            half,
                            peer: waiting,
                            rendezvous2: None,
                        },
                    );
                    send(
                        &waiting,
                        CoreMsg::Splice {
                            half: waiting,
                            peer: half,
                            rendezvous2: Some(payload),
                        },
                    );
                }
                None => {
                    // It happens when a client gives up on its rendezvous
                    // circuit before the service answers. [C rendmid.c]
                    self.unknown_cookie += 1;
                    debug!(
                        "RENDEZVOUS1 with an unrecognized cookie {}…; closing its circuit",
                        hex4(&cookie)
                    );
                    send(
                        &half,
                        CoreMsg::Destroy {
                            half,
                            reason: destroy_reason::PROTOCOL,
                        },
                    );
                }
            },
            other => *m = other,
        }
    }
}

/// The first four bytes of a key or cookie, for a log line.
fn hex4(b: &[u8]) -> String {
    b.iter().take(4).map(|x| format!("{x:02X}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(worker: u16, slot: u32) -> HalfRef {
        HalfRef {
            worker,
            slot,
            gen: 1,
        }
    }

    fn intro(half: HalfRef, auth_key: [u8; 32]) -> ControllerMsg {
        ControllerMsg::IntroEstablished { half, auth_key }
    }

    fn rendezvous(half: HalfRef, cookie: [u8; 20]) -> ControllerMsg {
        ControllerMsg::EstablishRendezvous { half, cookie }
    }

    fn rendezvous1(half: HalfRef, cookie: [u8; 20]) -> ControllerMsg {
        ControllerMsg::Rendezvous1 {
            half,
            cookie,
            payload: vec![1],
        }
    }

    fn introduce1(from: HalfRef, auth_key: [u8; 32]) -> ControllerMsg {
        ControllerMsg::Introduce1 {
            from,
            auth_key,
            payload: vec![9],
        }
    }

    /// Feed one message; return what the tables sent.
    fn feed(t: &mut OnionTables, m: ControllerMsg) -> Vec<(usize, CoreMsg)> {
        let mut out = Vec::new();
        let mut m = Some(m);
        t.on_msg(&mut m, &mut |w, msg| out.push((w, msg)));
        assert!(m.is_none(), "an onion-service message is taken");
        out
    }

    #[test]
    fn a_new_introduction_circuit_replaces_and_closes_the_old_one_but_not_itself() {
        let mut t = OnionTables::default();
        let key = [7; 32];
        let (a, b) = (half(0, 1), half(1, 2));
        assert!(feed(&mut t, intro(a, key)).is_empty());
        // The same circuit again (a second ESTABLISH_INTRO): nothing closes.
        assert!(feed(&mut t, intro(a, key)).is_empty());
        let out = feed(&mut t, intro(b, key));
        assert!(matches!(
            out.as_slice(),
            [(0, CoreMsg::Destroy { half, reason })] if *half == a && *reason == destroy_reason::FINISHED
        ));
        assert_eq!(t.intro_circuit(&key), Some(b));
        // The old circuit's late goodbye leaves the new one registered.
        feed(
            &mut t,
            ControllerMsg::IntroGone {
                half: a,
                auth_key: key,
            },
        );
        assert_eq!(t.intro_circuit(&key), Some(b));
        // A move of the registered circuit follows it; of another, not.
        let b2 = half(0, 9);
        feed(
            &mut t,
            ControllerMsg::IntroMoved {
                auth_key: key,
                old: a,
                new: half(1, 5),
            },
        );
        assert_eq!(t.intro_circuit(&key), Some(b));
        feed(
            &mut t,
            ControllerMsg::IntroMoved {
                auth_key: key,
                old: b,
                new: b2,
            },
        );
        assert_eq!(t.intro_circuit(&key), Some(b2));
    }

    #[test]
    fn introduce1_goes_to_the_service_or_gets_unknown_id() {
        let mut t = OnionTables::default();
        let (svc, client) = (half(1, 3), half(0, 4));
        let out = feed(&mut t, introduce1(client, [1; 32]));
        assert!(matches!(
            out.as_slice(),
            [(0, CoreMsg::IntroduceAck { to, status })] if *to == client && *status == ack_status::UNKNOWN_ID
        ));
        assert_eq!(t.unknown_service, 1);
        feed(&mut t, intro(svc, [1; 32]));
        let out = feed(&mut t, introduce1(client, [1; 32]));
        assert!(matches!(
            out.as_slice(),
            [(1, CoreMsg::Introduce2 { to, from, .. })] if *to == svc && *from == client
        ));
    }

    #[test]
    fn a_cookie_is_registered_once_and_splices_once() {
        let mut t = OnionTables::default();
        let (client, svc, other) = (half(0, 1), half(1, 2), half(1, 3));
        let c = [5; 20];
        let out = feed(&mut t, rendezvous(client, c));
        assert!(matches!(
            out.as_slice(),
            [(0, CoreMsg::RendezvousEstablished { ok: true, .. })]
        ));
        let out = feed(&mut t, rendezvous(other, c));
        assert!(matches!(
            out.as_slice(),
            [(1, CoreMsg::RendezvousEstablished { ok: false, .. })]
        ));
        let out = feed(&mut t, rendezvous1(svc, c));
        // The service's side first, then the client's with RENDEZVOUS2.
        assert!(matches!(
            out.as_slice(),
            [
                (1, CoreMsg::Splice { half: a, peer: b, rendezvous2: None }),
                (0, CoreMsg::Splice { half: x, peer: y, rendezvous2: Some(_) }),
            ] if *a == svc && *b == client && *x == client && *y == svc
        ));
        assert_eq!(t.sizes(), (0, 0));
        let out = feed(&mut t, rendezvous1(svc, c));
        assert!(matches!(
            out.as_slice(),
            [(1, CoreMsg::Destroy { reason, .. })] if *reason == destroy_reason::PROTOCOL
        ));
        assert_eq!(t.unknown_cookie, 1);
    }
}
