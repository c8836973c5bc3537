//! Cell dispatch in the circuit core: what one cell read from a connection
//! does, by command and by the role of the circuit half it is for.
//! [tor-spec §3–§6; protocol-notes §3]
//!
//! | command | handled by |
//! |---|---|
//! | RELAY, RELAY_EARLY | the half's role: a *keyed* half (toward the client) removes our layer in weft-proto's `KeyedHalf::on_forward`, which answers the relay commands addressed to us (see its table) and passes the rest to [`Circuits::forward`]; a *relabel* half (toward the next relay) forwards as is; an *origin* half is one of our self-test circuits ([`crate::worker::core::origin`]) |
//! | CREATE2, CREATE_FAST | [`Circuits::create`]: handshake, new keyed half, CREATED* |
//! | CREATED2 | [`crate::worker::core::extend`] (answer to our CREATE2) or [`crate::worker::core::origin`] |
//! | DESTROY | drop the half, DESTROY(DESTROYED) to its peer |
//! | PADDING, PADDING_NEGOTIATE, VPADDING, NETINFO, unknown | dropped |
//! | VERSIONS (fixed-size) | the connection closes |
//!
//! A relay command that a keyed half recognizes comes back here as a
//! [`ForwardAction`]; the arms of [`Circuits::keyed_action`] are where a new
//! relay command's room is wired in (EXTEND2 → [`crate::worker::core::extend`], the
//! onion-service roles → [`crate::worker::core::onion`], exit streams →
//! [`crate::worker::core::streams`]; conflux goes beside them).

use tracing::{debug, info};
use weft_proto::cell::{self, cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::{self, ForwardAction};

use crate::link_io::{CellFlow, CellIn};
use crate::messages::ControllerMsg;
use crate::worker::core::half::{Half, HalfRole};
use crate::worker::core::streams::StreamOwner;
use crate::worker::core::Circuits;

/// What the connection does after a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CellVerdict {
    /// Read on.
    Continue,
    /// Close the connection.
    Close(String),
}

impl CellVerdict {
    /// The link reader's answer.
    pub(crate) fn flow(&self) -> CellFlow {
        match self {
            CellVerdict::Continue => CellFlow::Continue,
            CellVerdict::Close(_) => CellFlow::Pause,
        }
    }
}

impl Circuits {
    /// One cell read from connection `conn`, stamped `stamp_ns` (the
    /// round's clock).
    pub(crate) fn on_cell(&mut self, conn: usize, cell: CellIn<'_>, stamp_ns: u64) -> CellVerdict {
        let (circ_id, command, body) = match cell {
            CellIn::Var { command, .. } => {
                // After the handshake: VPADDING is dropped silently; a late
                // handshake cell or an unknown variable cell is dropped (C
                // Tor ignores a second VERSIONS too).
                if command != cmd::VPADDING {
                    debug!(
                        "worker {}: ignoring {} cell (command {command}) after handshake",
                        self.me,
                        cell::cmd_name(command)
                    );
                }
                return CellVerdict::Continue;
            }
            CellIn::Fixed {
                circ_id,
                command,
                body,
            } => (circ_id, command, body),
        };
        if command != cmd::RELAY && command != cmd::RELAY_EARLY {
            // (A relay cell's read is noted in `lookup`.)
            self.note_read(conn, command, stamp_ns);
        }
        match command {
            cmd::RELAY | cmd::RELAY_EARLY => {
                let Some(slot) = self.lookup(conn, circ_id, stamp_ns) else {
                    debug!(
                        "worker {}: {} on unknown circuit {circ_id:#x} dropped",
                        self.me,
                        cell::cmd_name(command)
                    );
                    return CellVerdict::Continue;
                };
                self.relay(conn, slot, command, stamp_ns, body);
                CellVerdict::Continue
            }
            cmd::PADDING => CellVerdict::Continue,
            cmd::PADDING_NEGOTIATE => {
                self.padding_negotiate(conn, &body[..]);
                CellVerdict::Continue
            }
            cmd::CREATE | cmd::CREATE_FAST | cmd::CREATE2 => {
                self.create(conn, circ_id, command, body);
                CellVerdict::Continue
            }
            cmd::CREATED | cmd::CREATED_FAST | cmd::CREATED2 => {
                self.created(conn, circ_id, command, body)
            }
            cmd::DESTROY => {
                self.counters.destroy_cells += 1;
                self.destroy_cell(conn, circ_id);
                CellVerdict::Continue
            }
            cmd::NETINFO => {
                debug!("worker {}: ignoring NETINFO after handshake", self.me);
                CellVerdict::Continue
            }
            cmd::VERSIONS => CellVerdict::Close("fixed-size cell with the VERSIONS command".into()),
            _ => {
                debug!(
                    "worker {}: dropping cell with unknown command {command}",
                    self.me
                );
                CellVerdict::Continue
            }
        }
    }

