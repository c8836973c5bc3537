//! Moving a connection from one worker to another under traffic, without
//! losing, duplicating or reordering a cell: the circuit core's side of it
//! (the driver moves the socket and its buffers, [`crate::worker::inbox`]).
//!
//! The connection X leaves worker A for worker B with everything it owns:
//! its link (socket, TLS, buffers), its circuit halves with their queued
//! cells. The halves' peers — on any worker C — still address the old
//! references, and cells are in flight on the rings. Order is kept by
//! markers that travel *in* the rings, which are FIFO per pair of workers:
//!
//! 1. **A detaches X.** Each old half slot becomes a [`Forwarder`]. For
//!    every peer p not on A, A puts `SourceDone{to: p}` on the ring A→C(p):
//!    after it, A sends nothing more to p.
//! 2. **B adopts X** (a `MovedConn` in its inbox), gives each half a new
//!    reference, tells A `Installed{old, new}` (ring B→A) and each peer's
//!    worker `PeerMoved{to: p, peer: new, old: A}` (ring B→C, before any of
//!    B's cells for p). If p is not on A, B holds cells for the new half
//!    that do not come through A until A's marker (step 4).
//! 3. **C (p's worker)** sets p's peer to the new reference; unless A's
//!    `SourceDone{to: p}` already came, p holds cells that do not come from
//!    A (they are B's, newer) until it does. C puts `Switched{old}` on the
//!    ring C→A: after it, C sends nothing more to the old reference.
//! 4. **A** forwards everything that arrives for an old reference to B (in
//!    arrival order, buffering until `Installed`), and after `Switched`
//!    sends `SourceDone{to: new}` to B, which releases the held cells.
//!
//! Extends in flight: a keyed half that leaves while its extend is pending
//! has no peer yet, and the relabel half made for it links to the old
//! reference. The forwarder passes the `Linked` on and stands in for the
//! detach's missing marker (`PeerMoved`, then `SourceDone`, to the relabel
//! half), which then switches like any peer. A relabel half that moves
//! before its `Linked` reached the keyed half: the keyed half takes the
//! `PeerMoved` first and answers `Switched` when the `Linked` comes.
//!
//! One move at a time. A half waits for one marker at a time and a
//! forwarder passes markers on as its own worker's, so two moves that
//! overlap on one circuit (its second connection leaving before the first
//! move's markers passed) could release held cells on the wrong marker.
//! They never overlap: a peer that still holds cells owes `Switched` until
//! its hold ends ([`Circuits::owe_switched`]), so the new half's release
//! means both ends are done; B then reports the move over
//! (`MigrationDone`, [`Circuits::tend_adopted`]) and the controller starts
//! no move before that (or before a timeout, for a circuit whose extend
//! never completes). [`Circuits::can_detach`] also refuses a connection
//! with a half inside a move, as far as this worker can see.
//!
//! Held cells are kept without the keyed half's onion layer and encrypted
//! when released, so the AES-CTR keystream follows the final order. A
//! forwarder stays for [`FORWARDER_LIFETIME`] after its marker passed, for
//! late control messages (DESTROY, a pending extend's answer).
//!
//! The cells a migration holds count against the circuit's queue limit, and
//! a pool that cannot hold them closes that circuit, never drops a cell.

use std::collections::VecDeque;

use tracing::info;
use weft_proto::cell::{cmd, BODY_LEN};

use crate::ewma::CircuitEwma;
use crate::messages::{ConnId, ControllerMsg, HalfRef, RingMsg};
use crate::pool::{CellPool, CellQueue};
use crate::worker::core::half::{Half, HalfRole};
use crate::worker::core::move_state::{ForwarderPhase, MoveState, OnSourceDone};
use crate::worker::core::{Circuits, ConnCircuits};

/// How long an old half slot keeps forwarding after its migration
/// finished, in nanoseconds.
pub(crate) const FORWARDER_LIFETIME_NS: u64 = 300_000_000_000;

