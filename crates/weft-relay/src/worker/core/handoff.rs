//! The hand-off between the two halves of a circuit, in the circuit core:
//! a cell that leaves one half goes to its peer's queue directly when the
//! peer is on this worker, else onto the ring to the peer's worker
//! ([`Circuits::forward`]); what arrives on a ring is delivered to its half
//! ([`Circuits::on_ring_msg`], [`Circuits::deliver`]). The keyed half
//! toward the client adds its onion layer when the cell is queued on it, so
//! the AES-CTR keystream follows the order of the queue.
//!
//! Backpressure: a cell that finds its ring full waits in its
//! connection's stall slot and the connection stops reading. Messages that
//! must keep their order with the cells around them but come from no
//! connection (links, migration markers) never spin and are never
//! dropped: they join the same per-ring waiting line as the stalled
//! connections, and [`Circuits::retry_waiting`] places both in the order
//! they were refused before anything newer may use that ring.

use tracing::debug;
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::NextHop;

use crate::messages::{HalfRef, RingMsg};
use crate::worker::core::half::HalfRole;
use crate::worker::core::{Circuits, Waiting};

/// What became of a cell handed to a half. (`must_use`: a stall must
/// reach the reader as [`crate::worker::core::dispatch::CellVerdict::Pause`],
/// the only way the driver learns that a connection stopped.)
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Queued, sent, held or dropped: the reader goes on.
    Done,
    /// The ring to that worker is full; the cell waits in the reading
    /// connection's stall slot.
    Stalled,
}

/// Entries (536 bytes each) an empty waiting line keeps allocated.
const WAITING_KEPT: usize = 64;

impl Circuits {
    /// Push `msg` on the ring to worker `w`, unless something is waiting
    /// for room on that ring (it goes first) or the ring is full.
    // The refused message comes back by value (as from the ring itself) so
    // the caller can park it in a stall slot or the waiting line: no
    // allocation.
    #[allow(clippy::result_large_err)]
    #[inline]
    pub(crate) fn try_push(&mut self, w: usize, msg: RingMsg) -> Result<(), RingMsg> {
        if !self.waiting[w].is_empty() {
            return Err(msg);
        }
        match self.outs.get_mut(w) {
            Some(Some(p)) => p.push(msg),
            // No ring to that worker (it is us, or out of range): drop.
            _ => Ok(()),
        }
    }

    /// Deliver a message that must stay in order with cells: locally, or on
    /// the ring to the half's worker; if that ring is full or has a waiting
    /// line, at the end of the line ([`Circuits::retry_waiting`]).
    pub(crate) fn send_ordered(&mut self, to: HalfRef, msg: RingMsg) {
        let w = usize::from(to.worker);
        if w == self.me {
            self.on_ring_msg(&msg, self.me as u16);
            return;
        }
        if w >= self.outs.len() {
            return;
        }
        if let Err(m) = self.try_push(w, msg) {
            self.waiting[w].push_back(Waiting::Msg(m));
        }
    }

    /// Connection `conn` must wait: `msg` for worker `w` sits in its stall
    /// slot, at the end of `w`'s waiting line, and the connection stops
    /// reading until it is placed.
    pub(crate) fn stall(&mut self, conn: usize, w: usize, msg: RingMsg) {
        if let Some(c) = self.conn_mut(conn) {
            c.stall = Some((w, msg));
            self.waiting[w].push_back(Waiting::Conn(conn));
        }
    }

    /// Take connection `conn` out of every waiting line (it closed, moved
    /// or its stalled cell was readdressed).
    pub(crate) fn unwait(&mut self, conn: usize) {
        for line in &mut self.waiting {
            line.retain(|e| !matches!(e, Waiting::Conn(c) if *c == conn));
        }
    }

