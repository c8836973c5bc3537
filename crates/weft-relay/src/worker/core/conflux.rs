//! Conflux at the exit, in the circuit core: the legs on this worker and
//! the sets whose home this worker is (docs/architecture.md, "Conflux at
//! the exit"). The set's rules (sequence numbers, the out-of-order queue,
//! the choice of leg) are weft-proto's `circuit::conflux`; this room moves
//! messages between a leg and its set's home.
//!
//! * **A leg stays where its connection is**: its keyed half (onion keys,
//!   SENDMEs, congestion control) never moves. A LINK is checked here
//!   (exit circuit, congestion control negotiated, no streams, a relay
//!   before it) and goes to the controller, which knows each nonce's home.
//! * **A set has one home** (the worker of its first leg): its sequence
//!   numbers, its out-of-order queue and its streams (in the home's stream
//!   room, owned by [`StreamOwner::Set`]). A leg's multiplexed
//!   cells and SWITCHes go home in the leg's order (one FIFO ring per
//!   worker pair, or a call when home is here); the leg's congestion state
//!   follows after LINKED, LINKED_ACK and every circuit SENDME.
//! * **Downstream**, the home picks a leg for each message (the client's
//!   UX: MinRTT or LowRTT) and has the leg's worker originate it (a SWITCH
//!   first when the leg changes).
//! * A leg that closes tells its home; the home closes the whole set when
//!   C Tor would (the leg was in use or held the highest numbers), and on
//!   a protocol violation or a full out-of-order queue.
//!
//! Connections that carry a leg do not migrate (see `migrate`).
//! [prop 329; C conflux.c, conflux_pool.c]

use std::collections::HashMap;

use slab::Slab;
use tracing::{debug, info};
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::conflux::{
    self, Arrival, ConfluxSet, LegState, Link, SetError, SetLimits, OOO_CELL_COST,
};
use weft_proto::relay::{self, relay_cmd, RelayHeader, RelayMsg};

use crate::messages::{ConfluxCounters, ControllerMsg, HalfRef, RingMsg, SetRef, OOO_DEPTH_BOUNDS};
use crate::worker::core::half::HalfRole;
use crate::worker::core::streams::StreamOwner;
use crate::worker::core::Circuits;

/// A leg on this worker.
struct LegRecord {
    /// Its set, once the home answered.
    set: Option<SetRef>,
    /// When LINKED went out (µs).
    linked_sent_us: u64,
    /// LINKED → LINKED_ACK (µs; 0 until then).
    rtt_us: u64,
    /// DATA cells it originated for its set.
    sent_total: u64,
}

/// A set whose home is this worker.
struct HomeSet {
    gen: u32,
    nonce: [u8; 32],
    set: ConfluxSet<HalfRef>,
}

/// The conflux room of one worker.
#[derive(Default)]
pub(crate) struct ConfluxRoom {
    /// Legs on this worker, by half slot.
    legs: HashMap<u32, LegRecord>,
    sets: Slab<HomeSet>,
    by_nonce: HashMap<[u8; 32], usize>,
    next_gen: u32,
    counters: ConfluxCounters,
    /// Bytes in every set's out-of-order queue, kept as messages are
    /// queued and released, so the round's memory report walks no set.
    ooo_total: u64,
}

impl ConfluxRoom {
    /// True if the half at `slot` is a leg (linked or linking).
    pub(crate) fn is_leg(&self, slot: u32) -> bool {
        !self.legs.is_empty() && self.legs.contains_key(&slot)
    }

    /// Bytes in this worker's out-of-order queues.
    pub(crate) fn ooo_bytes(&self) -> u64 {
        #[cfg(test)]
        assert_eq!(
            self.ooo_total,
            self.sets
                .iter()
                .map(|(_, s)| s.set.ooo_bytes() as u64)
                .sum::<u64>(),
            "the kept out-of-order byte count drifted from the sets'"
        );
        self.ooo_total
    }