/// What an old half slot does after its half moved.
pub(crate) struct Forwarder {
    /// Where it stands: detached, installed, its marker due or sent.
    pub(super) phase: ForwarderPhase,
    /// Messages for the old reference not yet passed on (before
    /// `Installed`, or from a half of this worker since the last flush), in
    /// arrival order.
    pub(super) buf: VecDeque<RingMsg>,
    /// A DESTROY (reason) for the old reference, to pass on once installed.
    pub(super) destroy: Option<u8>,
    /// When the migration started (core clock, ns).
    pub(super) since_ns: u64,
}

impl Forwarder {
    /// A forwarder for a half that is leaving at `now_ns`.
    pub(crate) fn new(now_ns: u64) -> Self {
        Forwarder {
            phase: ForwarderPhase::Detached { switched: false },
            buf: VecDeque::new(),
            destroy: None,
            since_ns: now_ns,
        }
    }
}

/// A queued cell travelling with its half.
#[derive(Clone, Copy)]
pub(crate) struct MovedCell {
    /// RELAY or RELAY_EARLY (or a connection-level command for urgent
    /// cells).
    pub(super) command: u8,
    /// Circuit ID (urgent cells).
    pub(super) circ_id: u32,
    /// Read stamp.
    pub(super) stamp_ns: u64,
    /// Body.
    pub(super) body: [u8; BODY_LEN],
}

/// One circuit half on its way to another worker.
pub(crate) struct MovedHalf {
    /// Its reference on the old worker.
    pub(super) old: HalfRef,
    /// Circuit ID on the connection.
    pub(super) circ_id: u32,
    /// Keys and state.
    pub(super) role: HalfRole,
    /// Its peer.
    pub(super) peer: Option<HalfRef>,
    /// EWMA state.
    pub(super) ewma: CircuitEwma,
    /// Queued cells, oldest first.
    pub(super) cells: Vec<MovedCell>,
    /// Held cells.
    pub(super) held: Vec<MovedCell>,
    /// Cells for its peer on another worker that waited for ring room
    /// (they cross from the new worker, behind its `PeerMoved`).
    pub(super) crossing: Vec<MovedCell>,
    /// Its circuit padding machine, if any
    /// ([`crate::worker::core::circpad`]).
    pub(super) pad: Option<Box<weft_proto::circpad::CircPadding>>,
}

/// The circuit core's part of a connection on its way to another worker.
pub(crate) struct MovedCircuits {
    /// Its identifier.
    pub(super) id: ConnId,
    /// TCP peer.
    pub(super) peer_addr: std::net::SocketAddr,
    /// We opened it.
    pub(super) we_initiated: bool,
    /// The peer's RSA identity, if a relay.
    pub(super) peer_rsa: Option<[u8; 20]>,
    /// Its link version, idle timeout and padding state.
    pub(super) link: super::ConnLink,
    /// Its halves.
    pub(super) halves: Vec<MovedHalf>,
    /// Its connection-level cells.
    pub(super) urgent: Vec<MovedCell>,
}

impl MovedCircuits {
    /// How many circuit halves move.
    pub(crate) fn circuit_count(&self) -> usize {
        self.halves.len()
    }
}

impl std::fmt::Debug for MovedCircuits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MovedCircuits")
            .field("id", &self.id)
            .field("peer_addr", &self.peer_addr)
            .field("halves", &self.halves.len())
            .field("urgent", &self.urgent.len())
            .finish()
    }
}

/// Empty a queue into moved cells (the slots go back to the pool).
fn take(q: &mut CellQueue, pool: &mut CellPool) -> Vec<MovedCell> {
    let mut v = Vec::with_capacity(q.len());
    while let Some(s) = q.pop(pool) {
        let c = pool.slot(s);
        v.push(MovedCell {
            command: c.command,
            circ_id: c.circ_id,
            stamp_ns: c.stamp_ns,
            body: c.body,
        });
        pool.release(s);
    }
    v
}

