//! Circuit padding machines at this relay (proposal 254, `Padding=2`;
//! part of the sans-IO circuit core): the PADDING_NEGOTIATE cells a
//! client sends to this hop, the machine each keyed half may carry
//! ([`crate::worker::core::half::Half::pad`], the protocol in
//! [`weft_proto::circpad`]), the RELAY_DROP and PADDING_NEGOTIATED cells
//! it sends toward the client, and its timers: a heap of (due, half) read
//! by [`Circuits::run_circpad_timers`] each round, beside the connection
//! padding's `pad_due` ([`crate::worker::core::timers`]).
//!
//! The per-cell path pays one test of `Half::pad` (a cell sent toward
//! the client on a keyed half, [`crate::worker::core::handoff`] and
//! [`Circuits::reply`]); nothing else runs, and nothing is allocated,
//! on a circuit no client negotiated padding on. A half that moves to
//! another worker takes its machine along (`MovedHalf::pad`,
//! [`Circuits::circpad_adopted`] schedules its due padding there).
//! [C circuitpadding.c circpad_handle_padding_negotiate(),
//! circpad_send_padding_cell_for_callback(), relay.c
//! circpad_deliver_sent_relay_cell_events()]

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tracing::{debug, info};
use weft_proto::cell::{cmd, BODY_LEN};
use weft_proto::circpad::{NegotiateOutcome, PadAction, PADDING_NEGOTIATED};
use weft_proto::relay::{relay_cmd, RELAY_HEADER_LEN};

use crate::messages::HalfRef;
use crate::worker::core::half::HalfRole;
use crate::worker::core::Circuits;

/// The core's circuit padding timers and a reused action buffer.
#[derive(Default)]
pub(crate) struct CircPadRoom {
    /// Padding due: (when, half slot, its generation). Entries a machine
    /// moved or dropped stay until due and are then skipped.
    due: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// What the machine asked for, drained at once (kept for its
    /// capacity).
    actions: Vec<PadAction>,
    /// Padding not queued for a full circuit queue (logged once).
    full_logged: bool,
}

impl CircPadRoom {
    /// The earliest padding due, if any.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.due.peek().map(|&Reverse((t, _, _))| t)
    }
}

impl Circuits {
    /// A PADDING_NEGOTIATE for this hop on the keyed half at `slot`;
    /// `body` is decrypted. A malformed one is logged and dropped, the
    /// circuit kept (as C).
    pub(crate) fn padding_negotiate_cell(&mut self, conn: usize, slot: u32, body: &[u8; BODY_LEN]) {
        let me = self.me;
        let Some(r) = self.halves.reference(slot) else {
            return;
        };
        let Some(h) = self.halves.get(r) else {
            return;
        };
        let circ_id = h.circ_id;
        let pad = h.pad.get_or_insert_with(Default::default);
        let before = pad.due_ns();
        let mut actions = std::mem::take(&mut self.circpad.actions);
        // As C, the payload after the relay header, whatever its length
        // field says.
        let params = &self.ctx.padding.circ;
        let outcome = pad.negotiate(&body[RELAY_HEADER_LEN..], params, &mut actions);
        if pad.counter() == 0 {
            // Nothing ever started here: keep the half without a box.
            h.pad = None;
        }
        let c = &mut self.counters.padding;
        match outcome {
            Err(e) => {
                c.circ_negotiate[5] += 1;
                info!("worker {me}: circuit {circ_id}: malformed PADDING_NEGOTIATE ({e}); dropped");
            }
            Ok(o) => {
                let (i, what, t) = match o {
                    NegotiateOutcome::Started(t) => {
                        c.circ_started[usize::from(t)] += 1;
                        (0, "started", t)
                    }
                    NegotiateOutcome::Stopped(t) => (1, "stopped", t),
                    NegotiateOutcome::StopOld(t) => (2, "STOP for an old machine", t),
                    NegotiateOutcome::StopUnknown(t) => (2, "STOP for an unknown machine", t),
                    NegotiateOutcome::Unknown(t) => (3, "START of an unknown machine refused", t),
                    NegotiateOutcome::SlotBusy(t) => (4, "START while a machine runs", t),
                };
                c.circ_negotiate[i] += 1;
                let name = weft_proto::circpad::RELAY_MACHINES
                    .get(usize::from(t))
                    .map_or("?", |m| m.name);
                if i == 0 || i == 1 {
                    debug!("worker {me}: circuit {circ_id}: padding machine {t} ({name}) {what}");
                } else {
                    info!("worker {me}: circuit {circ_id}: padding machine {t} ({name}): {what}");
                }
            }
        }
        self.run_pad_actions(conn, r, before, actions);
    }