    /// Place what waits for room on each ring, in the order it was refused,
    /// as far as the rings take it; connections whose stalled cell went out
    /// may read again ([`Circuits::take_resumed`]).
    pub(crate) fn retry_waiting(&mut self) {
        for w in 0..self.waiting.len() {
            while let Some(&e) = self.waiting[w].front() {
                let Some(Some(p)) = self.outs.get_mut(w) else {
                    self.waiting[w].clear();
                    break;
                };
                match e {
                    Waiting::Msg(m) => {
                        if p.push(m).is_err() {
                            break;
                        }
                    }
                    Waiting::Conn(idx) => {
                        let Some(Some(c)) = self.conns.get_mut(idx) else {
                            self.waiting[w].pop_front();
                            continue;
                        };
                        match c.stall.take() {
                            Some((dw, m)) if dw == w => {
                                if let Err(m) = p.push(m) {
                                    c.stall = Some((dw, m));
                                    break;
                                }
                                self.effects
                                    .push_back(crate::worker::core::Effect::Resume(idx));
                            }
                            other => c.stall = other,
                        }
                    }
                }
                self.waiting[w].pop_front();
            }
        }
    }

    /// Once a second (from the core's report): a waiting line that a burst
    /// grew (a connection's move sends messages per circuit) and that is
    /// empty now gives that room back. Not where the line empties: a busy
    /// ring's line empties and regrows many times a second, and shrinking
    /// it each time put allocations on the data path (a CI run counted
    /// 795 worker allocations over 75,801 exit DATA cells).
    pub(crate) fn shrink_waiting(&mut self) {
        for line in &mut self.waiting {
            if line.is_empty() && line.capacity() > WAITING_KEPT {
                line.shrink_to(WAITING_KEPT);
            }
        }
    }

    /// Hand a cell from a half to its peer `to`: into its queue if it is on
    /// this worker (a keyed peer adds its layer now), else onto the ring.
    /// `conn` is the connection the cell was read from (it stalls if the
    /// ring is full).
    #[inline]
    pub(crate) fn forward(
        &mut self,
        conn: usize,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
    ) -> Handed {
        self.counters.cells += 1;
        let w = usize::from(to.worker);
        if w == self.me {
            self.deliver(to, command, stamp_ns, body, self.me as u16);
            return Handed::Done;
        }
        self.counters.cross += 1;
        let make = || RingMsg::Cell {
            to,
            command,
            stamp_ns,
            body: *body,
        };
        // Straight into the ring slot: the body's one copy on this side.
        let make = if self.waiting[w].is_empty() {
            match self.outs.get_mut(w) {
                Some(Some(p)) => match p.push_with(make) {
                    Ok(()) => return Handed::Done,
                    Err(make) => make,
                },
                // No ring to that worker (it is us, or out of range): drop.
                _ => return Handed::Done,
            }
        } else {
            make
        };
        self.stall(conn, w, make());
        Handed::Stalled
    }

    /// A cell for half `to` on this worker, from worker `source`: add our
    /// layer if it is the keyed half (toward the client), queue it. While
    /// the half's peer is moving, cells that did not come through the old
    /// worker are held (without our layer) until its marker passes.
    pub(crate) fn deliver(
        &mut self,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &[u8; BODY_LEN],
        source: u16,
    ) {
        let now = self.now_ns;
        let max = self.limits.max_circuit_queue;
        let Some(h) = self.halves.get(to) else { return };
        if h.move_state.holds(source) {
            // Newer than what the old source still has in flight: wait
            // (held cells count against the circuit's queue limit).
            let conn = h.conn;
            if h.held.len() + h.queue.len() >= max {
                let why = format!(
                    "{} cells held during a migration, maximum allowed is {max}",
                    h.held.len()
                );
                return self.close_circuit(conn, to.slot, destroy_reason::RESOURCELIMIT, &why);
            }
            let Some(s) = self.pool.alloc() else {
                return self.close_pool_exhausted(conn, to.slot);
            };
            self.pool.put(s, command, stamp_ns, stamp_ns, body);
            h.held.push(&mut self.pool, s);
            return;
        }
        let (command, layer) = match &mut h.role {
            HalfRole::Keyed(_) => (cmd::RELAY, true),
            HalfRole::Relabel { .. } => (command, false),
            // An origin half has no peer; nothing is handed to it.
            HalfRole::Origin(_) => return,
            HalfRole::Moved(f) => {
                // Moved away: the forwarder passes it on.
                f.buf.push_back(RingMsg::Cell {
                    to,
                    command,
                    stamp_ns,
                    body: *body,
                });
                return;
            }
        };
        let conn = h.conn;
        // Copied once, into its pool slot; the keyed half adds its layer
        // there, right after the cell took its place in the queue (the
        // keystream follows the queue's order).
        let Some(s) = self.enqueue(conn, to.slot, command, stamp_ns, now, body) else {
            return;
        };
        if layer {
            if let Some(h) = self.halves.get(to) {
                if let HalfRole::Keyed(k) = &mut h.role {
                    k.on_backward(&mut self.pool.slot_mut(s).body);
                }
                // Circuit padding hears of every cell sent toward the
                // client (one test when no machine runs).
                if h.pad.is_some() {
                    self.pad_nonpadding_sent(to.slot);
                }
            }
        }
    }