    /// Sets with queued messages: (their streams' owner, age of the
    /// oldest at `now_ns`, bytes), for the memory limit.
    pub(crate) fn oom_candidates(&self, now_ns: u64) -> Vec<(StreamOwner, u64, u64)> {
        crate::worker::core::walks::visit(self.sets.len());
        self.sets
            .iter()
            .filter_map(|(i, s)| {
                let t = s.set.ooo_oldest_stamp()?;
                Some((
                    StreamOwner::Set(i),
                    now_ns.saturating_sub(t),
                    s.set.ooo_bytes() as u64,
                ))
            })
            .collect()
    }

    /// The counters with the gauges filled in.
    pub(crate) fn report(&self) -> ConfluxCounters {
        let mut c = self.counters;
        c.sets_open = self.sets.len() as u64;
        crate::worker::core::walks::visit(self.sets.len());
        c.legs_open = self.sets.iter().map(|(_, s)| s.set.len() as u64).sum();
        c
    }
}

impl Circuits {
    fn set_limits(&self) -> SetLimits {
        let p = &self.ctx.cfx;
        SetLimits {
            max_legs: p.max_legs,
            max_ooo_bytes: p.max_ooo_bytes,
            // Beyond what the client's other legs can have in flight.
            max_switch_gap: self.ctx.cc.cwnd_max.min(1 << 20) * 2,
        }
    }

    /// LINK, LINKED, LINKED_ACK or SWITCH on the keyed half at `slot`
    /// (its decrypted message in `body`).
    pub(crate) fn conflux_cell(
        &mut self,
        conn: usize,
        slot: u32,
        h: RelayHeader,
        body: &[u8; BODY_LEN],
    ) {
        let command = h.command;
        if !self.ctx.cfx.enabled {
            // The consensus turned conflux off (cfx_enabled=0): C closes
            // the circuit on any conflux cell.
            self.conflux_refuse(conn, slot, "conflux cell while cfx_enabled=0");
            return;
        }
        let linked = self.conflux.legs.get(&slot).and_then(|l| l.set);
        match (command, linked) {
            (conflux::LINK, _) => self.conflux_link(conn, slot, h.data(body)),
            (conflux::LINKED_ACK, Some(set)) => {
                let now_us = self.now_ns / 1000;
                let first = match self.conflux.legs.get_mut(&slot) {
                    Some(rec) if rec.rtt_us == 0 => {
                        rec.rtt_us = now_us.saturating_sub(rec.linked_sent_us).max(1);
                        true
                    }
                    _ => false,
                };
                if !first {
                    self.conflux_refuse(conn, slot, "a second CONFLUX_LINKED_ACK");
                    return;
                }
                self.leg_snapshot(slot, set);
            }
            (conflux::SWITCH, Some(set)) => self.leg_to_home(slot, set, h, body),
            (conflux::LINKED, _) => {
                self.conflux_refuse(conn, slot, "CONFLUX_LINKED at an exit");
            }
            _ => self.conflux_refuse(conn, slot, "conflux cell on a circuit that is not linked"),
        }
    }

    /// Close the circuit at `slot` for a conflux protocol violation.
    fn conflux_refuse(&mut self, conn: usize, slot: u32, why: &str) {
        self.close_circuit(conn, slot, destroy_reason::PROTOCOL, why);
    }

    /// A LINK: checked as C checks it, then the controller finds the home.
    fn conflux_link(&mut self, conn: usize, slot: u32, data: &[u8]) {
        let why = if self.conflux.legs.contains_key(&slot) {
            Some("CONFLUX_LINK on a circuit that is already a leg")
        } else if self.streams.owns_any(StreamOwner::circuit(conn, slot)) {
            Some("CONFLUX_LINK on a circuit with streams")
        } else if self.conn(conn).is_none_or(|c| c.client) {
            Some("CONFLUX_LINK from a one-hop client")
        } else if self
            .streams_keyed(slot)
            .is_none_or(|k| k.congestion().is_none())
        {
            Some("CONFLUX_LINK without congestion control")
        } else {
            None
        };
        let link = Link::parse(data);
        let (Some(link), None) = (link, why) else {
            self.conflux.counters.links_refused += 1;
            return self.conflux_refuse(conn, slot, why.unwrap_or("malformed CONFLUX_LINK"));
        };
        let Some(leg) = self.halves.reference(slot) else {
            return;
        };
        self.conflux.legs.insert(
            slot,
            LegRecord {
                set: None,
                linked_sent_us: 0,
                rtt_us: 0,
                sent_total: 0,
            },
        );
        self.tell_controller(ControllerMsg::ConfluxLink { leg, link });
    }

