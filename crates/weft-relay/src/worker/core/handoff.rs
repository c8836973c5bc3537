//! The hand-off between the two halves of a circuit, in the circuit core:
//! a cell that leaves one half goes to its peer's queue directly when the
//! peer is on this worker, else onto the ring to the peer's worker or,
//! when that ring has no room, into the half's own crossing queue
//! ([`Circuits::forward`], [`crate::worker::core::crossing`]); what
//! arrives on a ring is delivered to its half ([`Circuits::on_ring_msg`],
//! [`Circuits::deliver`]). The keyed half toward the client adds its
//! onion layer when the cell is queued on it, so the AES-CTR keystream
//! follows the order of the queue.
//!
//! Nothing here stops a connection's reading: a full ring delays only the
//! circuits whose cells it refused ([`Circuits::serve_lanes`] gives its
//! room back in EWMA order), and messages that keep their order with the
//! cells around them go through the lane's ordered line, which is never
//! dropped.

use tracing::debug;
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::NextHop;

use crate::ewma::CircuitEwma;
use crate::messages::{HalfRef, RingMsg};
use crate::worker::core::crossing::{HalfCrossing, NO_LANE};
use crate::worker::core::half::HalfRole;
use crate::worker::core::Circuits;

/// Cells of one waiting circuit placed on a ring before the lane's mux
/// picks again (fairness by cells within a batch's grain; one heap step
/// per batch).
const SERVE_BATCH: u32 = 16;

/// What [`Circuits::serve_lane`] stopped at.
enum Served {
    /// The ring is full, or nothing of the lane waits.
    Stop,
    /// The half at this slot waits on the wrong lane (its peer moved or is
    /// gone): it is off the lane, to be sent where its peer is now.
    Rehome(u32),
}

/// What became of a cell for another worker.
enum Crossed {
    /// On the ring, in the half's crossing queue, or dropped (no such
    /// worker, no such half).
    Done,
    /// The half's crossing queue is at the circuit's limit.
    OverLimit(usize),
    /// The pool is at its hard cap.
    PoolExhausted,
}

impl Circuits {
    /// Deliver a message that must stay in order with cells: locally, or on
    /// the ring to the half's worker; if that ring is full or its ordered
    /// line is not empty, at the end of the line ([`Circuits::serve_lanes`]).
    pub(crate) fn send_ordered(&mut self, to: HalfRef, msg: RingMsg) {
        let w = usize::from(to.worker);
        self.send_ordered_to(w, msg);
    }

    /// [`Circuits::send_ordered`] to worker `w` (a message for a conflux
    /// set's home names no half). True if it waits in the ordered line.
    pub(crate) fn send_ordered_to(&mut self, w: usize, msg: RingMsg) -> bool {
        if w == self.me {
            self.on_ring_msg(&msg, self.me as u16);
            return false;
        }
        let Some(lane) = self.lanes.lanes.get_mut(w) else {
            return false;
        };
        let Some(ring) = lane.ring.as_mut() else {
            return false;
        };
        if lane.ordered.is_empty() {
            match ring.push(msg) {
                Ok(()) => return false,
                Err(m) => lane.ordered.push_back(m),
            }
        } else {
            lane.ordered.push_back(msg);
        }
        true
    }

    /// Place what waits on every lane, as far as the rings take it: the
    /// ordered lines first, then the waiting circuits' cells in EWMA order.
    pub(crate) fn serve_lanes(&mut self) {
        for w in 0..self.lanes.lanes.len() {
            if self.lanes.lanes[w].is_idle() {
                continue;
            }
            // Bounded: each rehome takes one half off this lane for good
            // (its peer is elsewhere, or gone).
            while let Served::Rehome(slot) = self.serve_lane(w) {
                self.rehome_crossing(slot);
            }
        }
    }