impl Circuits {
    /// True if connection `idx` may move now: open here, no CREATE2 in this worker's handshake queue
    /// ([`crate::worker::core::limits`]), no circuit in the middle of a rendezvous
    /// ([`crate::worker::core::onion`]), and no half still inside an earlier move (its
    /// own or its peer's): a half keeps one marker to wait for, and a
    /// second move before the first one's marker passed would release its
    /// held cells on the wrong marker.
    pub(crate) fn can_detach(&mut self, idx: usize) -> bool {
        if self.has_pending_creates(idx) {
            return false;
        }
        let Some(Some(c)) = self.conns.get(idx) else {
            return false;
        };
        // Asked every round while a move waits (`Worker::retry_move`):
        // nothing allocated.
        let halves = &self.halves;
        let moving = c
            .circuits
            .values()
            .any(|&s| halves.at(s).is_some_and(|h| h.in_move()));
        let streams = self.streams.on_conn(idx, c.circuits.values().copied());
        !moving && !streams && !self.in_rendezvous(idx) && !self.conn_has_leg(idx)
    }

    /// Step 1: take connection `idx`'s circuits out of the core. Each half
    /// slot becomes a forwarder; each peer gets `SourceDone`.
    pub(crate) fn detach(&mut self, idx: usize) -> Option<MovedCircuits> {
        if !self.can_detach(idx) {
            return None;
        }
        let mut c: ConnCircuits = self.conns.get_mut(idx)?.take()?;
        Self::fold_cell_counts(&mut self.counters.padding, &mut c);
        self.conn_ids.remove(&c.id);
        self.pending.retain(|&p| p != idx);
        // None wait for a handshake (`can_detach`); this only keeps the
        // queue free of a connection that is no longer here.
        self.forget_pending_creates(idx);
        let now = self.now_ns;
        let mut moved = Vec::new();
        let mut markers = Vec::new();
        for (circ_id, slot) in c.circuits.drain() {
            let Some(old) = self.halves.reference(slot) else {
                continue;
            };
            let Some(h) = self.halves.by_slot(slot) else {
                continue;
            };
            let role =
                std::mem::replace(&mut h.role, HalfRole::Moved(Box::new(Forwarder::new(now))));
            let ends_circuit = role.ends_circuit();
            let mut ewma = h.ewma;
            ewma.active = false;
            h.ewma = CircuitEwma::default();
            let cells = take(&mut h.queue, &mut self.pool);
            let held = take(&mut h.held, &mut self.pool);
            let crossing = match h.cross.take() {
                Some(mut x) => {
                    if let Some(l) = self.lanes.lanes.get_mut(usize::from(x.lane)) {
                        l.waiting.remove(slot, &mut x.ewma);
                    }
                    self.lanes.cells -= x.queue.len();
                    take(&mut x.queue, &mut self.pool)
                }
                None => Vec::new(),
            };
            if let Some(p) = h.peer {
                markers.push(p);
            }
            h.move_state = MoveState::default();
            let pad = h.pad.take();
            moved.push(MovedHalf {
                pad,
                old,
                circ_id,
                role,
                peer: h.peer.take(),
                ewma,
                cells,
                held,
                crossing,
            });
            self.forwarders.push(slot);
            if ends_circuit {
                self.halves.circuit_end_moved_away();
            }
        }
        let urgent = take(&mut c.sched.urgent, &mut self.pool);
        // After these markers we send nothing more to the peers.
        for p in markers {
            self.send_ordered(p, RingMsg::SourceDone { to: p });
        }
        self.counters.migrations += 1;
        Some(MovedCircuits {
            id: c.id,
            peer_addr: c.peer_addr,
            we_initiated: c.we_initiated,
            peer_rsa: c.peer_rsa,
            link: super::ConnLink {
                version: c.link_version,
                idle_timeout_ns: c.times.idle_timeout_ns,
                // A padding time scheduled here is this worker's: the new
                // one decides again within a second.
                padding: c.padding.moved(),
                proves_reachable: c.proves_reachable,
            },
            halves: moved,
            urgent,
        })
    }