    fn streams_keyed(&mut self, slot: u32) -> Option<&mut weft_proto::circuit::KeyedHalf> {
        match &mut self.halves.by_slot(slot)?.role {
            HalfRole::Keyed(k) => Some(k),
            _ => None,
        }
    }

    /// From the controller: this worker is the home of `link`'s set; add
    /// leg `leg` (made if new) and have it send LINKED, or close it.
    pub(crate) fn conflux_join(&mut self, leg: HalfRef, link: &Link) {
        let limits = self.set_limits();
        let idx = match self.conflux.by_nonce.get(&link.nonce) {
            Some(&i) => i,
            None => {
                self.conflux.next_gen = self.conflux.next_gen.wrapping_add(1);
                let i = self.conflux.sets.insert(HomeSet {
                    gen: self.conflux.next_gen,
                    nonce: link.nonce,
                    set: ConfluxSet::new(limits),
                });
                self.conflux.by_nonce.insert(link.nonce, i);
                self.conflux.counters.sets_created += 1;
                i
            }
        };
        let me = self.me as u16;
        let hs = &mut self.conflux.sets[idx];
        let set = SetRef {
            worker: me,
            slot: idx as u32,
            gen: hs.gen,
        };
        match hs.set.add_leg(leg, link) {
            Some(linked) => {
                self.conflux.counters.legs_linked += 1;
                self.conflux.counters.legs_remote += u64::from(leg.worker != me);
                debug!("worker {}: conflux set {idx}: leg {leg:?} joins", self.me);
                self.send_ordered(
                    leg,
                    RingMsg::ConfluxLinked {
                        to: leg,
                        set,
                        linked,
                    },
                );
            }
            None => {
                self.conflux.counters.links_refused += 1;
                info!(
                    "worker {}: conflux set {idx} is full ({} legs); closing the new leg",
                    self.me,
                    hs.set.len()
                );
                self.destroy_later.push((leg, destroy_reason::PROTOCOL));
                if hs.set.is_empty() {
                    self.conflux_close_set(idx, destroy_reason::PROTOCOL, "no legs");
                }
            }
        }
        self.flush_destroys();
    }

    /// A message for a set or a leg, from a ring or from this worker.
    pub(crate) fn conflux_ring_msg(&mut self, m: &RingMsg) {
        match *m {
            RingMsg::ConfluxLinked { to, set, linked } => self.leg_linked(to, set, &linked),
            RingMsg::ConfluxSend {
                to,
                command,
                stream_id,
                len,
                ref data,
            } => self.leg_originate(
                to,
                command,
                stream_id,
                &data[..usize::from(len).min(data.len())],
            ),
            RingMsg::ConfluxCell { set, leg, ref msg } => self.home_cell(set, leg, msg),
            RingMsg::ConfluxLegState { set, leg, state } => {
                if let Some(idx) = self.home_set(set) {
                    self.conflux.sets[idx].set.update_leg(leg, state);
                    self.circuit_window_opened(StreamOwner::Set(idx));
                }
            }
            RingMsg::ConfluxLegGone { set, leg } => {
                if let Some(idx) = self.home_set(set) {
                    let inc = u64::from(self.ctx.cc.sendme_inc);
                    if self.conflux.sets[idx].set.remove_leg(leg, inc) {
                        self.conflux_close_set(
                            idx,
                            destroy_reason::FINISHED,
                            "a leg in use closed (or the last one)",
                        );
                    } else {
                        self.circuit_window_opened(StreamOwner::Set(idx));
                    }
                }
            }
            _ => {}
        }
    }

    /// The index of home set `set`, if it is still this one.
    fn home_set(&self, set: SetRef) -> Option<usize> {
        let idx = set.slot as usize;
        let hs = self.conflux.sets.get(idx)?;
        (usize::from(set.worker) == self.me && hs.gen == set.gen).then_some(idx)
    }

    /// Send a message to set `set`'s home: a call here, else its ring, in
    /// order behind what waits there (the lane's ordered line: a full ring
    /// stops no connection's reading).
    fn send_home(&mut self, set: SetRef, msg: RingMsg) -> bool {
        let w = usize::from(set.worker);
        if w != self.me {
            self.counters.cross += 1;
        }
        self.send_ordered_to(w, msg)
    }

