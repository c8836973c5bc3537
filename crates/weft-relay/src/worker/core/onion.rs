//! The onion-service roles in the circuit core: introduction point and
//! rendezvous point. The keyed half checks the cells and changes its
//! [`Purpose`] (weft-proto); this room does what needs the other circuit,
//! which usually lives on another worker: the two meet through the
//! controller's tables (auth key → introduction circuit, cookie → waiting
//! rendezvous circuit; control plane only, see docs/architecture.md).
//!
//! * Introduction: ESTABLISH_INTRO verified → INTRO_ESTABLISHED, the
//!   controller learns the auth key. INTRODUCE1 → the controller finds the
//!   service's circuit → its worker relays INTRODUCE2 (within the circuit's
//!   rate limit, prop 305) → the client's worker answers INTRODUCE_ACK.
//! * Rendezvous: ESTABLISH_RENDEZVOUS → the controller registers the cookie
//!   (or refuses a cookie in use) → RENDEZVOUS_ESTABLISHED. RENDEZVOUS1 →
//!   the controller takes the cookie → both circuits are spliced: each
//!   half's peer is the other keyed half, and the client's side first sends
//!   RENDEZVOUS2. From then on a cell not for us crosses like any cell to a
//!   peer: our layer off on one circuit, on on the other.
//!
//! A connection with a circuit between ESTABLISH_RENDEZVOUS and its splice
//! does not migrate (the controller holds its reference); an introduction
//! circuit does, and tells the controller its new reference.
//! [rend-spec-v3 §3–§4; C hs_intropoint.c, rendmid.c]

use tracing::debug;
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::{ForwardAction, Purpose};
use weft_proto::onion::{ack_status, hs_cmd, introduce_ack_body, COOKIE_LEN};
use weft_proto::relay;

use crate::messages::{ControllerMsg, HalfRef, RingMsg};
use crate::worker::core::core_msg::CoreMsg;
use crate::worker::core::half::{Half, HalfRole};
use crate::worker::core::{Circuits, Effect};

impl Circuits {
    /// The keyed half at `slot` (connection `conn`) recognized an
    /// onion-service cell; `body` is the decrypted cell (or, for
    /// INTRO_ESTABLISHED, the encrypted answer).
    pub(crate) fn onion_action(
        &mut self,
        conn: usize,
        slot: u32,
        action: ForwardAction,
        body: &[u8; BODY_LEN],
        stamp_ns: u64,
    ) {
        let Some(half) = self.halves.reference(slot) else {
            return;
        };
        let data = |h: &relay::RelayHeader| h.data(body).to_vec();
        let msg = match action {
            ForwardAction::IntroEstablished { auth_key } => {
                self.reply(conn, slot, stamp_ns, body);
                self.counters.onion.intro_established += 1;
                ControllerMsg::IntroEstablished { half, auth_key }
            }
            ForwardAction::Introduce { auth_key, header } => ControllerMsg::Introduce1 {
                from: half,
                auth_key,
                payload: data(&header),
            },
            ForwardAction::EstablishRendezvous { cookie } => {
                ControllerMsg::EstablishRendezvous { half, cookie }
            }
            ForwardAction::Rendezvous1 { cookie, header } => ControllerMsg::Rendezvous1 {
                half,
                cookie,
                payload: data(&header).get(COOKIE_LEN..).unwrap_or_default().to_vec(),
            },
            _ => return,
        };
        self.tell_controller(msg);
    }

    /// From the controller: relay `payload` as INTRODUCE2 on introduction
    /// half `to` (through its forwarder if it moved), answer `from`.
    pub(crate) fn introduce2(&mut self, to: HalfRef, from: HalfRef, payload: &[u8]) {
        let mut body = [0u8; BODY_LEN];
        let n = payload.len().min(BODY_LEN);
        body[..n].copy_from_slice(&payload[..n]);
        let msg = RingMsg::Introduce2 {
            to,
            from,
            len: n as u16,
            body,
        };
        self.on_ring_msg(&msg, self.me as u16);
        self.flush_destroys();
    }

    /// INTRODUCE2 for introduction half `to`, here: send it if the circuit
    /// is still an introduction point and its limit allows, and tell the
    /// client how it went (C Tor says UNKNOWN_ID for a dead circuit and a
    /// full bucket alike).
    pub(crate) fn introduce2_arrived(&mut self, to: HalfRef, from: HalfRef, data: &[u8]) {
        let now = self.now_ns;
        let now_s = now / 1_000_000_000;
        let mut status = ack_status::UNKNOWN_ID;
        let mut sent = None;
        if let Some(h) = self.halves.get(to) {
            if let HalfRole::Keyed(k) = &mut h.role {
                if let Purpose::IntroPoint(ip) = &mut k.purpose {
                    if ip.bucket.can_send(now_s) {
                        let mut cell = [0u8; BODY_LEN];
                        k.originate(&mut cell, hs_cmd::INTRODUCE2, 0, data);
                        sent = Some((h.conn, cell));
                        status = ack_status::SUCCESS;
                    } else {
                        self.counters.onion.introduce_limited += 1;
                    }
                }
            }
        }
        if let Some((conn, cell)) = sent {
            self.counters.onion.introduce2_sent += 1;
            self.enqueue(conn, to.slot, cmd::RELAY, 0, now, &cell);
        } else {
            self.counters.onion.introduce_nacked += 1;
        }
        let w = usize::from(from.worker);
        if w == self.me {
            self.introduce_ack(from, status);
        } else {
            self.effects.push_back(Effect::Worker(
                w,
                CoreMsg::IntroduceAck { to: from, status },
            ));
        }
    }

