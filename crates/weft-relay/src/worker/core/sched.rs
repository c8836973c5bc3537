//! Output scheduling of the circuit core: the queues a connection writes
//! from and the choice of what goes next. Each connection has urgent cells
//! (CREATED2, DESTROY, CREATE2, keepalive: written first) and an EWMA mux of
//! its circuits with queued cells ([`crate::ewma`], Tang & Goldberg: the
//! least recently busy circuit first). [`Circuits::fill`] moves cells from
//! there into the connection's write buffer up to the budget the driver
//! computed (KIST's socket limit and the token bucket, both I/O-side), and
//! measures each cell's in-relay delay as it leaves. Sans-IO: the write
//! buffer is any [`CellSink`], and the clock reading comes in.

use weft_proto::cell::BODY_LEN;

use crate::ewma::{CircuitEwma, EwmaMux};
use crate::pool::CellQueue;
use crate::worker::core::Circuits;

/// What [`Circuits::fill`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filled {
    /// Bytes of circuit cells staged.
    pub(crate) staged: usize,
    /// Cells are left for a later fill.
    pub(crate) more: bool,
}

/// A connection's output queues (see the module docs).
pub(crate) struct ConnSched {
    /// Half slots with queued cells, in EWMA order (or round robin).
    pub(super) mux: EwmaMux,
    /// Connection-level cells (circ_id in the slot) written before any
    /// circuit's cells.
    pub(super) urgent: CellQueue,
    /// On the core's pending list.
    pub(super) pending: bool,
    /// Cells queued on this connection's circuits.
    pub(super) queued: usize,
}

impl ConnSched {
    /// Empty queues with EWMA half-life `halflife_s` (≤ 0: round robin).
    pub(crate) fn new(halflife_s: f64) -> Self {
        ConnSched {
            mux: EwmaMux::new(halflife_s),
            urgent: CellQueue::default(),
            pending: false,
            queued: 0,
        }
    }
}

/// Where [`Circuits::fill`] puts cells: a connection's write buffer.
pub(crate) trait CellSink {
    /// Bytes staged and not yet written.
    fn staged(&self) -> usize;
    /// Stage one fixed-size cell.
    fn put(&mut self, circ_id: u32, command: u8, body: &[u8; BODY_LEN]);
}

/// Bytes of urgent cells staged for one connection per run.
const URGENT_BATCH: usize = 64 * 1024;

impl Circuits {
    /// Queue a cell on half `slot` (connection `conn`) and return its pool
    /// slot; closes the circuit (None) if its queue is over the limit or
    /// the pool is exhausted. `now_ns` is the round's clock (for the
    /// queue-wait histogram).
    pub(crate) fn enqueue(
        &mut self,
        conn: usize,
        slot: u32,
        command: u8,
        stamp_ns: u64,
        queued_ns: u64,
        body: &[u8; BODY_LEN],
    ) -> Option<u32> {
        let max = self.limits.max_circuit_queue;
        let h = self.halves.by_slot(slot)?;
        if h.queue.len() >= max {
            let why = format!("{} cells queued, maximum allowed is {max}", h.queue.len());
            self.close_circuit(
                conn,
                slot,
                weft_proto::cell::destroy_reason::RESOURCELIMIT,
                &why,
            );
            return None;
        }
        let Some(s) = self.pool.alloc() else {
            self.close_pool_exhausted(conn, slot);
            return None;
        };
        self.pool.put(s, command, stamp_ns, queued_ns, body);
        h.queue.push(&mut self.pool, s);
        let Some(Some(cc)) = self.conns.get_mut(conn) else {
            return Some(s);
        };
        let sched = &mut cc.sched;
        sched.queued += 1;
        if !h.ewma.active {
            sched.mux.activate(slot, &mut h.ewma);
        }
        if !sched.pending {
            sched.pending = true;
            self.pending.push_back(conn);
        }
        Some(s)
    }