    /// Step 2: install a connection's circuits that worker `from` moved
    /// here, on the driver's slot `idx`.
    pub(crate) fn attach(&mut self, idx: usize, m: MovedCircuits, from: u16) {
        let now = self.now_ns;
        self.add_conn(idx, m.id, m.peer_addr, m.we_initiated, m.peer_rsa, m.link);
        let mut refs = Vec::with_capacity(m.halves.len());
        for mh in m.halves {
            let mut h = Half::new(idx, mh.circ_id, mh.role, mh.peer);
            h.ewma = mh.ewma;
            h.pad = mh.pad;
            // Cells that do not come through the old worker wait for its
            // marker (always sent, see the module docs).
            h.move_state = MoveState::adopted_from(from);
            let r = self.halves.insert(h);
            self.circpad_adopted(r);
            refs.push(r);
            if let Some(c) = self.conn_mut(idx) {
                c.circuits.insert(mh.circ_id, r.slot);
            }
            for cell in mh.cells {
                self.enqueue(idx, r.slot, cell.command, cell.stamp_ns, now, &cell.body);
            }
            for cell in mh.held {
                if self.halves.get(r).is_none() {
                    break; // closed while its queue was rebuilt
                }
                let Some(s) = self.pool.alloc() else {
                    self.close_pool_exhausted(idx, r.slot);
                    break;
                };
                let c = self.pool.slot_mut(s);
                c.command = cell.command;
                c.stamp_ns = cell.stamp_ns;
                c.body = cell.body;
                if let Some(h) = self.halves.get(r) {
                    h.held.push(&mut self.pool, s);
                }
            }
            self.note_moved(mh.old, r);
            self.send_ordered(
                mh.old,
                RingMsg::Installed {
                    old: mh.old,
                    new: r,
                },
            );
            if let Some(p) = mh.peer {
                self.send_ordered(
                    p,
                    RingMsg::PeerMoved {
                        to: p,
                        peer: r,
                        old: from,
                    },
                );
            }
            // What waited to cross goes on from here, behind the
            // `PeerMoved` (its lane's ordered line goes first; a peer on
            // this worker holds it for the old worker's marker).
            self.adopt_crossing(r, mh.crossing);
        }
        self.adopted.push((m.id, refs));
        for cell in m.urgent {
            self.queue_urgent(idx, cell.circ_id, cell.command, &cell.body);
        }
        if self.has_output(idx) {
            if let Some(c) = self.conn_mut(idx) {
                if !c.sched.pending {
                    c.sched.pending = true;
                    self.pending.push_back(idx);
                }
            }
        }
        self.flush_destroys();
    }

    /// A moved connection that could not be installed: its circuits end
    /// (their peers get DESTROY).
    pub(crate) fn abandon(&mut self, m: MovedCircuits) {
        for h in m.halves {
            if let Some(p) = h.peer {
                self.destroy_later
                    .push((p, weft_proto::cell::destroy_reason::CHANNEL_CLOSED));
            }
        }
        self.flush_destroys();
    }

    pub(crate) fn forwarder(&mut self, slot: u32) -> Option<&mut Forwarder> {
        match self.halves.by_slot(slot).map(|h| &mut h.role) {
            Some(HalfRole::Moved(f)) => Some(f),
            _ => None,
        }
    }

    pub(crate) fn forwarder_push(&mut self, slot: u32, m: RingMsg) {
        if let Some(f) = self.forwarder(slot) {
            f.buf.push_back(m);
        }
        self.forwarder_flush(slot);
    }

    pub(crate) fn forwarder_installed(&mut self, old: HalfRef, new: HalfRef) {
        if !self.is_forwarder(old) {
            return;
        }
        if let Some(f) = self.forwarder(old.slot) {
            f.phase.installed(new);
        }
        self.forwarder_flush(old.slot);
    }

    pub(crate) fn forwarder_switched(&mut self, old: HalfRef) {
        if !self.is_forwarder(old) {
            return;
        }
        if let Some(f) = self.forwarder(old.slot) {
            f.phase.switched();
        }
        self.forwarder_flush(old.slot);
    }

    pub(crate) fn forward_destroy(&mut self, old: HalfRef, reason: u8) {
        if let Some(f) = self.forwarder(old.slot) {
            f.destroy = Some(reason);
        }
        self.forwarder_flush(old.slot);
    }