    /// A message from worker `source`'s ring (or a local one that must keep
    /// the same order), read where it lies.
    pub(crate) fn on_ring_msg(&mut self, m: &RingMsg, source: u16) {
        match *m {
            RingMsg::Installed { old, new } => return self.forwarder_installed(old, new),
            RingMsg::Switched { old } => return self.forwarder_switched(old),
            RingMsg::ConfluxCell { .. }
            | RingMsg::ConfluxLegState { .. }
            | RingMsg::ConfluxLegGone { .. } => return self.conflux_ring_msg(m),
            _ => {}
        }
        if self.is_forwarder(m.target()) {
            return self.forwarder_push(m.target().slot, *m);
        }
        match *m {
            RingMsg::Installed { .. } | RingMsg::Switched { .. } => {}
            RingMsg::ConfluxCell { .. }
            | RingMsg::ConfluxLegState { .. }
            | RingMsg::ConfluxLegGone { .. }
            | RingMsg::ConfluxLinked { .. }
            | RingMsg::ConfluxSend { .. } => self.conflux_ring_msg(m),
            RingMsg::SourceDone { to } => self.source_done(to, source),
            RingMsg::PeerMoved { to, peer, old } => self.peer_moved(to, peer, old),
            RingMsg::Cell {
                to,
                command,
                stamp_ns,
                ref body,
            } => self.deliver(to, command, stamp_ns, body, source),
            RingMsg::Linked { to, peer } => self.linked(to, peer),
            RingMsg::Introduce2 {
                to,
                from,
                len,
                ref body,
            } => self.introduce2_arrived(to, from, &body[..usize::from(len).min(BODY_LEN)]),
            RingMsg::IntroduceAck { to, status } => self.introduce_ack_arrived(to, status),
            RingMsg::Created2 { to, len, ref body } => {
                self.created2_arrived(to, &body[..usize::from(len).min(BODY_LEN)])
            }
        }
    }

    /// True if `r` is one of this worker's halves that moved away (its slot
    /// forwards).
    pub(crate) fn is_forwarder(&mut self, r: HalfRef) -> bool {
        usize::from(r.worker) == self.me
            && matches!(
                self.halves.get(r).map(|h| &h.role),
                Some(HalfRole::Moved(_))
            )
    }

    /// The keyed half `to` (which asked for an extend) now has `peer`.
    pub(crate) fn linked(&mut self, to: HalfRef, peer: HalfRef) {
        match self.halves.get(to) {
            Some(h) if h.move_state.expects_link_from(peer.worker) => {
                // `peer` moved and its `PeerMoved` came first: we already
                // address its new reference; the old one hears that we
                // switched ([`crate::worker::core::migrate`]).
                h.move_state.link_came(peer.worker);
                self.owe_switched(to, peer);
            }
            Some(h)
                if h.peer.is_none()
                    && matches!(&h.role, HalfRole::Keyed(k) if k.next == NextHop::Pending) =>
            {
                h.peer = Some(peer);
            }
            _ => {
                debug!(
                    "worker {}: link for a half that is gone; closing the new half",
                    self.me
                );
                self.destroy_later.push((peer, destroy_reason::DESTROYED));
            }
        }
    }
}