    /// A multiplexed message or SWITCH on leg `slot`: to its set's home.
    fn leg_to_home(&mut self, slot: u32, set: SetRef, header: RelayHeader, body: &[u8; BODY_LEN]) {
        let Some(leg) = self.halves.reference(slot) else {
            return;
        };
        let msg = RelayMsg::parsed(&header, body);
        if usize::from(set.worker) == self.me {
            // Home is here: no ring message.
            self.home_cell(set, leg, &msg);
            return;
        }
        let msg = RingMsg::ConfluxCell { set, leg, msg };
        if self.send_home(set, msg) {
            self.leg_waits(slot);
        }
    }

    /// A message of leg `slot` waits in the ordered line to its home (the
    /// home's worker is behind): count it, and close the leg at the
    /// circuit queue limit, as a circuit whose queue reaches it (a client
    /// that ignores its windows must not grow the line without bound).
    fn leg_waits(&mut self, slot: u32) {
        let max = self.limits.max_circuit_queue;
        let Some(h) = self.halves.by_slot(slot) else {
            return;
        };
        let conn = h.conn;
        let x = h
            .cross
            .get_or_insert_with(|| Box::new(crate::worker::core::crossing::HalfCrossing::new()));
        x.ordered += 1;
        if x.ordered as usize >= max {
            let why = format!(
                "{} conflux messages waiting for the set's worker, maximum allowed is {max}",
                x.ordered
            );
            self.close_circuit(conn, slot, destroy_reason::RESOURCELIMIT, &why);
        }
    }

    /// A stream command on a half that is a leg (the dispatch asked
    /// [`ConfluxRoom::is_leg`]): the DATA's circuit SENDME here, the
    /// message to the set.
    pub(crate) fn leg_stream_cell(
        &mut self,
        conn: usize,
        slot: u32,
        header: RelayHeader,
        circuit_sendme: bool,
        body: &[u8; BODY_LEN],
    ) {
        let command = header.command;
        if circuit_sendme {
            let mut reply = [0u8; BODY_LEN];
            if let Some(k) = self.streams_keyed(slot) {
                k.originate_circuit_sendme(&mut reply);
                self.reply(conn, slot, self.now_ns, &reply);
            }
        }
        let set = self.conflux.legs.get(&slot).and_then(|l| l.set);
        match set {
            Some(set) if conflux::is_multiplexed(command) => {
                self.leg_to_home(slot, set, header, body)
            }
            Some(_) => self.conflux_refuse(conn, slot, "a stream-level SENDME on a conflux leg"),
            None => self.conflux_refuse(conn, slot, "a stream cell before CONFLUX_LINKED"),
        }
    }

    /// The home answered: `to` is a leg of `set`; send LINKED.
    fn leg_linked(&mut self, to: HalfRef, set: SetRef, linked: &Link) {
        let now_us = self.now_ns / 1000;
        let conn = self.halves.get(to).map(|h| h.conn);
        let rec = self.conflux.legs.get_mut(&to.slot);
        let (Some(conn), Some(rec)) = (conn, rec) else {
            // The circuit closed meanwhile.
            self.send_home(set, RingMsg::ConfluxLegGone { set, leg: to });
            return;
        };
        rec.set = Some(set);
        rec.linked_sent_us = now_us;
        self.send_on(
            StreamOwner::circuit(conn, to.slot),
            conflux::LINKED,
            0,
            &linked.encode(),
        );
        self.leg_snapshot(to.slot, set);
    }

    /// Tell the home leg `slot`'s congestion state.
    pub(crate) fn leg_snapshot(&mut self, slot: u32, set: SetRef) {
        let Some(rec) = self.conflux.legs.get(&slot) else {
            return;
        };
        let (rtt0, sent_total) = (rec.rtt_us, rec.sent_total);
        let Some(leg) = self.halves.reference(slot) else {
            return;
        };
        let Some(h) = self.halves.by_slot(slot) else {
            return;
        };
        let blocked = h.queue.len() >= crate::worker::core::streams::flow::BLOCKED_QUEUE;
        let HalfRole::Keyed(k) = &h.role else {
            return;
        };
        let Some(v) = k.congestion() else { return };
        let rtt_us = match (rtt0, v.ewma_rtt_us) {
            (0, _) => 0,
            (r, 0) => r,
            (_, e) => e,
        };
        let state = LegState {
            cwnd: v.cwnd,
            inflight: v.inflight,
            sent_total,
            rtt_us,
            blocked,
        };
        self.send_home(set, RingMsg::ConfluxLegState { set, leg, state });
    }

