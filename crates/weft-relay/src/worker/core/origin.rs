//! Our own circuits in the circuit core: the origin ends of the bandwidth
//! self-test circuits ([`crate::selftest`]). A half of role
//! [`HalfRole::Origin`] is created by [`Circuits::start_selftest`], extended
//! hop by hop as CREATED2 / EXTENDED2 come back, then sends its DROP cells,
//! and closes after [`crate::selftest::LIFETIME_NS`].

use tracing::{debug, info};
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};
use weft_proto::origin::HopTarget;

use crate::selftest::{SelfTestCircuit, TestStep};
use crate::worker::core::half::{Half, HalfRole};
use crate::worker::core::Circuits;

impl Circuits {
    /// Launch a self-test circuit on connection `conn` (to `first`),
    /// extending through `rest` back to ourselves.
    pub(crate) fn start_selftest(
        &mut self,
        conn: usize,
        first: &HopTarget,
        rest: Vec<HopTarget>,
        cells: u32,
    ) {
        let Some(circ_id) = self.fresh_circ_id(conn) else {
            return;
        };
        let (t, create2) = match SelfTestCircuit::new(first, rest, cells, self.now_ns) {
            Ok(x) => x,
            Err(e) => return info!("self-test circuit: {e}"),
        };
        let r = self.halves.insert(Half::new(
            conn,
            circ_id,
            HalfRole::Origin(Box::new(t)),
            None,
        ));
        if let Some(c) = self.conn_mut(conn) {
            c.circuits.insert(circ_id, r.slot);
        }
        self.selftests.push(r);
        self.queue_urgent(conn, circ_id, cmd::CREATE2, &create2);
    }

    /// A relay cell came back on the origin half at `slot`.
    pub(crate) fn origin_relay(
        &mut self,
        conn: usize,
        slot: u32,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
    ) {
        let step = match self.halves.by_slot(slot).map(|h| &mut h.role) {
            Some(HalfRole::Origin(t)) => t.on_relay(body),
            _ => return,
        };
        match step {
            Ok(step) => self.selftest_step(conn, slot, step, stamp_ns),
            Err(e) => self.close_circuit(
                conn,
                slot,
                destroy_reason::NONE,
                &format!("bandwidth self-test circuit: {e}"),
            ),
        }
    }

    /// The first hop answered CREATED2 on the origin half at `slot`.
    pub(crate) fn origin_created2(&mut self, conn: usize, slot: u32, body: &[u8; BODY_LEN]) {
        let hlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
        let step = match self.halves.by_slot(slot).map(|h| &mut h.role) {
            Some(HalfRole::Origin(t)) => t.on_created2(&body[..(hlen + 2).min(BODY_LEN)]),
            _ => return,
        };
        match step {
            Ok(step) => self.selftest_step(conn, slot, step, 0),
            Err(e) => self.close_circuit(
                conn,
                slot,
                destroy_reason::NONE,
                &format!("bandwidth self-test circuit: {e}"),
            ),
        }
    }

    /// Act on a testing circuit's step: queue the EXTEND2 (RELAY_EARLY), or
    /// once it reaches us, its DROP cells.
    fn selftest_step(&mut self, conn: usize, slot: u32, step: TestStep, stamp_ns: u64) {
        let now = self.now_ns;
        match step {
            TestStep::Extend(cell) => {
                self.enqueue(conn, slot, cmd::RELAY_EARLY, stamp_ns, now, &cell);
            }
            TestStep::Built => {
                let n = match self.halves.by_slot(slot).map(|h| &mut h.role) {
                    Some(HalfRole::Origin(t)) if !t.done => {
                        t.done = true;
                        t.cells
                    }
                    _ => 0,
                };
                debug!("bandwidth self-test circuit built; sending {n} DROP cells");
                let mut cell = [0u8; BODY_LEN];
                for _ in 0..n {
                    if let Some(HalfRole::Origin(t)) =
                        self.halves.by_slot(slot).map(|h| &mut h.role)
                    {
                        t.drop_cell(&mut cell);
                    }
                    self.enqueue(conn, slot, cmd::RELAY, stamp_ns, now, &cell);
                }
            }
            TestStep::Wait => {}
        }
    }

    /// Close the self-test circuits that have lived their time.
    pub(crate) fn expire_selftests(&mut self) {
        let now = self.now_ns;
        let mut i = 0;
        while i < self.selftests.len() {
            let r = self.selftests[i];
            let expired = match self.halves.get(r) {
                Some(h) => match &h.role {
                    HalfRole::Origin(t) => {
                        now.saturating_sub(t.started_ns) >= crate::selftest::LIFETIME_NS
                    }
                    // It moved away with its connection.
                    _ => {
                        self.selftests.swap_remove(i);
                        continue;
                    }
                },
                None => {
                    self.selftests.swap_remove(i);
                    continue;
                }
            };
            if expired {
                if let Some(conn) = self.halves.get(r).map(|h| h.conn) {
                    // The origin gives no reason. [C circuitlist.c]
                    self.close_circuit(
                        conn,
                        r.slot,
                        destroy_reason::NONE,
                        "bandwidth self-test circuit done",
                    );
                }
                self.selftests.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }
}