    /// Send INTRODUCE_ACK with `status` on the client's half `to` (through
    /// its forwarder if it moved).
    pub(crate) fn introduce_ack(&mut self, to: HalfRef, status: u16) {
        self.on_ring_msg(&RingMsg::IntroduceAck { to, status }, self.me as u16);
        self.flush_destroys();
    }

    /// INTRODUCE_ACK for the client's half `to`, here.
    pub(crate) fn introduce_ack_arrived(&mut self, to: HalfRef, status: u16) {
        let now = self.now_ns;
        let Some(h) = self.halves.get(to) else { return };
        let HalfRole::Keyed(k) = &mut h.role else {
            return;
        };
        let mut cell = [0u8; BODY_LEN];
        k.originate(
            &mut cell,
            hs_cmd::INTRODUCE_ACK,
            0,
            &introduce_ack_body(status),
        );
        let conn = h.conn;
        self.enqueue(conn, to.slot, cmd::RELAY, 0, now, &cell);
    }

    /// The controller registered (or, the cookie being in use, refused) the
    /// cookie of rendezvous half `half`.
    pub(crate) fn rendezvous_established(&mut self, half: HalfRef, ok: bool) {
        let now = self.now_ns;
        let Some(h) = self.halves.get(half) else {
            // Closed meanwhile; it told the controller when it closed.
            return;
        };
        let conn = h.conn;
        let HalfRole::Keyed(k) = &mut h.role else {
            return;
        };
        let Purpose::RendPending { cookie } = k.purpose else {
            return;
        };
        if !ok {
            self.counters.onion.rend_duplicate_cookie += 1;
            return self.close_circuit(
                conn,
                half.slot,
                destroy_reason::PROTOCOL,
                "duplicate rendezvous cookie in ESTABLISH_RENDEZVOUS",
            );
        }
        k.purpose = Purpose::RendWaiting { cookie };
        let mut cell = [0u8; BODY_LEN];
        k.originate(&mut cell, hs_cmd::RENDEZVOUS_ESTABLISHED, 0, &[]);
        self.counters.onion.rend_established += 1;
        self.enqueue(conn, half.slot, cmd::RELAY, 0, now, &cell);
    }

    /// Join rendezvous half `half` with `peer`; the client's side first
    /// gets RENDEZVOUS2 with `rendezvous2`. If `half` is gone, so goes
    /// `peer`.
    pub(crate) fn splice(&mut self, half: HalfRef, peer: HalfRef, rendezvous2: Option<&[u8]>) {
        let now = self.now_ns;
        let mut queued = None;
        let joined = match self.halves.get(half) {
            Some(h) => {
                let conn = h.conn;
                match &mut h.role {
                    HalfRole::Keyed(k)
                        if matches!(
                            (&k.purpose, rendezvous2.is_some()),
                            (Purpose::RendWaiting { .. }, true) | (Purpose::Joining, false)
                        ) =>
                    {
                        if let Some(d) = rendezvous2 {
                            let mut cell = [0u8; BODY_LEN];
                            k.originate(&mut cell, hs_cmd::RENDEZVOUS2, 0, d);
                            queued = Some((conn, cell));
                        }
                        k.purpose = Purpose::Spliced;
                        h.peer = Some(peer);
                        true
                    }
                    _ => false,
                }
            }
            None => false,
        };
        if let Some((conn, cell)) = queued {
            self.counters.onion.rend_joined += 1;
            self.enqueue(conn, half.slot, cmd::RELAY, 0, now, &cell);
        }
        if !joined {
            debug!(
                "worker {}: rendezvous circuit gone before its splice; closing the other",
                self.me
            );
            self.destroy_later.push((peer, destroy_reason::PROTOCOL));
        }
        self.flush_destroys();
    }

    /// A half is being dropped: the controller forgets its auth key or
    /// cookie.
    pub(crate) fn forget_onion_role(&mut self, r: HalfRef, h: &Half) {
        let HalfRole::Keyed(k) = &h.role else { return };
        let msg = match k.purpose {
            Purpose::IntroPoint(ref ip) => ControllerMsg::IntroGone {
                half: r,
                auth_key: ip.auth_key,
            },
            Purpose::RendPending { cookie } | Purpose::RendWaiting { cookie } => {
                ControllerMsg::RendezvousGone { half: r, cookie }
            }
            _ => return,
        };
        self.tell_controller(msg);
    }

    /// True if connection `conn` has a circuit between
    /// ESTABLISH_RENDEZVOUS / RENDEZVOUS1 and its splice (the controller
    /// holds its reference, so it may not move).
    pub(crate) fn in_rendezvous(&mut self, conn: usize) -> bool {
        let Some(c) = self.conns.get(conn).and_then(Option::as_ref) else {
            return false;
        };
        let slots: Vec<u32> = c.circuits.values().copied().collect();
        slots.into_iter().any(|s| {
            matches!(
                self.halves.by_slot(s).map(|h| &h.role),
                Some(HalfRole::Keyed(k)) if matches!(
                    k.purpose,
                    Purpose::RendPending { .. } | Purpose::RendWaiting { .. } | Purpose::Joining
                )
            )
        })
    }

    /// After a migration: the controller learns the new reference of an
    /// introduction circuit.
    pub(crate) fn note_moved(&mut self, old: HalfRef, new: HalfRef) {
        let Some(h) = self.halves.get(new) else {
            return;
        };
        if let HalfRole::Keyed(k) = &h.role {
            if let Purpose::IntroPoint(ip) = &k.purpose {
                let auth_key = ip.auth_key;
                self.tell_controller(ControllerMsg::IntroMoved { auth_key, old, new });
            }
        }
    }
}