    /// The half slot for `circ_id` on connection `conn`. Consecutive cells
    /// mostly belong to the same circuit: a remembered (ID, slot) pair
    /// skips the hash lookup when the half at that slot still is that
    /// circuit on that connection. Notes the read (`stamp_ns`) for the
    /// connection's padding clock, and the circuit for its read budget.
    #[inline]
    fn lookup(&mut self, conn: usize, circ_id: u32, stamp_ns: u64) -> Option<u32> {
        let c = self.conns.get_mut(conn)?.as_mut()?;
        c.times.last_read_ns = stamp_ns;
        c.times.cells_read += 1;
        if circ_id != 0 && c.last.0 == circ_id {
            let slot = c.last.1;
            if self
                .halves
                .by_slot(slot)
                .is_some_and(|h| h.conn == conn && h.circ_id == circ_id)
            {
                c.reads.note(slot);
                return Some(slot);
            }
        }
        let slot = *c.circuits.get(&circ_id)?;
        c.last = (circ_id, slot);
        c.reads.note(slot);
        Some(slot)
    }

    /// A cell other than a relay cell (`command`) was read on connection
    /// `conn`.
    fn note_read(&mut self, conn: usize, command: u8, stamp_ns: u64) {
        if let Some(Some(c)) = self.conns.get_mut(conn) {
            c.times.last_read_ns = stamp_ns;
            c.times.cells_read += 1;
            if command == cmd::PADDING {
                self.counters.padding.pad_read[usize::from(c.padding.enabled())] += 1;
            }
        }
    }

    /// A RELAY (or RELAY_EARLY, `command`) cell from the client side of a
    /// circuit on connection `conn` that has a next hop (`onward`): what
    /// the connection is used for, for its padding (only a multi-hop
    /// circuit counts on a client's connection). C also counts the cells
    /// toward the client; the client's own RELAY cells (SENDMEs at the
    /// latest) mark it all the same.
    /// [C relay.c circuit_update_channel_usage()]
    #[inline]
    fn note_usage(&mut self, conn: usize, command: u8, onward: bool) {
        if let Some(Some(c)) = self.conns.get_mut(conn) {
            if c.padding.usage() != weft_proto::padding::ChannelUsage::UserTraffic
                && (onward || !c.client)
            {
                c.padding.note_usage(command == cmd::RELAY_EARLY);
            }
        }
    }

    /// A RELAY / RELAY_EARLY cell for the half at `slot` of connection
    /// `conn`.
    fn relay(
        &mut self,
        conn: usize,
        slot: u32,
        command: u8,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
    ) {
        let Some(h) = self.halves.by_slot(slot) else {
            return;
        };
        match &mut h.role {
            // Not on this connection any more (cannot happen: a moved
            // half's connection left with it).
            HalfRole::Moved(_) => {}
            HalfRole::Relabel { created } => {
                let (created, peer) = (*created, h.peer);
                if command == cmd::RELAY_EARLY {
                    return self.close_circuit(
                        conn,
                        slot,
                        destroy_reason::PROTOCOL,
                        "RELAY_EARLY toward the client",
                    );
                }
                if !created {
                    return self.close_circuit(
                        conn,
                        slot,
                        destroy_reason::PROTOCOL,
                        "relay cell before CREATED2",
                    );
                }
                match peer {
                    Some(p) => self.forward(conn, slot, p, cmd::RELAY, stamp_ns, body),
                    None => debug!(
                        "worker {}: relay cell toward a client half that is gone dropped",
                        self.me
                    ),
                }
            }
            HalfRole::Origin(_) => {
                if command == cmd::RELAY_EARLY {
                    return self.close_circuit(
                        conn,
                        slot,
                        destroy_reason::PROTOCOL,
                        "RELAY_EARLY toward the origin",
                    );
                }
                self.origin_relay(conn, slot, stamp_ns, body);
            }
            HalfRole::Keyed(k) => {
                let action = k.on_forward(command, body, &self.fctx);
                // C counts every relay cell of a rendezvous-point circuit,
                // the ESTABLISH_RENDEZVOUS that makes it one included.
                if k.purpose.is_rendezvous() {
                    self.counters.onion.rend_cells += 1;
                }
                let peer = h.peer;
                self.note_usage(conn, command, peer.is_some());
                self.keyed_action(conn, slot, peer, action, stamp_ns, body);
            }
        }
    }