    /// Pass on what a forwarder holds, in order; then, once the peer
    /// switched, the "source done" marker. What the ring to the new worker
    /// refuses joins that ring's waiting line
    /// ([`Circuits::retry_waiting`]): a half of this worker that switched
    /// to the new reference sends on the same ring, and its cells must not
    /// overtake the ones it sent through the forwarder (the new half cannot
    /// tell them apart: both come from this worker).
    pub(crate) fn forwarder_flush(&mut self, slot: u32) {
        let me = self.me;
        let Some(new) = self.forwarder(slot).and_then(|f| f.phase.new_ref()) else {
            return;
        };
        let w = usize::from(new.worker);
        let mut local = Vec::new();
        let mut linked = None;
        while let Some(m) = self.forwarder(slot).and_then(|f| f.buf.pop_front()) {
            if let RingMsg::Linked { peer, .. } = m {
                linked = Some(peer);
            }
            let m = m.retarget(new);
            if w == me {
                local.push(m);
            } else {
                self.send_ordered(new, m);
            }
        }
        let mut destroy = None;
        let mut marker = false;
        if let Some(f) = self.forwarder(slot) {
            destroy = f.destroy.take();
            marker = f.phase.take_marker();
        }
        if marker {
            let m = RingMsg::SourceDone { to: new };
            if w == me {
                local.push(m);
            } else {
                self.send_ordered(new, m);
            }
        }
        for m in local {
            self.on_ring_msg(&m, me as u16);
        }
        if let Some(peer) = linked {
            self.link_moved_half(peer, new);
        }
        if let Some(reason) = destroy {
            self.destroy_later.push((new, reason));
            self.flush_destroys();
        }
    }

    /// The half left while its extend was pending, and the relabel half
    /// `peer` made for it links to the old reference (its `Linked` just
    /// went on to `new`). This worker sent `peer` nothing, so it does what
    /// the detach would have done had the link come first: tells `peer`
    /// that its peer moved and, in order behind that, that nothing more
    /// comes from here. `peer` then switches to `new` and answers
    /// `Switched`, after which the forwarder's own marker releases what
    /// `new` holds. Without this, `peer` would address the old reference
    /// for the circuit's life, and `new` would wait for a marker that never
    /// comes.
    fn link_moved_half(&mut self, peer: HalfRef, new: HalfRef) {
        let me = self.me as u16;
        self.send_ordered(
            peer,
            RingMsg::PeerMoved {
                to: peer,
                peer: new,
                old: me,
            },
        );
        self.send_ordered(peer, RingMsg::SourceDone { to: peer });
    }