    /// Serve lane `w` until its ring is full, nothing waits, or a waiting
    /// half turns out to belong elsewhere.
    fn serve_lane(&mut self, w: usize) -> Served {
        let Circuits {
            lanes,
            halves,
            pool,
            ..
        } = self;
        let cells = &mut lanes.cells;
        let lane = &mut lanes.lanes[w];
        let Some(ring) = lane.ring.as_mut() else {
            lane.ordered.clear();
            return Served::Stop;
        };
        while let Some(m) = lane.ordered.front() {
            if ring.push(*m).is_err() {
                return Served::Stop;
            }
            if let RingMsg::ConfluxCell { leg, .. } = m {
                if let Some(x) = halves.get(*leg).and_then(|h| h.cross.as_deref_mut()) {
                    x.ordered = x.ordered.saturating_sub(1);
                }
            }
            lane.ordered.pop_front();
        }
        while let Some(slot) = lane.waiting.peek() {
            let Some(h) = halves.by_slot(slot) else {
                let mut gone = CircuitEwma {
                    active: true,
                    ..Default::default()
                };
                lane.waiting.remove(slot, &mut gone);
                continue;
            };
            let to = h.peer;
            let Some(x) = h.cross.as_deref_mut() else {
                let mut gone = CircuitEwma {
                    active: true,
                    ..Default::default()
                };
                lane.waiting.remove(slot, &mut gone);
                continue;
            };
            let Some(front) = x.queue.front() else {
                lane.waiting.remove(slot, &mut x.ewma);
                x.lane = NO_LANE;
                continue;
            };
            let Some(to) = to.filter(|p| usize::from(p.worker) == w) else {
                lane.waiting.remove(slot, &mut x.ewma);
                x.lane = NO_LANE;
                return Served::Rehome(slot);
            };
            // Up to a batch of this circuit's cells, then the mux again (its
            // order is by cells; one heap step per batch, not per cell).
            let mut sent = 0u32;
            let mut full = false;
            let mut next = Some(front);
            while let Some(front) = next {
                let c = pool.slot(front);
                let (command, stamp_ns) = (c.command, c.stamp_ns);
                // The body straight from its pool slot into the ring's.
                let made = ring.push_filled(
                    || RingMsg::Cell {
                        to,
                        command,
                        stamp_ns,
                        body: [0; BODY_LEN],
                    },
                    |m| {
                        if let RingMsg::Cell { body, .. } = m {
                            body.copy_from_slice(&c.body);
                        }
                    },
                );
                if made.is_err() {
                    full = true;
                    break;
                }
                x.queue.pop(pool);
                pool.release(front);
                *cells -= 1;
                sent += 1;
                next = if sent < SERVE_BATCH {
                    x.queue.front()
                } else {
                    None
                };
            }
            let more = !x.queue.is_empty();
            if sent > 0 {
                lane.waiting
                    .sent(slot, &mut x.ewma, sent, lane.weight, more);
                if !more {
                    x.lane = NO_LANE;
                }
            }
            if full {
                return Served::Stop;
            }
        }
        Served::Stop
    }

    /// The half at `slot` has cells waiting to cross, and its peer changed
    /// (it moved, or it is gone): take it off its lane, then drop the
    /// cells (no peer), deliver them here in order (the peer is on this
    /// worker now; a peer inside a move holds them for its marker, as
    /// [`Circuits::deliver`] does any cell), or list it on its peer's lane.
    pub(crate) fn rehome_crossing(&mut self, slot: u32) {
        let me = self.me;
        let Circuits { lanes, halves, .. } = self;
        let Some(h) = halves.by_slot(slot) else {
            return;
        };
        let peer = h.peer;
        let Some(x) = h.cross.as_deref_mut() else {
            return;
        };
        if let Some(l) = lanes.lanes.get_mut(usize::from(x.lane)) {
            l.waiting.remove(slot, &mut x.ewma);
        }
        x.lane = NO_LANE;
        if x.queue.is_empty() {
            return;
        }
        match peer {
            None => self.drop_crossing(slot),
            Some(p) if usize::from(p.worker) == me => {
                while let Some(s) = self
                    .halves
                    .by_slot(slot)
                    .and_then(|h| h.cross.as_deref_mut())
                    .and_then(|x| x.queue.pop(&self.pool))
                {
                    self.lanes.cells -= 1;
                    let c = self.pool.slot(s);
                    let (command, stamp_ns, body) = (c.command, c.stamp_ns, c.body);
                    self.pool.release(s);
                    self.deliver(p, command, stamp_ns, &body, me as u16);
                }
            }
            Some(p) => {
                let w = p.worker;
                if let Some(l) = self.lanes.lanes.get_mut(usize::from(w)) {
                    // Counts of every lane share one reference time (see
                    // `Lanes::begin_round`): the count carries over.
                    l.waiting.activate(slot, &mut x.ewma);
                    x.lane = w;
                } else {
                    self.drop_crossing(slot);
                }
            }
        }
    }

