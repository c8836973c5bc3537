//! Resource limits in the circuit core: the worker's side of the global
//! memory limit ([`crate::oom`]: report circuits by the age of their oldest
//! queued cell, close those the controller picks), of the DoS subsystem
//! ([`crate::dos`]: addresses whose CREATE cells are refused, counted
//! CREATEs from client connections), and the bound on handshake work: a
//! CREATE2 that finds this round's handshake budget spent waits in a queue
//! (as C Tor's onionskin queue), so a CREATE flood delays new circuits, not
//! relayed cells, and one that waited longer than `MaxOnionQueueDelay` is
//! refused. [C onion_queue.c, dos.c, circuitlist.c circuits_handle_oom()]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;

use tracing::info;
use weft_proto::cell::{cmd, destroy_reason, BODY_LEN};

use crate::messages::ControllerMsg;
use crate::oom::CELL_COST;
use crate::worker::core::streams::StreamOwner;
use crate::worker::core::Circuits;

/// CREATE2 handshakes a worker answers per round before the rest waits.
pub(crate) const HANDSHAKES_PER_ROUND: u32 = 32;
/// How long a CREATE2 may wait for its handshake (C Tor's
/// `MaxOnionQueueDelay` default, 1750 ms).
pub(crate) const MAX_ONION_QUEUE_DELAY_NS: u64 = 1_750_000_000;
/// Most CREATE2 cells waiting per worker (about 2 MiB).
pub(crate) const MAX_ONION_QUEUE: usize = 4096;

/// A CREATE2 waiting for its handshake.
pub(crate) struct PendingCreate {
    pub(super) conn: usize,
    pub(super) circ_id: u32,
    pub(super) body: [u8; BODY_LEN],
    pub(super) since_ns: u64,
}

/// The core's resource-limit state (its guards against floods).
#[derive(Default)]
pub(crate) struct Guards {
    /// Addresses whose CREATE cells are refused, until then (core clock).
    dos_marked: HashMap<IpAddr, u64>,
    /// CREATE2 cells waiting for a handshake, oldest first.
    pending: VecDeque<PendingCreate>,
    /// (connection, circuit ID) of those, for "ID in use" checks.
    pending_ids: HashSet<(usize, u32)>,
    /// Handshakes answered this round.
    handshakes_this_round: u32,
    /// The clock when the controller last asked for OOM candidates: the
    /// ages it chooses a cutoff from are as of then, and so is the kill
    /// (cells queued since are younger, whatever the delay).
    oom_query_ns: u64,
}

/// The core's resource-limit counters (cumulative).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LimitCounters {
    /// Circuits closed by the memory limit.
    pub(crate) oom_circuits: u64,
    /// Bytes their queues held.
    pub(crate) oom_bytes: u64,
    /// CREATE cells refused by the DoS mitigation.
    pub(crate) dos_cc_rejected: u64,
    /// ESTABLISH_RENDEZVOUS from one-hop clients dropped.
    pub(crate) single_hop_refused: u64,
    /// CREATE2 cells refused because the handshake queue was full or they
    /// waited too long.
    pub(crate) onionskins_dropped: [u64; 4],
    /// CREATE2 handshakes answered.
    pub(crate) onionskins_processed: [u64; 4],
}

/// A CREATE2 body's handshake type as C Tor's metrics index it (0 TAP,
/// 2 ntor, 3 ntor v3; an unknown type counts as TAP, which weft refuses
/// as it refuses unknown ones).
pub(crate) fn handshake_type(body: &[u8; BODY_LEN]) -> usize {
    match u16::from_be_bytes([body[0], body[1]]) {
        t @ 2..=3 => usize::from(t),
        _ => 0,
    }
}

