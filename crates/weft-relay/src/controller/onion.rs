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
use crate::worker::{WorkerHandle, WorkerMsg};

/// The controller's onion-service tables.
#[derive(Default)]
pub(super) struct OnionTables {
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
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.intro.len(), self.rend.len())
    }

    /// Handle `m` if it is an onion-service message from a worker (it is
    /// taken); anything else is left in place.
    pub(super) fn on_msg(&mut self, m: &mut Option<ControllerMsg>, workers: &[WorkerHandle]) {
        let send = |h: &HalfRef, msg: WorkerMsg| {
            if let Some(w) = workers.get(usize::from(h.worker)) {
                w.send(msg);
            }
        };
        match m.take() {
            Some(ControllerMsg::IntroEstablished { half, auth_key }) => {
                if let Some(old) = self.intro.insert(auth_key, half) {
                    if old != half {
                        // New introduction circuits take precedence.
                        send(
                            &old,
                            WorkerMsg::Destroy {
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
                    send(&to, WorkerMsg::Introduce2 { to, from, payload })
                }
                None => {
                    self.unknown_service += 1;
                    debug!("INTRODUCE1 for an unknown service; answering UNKNOWN_ID");
                    send(
                        &from,
                        WorkerMsg::IntroduceAck {
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
                send(&half, WorkerMsg::RendezvousEstablished { half, ok });
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
                        WorkerMsg::Splice {
                            half,
                            peer: waiting,
                            rendezvous2: None,
                        },
                    );
                    send(
                        &waiting,
                        WorkerMsg::Splice {
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
                        WorkerMsg::Destroy {
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
