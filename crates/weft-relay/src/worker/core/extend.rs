//! EXTEND2 in the circuit core, after the keyed half recognized it (and the
//! controller found or opened the connection to the next relay):
//!
//! 1. the worker that owns that connection makes a relabel half with a
//!    fresh circuit ID, sends CREATE2 and tells the keyed half `Linked`
//!    ([`Circuits::create_outbound`]);
//! 2. CREATED2 comes back to the relabel half ([`Circuits::extend_created2`])
//!    and travels, in order with the cells behind it, to the keyed half,
//!    which answers EXTENDED2 ([`Circuits::created2_arrived`]);
//! 3. or the extend fails and the circuit closes
//!    ([`Circuits::extend_failed`]).
//!
//! [tor-spec §5.1.2, §5.3; protocol-notes §6.1]

use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};

use crate::messages::{HalfRef, RingMsg};
use crate::worker::core::half::{Half, HalfRole};
use crate::worker::core::Circuits;

impl Circuits {
    /// Make a relabel half on connection `conn` toward the next relay, send
    /// CREATE2 with `create2` (HTYPE | HLEN | HDATA) and link it with the
    /// keyed half `prev`. Without the connection or a free circuit ID, the
    /// circuit closes.
    pub(crate) fn create_outbound(&mut self, conn: Option<usize>, prev: HalfRef, create2: &[u8]) {
        let Some((idx, circ_id)) = conn.and_then(|i| Some((i, self.fresh_circ_id(i)?))) else {
            let reason = if conn.is_some_and(|i| self.conn(i).is_some()) {
                destroy_reason::RESOURCELIMIT
            } else {
                destroy_reason::CHANNEL_CLOSED
            };
            self.destroy_later.push((prev, reason));
            return self.flush_destroys();
        };
        let r = self.halves.insert(Half::new(
            idx,
            circ_id,
            HalfRole::Relabel { created: false },
            Some(prev),
        ));
        if let Some(c) = self.conn_mut(idx) {
            c.circuits.insert(circ_id, r.slot);
        }
        self.queue_urgent(idx, circ_id, cmd::CREATE2, create2);
        self.send_ordered(prev, RingMsg::Linked { to: prev, peer: r });
    }

    /// CREATED2 on the relabel half at `slot` (connection `conn`): pass it
    /// to the keyed half, in order with the cells that follow it (through
    /// the ordered line if the ring to the keyed half's worker is full).
    pub(crate) fn extend_created2(&mut self, conn: usize, slot: u32, body: &[u8; BODY_LEN]) {
        let hlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
        if hlen + 2 > BODY_LEN {
            return self.close_circuit(
                conn,
                slot,
                destroy_reason::PROTOCOL,
                "CREATED2 with bad length",
            );
        }
        let Some(h) = self.halves.by_slot(slot) else {
            return;
        };
        if let HalfRole::Relabel { created } = &mut h.role {
            *created = true;
        }
        let Some(p) = h.peer else {
            return;
        };
        self.send_ordered(
            p,
            RingMsg::Created2 {
                to: p,
                len: (hlen + 2) as u16,
                body: *body,
            },
        );
    }

    /// The next hop answered the CREATE2 of keyed half `to` with `created2`
    /// (HLEN | HDATA): send EXTENDED2 toward the client.
    pub(crate) fn created2_arrived(&mut self, to: HalfRef, created2: &[u8]) {
        let now = self.now_ns;
        let Some(h) = self.halves.get(to) else { return };
        let HalfRole::Keyed(k) = &mut h.role else {
            return;
        };
        let mut cell = [0u8; BODY_LEN];
        k.extended(&mut cell, created2);
        let conn = h.conn;
        self.enqueue(conn, to.slot, cmd::RELAY, 0, now, &cell);
    }

    /// The extend of keyed half `half` failed (no connection, identity
    /// mismatch, refused target): close its circuit with `reason`.
    pub(crate) fn extend_failed(&mut self, half: HalfRef, reason: u8, why: &str) {
        if self.is_forwarder(half) {
            return self.forward_destroy(half, reason);
        }
        if let Some(h) = self.halves.get(half) {
            let conn = h.conn;
            self.close_circuit(conn, half.slot, reason, &format!("extend failed: {why}"));
        }
        self.flush_destroys();
    }
}