impl Circuits {
    /// Bytes the queues of this worker hold (cells in the pool — queued
    /// to write, held for a move, waiting to cross to another worker —,
    /// messages in the lanes' ordered lines, and the bytes exit streams
    /// hold for their destinations).
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.pool.in_use() as u64 * CELL_COST
            + self.lanes.ordered_bytes()
            + self.stream_buffered_bytes()
            + self.conflux.ooo_bytes()
    }

    /// The cells of the half `h` (queued, held, waiting to cross) and when
    /// the oldest of them was queued.
    fn half_cells(
        pool: &crate::pool::CellPool,
        h: &crate::worker::core::half::Half,
    ) -> (usize, Option<u64>) {
        let cross = h.cross.as_deref().map(|x| &x.queue);
        let n = h.queue.len() + h.held.len() + cross.map_or(0, |q| q.len());
        let oldest = [
            h.queue.front(),
            h.held.front(),
            cross.and_then(|q| q.front()),
        ]
        .into_iter()
        .flatten()
        .map(|s| pool.slot(s).queued_ns)
        .min();
        (n, oldest)
    }

    /// Every circuit half with queued, held or crossing cells: (age of its
    /// oldest cell, bytes), for the controller's choice of victims.
    pub(crate) fn oom_candidates(&mut self) -> Vec<(u64, u64)> {
        let now = self.now_ns;
        self.guards.oom_query_ns = now;
        let mut v = Vec::new();
        crate::worker::core::walks::visit(self.halves.slots() as usize);
        for slot in 0..self.halves.slots() {
            let Some(h) = self.halves.by_slot(slot) else {
                continue;
            };
            let (n, oldest) = Self::half_cells(&self.pool, h);
            if n == 0 {
                continue;
            }
            let oldest = oldest.unwrap_or(now);
            v.push((now.saturating_sub(oldest), n as u64 * CELL_COST));
        }
        v.extend(
            self.stream_oom_candidates(now)
                .chain(self.conflux.oom_candidates(now))
                .map(|(_, age, b)| (age, b)),
        );
        v
    }

    /// Close every circuit whose oldest queued cell was at least
    /// `min_age_ns` old when the candidates were listed (RESOURCELIMIT both
    /// ways). Returns (circuits, bytes).
    pub(crate) fn oom_kill(&mut self, min_age_ns: u64) -> (u64, u64) {
        let now = match self.guards.oom_query_ns {
            0 => self.now_ns,
            t => t,
        };
        let mut victims = Vec::new();
        crate::worker::core::walks::visit(self.halves.slots() as usize);
        for slot in 0..self.halves.slots() {
            let Some(h) = self.halves.by_slot(slot) else {
                continue;
            };
            let (n, oldest) = Self::half_cells(&self.pool, h);
            if let Some(o) = oldest {
                if now.saturating_sub(o) >= min_age_ns {
                    victims.push((StreamOwner::circuit(h.conn, slot), n as u64 * CELL_COST));
                }
            }
        }
        victims.extend(
            self.stream_oom_candidates(now)
                .chain(self.conflux.oom_candidates(now))
                .filter(|&(_, age, _)| age >= min_age_ns)
                .map(|(owner, _, b)| (owner, b)),
        );
        let (mut circuits, mut bytes) = (0, 0);
        for (owner, b) in victims {
            if let StreamOwner::Circuit { slot, .. } = owner {
                if self.halves.by_slot(slot).is_none() {
                    continue; // its peer on this worker went first
                }
            }
            self.close_owner(
                owner,
                destroy_reason::RESOURCELIMIT,
                "out of memory (MaxMemInQueues): it held the oldest cells or stream bytes",
            );
            circuits += 1;
            bytes += b;
        }
        self.flush_destroys();
        self.limit_counters.oom_circuits += circuits;
        self.limit_counters.oom_bytes += bytes;
        if circuits > 0 {
            info!(
                "worker {}: closed {circuits} circuits holding {} KiB for the memory limit",
                self.me,
                bytes / 1024
            );
        }
        (circuits, bytes)
    }

    /// The controller marked `ip`: refuse its CREATE cells for `secs`.
    pub(crate) fn dos_mark(&mut self, ip: IpAddr, secs: u64) {
        let until = self
            .now_ns
            .saturating_add(secs.saturating_mul(1_000_000_000));
        self.guards.dos_marked.insert(ip, until);
    }

    /// A CREATE* arrived on connection `conn`: count it for the DoS
    /// mitigation (client connections only, as C Tor), and say whether it
    /// must be refused (its address is marked).
    pub(crate) fn dos_refuses_create(&mut self, conn: usize) -> bool {
        let Some(c) = self.conn(conn) else {
            return false;
        };
        if !c.client {
            return false;
        }
        let ip = c.peer_addr.ip();
        if self.ctx.dos.cc_enabled {
            self.tell_controller(ControllerMsg::ClientCreate { ip });
        }
        let now = self.now_ns;
        match self.guards.dos_marked.get(&ip) {
            Some(&until) if until >= now => {
                self.limit_counters.dos_cc_rejected += 1;
                true
            }
            Some(_) => {
                self.guards.dos_marked.remove(&ip);
                false
            }
            None => false,
        }
    }

    /// Queue a CREATE2 for a later handshake if this round's budget is
    /// spent (or others wait); refuse it if the queue is full. Returns
    /// true if the cell was taken care of (queued or refused).
    pub(crate) fn defer_create2(
        &mut self,
        conn: usize,
        circ_id: u32,
        body: &[u8; BODY_LEN],
    ) -> bool {
        let l = &mut self.guards;
        if l.handshakes_this_round < HANDSHAKES_PER_ROUND && l.pending.is_empty() {
            l.handshakes_this_round += 1;
            return false;
        }
        if l.pending.len() >= MAX_ONION_QUEUE {
            self.limit_counters.onionskins_dropped[handshake_type(body)] += 1;
            self.queue_urgent(
                conn,
                circ_id,
                cmd::DESTROY,
                &[destroy_reason::RESOURCELIMIT],
            );
            return true;
        }
        l.pending_ids.insert((conn, circ_id));
        l.pending.push_back(PendingCreate {
            conn,
            circ_id,
            body: *body,
            since_ns: self.now_ns,
        });
        true
    }

    /// True if a CREATE2 for (conn, circ_id) waits for its handshake.
    pub(crate) fn create_pending(&self, conn: usize, circ_id: u32) -> bool {
        !self.guards.pending.is_empty() && self.guards.pending_ids.contains(&(conn, circ_id))
    }

    /// A DESTROY for a circuit whose CREATE2 still waits: forget it.
    pub(crate) fn cancel_pending_create(&mut self, conn: usize, circ_id: u32) {
        if self.guards.pending_ids.remove(&(conn, circ_id)) {
            self.guards
                .pending
                .retain(|p| !(p.conn == conn && p.circ_id == circ_id));
        }
    }

    /// At the start of a round: a fresh handshake budget, spent first on
    /// the CREATE2 cells that wait (the ones too old are refused).
    pub(crate) fn run_pending_creates(&mut self) {
        self.guards.handshakes_this_round = 0;
        while self.guards.handshakes_this_round < HANDSHAKES_PER_ROUND {
            let Some(p) = self.guards.pending.pop_front() else {
                break;
            };
            self.guards.pending_ids.remove(&(p.conn, p.circ_id));
            if self.conn(p.conn).is_none() {
                continue;
            }
            if self.now_ns.saturating_sub(p.since_ns) > MAX_ONION_QUEUE_DELAY_NS {
                self.limit_counters.onionskins_dropped[handshake_type(&p.body)] += 1;
                self.queue_urgent(
                    p.conn,
                    p.circ_id,
                    cmd::DESTROY,
                    &[destroy_reason::RESOURCELIMIT],
                );
                continue;
            }
            self.guards.handshakes_this_round += 1;
            self.answer_create(p.conn, p.circ_id, cmd::CREATE2, &p.body);
        }
        self.flush_destroys();
    }

    /// Drop a connection's waiting CREATE2 cells (it closed or moved).
    /// True if a CREATE2 of connection `conn` waits for its handshake:
    /// the queue is this worker's, so the connection does not move until
    /// it is answered or refused (at most `MaxOnionQueueDelay`).
    pub(crate) fn has_pending_creates(&self, conn: usize) -> bool {
        !self.guards.pending.is_empty() && self.guards.pending.iter().any(|p| p.conn == conn)
    }

    pub(crate) fn forget_pending_creates(&mut self, conn: usize) {
        if self.guards.pending.is_empty() {
            return;
        }
        self.guards.pending.retain(|p| p.conn != conn);
        self.guards.pending_ids.retain(|&(c, _)| c != conn);
    }
}