    /// After a circuit SENDME on the half at `slot`: a leg tells its home.
    pub(crate) fn leg_window_moved(&mut self, slot: u32) {
        if let Some(set) = self.conflux.legs.get(&slot).and_then(|l| l.set) {
            self.leg_snapshot(slot, set);
        }
    }

    /// The home asks leg `to` to originate a message toward the client.
    fn leg_originate(&mut self, to: HalfRef, command: u8, stream_id: u16, data: &[u8]) {
        let now_us = self.now_ns / 1000;
        let Some(h) = self.halves.get(to) else {
            return;
        };
        let conn = h.conn;
        let HalfRole::Keyed(k) = &mut h.role else {
            return;
        };
        let mut body = [0u8; BODY_LEN];
        if command == relay_cmd::DATA {
            k.originate_data(&mut body, stream_id, data, now_us);
            if let Some(rec) = self.conflux.legs.get_mut(&to.slot) {
                rec.sent_total += 1;
            }
        } else {
            k.originate(&mut body, command, stream_id, data);
        }
        let now = self.now_ns;
        self.enqueue(conn, to.slot, cmd::RELAY, now, now, &body);
    }

    /// The half at `slot` is being dropped: if it was a leg, its home
    /// hears of it.
    pub(crate) fn conflux_half_dropped(&mut self, slot: u32, leg: HalfRef) {
        if self.conflux.legs.is_empty() {
            return;
        }
        if let Some(LegRecord { set: Some(set), .. }) = self.conflux.legs.remove(&slot) {
            self.send_home(set, RingMsg::ConfluxLegGone { set, leg });
        }
    }

    /// A multiplexed message or SWITCH for home set `set` from leg `leg`.
    fn home_cell(&mut self, set: SetRef, leg: HalfRef, msg: &RelayMsg) {
        let stamp_ns = self.now_ns;
        let Some(idx) = self.home_set(set) else {
            return;
        };
        let before = self.conflux.sets[idx].set.ooo_bytes() as u64;
        self.home_arrival(idx, leg, stamp_ns, msg);
        // A set closed meanwhile took its bytes off the total itself.
        if let Some(hs) = self.conflux.sets.get(idx) {
            self.conflux.ooo_total = self.conflux.ooo_total + hs.set.ooo_bytes() as u64 - before;
        }
    }

    /// [`Circuits::home_cell`] for a live set: deliver, queue or close.
    fn home_arrival(&mut self, idx: usize, leg: HalfRef, stamp_ns: u64, msg: &RelayMsg) {
        let s = &mut self.conflux.sets[idx].set;
        if msg.header().command == conflux::SWITCH {
            self.conflux.counters.switches_received += 1;
            if let Err(e) = s.switch_received(leg, conflux::parse_switch(msg.data())) {
                self.conflux_set_error(idx, &e);
            }
            return;
        }
        match s.received(leg, stamp_ns, msg) {
            Ok(Arrival::Deliver) => {
                self.home_deliver(idx, *msg);
                while let Some(q) = self
                    .conflux
                    .sets
                    .get_mut(idx)
                    .and_then(|hs| hs.set.pop_ready())
                {
                    self.home_deliver(idx, q.msg);
                }
            }
            Ok(Arrival::Queued) => {
                let depth = (s.ooo_bytes() / OOO_CELL_COST) as u64;
                let c = &mut self.conflux.counters;
                c.reordered += 1;
                let b = OOO_DEPTH_BOUNDS
                    .iter()
                    .position(|&x| depth <= x)
                    .unwrap_or(7);
                c.ooo_depth[b] += 1;
            }
            Err(e) => self.conflux_set_error(idx, &e),
        }
    }