    /// A non-padding relay cell was queued toward the client on the keyed
    /// half at `slot`, which carries a machine.
    /// [C circpad_cell_event_nonpadding_sent()]
    pub(crate) fn pad_nonpadding_sent(&mut self, slot: u32) {
        let now = self.now_ns;
        let Some(r) = self.halves.reference(slot) else {
            return;
        };
        let Some(h) = self.halves.get(r) else {
            return;
        };
        let conn = h.conn;
        let Some(p) = h.pad.as_mut() else {
            return;
        };
        let before = p.due_ns();
        let mut actions = std::mem::take(&mut self.circpad.actions);
        p.nonpadding_sent(now, &mut self.rng, &mut actions);
        self.run_pad_actions(conn, r, before, actions);
    }

    /// Half `r` arrived with its connection from another worker: its
    /// machine's padding (due on the workers' shared clock) is scheduled
    /// here.
    pub(crate) fn circpad_adopted(&mut self, r: HalfRef) {
        if let Some(t) = self
            .halves
            .get(r)
            .and_then(|h| h.pad.as_ref())
            .and_then(|p| p.due_ns())
        {
            self.circpad.due.push(Reverse((t, r.slot, r.gen)));
        }
    }

    /// Send the circuit padding that is due.
    pub(crate) fn run_circpad_timers(&mut self) {
        let now = self.now_ns;
        while let Some(&Reverse((due, slot, gen))) = self.circpad.due.peek() {
            if due > now {
                break;
            }
            self.circpad.due.pop();
            let r = HalfRef {
                worker: self.me as u16,
                slot,
                gen,
            };
            let Some(h) = self.halves.get(r) else {
                continue;
            };
            let conn = h.conn;
            let Some(p) = h.pad.as_mut() else {
                continue;
            };
            if p.due_ns() != Some(due) {
                continue;
            }
            let mut actions = std::mem::take(&mut self.circpad.actions);
            p.fire(due, now, &mut self.rng, &mut actions);
            self.run_pad_actions(conn, r, None, actions);
        }
    }

    /// Send what the machine of half `r` asked for, in order, then
    /// schedule its next padding if it changed from `before`.
    fn run_pad_actions(
        &mut self,
        conn: usize,
        r: HalfRef,
        before: Option<u64>,
        mut actions: Vec<PadAction>,
    ) {
        self.send_pad_actions(conn, r, &actions);
        if let Some(p) = self.halves.get(r).and_then(|h| h.pad.as_ref()) {
            if let Some(t) = p.due_ns() {
                if Some(t) != before {
                    self.circpad.due.push(Reverse((t, r.slot, r.gen)));
                }
            }
        }
        actions.clear();
        self.circpad.actions = actions;
    }

    /// Queue `actions` toward the client on half `r`; false once the
    /// circuit is gone. A PADDING_NEGOTIATED is a non-padding cell sent:
    /// as C, its event runs before the cell is queued, so padding it
    /// sends at once (a zero delay) goes first.
    /// [C relay_send_command_from_edge_()]
    fn send_pad_actions(&mut self, conn: usize, r: HalfRef, actions: &[PadAction]) -> bool {
        let me = self.me;
        for &a in actions {
            let now = self.now_ns;
            let mut cell = [0u8; BODY_LEN];
            let command = match a {
                PadAction::Drop => relay_cmd::DROP,
                PadAction::Negotiated(_) => {
                    // Empty unless the machine pads at once: no allocation.
                    let mut first = Vec::new();
                    if let Some(p) = self.halves.get(r).and_then(|h| h.pad.as_mut()) {
                        p.nonpadding_sent(now, &mut self.rng, &mut first);
                    }
                    if !self.send_pad_actions(conn, r, &first) {
                        return false;
                    }
                    PADDING_NEGOTIATED
                }
            };
            let Some(h) = self.halves.get(r) else {
                return false;
            };
            let queued = h.queue.len();
            let HalfRole::Keyed(k) = &mut h.role else {
                return false;
            };
            if command == relay_cmd::DROP {
                if queued > self.ctx.padding.circ.max_queued_cells as usize {
                    if !self.circpad.full_logged {
                        self.circpad.full_logged = true;
                        info!(
                            "worker {me}: too many cells ({queued}) in a circuit queue to send padding"
                        );
                    }
                    continue;
                }
                k.originate(&mut cell, relay_cmd::DROP, 0, &[]);
                self.counters.padding.circ_drops_sent += 1;
            } else if let PadAction::Negotiated(b) = a {
                k.originate(&mut cell, PADDING_NEGOTIATED, 0, &b);
                self.counters.padding.circ_negotiated_sent += 1;
            }
            if self
                .enqueue(conn, r.slot, cmd::RELAY, 0, now, &cell)
                .is_none()
            {
                return false;
            }
        }
        true
    }
}