    /// Act on what a keyed half decided about a cell from the client side.
    fn keyed_action(
        &mut self,
        conn: usize,
        slot: u32,
        peer: Option<crate::messages::HalfRef>,
        action: ForwardAction,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
    ) {
        match action {
            ForwardAction::Pass { command } => match peer {
                Some(p) => self.forward(conn, slot, p, command, stamp_ns, body),
                None => debug!(
                    "worker {}: relay cell for a circuit with no next hop dropped",
                    self.me
                ),
            },
            ForwardAction::Extend(req) => {
                if let (Some(from), Some(c)) = (self.halves.reference(slot), self.conn(conn)) {
                    let from_conn = c.id;
                    self.tell_controller(ControllerMsg::Extend {
                        from,
                        from_conn,
                        req,
                    });
                }
            }
            ForwardAction::Truncate { reason } => {
                if let Some(h) = self.halves.by_slot(slot) {
                    if let Some(p) = h.peer.take() {
                        self.destroy_later.push((p, reason));
                    }
                }
                // Cells that waited to cross to that hop go with it.
                self.drop_crossing(slot);
                self.reply(conn, slot, stamp_ns, body);
            }
            ForwardAction::Reply => {
                self.reply(conn, slot, stamp_ns, body);
            }
            a @ (ForwardAction::IntroEstablished { .. }
            | ForwardAction::Introduce { .. }
            | ForwardAction::EstablishRendezvous { .. }
            | ForwardAction::Rendezvous1 { .. }) => {
                self.onion_action(conn, slot, a, body, stamp_ns);
            }
            ForwardAction::Stream {
                header,
                circuit_sendme,
            } => {
                if self.conflux.is_leg(slot) {
                    return self.leg_stream_cell(conn, slot, header, circuit_sendme, body);
                }
                self.stream_cell(
                    StreamOwner::circuit(conn, slot),
                    header,
                    circuit_sendme,
                    body,
                );
            }
            ForwardAction::CircuitSendme { header } => {
                self.circuit_sendme(conn, slot, &header, body);
            }
            ForwardAction::RefusedSingleHopRendezvous => {
                self.limit_counters.single_hop_refused += 1;
            }
            ForwardAction::Conflux { header } => self.conflux_cell(conn, slot, header, body),
            ForwardAction::PaddingNegotiate => {
                self.padding_negotiate_cell(conn, slot, body);
            }
            ForwardAction::Drop => {
                // The cell was for this hop (decrypted here): DROP, or a
                // command C Tor also drops unread.
                if body[0] == weft_proto::relay::relay_cmd::DROP {
                    self.counters.drop_cells += 1;
                }
            }
            ForwardAction::Close { reason, why } => {
                self.close_circuit(conn, slot, reason, &why);
            }
        }
    }

    /// Queue a reply the keyed half at `slot` built in `body` (already
    /// encrypted) toward the client.
    pub(crate) fn reply(&mut self, conn: usize, slot: u32, stamp_ns: u64, body: &[u8; BODY_LEN]) {
        let now = self.now_ns;
        self.enqueue(conn, slot, cmd::RELAY, stamp_ns, now, body);
        if self.halves.at(slot).is_some_and(|h| h.pad.is_some()) {
            self.pad_nonpadding_sent(slot);
        }
    }

    /// DESTROY from the peer of connection `conn`: drop the half and tell
    /// its peer. Never propagate the received reason. [protocol-notes §6.4]
    fn destroy_cell(&mut self, conn: usize, circ_id: u32) {
        let Some(slot) = self
            .conn_mut(conn)
            .and_then(|c| c.circuits.remove(&circ_id))
        else {
            return self.cancel_pending_create(conn, circ_id);
        };
        if let Some(h) = self.drop_half(slot) {
            if let Some(p) = h.peer {
                self.destroy_later.push((p, destroy_reason::DESTROYED));
            }
        }
    }

    /// CREATE2 / CREATE_FAST (CREATE, TAP, is refused) on connection `conn`:
    /// the checks in C Tor's order (DoS accounting first, then ID 0 and IDs
    /// in use dropped, a marked address refused, the wrong half of the ID
    /// space refused), then the handshake — now, or when the round's
    /// handshake budget allows ([`crate::worker::core::limits`]).
    /// [tor-spec §5.1; C command.c command_process_create_cell()]
    fn create(&mut self, conn: usize, circ_id: u32, command: u8, body: &[u8; BODY_LEN]) {
        if self.ctx.hibernating && circ_id != 0 {
            // C checks this first: "we're shutting down".
            self.queue_urgent(conn, circ_id, cmd::DESTROY, &[destroy_reason::HIBERNATING]);
            return;
        }
        let refuse = self.dos_refuses_create(conn);
        let Some(c) = self.conn(conn) else { return };
        let (conn_id, we_initiated) = (c.id, c.we_initiated);
        if circ_id == 0 {
            debug!(
                "connection {conn_id}: {} on circuit 0 dropped",
                cell::cmd_name(command)
            );
            return;
        }
        if c.circuits.contains_key(&circ_id) || self.create_pending(conn, circ_id) {
            debug!(
                "connection {conn_id}: {} on circuit {circ_id:#x} in use dropped",
                cell::cmd_name(command)
            );
            return;
        }
        if refuse {
            // Its address is marked by the DoS mitigation.
            self.queue_urgent(
                conn,
                circ_id,
                cmd::DESTROY,
                &[destroy_reason::RESOURCELIMIT],
            );
            return;
        }
        // The side that opened the TLS connection sets the top bit of the
        // IDs it allocates. [tor-spec §5.1.1]
        let high = circ_id & 0x8000_0000 != 0;
        if high == we_initiated {
            info!(
                "connection {conn_id}: {} with circuit id {circ_id:#x} of the wrong half; refusing",
                cell::cmd_name(command)
            );
            self.counters.protocol_closes += 1;
            self.queue_urgent(conn, circ_id, cmd::DESTROY, &[destroy_reason::PROTOCOL]);
            return;
        }
        if command == cmd::CREATE2 && self.defer_create2(conn, circ_id, body) {
            return;
        }
        self.answer_create(conn, circ_id, command, body);
    }