    /// A message of set `idx` in order: to the home's stream room.
    fn home_deliver(&mut self, idx: usize, mut msg: RelayMsg) {
        if !self.conflux.sets.contains(idx) {
            return; // closed by an earlier message of this batch
        }
        let owner = StreamOwner::Set(idx);
        let header = msg.header();
        self.stream_cell(owner, header, false, msg.body_mut());
    }

    fn conflux_set_error(&mut self, idx: usize, e: &SetError) {
        let (reason, c) = match e {
            SetError::QueueFull => (
                destroy_reason::RESOURCELIMIT,
                &mut self.conflux.counters.sets_closed_ooo,
            ),
            _ => (
                destroy_reason::PROTOCOL,
                &mut self.conflux.counters.sets_closed_protocol,
            ),
        };
        *c += 1;
        self.conflux_close_set(idx, reason, &e.to_string());
    }

    /// Close set `idx`: every leg (DESTROY with `reason`), every stream.
    pub(crate) fn conflux_close_set(&mut self, idx: usize, reason: u8, why: &str) {
        let Some(hs) = self.conflux.sets.try_remove(idx) else {
            return;
        };
        self.conflux.ooo_total -= hs.set.ooo_bytes() as u64;
        if self.conflux.by_nonce.get(&hs.nonce) == Some(&idx) {
            self.conflux.by_nonce.remove(&hs.nonce);
        }
        if reason == destroy_reason::FINISHED {
            self.conflux.counters.sets_closed_legs += 1;
        }
        info!(
            "worker {}: closing conflux set {idx} ({} legs): {why}",
            self.me,
            hs.set.len()
        );
        for leg in hs.set.legs() {
            self.destroy_later.push((leg, reason));
        }
        self.forget_streams(StreamOwner::Set(idx));
        self.tell_controller(ControllerMsg::ConfluxSetGone {
            nonce: hs.nonce,
            worker: self.me as u16,
        });
    }

    /// A message the set's stream room sends toward the client: on the
    /// leg the set picks (SWITCH first when it changes). DATA finds a leg
    /// whenever the streams' read budget allowed it; if none could take
    /// it, the set closes rather than lose a stream's bytes.
    pub(crate) fn set_send(&mut self, idx: usize, command: u8, stream_id: u16, data: &[u8]) {
        let Some(hs) = self.conflux.sets.get_mut(idx) else {
            return;
        };
        let Some(plan) = hs.set.plan_send(command) else {
            tracing::warn!(
                "worker {}: conflux set {idx}: no leg for relay command {command}; closing the set",
                self.me
            );
            self.conflux_close_set(idx, destroy_reason::INTERNAL, "no leg could send");
            return;
        };
        hs.set.note_sent(plan.leg, command);
        if let Some(rel) = plan.switch {
            self.conflux.counters.switches_sent += 1;
            self.leg_send(plan.leg, conflux::SWITCH, 0, &conflux::switch_body(rel));
        }
        self.leg_send(plan.leg, command, stream_id, data);
    }

    /// Cells set `idx` may send now (the read budget of its streams).
    pub(crate) fn set_window(&self, idx: usize) -> i32 {
        self.conflux.sets.get(idx).map_or(0, |hs| {
            i32::try_from(hs.set.send_window()).unwrap_or(i32::MAX)
        })
    }

    fn leg_send(&mut self, leg: HalfRef, command: u8, stream_id: u16, data: &[u8]) {
        if usize::from(leg.worker) == self.me {
            return self.leg_originate(leg, command, stream_id, data);
        }
        let mut buf = [0u8; relay::RELAY_DATA_MAX];
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        self.counters.cross += 1;
        self.send_ordered(
            leg,
            RingMsg::ConfluxSend {
                to: leg,
                command,
                stream_id,
                len: n as u16,
                data: buf,
            },
        );
    }

    /// True if connection `conn` carries a leg (it does not migrate).
    /// (Asked every round while a move waits: the connection's own
    /// circuits are looked at, not every leg.)
    pub(crate) fn conn_has_leg(&self, conn: usize) -> bool {
        if self.conflux.legs.is_empty() {
            return false;
        }
        self.conn(conn).is_some_and(|c| {
            c.circuits
                .values()
                .any(|s| self.conflux.legs.contains_key(s))
        })
    }
}