    /// Each round and tick: report adopted connections whose move is
    /// over; retry forwarders the ring refused; drop old ones.
    pub(crate) fn tend_forwarders(&mut self) {
        self.tend_adopted();
        if self.forwarders.is_empty() {
            return;
        }
        let now = self.now_ns;
        // In place (no list per round): a flush adds no forwarder, and their
        // order does not matter (each flushes its own circuit's cells).
        let mut i = 0;
        while i < self.forwarders.len() {
            let slot = self.forwarders[i];
            let Some((empty, done, since)) = self
                .forwarder(slot)
                .map(|f| (f.buf.is_empty(), f.phase.done(), f.since_ns))
            else {
                self.forwarders.swap_remove(i);
                continue;
            };
            if !empty || !done {
                self.forwarder_flush(slot);
            }
            if done && empty && now.saturating_sub(since) >= FORWARDER_LIFETIME_NS {
                self.halves.remove(slot);
                self.forwarders.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Tell the controller about each adopted connection whose move is
    /// over: every new half got its old worker's marker (or closed). That
    /// marker left the old worker after the peer's `Switched`, which the
    /// peer sends only once its own hold ended ([`Circuits::owe_switched`]),
    /// so both ends of every circuit are done with the move and the next
    /// move cannot overlap it (a half keeps one marker to wait for).
    fn tend_adopted(&mut self) {
        if self.adopted.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.adopted);
        for (conn_id, refs) in list {
            let busy = refs
                .iter()
                .any(|&r| self.halves.get(r).is_some_and(|h| h.in_move()));
            if busy {
                self.adopted.push((conn_id, refs));
            } else {
                self.tell_controller(ControllerMsg::MigrationDone {
                    conn_id,
                    moved: true,
                });
            }
        }
    }

    /// A "source done" marker from worker `source` for half `to`.
    pub(crate) fn source_done(&mut self, to: HalfRef, source: u16) {
        let Some(h) = self.halves.get(to) else { return };
        if h.move_state.source_done(source) == OnSourceDone::Early {
            return;
        }
        // Release the held cells in arrival order (the keyed half adds its
        // layer now, in the order they will be written).
        let now = self.now_ns;
        loop {
            let Some(h) = self.halves.get(to) else { return };
            let Some(s) = h.held.pop(&self.pool) else {
                // Done with the move: the old reference may hear it.
                if let Some(old) = h.move_state.hold_ended() {
                    self.send_ordered(old, RingMsg::Switched { old });
                }
                return;
            };
            let slot = self.pool.slot(s).clone();
            self.pool.release(s);
            let mut body = slot.body;
            let conn = h.conn;
            let command = match &mut h.role {
                HalfRole::Keyed(k) => {
                    k.on_backward(&mut body);
                    cmd::RELAY
                }
                _ => slot.command,
            };
            self.enqueue(conn, to.slot, command, slot.stamp_ns, now, &body);
        }
    }

    /// Our half `to`'s peer moved from worker `old` to `peer`.
    pub(crate) fn peer_moved(&mut self, to: HalfRef, peer: HalfRef, old: u16) {
        let Some(h) = self.halves.get(to) else {
            self.destroy_later
                .push((peer, weft_proto::cell::destroy_reason::DESTROYED));
            return self.flush_destroys();
        };
        h.move_state.peer_moved(old);
        let Some(old_ref) = h.peer.replace(peer) else {
            // The relabel half moved before its `Linked` reached us: that
            // comes from `old` with the old reference, which is then told
            // `Switched` ([`Circuits::linked`]).
            h.move_state.expect_link_from(old);
            return;
        };
        // Cells that waited to cross to the old reference are older than
        // anything the half sends from now on, and `Switched` below
        // promises the old worker nothing more: they go to the new one.
        self.rehome_crossing(to.slot);
        // We send nothing more to the old reference.
        self.owe_switched(to, old_ref);
    }

    /// Our half `to` addresses its peer's new reference and sends nothing
    /// more to `old`: tell `old`'s worker, whose marker then releases what
    /// the new half holds. If `to` itself still holds cells for the old
    /// worker's marker, not before that marker passed: the new half's
    /// release then means that both halves are done with the move, which
    /// the new worker reports to the controller
    /// ([`Circuits::tend_adopted`]); the next move may only start then.
    pub(crate) fn owe_switched(&mut self, to: HalfRef, old: HalfRef) {
        let Some(h) = self.halves.get(to) else { return };
        if let Some(old) = h.move_state.switched_from(old) {
            self.send_ordered(old, RingMsg::Switched { old });
        }
    }

    /// Cells a moved half had waiting to cross: into the crossing queue of
    /// its new reference `r`, then where its peer is
    /// ([`Circuits::rehome_crossing`]).
    fn adopt_crossing(&mut self, r: HalfRef, cells: Vec<MovedCell>) {
        if cells.is_empty() {
            return;
        }
        let Circuits {
            lanes,
            halves,
            pool,
            ..
        } = self;
        let Some(h) = halves.get(r) else { return };
        let conn = h.conn;
        let x = h
            .cross
            .get_or_insert_with(|| Box::new(crate::worker::core::crossing::HalfCrossing::new()));
        let mut exhausted = false;
        for cell in cells {
            let Some(s) = pool.alloc() else {
                exhausted = true;
                break;
            };
            pool.put(s, cell.command, cell.stamp_ns, cell.stamp_ns, &cell.body);
            x.queue.push(pool, s);
            lanes.cells += 1;
        }
        if exhausted {
            return self.close_pool_exhausted(conn, r.slot);
        }
        self.rehome_crossing(r.slot);
    }
}

/// Log a connection's departure (the driver calls it once the inbox
/// message is on its way).
pub(crate) fn log_departure(conn_id: ConnId, from: usize, to: usize, halves: usize) {
    info!("connection {conn_id} moves from worker {from} to worker {to} with {halves} circuits");
}