    /// Queue a connection-level cell (CREATED2, DESTROY, CREATE2,
    /// PADDING...) ahead of circuit cells. If the pool is exhausted the cell
    /// is dropped with a log line (it belongs to no circuit that could be
    /// closed instead).
    pub(crate) fn queue_urgent(&mut self, conn: usize, circ_id: u32, command: u8, data: &[u8]) {
        let Some(Some(cc)) = self.conns.get_mut(conn) else {
            return;
        };
        let Some(s) = self.pool.alloc() else {
            tracing::info!(
                "worker {}: cell pool exhausted; dropping a control cell",
                self.me
            );
            return;
        };
        let slot = self.pool.slot_mut(s);
        slot.circ_id = circ_id;
        slot.command = command;
        slot.stamp_ns = 0;
        let n = data.len().min(BODY_LEN);
        slot.body[..n].copy_from_slice(&data[..n]);
        slot.body[n..].fill(0);
        let sched = &mut cc.sched;
        sched.urgent.push(&mut self.pool, s);
        if !sched.pending {
            sched.pending = true;
            self.pending.push_back(conn);
        }
    }

    /// The next connection that got cells to write since it was last
    /// taken ([`Effect::Write`](crate::worker::core::Effect::Write)), in
    /// the order they got them.
    pub(super) fn take_pending(&mut self) -> Option<usize> {
        let idx = self.pending.pop_front()?;
        if let Some(Some(c)) = self.conns.get_mut(idx) {
            c.sched.pending = false;
        }
        Some(idx)
    }

    pub(crate) fn has_output(&self, conn: usize) -> bool {
        self.conn(conn)
            .is_some_and(|c| !c.sched.urgent.is_empty() || !c.sched.mux.is_empty())
    }

    /// Stage cells of connection `conn` into `out`: its urgent cells, then
    /// its circuits' cells in EWMA order, until `out` holds `budget` bytes
    /// (what the socket can take now), `allowed` bytes of circuit cells were
    /// staged (the write bucket's tokens), or nothing is left. `now_ns`
    /// (the scheduling run's one clock read, on the workers' shared epoch)
    /// decays the EWMA weights and dates the cells' departure. Returns the
    /// bytes of circuit cells staged (urgent cells are not charged to the
    /// bandwidth bucket) and whether cells are left.
    pub(crate) fn fill(
        &mut self,
        conn: usize,
        out: &mut impl CellSink,
        budget: usize,
        allowed: usize,
        now_ns: u64,
    ) -> Filled {
        let Circuits {
            conns,
            halves,
            pool,
            counters,
            ..
        } = self;
        let Some(Some(c)) = conns.get_mut(conn) else {
            return Filled::default();
        };
        let first = out.staged();
        let s = &mut c.sched;
        while out.staged() < URGENT_BATCH {
            let Some(u) = s.urgent.pop(pool) else { break };
            let slot = pool.slot(u);
            out.put(slot.circ_id, slot.command, &slot.body);
            pool.release(u);
        }
        // EWMA: one weight per connection and run (one clock read).
        let weight = s.mux.weight(now_ns as f64 / 1e9);
        let start = out.staged();
        let budget = budget.min(start.saturating_add(allowed));
        while out.staged() < budget {
            let Some(hs) = s.mux.peek() else { break };
            let Some(h) = halves.by_slot(hs).filter(|h| h.conn == conn) else {
                // Stale entry (the half closed): take it out.
                let mut gone = CircuitEwma {
                    active: true,
                    ..Default::default()
                };
                s.mux.remove(hs, &mut gone);
                continue;
            };
            let Some(cs) = h.queue.pop(pool) else {
                s.mux.remove(hs, &mut h.ewma);
                continue;
            };
            let slot = pool.slot(cs);
            out.put(h.circ_id, slot.command, &slot.body);
            counters.delay.record(now_ns.saturating_sub(slot.stamp_ns));
            counters
                .queue_wait
                .record(now_ns.saturating_sub(slot.queued_ns));
            pool.release(cs);
            s.queued = s.queued.saturating_sub(1);
            let more = !h.queue.is_empty();
            s.mux.sent(hs, &mut h.ewma, 1, weight, more);
        }
        if out.staged() > first {
            c.times.last_write_ns = now_ns;
            c.times.cells_written += ((out.staged() - first) / weft_proto::cell::CELL_LEN) as u64;
        }
        Filled {
            staged: out.staged().saturating_sub(start),
            more: !s.urgent.is_empty() || !s.mux.is_empty(),
        }
    }
}