    /// Drop the cells waiting in the crossing queue of the half at `slot`
    /// (its circuit closed, or its next hop went with a TRUNCATE) and take
    /// it off its lane.
    pub(crate) fn drop_crossing(&mut self, slot: u32) {
        let Circuits {
            lanes,
            halves,
            pool,
            ..
        } = self;
        let Some(h) = halves.by_slot(slot) else {
            return;
        };
        let Some(x) = h.cross.as_deref_mut() else {
            return;
        };
        if let Some(l) = lanes.lanes.get_mut(usize::from(x.lane)) {
            l.waiting.remove(slot, &mut x.ewma);
        }
        x.lane = NO_LANE;
        let n = x.queue.len();
        lanes.cells -= n;
        x.queue.clear(pool);
    }

    /// Hand a cell from the half at `from` to its peer `to`: into its queue
    /// if it is on this worker (a keyed peer adds its layer now), else onto
    /// the ring or, behind what of this half or this lane waits, into the
    /// half's crossing queue. `conn` is the connection the cell was read
    /// from (the circuit closes there if its crossing queue is over the
    /// limit or the pool is exhausted).
    #[inline]
    pub(crate) fn forward(
        &mut self,
        conn: usize,
        from: u32,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
    ) {
        self.counters.cells += 1;
        let w = usize::from(to.worker);
        if w == self.me {
            self.deliver(to, command, stamp_ns, body, self.me as u16);
            return;
        }
        self.counters.cross += 1;
        match self.cross(w, from, to, command, stamp_ns, body) {
            Crossed::Done => {}
            Crossed::OverLimit(n) => {
                let max = self.limits.max_circuit_queue;
                let why = format!("{n} cells waiting for another worker, maximum allowed is {max}");
                self.close_circuit(conn, from, destroy_reason::RESOURCELIMIT, &why);
            }
            Crossed::PoolExhausted => self.close_pool_exhausted(conn, from),
        }
    }

    /// A cell of the half at `from` for `to` on worker `w` (not us): see
    /// [`Circuits::forward`].
    #[inline]
    fn cross(
        &mut self,
        w: usize,
        from: u32,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &[u8; BODY_LEN],
    ) -> Crossed {
        let Circuits {
            lanes,
            halves,
            pool,
            limits,
            now_ns,
            ..
        } = self;
        let Some(lane) = lanes.lanes.get_mut(w) else {
            return Crossed::Done;
        };
        let idle = lane.is_idle();
        let Some(ring) = lane.ring.as_mut() else {
            // No ring to that worker (it is us, or out of range): drop.
            return Crossed::Done;
        };
        let Some(h) = halves.by_slot(from) else {
            return Crossed::Done;
        };
        // Made once per half, at its first cell for another worker.
        let x = h.cross.get_or_insert_with(|| Box::new(HalfCrossing::new()));
        if idle {
            // Nothing of this lane waits (nor of this half, which would be
            // on it): straight into the ring slot, the body's one copy on
            // this side. While circuits wait, the ring's room is theirs in
            // EWMA order, and a cell of another circuit takes its place
            // among them rather than the room as it frees up.
            debug_assert!(x.queue.is_empty() || x.lane != w as u16);
            let made = ring.push_with(|| RingMsg::Cell {
                to,
                command,
                stamp_ns,
                body: *body,
            });
            if made.is_ok() {
                lane.waiting.charge_idle(&mut x.ewma, 1, lane.weight);
                return Crossed::Done;
            }
        }
        // Behind what waits: in the circuit's own queue, bounded like its
        // other queues.
        let n = x.queue.len();
        if n >= limits.max_circuit_queue {
            return Crossed::OverLimit(n);
        }
        let Some(s) = pool.alloc() else {
            return Crossed::PoolExhausted;
        };
        pool.put(s, command, stamp_ns, *now_ns, body);
        x.queue.push(pool, s);
        lanes.cells += 1;
        if x.lane == NO_LANE {
            x.lane = w as u16;
            lane.waiting.activate(from, &mut x.ewma);
        }
        Crossed::Done
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
            } => {
                if let Some(r) = self.ring_reads.get_mut(usize::from(source)) {
                    r.note(to.slot);
                }
                self.deliver(to, command, stamp_ns, body, source)
            }
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