    /// The handshake of a CREATE2 / CREATE_FAST that passed the checks: a
    /// new keyed half and CREATED*, or DESTROY(PROTOCOL).
    pub(crate) fn answer_create(
        &mut self,
        conn: usize,
        circ_id: u32,
        command: u8,
        body: &[u8; BODY_LEN],
    ) {
        let Some(c) = self.conn(conn) else { return };
        let (conn_id, peer, client) = (c.id, c.peer_addr, c.client);
        let result = match command {
            cmd::CREATE2 => {
                self.limit_counters.onionskins_processed
                    [crate::worker::core::limits::handshake_type(body)] += 1;
                circuit::answer_create2_with(
                    &self.ctx.handshake,
                    body,
                    Some(&self.ctx.cc),
                    &mut *self.rng,
                )
                .map(|(r, h, _)| (cmd::CREATED2, r, h))
            }
            cmd::CREATE_FAST => circuit::answer_create_fast(body, &mut *self.rng)
                .map(|(r, h)| (cmd::CREATED_FAST, r, h)),
            _ => Err(circuit::CreateError::UnsupportedType(0)),
        };
        match result {
            Ok((reply_cmd, reply, mut half)) => {
                half.prev_is_client = client;
                if half.congestion().is_some() {
                    self.streams.note_cc_circuit();
                }
                if half.is_cgo() {
                    self.counters.cgo_created += 1;
                }
                self.queue_urgent(conn, circ_id, reply_cmd, &reply);
                let r = self.halves.insert(Half::new(
                    conn,
                    circ_id,
                    HalfRole::Keyed(Box::new(half)),
                    None,
                ));
                let mut proves = false;
                if let Some(c) = self.conn_mut(conn) {
                    c.circuits.insert(circ_id, r.slot);
                    proves = std::mem::take(&mut c.proves_reachable);
                }
                if proves {
                    self.tell_controller(ControllerMsg::CreateReachedUs { peer });
                }
                self.counters.created += 1;
            }
            Err(e) => {
                info!(
                    "connection {conn_id} ({peer}): refusing {} on circuit {circ_id:#x}: {e}",
                    cell::cmd_name(command)
                );
                self.counters.protocol_closes += 1;
                self.queue_urgent(conn, circ_id, cmd::DESTROY, &[destroy_reason::PROTOCOL]);
            }
        }
    }

    /// A CREATED* cell on connection `conn`: the answer to a CREATE2 we sent
    /// for an extend ([`crate::worker::core::extend`]) or for a self-test circuit.
    fn created(
        &mut self,
        conn: usize,
        circ_id: u32,
        command: u8,
        body: &[u8; BODY_LEN],
    ) -> CellVerdict {
        let Some(&slot) = self.conn(conn).and_then(|c| c.circuits.get(&circ_id)) else {
            debug!(
                "worker {}: {} for unknown circuit {circ_id:#x}",
                self.me,
                cell::cmd_name(command)
            );
            return CellVerdict::Continue;
        };
        let Some(h) = self.halves.by_slot(slot) else {
            return CellVerdict::Continue;
        };
        match (&h.role, command) {
            (HalfRole::Origin(_), cmd::CREATED2) => {
                self.origin_created2(conn, slot, body);
                CellVerdict::Continue
            }
            (HalfRole::Relabel { created: false }, cmd::CREATED2) => {
                self.extend_created2(conn, slot, body);
                CellVerdict::Continue
            }
            _ => {
                let why = format!("unexpected {}", cell::cmd_name(command));
                self.close_circuit(conn, slot, destroy_reason::PROTOCOL, &why);
                CellVerdict::Continue
            }
        }
    }
}
