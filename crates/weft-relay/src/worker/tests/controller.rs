//! The controller's part in the core tests: its onion-service tables
//! (auth key → introduction circuit, cookie → rendezvous circuit) and its
//! conflux table (nonce → home worker), played on [`Net`]'s messages.

use super::*;

impl Net {
    /// Play the controller's onion-service and conflux tables: take their
    /// messages out of `controller` and answer them as `controller/onion.rs`
    /// and `controller/conflux.rs` do.
    /// True if there were any.
    pub(super) fn onion_controller(&mut self) -> bool {
        let msgs = std::mem::take(&mut self.controller);
        let mut moved = false;
        for m in msgs {
            let to = |h: &HalfRef| usize::from(h.worker);
            match m {
                ControllerMsg::IntroEstablished { half, auth_key } => {
                    if let Some(old) = self.intro.insert(auth_key, half) {
                        self.inbox[to(&old)].push(WorkerMsg::Destroy {
                            half: old,
                            reason: destroy_reason::FINISHED,
                        });
                    }
                }
                ControllerMsg::IntroMoved { auth_key, old, new } => {
                    if self.intro.get(&auth_key) == Some(&old) {
                        self.intro.insert(auth_key, new);
                    }
                }
                ControllerMsg::IntroGone { half, auth_key } => {
                    if self.intro.get(&auth_key) == Some(&half) {
                        self.intro.remove(&auth_key);
                    }
                }
                ControllerMsg::Introduce1 {
                    from,
                    auth_key,
                    payload,
                } => match self.intro.get(&auth_key) {
                    Some(&t) => self.inbox[to(&t)].push(WorkerMsg::Introduce2 {
                        to: t,
                        from,
                        payload,
                    }),
                    None => self.inbox[to(&from)].push(WorkerMsg::IntroduceAck {
                        to: from,
                        status: weft_proto::onion::ack_status::UNKNOWN_ID,
                    }),
                },
                ControllerMsg::EstablishRendezvous { half, cookie } => {
                    let ok = !self.rend.contains_key(&cookie);
                    if ok {
                        self.rend.insert(cookie, half);
                    }
                    self.inbox[to(&half)].push(WorkerMsg::RendezvousEstablished { half, ok });
                }
                ControllerMsg::RendezvousGone { half, cookie } => {
                    if self.rend.get(&cookie) == Some(&half) {
                        self.rend.remove(&cookie);
                    }
                }
                ControllerMsg::Rendezvous1 {
                    half,
                    cookie,
                    payload,
                } => match self.rend.remove(&cookie) {
                    Some(w) => {
                        self.inbox[to(&half)].push(WorkerMsg::Splice {
                            half,
                            peer: w,
                            rendezvous2: None,
                        });
                        self.inbox[to(&w)].push(WorkerMsg::Splice {
                            half: w,
                            peer: half,
                            rendezvous2: Some(payload),
                        });
                    }
                    None => self.inbox[to(&half)].push(WorkerMsg::Destroy {
                        half,
                        reason: destroy_reason::PROTOCOL,
                    }),
                },
                ControllerMsg::ConfluxLink { leg, link } => {
                    let home = *self.cfx_home.entry(link.nonce).or_insert(leg.worker);
                    self.inbox[usize::from(home)].push(WorkerMsg::ConfluxJoin { leg, link });
                }
                ControllerMsg::ConfluxSetGone { nonce, worker } => {
                    if self.cfx_home.get(&nonce) == Some(&worker) {
                        self.cfx_home.remove(&nonce);
                    }
                }
                other => {
                    self.controller.push(other);
                    continue;
                }
            }
            moved = true;
        }
        moved
    }
}
